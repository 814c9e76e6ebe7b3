// torch.cuda.amp.GradScaler's rules (loss_scaler.h).
#include "train/optim/loss_scaler.h"

#include <atomic>
#include <cmath>

#include "core/error.h"
#include "core/parallel.h"

namespace sima {

LossScaler::LossScaler(LossScalerState& state, LossScalerOptions options) : state_(state), opt_(options) {
  check(opt_.init_scale > 0 && opt_.growth_factor > 1 && opt_.backoff_factor > 0 && opt_.backoff_factor < 1 &&
            opt_.growth_interval >= 1,
        "loss scaler: needs init_scale > 0, growth_factor > 1, backoff_factor in (0, 1), growth_interval >= 1");
  if (state_.scale <= 0.f) state_ = LossScalerState{.scale = opt_.init_scale};
}

Tensor LossScaler::seed(const Tensor& loss) const { return full(loss.shape(), state_.scale); }

bool LossScaler::unscale(const std::vector<Tensor>& params) const {
  // First look for inf/NaN (PyTorch unscales and checks in one pass; the finite result is the same,
  // and a skipped step drops the gradients either way).
  for (const Tensor& p : params) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    const float* d = g.data();
    std::atomic<bool> bad{false};
    parallel_for(g.numel(), kGrainElementwise, [&](int64_t i0, int64_t i1) {
      bool b = false;
      for (int64_t i = i0; i < i1; ++i) b |= !std::isfinite(d[i]);
      if (b) bad.store(true, std::memory_order_relaxed);
    });
    if (bad.load()) return false;
  }
  const float inv = 1.f / state_.scale;  // GradScaler's inv_scale, in float32
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    float* d = g.data();
    parallel_for(g.numel(), kGrainElementwise, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) d[i] *= inv;
    });
  }
  return true;
}

void LossScaler::update(bool found_inf) {
  if (found_inf) {
    state_.scale *= opt_.backoff_factor;
    state_.growth_tracker = 0;
    ++state_.skipped_steps;
    return;
  }
  if (++state_.growth_tracker == opt_.growth_interval) {
    const float grown = state_.scale * opt_.growth_factor;
    if (std::isfinite(grown)) state_.scale = grown;  // as GradScaler: never grows to inf
    state_.growth_tracker = 0;
  }
}

}  // namespace sima
