// Warmup + cosine / step / constant schedules (the formulas are in schedule.h).
#include "train/optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace sima {

void validate_schedule(const ScheduleOptions& s) {
  check(s.type == "cosine" || s.type == "step" || s.type == "constant", "schedule: type '", s.type,
        "' is not one of cosine, step, constant");
  auto non_negative = [](double v, const char* field) {
    check(std::isfinite(v) && v >= 0.0, "schedule: ", field, " ", v, " must be a finite number >= 0");
  };
  non_negative(s.base, "base");
  non_negative(s.final, "final");
  non_negative(s.warmup_start, "warmup_start");
  check(s.total_steps >= 1, "schedule: total_steps ", s.total_steps, " must be >= 1");
  check(s.warmup_steps >= 0, "schedule: warmup_steps ", s.warmup_steps, " must be >= 0");
  check(s.warmup_steps <= s.total_steps, "schedule: warmup_steps ", s.warmup_steps, " is more than total_steps ",
        s.total_steps);
  if (s.type == "step") {
    check(s.decay_steps >= 1, "schedule: decay_steps ", s.decay_steps, " must be >= 1");
    check(std::isfinite(s.decay_rate) && s.decay_rate > 0.0, "schedule: decay_rate ", s.decay_rate,
          " must be a finite number > 0");
  }
}

double schedule_value(const ScheduleOptions& s, int64_t step) {
  validate_schedule(s);
  check(step >= 0, "schedule: step ", step, " is negative");
  const int64_t W = s.warmup_steps, T = s.total_steps;
  const int64_t t = std::min(step, T);  // past the end: the value at T
  if (t < W) {
    if (s.warmup_linspace && W == 1) return s.warmup_start;  // np.linspace(a, b, 1) = [a]
    const int64_t span = s.warmup_linspace ? W - 1 : W;
    return s.warmup_start + (s.base - s.warmup_start) * static_cast<double>(t) / static_cast<double>(span);
  }
  if (s.type == "cosine") {
    // progress (t − W)/(T − W) in [0, 1]; a schedule that is all warmup (W = T) ends at final
    const double progress = T > W ? static_cast<double>(t - W) / static_cast<double>(T - W) : 1.0;
    return s.final + 0.5 * (s.base - s.final) * (1.0 + std::cos(std::numbers::pi * progress));
  }
  if (s.type == "step") return s.base * std::pow(s.decay_rate, static_cast<double>((t - W) / s.decay_steps));
  return s.base;  // constant
}

}  // namespace sima
