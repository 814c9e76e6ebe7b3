// Dynamic loss scaling for float16 training (train.precision fp16), with the rules of
// torch.cuda.amp.GradScaler and its defaults:
//
//   backward of (loss · S)               the gradients are S times the true ones, so small ones
//                                        stay above float16's subnormals in the fp16 products
//   g ← g · (1/S) for every gradient     (S is a power of two: exact); then
//   any g inf or NaN  →  the step is skipped (no update: weights and optimizer moments stay),
//                        S ← S · 0.5, the clean-step count restarts, the skip is counted
//   else              →  clip, update; after 2000 clean steps in a row S ← S · 2
//
// S starts at 2^16. The state is part of the training position (train_state.h), so a resumed
// run continues with the same scale.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace sima {

struct LossScalerOptions {
  float init_scale = 65536.f;  // 2^16
  float growth_factor = 2.f;
  float backoff_factor = 0.5f;
  int64_t growth_interval = 2000;
};

struct LossScalerState {
  float scale = 0.f;              // S; 0: no scaler (fp32 and bf16 runs)
  int64_t growth_tracker = 0;     // clean steps since the last change of S
  int64_t skipped_steps = 0;      // steps skipped for inf/NaN gradients, in total
  float forward_peak = 0.f;       // the largest |value| rounded to float16 by this epoch's forward
                                  // passes so far (fp16_peak_take, core/ops/autocast.h); not a rule
                                  // of GradScaler's: the training loop's record of float16's headroom
  float forward_peak_attention = 0.f;  // the same over the attention cores' products only
};

class LossScaler {
 public:
  explicit LossScaler(LossScalerState& state, LossScalerOptions options = {});
  float scale() const { return state_.scale; }
  // The gradient to seed the backward of `loss` with: S, shaped as the loss.
  Tensor seed(const Tensor& loss) const;
  // g ← g · (1/S) for every defined gradient of `params`; true when all of them are finite.
  // When not, the gradients are left as they are (the caller drops them and skips the step).
  bool unscale(const std::vector<Tensor>& params) const;
  // After a step: found_inf backs S off and counts the skip, else a clean step (growth).
  void update(bool found_inf);

 private:
  LossScalerState& state_;
  LossScalerOptions opt_;
};

}  // namespace sima
