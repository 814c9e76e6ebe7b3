// Console progress: a live bar on a terminal, plain lines otherwise (see progress.h).
#include "train/loop/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace sima {

namespace {

constexpr int kBarWidth = 20;
constexpr const char* kClearToEnd = "\033[K";  // ANSI "erase in line": from the cursor to the end

std::string printf_string(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

// "step 212/469  loss 0.4312  lr 4.800e-04  1523 img/s  ETA 0:17": everything after the epoch.
std::string format_fields(const ProgressState& s) {
  return "step " + std::to_string(s.step) + "/" + std::to_string(s.steps) + "  loss " +
         printf_string("%.4f", s.loss) + "  lr " + printf_string("%.3e", s.lr) + "  " +
         printf_string("%.0f", s.images_per_second) + " img/s  ETA " + format_duration(s.eta_seconds);
}

std::string format_epoch(const ProgressState& s) {
  return "epoch " + std::to_string(s.epoch + 1) + "/" + std::to_string(s.epochs);
}

// "[#########...........]": step/steps of kBarWidth cells filled, rounded to the nearest.
std::string format_bar(const ProgressState& s) {
  const double frac = s.steps > 0 ? static_cast<double>(s.step) / static_cast<double>(s.steps) : 0.0;
  const int filled = std::clamp(static_cast<int>(std::lround(frac * kBarWidth)), 0, kBarWidth);
  std::string bar(kBarWidth + 2, '.');
  bar.front() = '[';
  bar.back() = ']';
  std::fill_n(bar.begin() + 1, filled, '#');
  return bar;
}

}  // namespace

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-:--";
  const int64_t t = std::llround(std::min(seconds, 1e12));
  const int64_t h = t / 3600, m = t / 60 % 60, sec = t % 60;
  char buf[48];
  if (h > 0) std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", (long long)h, (long long)m, (long long)sec);
  else std::snprintf(buf, sizeof buf, "%lld:%02lld", (long long)m, (long long)sec);
  return buf;
}

std::string format_progress(const ProgressState& s) { return format_epoch(s) + "  " + format_fields(s); }

ProgressBar::ProgressBar(int64_t log_every, FILE* out, int terminal)
    : out_(out), terminal_(terminal < 0 ? ::isatty(::fileno(out)) != 0 : terminal != 0), log_every_(log_every) {}

void ProgressBar::draw(const ProgressState& s) {
  const std::string line = format_epoch(s) + " " + format_bar(s) + "  " + format_fields(s);
  std::fprintf(out_, "\r%s%s", line.c_str(), kClearToEnd);
  std::fflush(out_);
  bar_drawn_ = true;
  last_draw_ = std::chrono::steady_clock::now();
}

void ProgressBar::print_line(const std::string& line) {
  std::fprintf(out_, "%s\n", line.c_str());
  std::fflush(out_);
  last_line_ = line;
}

void ProgressBar::update(const ProgressState& s) {
  if (terminal_) {
    const auto now = std::chrono::steady_clock::now();
    if (bar_drawn_ && std::chrono::duration<double>(now - last_draw_).count() < redraw_interval_) return;
    draw(s);
  } else if (log_every_ > 0 && s.step % log_every_ == 0) {
    print_line(format_progress(s));
  }
}

void ProgressBar::end_epoch(const ProgressState& s) {
  if (terminal_) {
    draw(s);
    std::fputc('\n', out_);
    std::fflush(out_);
    bar_drawn_ = false;
  } else {
    const std::string line = format_progress(s);
    if (line != last_line_) print_line(line);  // not twice when the last step was a multiple of log_every
  }
}

void ProgressBar::message(const std::string& line) {
  if (terminal_ && bar_drawn_) {
    std::fprintf(out_, "\r%s", kClearToEnd);
    bar_drawn_ = false;  // redrawn at the next update, whatever the throttle
  }
  print_line(line);
}

}  // namespace sima
