// Schedules: hand values at chosen steps (warmup start/middle/end, cosine midpoint and end,
// past the end, step-decay boundaries, constant), a whole cosine curve against timm's
// CosineLRScheduler written out independently, and the validation messages.
#include <cmath>
#include <numbers>

#include "core/error.h"
#include "testing.h"
#include "train/optim/schedule.h"

using namespace sima;
using namespace sima::testing;

namespace {

constexpr double kTol = 1e-15;

// timm's CosineLRScheduler (cycle_limit 1, cycle_mul 1, warmup_prefix=True, t_in_epochs off),
// as its _get_lr reads, for the options of the header's cosine schedule:
//   t_initial = T − W, lr_min = final, warmup_lr_init = warmup_start
double timm_cosine(double base, double lr_min, int64_t warmup_t, double warmup_lr_init, int64_t t_initial,
                   int64_t t) {
  if (t < warmup_t) {
    const double warmup_step = (base - warmup_lr_init) / warmup_t;
    return warmup_lr_init + t * warmup_step;
  }
  t = t - warmup_t;  // warmup_prefix
  const int64_t i = t / t_initial;  // the cycle
  if (i >= 1) return lr_min;  // past cycle_limit = 1
  const double t_curr = t - t_initial * i;
  return lr_min + 0.5 * (base - lr_min) * (1 + std::cos(std::numbers::pi * t_curr / t_initial));
}

}  // namespace

TEST_CASE("cosine with warmup: hand values") {
  const ScheduleOptions s{.type = "cosine", .base = 1e-3, .final = 1e-5, .warmup_steps = 10, .warmup_start = 1e-6,
                          .total_steps = 110};
  CHECK(schedule_value(s, 0) == 1e-6);                                  // warmup start
  CHECK(std::fabs(schedule_value(s, 5) - 5.005e-4) < kTol);            // 1e-6 + (1e-3 − 1e-6)·5/10
  CHECK(std::fabs(schedule_value(s, 9) - 9.001e-4) < kTol);            // 1e-6 + 0.999e-3·0.9
  CHECK(std::fabs(schedule_value(s, 10) - 1e-3) < kTol);               // warmup end: base (cos 0 = 1)
  CHECK(std::fabs(schedule_value(s, 35) - 8.55017856687341e-4) < kTol);  // 1e-5 + ½·0.99e-3·(1 + cos π/4)
  CHECK(std::fabs(schedule_value(s, 60) - 5.05e-4) < kTol);            // midpoint: (base + final) / 2
  CHECK(std::fabs(schedule_value(s, 110) - 1e-5) < kTol);              // end: final
  CHECK(std::fabs(schedule_value(s, 111) - 1e-5) < kTol);              // beyond total: stays final
  CHECK(std::fabs(schedule_value(s, 1000000) - 1e-5) < kTol);
  // Decreasing after warmup.
  for (int64_t t = 10; t < 110; ++t) CHECK(schedule_value(s, t + 1) < schedule_value(s, t));
}

TEST_CASE("cosine curve equals timm's CosineLRScheduler (warmup_prefix) at every step") {
  for (auto [W, T] : {std::pair<int64_t, int64_t>{0, 50}, {7, 50}, {25, 1000}, {3, 4}}) {
    const ScheduleOptions s{.type = "cosine", .base = 5e-4, .final = 1e-6, .warmup_steps = W, .warmup_start = 1e-7,
                            .total_steps = T};
    for (int64_t t = 0; t <= T + 10; ++t) {
      INFO("W " << W << " T " << T << " t " << t);
      CHECK(std::fabs(schedule_value(s, t) - timm_cosine(5e-4, 1e-6, W, 1e-7, T - W, t)) < kTol);
    }
  }
}

TEST_CASE("step decay: boundaries") {
  // base 0.1, ×0.5 every 10 steps after a 5-step warmup from 0; total 40
  const ScheduleOptions s{.type = "step", .base = 0.1, .warmup_steps = 5, .warmup_start = 0.0, .total_steps = 40,
                          .decay_steps = 10, .decay_rate = 0.5};
  CHECK(schedule_value(s, 0) == 0.0);
  CHECK(std::fabs(schedule_value(s, 4) - 0.08) < kTol);  // 0.1·4/5
  CHECK(schedule_value(s, 5) == 0.1);    // ⌊0/10⌋ = 0
  CHECK(schedule_value(s, 14) == 0.1);   // ⌊9/10⌋ = 0
  CHECK(schedule_value(s, 15) == 0.05);  // ⌊10/10⌋ = 1
  CHECK(schedule_value(s, 24) == 0.05);
  CHECK(schedule_value(s, 25) == 0.025);
  CHECK(schedule_value(s, 40) == 0.0125);   // ⌊35/10⌋ = 3
  CHECK(schedule_value(s, 400) == 0.0125);  // beyond total: the value at total
}

TEST_CASE("constant, and schedules without warmup or all warmup") {
  const ScheduleOptions c{.type = "constant", .base = 0.04, .warmup_steps = 4, .warmup_start = 0.0, .total_steps = 8};
  CHECK(schedule_value(c, 0) == 0.0);
  CHECK(schedule_value(c, 1) == 0.01);
  CHECK(schedule_value(c, 2) == 0.02);
  CHECK(schedule_value(c, 4) == 0.04);
  CHECK(schedule_value(c, 100) == 0.04);
  // No warmup: the first value is base.
  const ScheduleOptions nw{.type = "cosine", .base = 0.3, .final = 0.1, .total_steps = 2};
  CHECK(schedule_value(nw, 0) == 0.3);
  CHECK(std::fabs(schedule_value(nw, 1) - 0.2) < kTol);  // midpoint
  CHECK(std::fabs(schedule_value(nw, 2) - 0.1) < kTol);
  // Warmup as long as the schedule: linear up to the last warmup step, then final.
  const ScheduleOptions all{.type = "cosine", .base = 1.0, .final = 0.5, .warmup_steps = 4, .total_steps = 4};
  CHECK(schedule_value(all, 3) == 0.75);
  CHECK(schedule_value(all, 4) == 0.5);
  // A weight-decay schedule rising with cosine (DINO: 0.04 → 0.4): base < final is fine.
  const ScheduleOptions wd{.type = "cosine", .base = 0.04, .final = 0.4, .total_steps = 100};
  CHECK(std::fabs(schedule_value(wd, 50) - 0.22) < kTol);
  CHECK(std::fabs(schedule_value(wd, 100) - 0.4) < kTol);
}

TEST_CASE("validation errors name the field") {
  auto msg = [](ScheduleOptions s) {
    return error_message([&] { validate_schedule(s); });
  };
  CHECK(msg({}) == "(no error)");
  CHECK(msg({.type = "linear"}) == "schedule: type 'linear' is not one of cosine, step, constant");
  CHECK(msg({.total_steps = 0}) == "schedule: total_steps 0 must be >= 1");
  CHECK(msg({.warmup_steps = -1, .total_steps = 10}) == "schedule: warmup_steps -1 must be >= 0");
  CHECK(msg({.warmup_steps = 11, .total_steps = 10}) == "schedule: warmup_steps 11 is more than total_steps 10");
  CHECK(msg({.type = "step", .decay_steps = 0}) == "schedule: decay_steps 0 must be >= 1");
  CHECK(msg({.type = "step", .decay_rate = -0.1}) == "schedule: decay_rate -0.1 must be a finite number > 0");
  CHECK(msg({.base = -1e-3}) == "schedule: base -0.001 must be a finite number >= 0");
  CHECK(msg({.final = -1.0}) == "schedule: final -1 must be a finite number >= 0");
  CHECK(msg({.warmup_start = NAN}) == "schedule: warmup_start nan must be a finite number >= 0");
  // decay options are only checked for the step type
  CHECK(msg({.type = "cosine", .decay_steps = 0}) == "(no error)");
  // schedule_value validates too, and refuses negative steps
  CHECK(error_message([] { schedule_value({.total_steps = 0}, 0); }) == "schedule: total_steps 0 must be >= 1");
  CHECK(error_message([] { schedule_value({}, -1); }) == "schedule: step -1 is negative");
}
