// Training progress on the console.
//
// On a terminal: one live line redrawn in place (carriage return), at most ~10 times a second:
//   epoch 3/30 [#########.........]  212/469  loss 0.4312  lr 4.8e-04  1523 img/s  ETA 0:00:17
// and a newline when the epoch ends. Not on a terminal (a log file, CI): a plain line every
// `log_every` steps and at the end of the epoch, with the same fields, so logs stay readable.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace sima {

struct ProgressState {
  int64_t epoch = 0, epochs = 1;  // epoch is 0-based; printed 1-based
  int64_t step = 0, steps = 1;    // step within the epoch (steps done), of steps per epoch
  double loss = 0.0, lr = 0.0;
  double images_per_second = 0.0;
  double eta_seconds = 0.0;       // of the epoch
};

// The fields as one line without the bar ("epoch 3/30  212/469  loss 0.4312 ..."); for logs and tests.
std::string format_progress(const ProgressState& s);
// "1:02:03" / "2:03" style duration.
std::string format_duration(double seconds);

class ProgressBar {
 public:
  // `out` defaults to stdout; `terminal` decides the mode (default: isatty(out)).
  explicit ProgressBar(int64_t log_every = 50, FILE* out = stdout, int terminal = -1);
  void update(const ProgressState& s);  // after each step
  void end_epoch(const ProgressState& s);
  // Prints a full line (clearing a live bar first), e.g. evaluation results.
  void message(const std::string& line);
  bool is_terminal() const { return terminal_; }

 private:
  FILE* out_;
  bool terminal_;
  int64_t log_every_;
  bool bar_drawn_ = false;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace sima
