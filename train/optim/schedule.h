// Per-step schedules of the learning rate and the weight decay, as the DeiT / DINO
// recipes use them. A schedule is a pure function of the global step, so resuming at
// step s gives the same values as an uninterrupted run.
//
//   ScheduleOptions s{.type = "cosine", .base = 5e-4, .final = 1e-5, .warmup_steps = 5 * spe,
//                     .warmup_start = 1e-6, .total_steps = 100 * spe};
//   for (step...) opt.set_lr(schedule_value(s, step));
//
// Types (t = step, W = warmup_steps, T = total_steps):
//   warmup (t < W): warmup_start + (base − warmup_start)·t / W   (linear, every type)
//                   or, with warmup_linspace, DINO's np.linspace(warmup_start, base, W):
//                   warmup_start + (base − warmup_start)·t / (W − 1), reaching base at W − 1
//   "cosine":   final + ½(base − final)(1 + cos(π·(t − W)/(T − W)))
//   "step":     base · decay_rate^⌊(t − W) / decay_steps⌋
//   "constant": base
// For t ≥ T the value stays at the value for T (cosine: final).
#pragma once
#include <cstdint>
#include <string>

namespace sima {

struct ScheduleOptions {
  std::string type = "cosine";  // cosine | step | constant
  double base = 1e-3;           // value after warmup
  double final = 0.0;           // cosine: value at total_steps
  int64_t warmup_steps = 0;
  double warmup_start = 0.0;    // value at step 0 when warmup_steps > 0
  int64_t total_steps = 1;
  int64_t decay_steps = 1;      // step: steps between decays
  double decay_rate = 0.1;      // step: factor per decay
  // DINO's utils.cosine_scheduler: the warmup is np.linspace(warmup_start, base, W) (its
  // cosine part, (t − W)/(T − W), is the formula above).
  bool warmup_linspace = false;
};

// Throws sima::Error naming the field when an option is invalid (unknown type,
// total_steps < 1, warmup_steps > total_steps, decay_steps < 1, negative values).
void validate_schedule(const ScheduleOptions& s);
double schedule_value(const ScheduleOptions& s, int64_t step);

}  // namespace sima
