// Training progress on the console.
//
// On a terminal: one live line redrawn in place ("\r", the line, then "\033[K" to erase what a
// longer previous line left), at most 10 times a second, the last one always:
//   epoch 4/30 [#########...........]  step 212/469  loss 0.4312  lr 4.800e-04  1523 img/s  ETA 0:17
// and a newline when the epoch ends. Not on a terminal (a log file, CI): a plain line
// (format_progress) after each step that is a multiple of `log_every` (none when log_every
// <= 0) and at the end of the epoch (unless that line was just printed), so logs stay readable.
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

// The fields as one line without the bar; for logs and tests:
//   "epoch 4/30  step 212/469  loss 0.4312  lr 4.800e-04  1523 img/s  ETA 0:17"
// (loss %.4f, lr %.3e, img/s %.0f, ETA format_duration).
std::string format_progress(const ProgressState& s);
// Rounded to the second: 59 -> "0:59", 61 -> "1:01", 3723 -> "1:02:03"; "-:--" when negative
// or not finite.
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
  // Least time between two redraws of the live bar (default 0.1 s; end_epoch always draws).
  void set_redraw_interval(double seconds) { redraw_interval_ = seconds; }

 private:
  void draw(const ProgressState& s);          // "\r" + bar line + "\033[K", no newline
  void print_line(const std::string& line);  // line + "\n"
  FILE* out_;
  bool terminal_;
  int64_t log_every_;
  bool bar_drawn_ = false;
  double redraw_interval_ = 0.1;
  std::chrono::steady_clock::time_point last_draw_{};
  std::string last_line_;  // the last plain line printed
};

}  // namespace sima
