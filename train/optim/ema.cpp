// Weight EMA (timm's ModelEmaV2 / DINO's teacher update), see ema.h.
#include "train/optim/ema.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/autograd.h"
#include "core/error.h"
#include "core/parallel.h"

// d·e + (1 − d)·p is two rounded products and a rounded sum in PyTorch (timm and DINO
// alike); a fused multiply-add would round once less.
#include "core/fp_contract_off.h"

namespace sima {

namespace {

using Named = std::vector<std::pair<std::string, Tensor>>;

// Names and shapes of `ema`'s tensors (parameters or buffers) must be `model`'s, in order.
void check_same_tensors(const Named& ema, const Named& model, const char* what) {
  const size_t n = std::min(ema.size(), model.size());
  for (size_t i = 0; i < n; ++i) {
    check(ema[i].first == model[i].first, "ema: ", what, " ", i, " is '", ema[i].first, "' in the EMA model but '",
          model[i].first, "' in the model");
    check(ema[i].second.shape() == model[i].second.shape(), "ema: ", what, " '", ema[i].first, "' has shape ",
          ema[i].second.shape(), " in the EMA model but ", model[i].second.shape(), " in the model");
  }
  if (ema.size() != model.size()) {
    const bool ema_longer = ema.size() > model.size();
    fail("ema: ", what, " '", (ema_longer ? ema : model)[n].first, "' is only in the ",
         ema_longer ? "EMA model" : "model", " (", ema.size(), " vs ", model.size(), " ", what, "s)");
  }
}

void copy_values(const Named& dst, const Named& src) {
  for (size_t i = 0; i < dst.size(); ++i)
    std::memcpy(dst[i].second.data(), src[i].second.data(), sizeof(float) * dst[i].second.numel());
}

void ema_update_impl(Module& ema, const Module& model, double decay, bool copy_buffers) {
  check(std::isfinite(decay) && decay >= 0.0 && decay <= 1.0, "ema: decay ", decay, " is not in [0, 1]");
  const Named ep = ema.named_parameters(), mp = model.named_parameters();
  const Named eb = ema.named_buffers(), mb = model.named_buffers();
  check_same_tensors(ep, mp, "parameter");
  check_same_tensors(eb, mb, "buffer");
  NoGradGuard no_grad;
  // float32 d·ema + (1 − d)·p, as timm's ModelEmaV2 and DINO's ema.mul_(d).add_((1 − d)·p)
  const float d = static_cast<float>(decay), one_minus_d = static_cast<float>(1.0 - decay);
  for (size_t i = 0; i < ep.size(); ++i) {
    float* e = ep[i].second.data();
    const float* p = mp[i].second.data();
    parallel_for(ep[i].second.numel(), kGrainElementwise, [&](int64_t begin, int64_t end) {
      for (int64_t j = begin; j < end; ++j) e[j] = e[j] * d + one_minus_d * p[j];
    });
  }
  if (copy_buffers) copy_values(eb, mb);  // BatchNorm running statistics are copied, not averaged
}

}  // namespace

void ema_update(Module& ema, const Module& model, double decay) { ema_update_impl(ema, model, decay, true); }
void ema_update_parameters(Module& ema, const Module& model, double decay) {
  ema_update_impl(ema, model, decay, false);
}

ModelEma::ModelEma(std::shared_ptr<Module> ema, const Module& model, double decay)
    : ema_(std::move(ema)), decay_(decay) {
  check(ema_ != nullptr, "ModelEma: the EMA module is null");
  check(std::isfinite(decay) && decay >= 0.0 && decay <= 1.0, "ModelEma: decay ", decay, " is not in [0, 1]");
  const Named ep = ema_->named_parameters(), mp = model.named_parameters();
  const Named eb = ema_->named_buffers(), mb = model.named_buffers();
  check_same_tensors(ep, mp, "parameter");
  check_same_tensors(eb, mb, "buffer");
  copy_values(ep, mp);
  copy_values(eb, mb);
  // The average is never trained (timm: requires_grad_(False)): no graph when it is evaluated.
  for (auto [name, p] : ep) p.requires_grad_(false);
}

void ModelEma::update(const Module& model) { ema_update(*ema_, model, decay_); }
void ModelEma::update(const Module& model, double decay) { ema_update(*ema_, model, decay); }

}  // namespace sima
