// Progress display: the exact text of format_progress / format_duration, the live bar on a
// terminal ("\r", bar, "\033[K", throttled redraws, newline at the end of the epoch, message
// clearing the bar) and the plain lines every log_every steps off a terminal.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

#include "app_testing.h"
#include "testing.h"
#include "train/loop/progress.h"

using namespace sima;

namespace {

// A FILE* writing to memory; text() is everything written so far.
struct MemOut {
  char* buf = nullptr;
  size_t size = 0;
  FILE* f = nullptr;
  MemOut() { f = open_memstream(&buf, &size); }
  ~MemOut() {
    if (f) std::fclose(f);
    std::free(buf);
  }
  std::string text() {
    std::fflush(f);
    return std::string(buf, size);
  }
};

ProgressState state(int64_t epoch, int64_t epochs, int64_t step, int64_t steps, double loss = 0.5, double lr = 1e-3,
                    double ips = 100.0, double eta = 0.0) {
  ProgressState s;
  s.epoch = epoch;
  s.epochs = epochs;
  s.step = step;
  s.steps = steps;
  s.loss = loss;
  s.lr = lr;
  s.images_per_second = ips;
  s.eta_seconds = eta;
  return s;
}

}  // namespace

TEST_CASE("format_duration: m:ss under an hour, h:mm:ss above, rounded to the second") {
  CHECK(format_duration(0) == "0:00");
  CHECK(format_duration(59) == "0:59");
  CHECK(format_duration(61) == "1:01");
  CHECK(format_duration(59.6) == "1:00");
  CHECK(format_duration(3599.4) == "59:59");
  CHECK(format_duration(3600) == "1:00:00");
  CHECK(format_duration(3723) == "1:02:03");
  CHECK(format_duration(100 * 3600 + 5) == "100:00:05");
  CHECK(format_duration(-1) == "-:--");
  CHECK(format_duration(std::numeric_limits<double>::quiet_NaN()) == "-:--");
  CHECK(format_duration(std::numeric_limits<double>::infinity()) == "-:--");
}

TEST_CASE("format_progress: 1-based epoch, loss %.4f, lr %.3e, img/s %.0f, ETA") {
  CHECK(format_progress(state(3, 30, 212, 469, 0.43124, 4.8e-4, 1523.4, 17)) ==
        "epoch 4/30  step 212/469  loss 0.4312  lr 4.800e-04  1523 img/s  ETA 0:17");
  CHECK(format_progress(state(0, 1, 0, 1, 2.30258, 0.0, 0.0, 3723)) ==
        "epoch 1/1  step 0/1  loss 2.3026  lr 0.000e+00  0 img/s  ETA 1:02:03");
}

TEST_CASE("ProgressBar off a terminal: a line at each multiple of log_every and at the end of the epoch") {
  MemOut out;
  ProgressBar bar(2, out.f, 0);
  CHECK_FALSE(bar.is_terminal());
  for (int64_t step = 1; step <= 5; ++step) bar.update(state(0, 2, step, 5, 0.1 * step));
  CHECK(out.text() ==
        "epoch 1/2  step 2/5  loss 0.2000  lr 1.000e-03  100 img/s  ETA 0:00\n"
        "epoch 1/2  step 4/5  loss 0.4000  lr 1.000e-03  100 img/s  ETA 0:00\n");
  bar.end_epoch(state(0, 2, 5, 5, 0.3));
  bar.message("eval: top1 81.30");
  // The second epoch ends on a multiple of log_every: its last line is not printed twice.
  for (int64_t step = 1; step <= 4; ++step) bar.update(state(1, 2, step, 4, 0.25));
  bar.end_epoch(state(1, 2, 4, 4, 0.25));
  CHECK(out.text() ==
        "epoch 1/2  step 2/5  loss 0.2000  lr 1.000e-03  100 img/s  ETA 0:00\n"
        "epoch 1/2  step 4/5  loss 0.4000  lr 1.000e-03  100 img/s  ETA 0:00\n"
        "epoch 1/2  step 5/5  loss 0.3000  lr 1.000e-03  100 img/s  ETA 0:00\n"
        "eval: top1 81.30\n"
        "epoch 2/2  step 2/4  loss 0.2500  lr 1.000e-03  100 img/s  ETA 0:00\n"
        "epoch 2/2  step 4/4  loss 0.2500  lr 1.000e-03  100 img/s  ETA 0:00\n");
}

TEST_CASE("ProgressBar off a terminal with log_every 0: only the end of each epoch") {
  MemOut out;
  ProgressBar bar(0, out.f, 0);
  for (int64_t step = 1; step <= 3; ++step) bar.update(state(0, 1, step, 3));
  CHECK(out.text().empty());
  bar.end_epoch(state(0, 1, 3, 3));
  CHECK(out.text() == "epoch 1/1  step 3/3  loss 0.5000  lr 1.000e-03  100 img/s  ETA 0:00\n");
}

TEST_CASE("ProgressBar mode defaults to isatty(out)") {
  FILE* f = std::tmpfile();
  REQUIRE(f != nullptr);
  CHECK_FALSE(ProgressBar(50, f).is_terminal());
  CHECK(ProgressBar(50, f, 1).is_terminal());
  std::fclose(f);
}

TEST_CASE("ProgressBar on a terminal: \\r + bar line + \\033[K, throttled, newline at the end of the epoch") {
  const std::string fields = "  loss 0.5000  lr 1.000e-03  100 img/s  ETA 0:00";
  SUBCASE("throttled: the first update draws, the rest within the interval do not, end_epoch always does") {
    MemOut out;
    ProgressBar bar(1, out.f, 1);
    bar.set_redraw_interval(3600.0);
    for (int64_t step = 1; step <= 4; ++step) bar.update(state(2, 5, step, 4));
    // 1/4 of 20 cells
    CHECK(out.text() == "\repoch 3/5 [#####...............]  step 1/4" + fields + "\033[K");
    bar.end_epoch(state(2, 5, 4, 4));
    CHECK(out.text() == "\repoch 3/5 [#####...............]  step 1/4" + fields + "\033[K" +
                            "\repoch 3/5 [####################]  step 4/4" + fields + "\033[K\n");
    // The next epoch's first update draws at once, whatever the throttle.
    bar.update(state(3, 5, 1, 4));
    CHECK(out.text().ends_with("\033[K\n\repoch 4/5 [#####...............]  step 1/4" + fields + "\033[K"));
  }
  SUBCASE("no throttle: every update redraws; message clears the bar and it is redrawn after") {
    MemOut out;
    ProgressBar bar(1, out.f, 1);
    bar.set_redraw_interval(0.0);
    bar.update(state(0, 1, 1, 3));  // 20/3 = 6.67 -> 7 cells
    bar.update(state(0, 1, 2, 3));  // 13.3 -> 13 cells
    bar.message("checkpoint saved");
    bar.message("second note");  // no bar drawn: no clearing
    bar.update(state(0, 1, 3, 3));
    bar.end_epoch(state(0, 1, 3, 3));
    const std::string full = "\repoch 1/1 [####################]  step 3/3" + fields + "\033[K";
    CHECK(out.text() == "\repoch 1/1 [#######.............]  step 1/3" + fields + "\033[K" +
                            "\repoch 1/1 [#############.......]  step 2/3" + fields + "\033[K" +
                            "\r\033[Kcheckpoint saved\n" + "second note\n" + full + full + "\n");
  }
}

TEST_CASE("sima-train off a terminal: every progress line shows the window's true rate, not 0 img/s") {
  // Each line is printed on a logging step, right after the step's window closes: the line must
  // show that window's rate (the window was reset before the line was drawn, so every line of
  // a redirected run said "0 img/s  ETA 0:00").
  testing::TempDir dir;
  const std::string cfg = dir.file("progress.json");
  std::FILE* f = std::fopen(cfg.c_str(), "w");
  REQUIRE(f != nullptr);
  std::fputs(R"({"name": "progress",
    "model": {"name": "deit_tiny_patch4_28_sima", "embed_dim": 32, "depth": 1, "num_heads": 2},
    "data": {"train_subset": 128, "test_subset": 32, "batch_size": 16, "num_workers": 0},
    "schedule": {"warmup_epochs": 0},
    "train": {"epochs": 1, "log_every": 2}})",
             f);
  std::fclose(f);
  const testing::Run r = testing::run_app("sima-train --config " + cfg + " --out " + dir.file("run"));
  REQUIRE_MESSAGE(r.status == 0, r.err);
  int lines = 0;
  size_t at = 0;
  while ((at = r.out.find("img/s", at)) != std::string::npos) {
    const size_t start = r.out.rfind('\n', at) + 1;
    const std::string line = r.out.substr(start, r.out.find('\n', at) - start);
    CAPTURE(line);
    const size_t two = line.rfind("  ", line.find(" img/s"));
    const double rate = std::atof(line.c_str() + two + 2);
    CHECK(rate > 0.0);
    ++lines;
    ++at;
  }
  CHECK(lines == 4);  // steps 2, 4, 6 and 8 of the epoch (the end of the epoch is step 8: printed once)
}
