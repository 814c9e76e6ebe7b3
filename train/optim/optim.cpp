// SGD and AdamW as torch.optim's single-tensor (foreach=False) implementations, the
// bookkeeping they share (groups, per-parameter state, state files), and gradient clipping.
//
// Bit-for-bit with PyTorch 1.13 on CPU: its elementwise kernels round every tensor op to
// float32, and `a.add_(b, alpha=s)` is one fused multiply-add (Vectorized fmadd), as is the
// final multiply-add of addcmul. The loops below spell out each of those roundings, so the
// compiler must not fuse anything else.
#include "train/optim/optim.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "core/autograd.h"
#include "core/error.h"
#include "core/parallel.h"
#include "models/finite_check.h"

// Only the fused multiply-adds PyTorch does (std::fma below): the compiler must form no others.
#include "core/fp_contract_off.h"

namespace sima {

// ---- parameter groups ---------------------------------------------------------------

bool is_no_decay_name(const std::string& name, const std::vector<std::string>& no_decay_names) {
  for (const std::string& n : no_decay_names) {
    if (n.empty()) continue;
    // a dot-separated component: "a.n.b", "n.b", "a.n", "n"
    for (size_t pos = name.find(n); pos != std::string::npos; pos = name.find(n, pos + 1)) {
      const size_t end = pos + n.size();
      if ((pos == 0 || name[pos - 1] == '.') && (end == name.size() || name[end] == '.')) return true;
    }
    // or a suffix ("attn.temperature", ".bias")
    if (name.size() >= n.size() && name.compare(name.size() - n.size(), n.size(), n) == 0) return true;
  }
  return false;
}

std::vector<ParamGroup> param_groups_no_decay(const std::vector<std::pair<std::string, Tensor>>& named_params,
                                              const std::vector<std::string>& no_decay_names) {
  ParamGroup decay, no_decay;
  no_decay.wd_scale = 0.0;
  for (const auto& [name, p] : named_params) {
    check(p.defined(), "param_groups_no_decay: parameter '", name, "' is undefined");
    if (!p.requires_grad()) continue;
    if (p.dim() <= 1 || is_no_decay_name(name, no_decay_names)) no_decay.params.emplace_back(name, p);
    else decay.params.emplace_back(name, p);
  }
  std::vector<ParamGroup> groups;
  if (!decay.params.empty()) groups.push_back(std::move(decay));
  if (!no_decay.params.empty()) groups.push_back(std::move(no_decay));
  return groups;
}

// ---- Optimizer ----------------------------------------------------------------------

Optimizer::Optimizer(std::vector<ParamGroup> groups) : groups_(std::move(groups)) {
  std::set<std::string> names;
  std::set<const TensorImpl*> tensors;
  size_t offset = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    group_offset_.push_back(offset);
    for (const auto& [name, p] : groups_[g].params) {
      check(p.defined(), "optimizer: parameter '", name, "' of group ", g, " is undefined");
      check(names.insert(name).second, "optimizer: parameter name '", name, "' appears twice");
      check(tensors.insert(p.impl()).second, "optimizer: parameter '", name,
            "' is the same tensor as an earlier parameter (in more than one group?)");
    }
    offset += groups_[g].params.size();
  }
  group_offset_.push_back(offset);  // one past the end: the number of parameters
}

int64_t Optimizer::flat_index(size_t group, size_t i) const {
  return static_cast<int64_t>(group_offset_[group] + i);
}

void Optimizer::zero_grad() {
  for (ParamGroup& g : groups_)
    for (auto& [name, p] : g.params) p.zero_grad();
}

void Optimizer::set_lr(double lr) {
  for (ParamGroup& g : groups_) g.lr = lr * g.lr_scale;
}

void Optimizer::set_weight_decay(double wd) {
  for (ParamGroup& g : groups_) g.weight_decay = wd * g.wd_scale;
}

std::vector<std::pair<std::string, Tensor>> Optimizer::state() const {
  std::vector<std::pair<std::string, Tensor>> out;
  out.emplace_back("step", from_vector({static_cast<float>(step_count_)}));
  for (const auto& [kind, list] : buffers_)
    for (size_t g = 0; g < groups_.size(); ++g)
      for (size_t i = 0; i < groups_[g].params.size(); ++i) {
        const Tensor& b = list[flat_index(g, i)];
        // A copy: the state must not move on with later steps (it is a snapshot to save).
        if (b.defined()) out.emplace_back(kind + "." + groups_[g].params[i].first, b.detach().clone());
      }
  return out;
}

namespace {

// The saved state's "step" entry as a step count (one finite, whole, non-negative value).
int64_t checked_step_count(const Tensor* step) {
  check(step != nullptr, "optimizer state: missing entry 'step'");
  check(step->numel() == 1, "optimizer state: entry 'step' has shape ", step->shape(), ", expected one value");
  const float sv = step->data()[0];
  check(std::isfinite(sv) && sv >= 0.f && sv == std::floor(sv), "optimizer state: entry 'step' holds ", sv,
        ", not a step count");
  return static_cast<int64_t>(sv);
}

// A parameter has every kind of buffer or none (it was never updated). `params`: name ->
// (flat index, tensor); `kinds`: the buffer kinds in order; `found`: (kind, flat index) -> entry.
void check_whole_buffer_sets(const std::map<std::string, std::pair<int64_t, Tensor>>& params,
                             const std::vector<std::string>& kinds,
                             const std::map<std::pair<size_t, int64_t>, Tensor>& found) {
  for (const auto& [pname, idx] : params) {
    int have = -1;
    for (size_t k = 0; k < kinds.size(); ++k)
      if (found.count({k, idx.first})) have = static_cast<int>(k);
    if (have < 0) continue;
    for (size_t k = 0; k < kinds.size(); ++k)
      check(found.count({k, idx.first}) > 0, "optimizer state: missing entry '", kinds[k], ".", pname, "' (",
            kinds[size_t(have)], ".", pname, " is present)");
  }
}

}  // namespace

void Optimizer::load_state(const std::vector<std::pair<std::string, Tensor>>& state) {
  // Parameter name -> flat index and tensor.
  std::map<std::string, std::pair<int64_t, Tensor>> params;
  for (size_t g = 0; g < groups_.size(); ++g)
    for (size_t i = 0; i < groups_[g].params.size(); ++i)
      params[groups_[g].params[i].first] = {flat_index(g, i), groups_[g].params[i].second};
  std::map<std::string, size_t> kinds;
  std::string kind_list;
  for (size_t k = 0; k < buffers_.size(); ++k) {
    kinds[buffers_[k].first] = k;
    kind_list += (k ? ", " : "") + buffers_[k].first;
  }

  // 1. Validate every entry; nothing changes before all are known good.
  const Tensor* step = nullptr;
  std::set<std::string> seen;
  // (kind, flat index) -> the entry's tensor
  std::map<std::pair<size_t, int64_t>, Tensor> found;
  for (const auto& [name, t] : state) {
    check(seen.insert(name).second, "optimizer state: entry '", name, "' appears twice");
    check(t.defined(), "optimizer state: entry '", name, "' is undefined");
    if (name == "step") {
      step = &t;
      continue;
    }
    const size_t dot = name.find('.');
    const std::string kind = dot == std::string::npos ? name : name.substr(0, dot);
    auto k = kinds.find(kind);
    check(dot != std::string::npos && k != kinds.end(), "optimizer state: unknown entry '", name,
          "' (expected 'step' or '<kind>.<parameter>' with kind one of: ", kind_list.empty() ? "none" : kind_list,
          ")");
    const std::string pname = name.substr(dot + 1);
    auto p = params.find(pname);
    check(p != params.end(), "optimizer state: entry '", name, "' names no parameter of the optimizer");
    // Buffers are shaped like their parameter, except per-parameter step counts (1 value).
    const Shape want = kind == "step" ? Shape{1} : p->second.second.shape();
    check(t.shape() == want, "optimizer state: entry '", name, "' has shape ", t.shape(), ", expected ", want);
    found[{k->second, p->second.first}] = t;
  }
  const int64_t step_count = checked_step_count(step);
  std::vector<std::string> kind_names;
  for (const auto& [kind, list] : buffers_) kind_names.push_back(kind);
  check_whole_buffer_sets(params, kind_names, found);

  // 2. Apply: copies, so the optimizer never shares storage with the caller's tensors.
  step_count_ = step_count;
  for (size_t k = 0; k < buffers_.size(); ++k)
    for (Tensor& b : buffers_[k].second) b = Tensor();
  for (const auto& [key, t] : found) buffers_[key.first].second[key.second] = t.detach().clone();
}

// ---- step, its finite check and its undo ----------------------------------------------

namespace {

// dst ← a copy of src's values (dst reallocated when its shape differs).
void copy_into(Tensor& dst, const Tensor& src) {
  if (!dst.defined() || dst.shape() != src.shape()) dst = empty(src.shape());
  const float* from = src.data();
  float* to = dst.data();
  parallel_for(src.numel(), kGrainElementwise, [&](int64_t begin, int64_t end) {
    std::memcpy(to + begin, from + begin, sizeof(float) * size_t(end - begin));
  });
}

}  // namespace

void Optimizer::step() {
  NoGradGuard no_grad;
  nonfinite_.clear();
  touched_.clear();
  prev_step_count_ = step_count_;
  ++step_count_;
  update();
}

void Optimizer::save_previous(size_t g, size_t i) {
  if (!keep_previous_) return;
  const int64_t k = flat_index(g, i);
  if (prev_params_.empty()) {
    prev_params_.resize(group_offset_.back());
    prev_buffers_.assign(buffers_.size(), std::vector<Tensor>(group_offset_.back()));
  }
  touched_.emplace_back(g, i);
  copy_into(prev_params_[k], groups_[g].params[i].second);
  for (size_t b = 0; b < buffers_.size(); ++b) {
    const Tensor& buf = buffers_[b].second[k];
    if (buf.defined()) copy_into(prev_buffers_[b][k], buf);
    else prev_buffers_[b][k] = Tensor();  // created by this step: undo drops it
  }
}

void Optimizer::note_nonfinite(size_t g, size_t i) {
  if (nonfinite_.empty()) nonfinite_ = groups_[g].params[i].first;
}

void Optimizer::undo_step() {
  check(keep_previous_, "optimizer: undo_step needs set_keep_previous(true) before the step");
  NoGradGuard no_grad;
  for (const auto& [g, i] : touched_) {
    const int64_t k = flat_index(g, i);
    Tensor p = groups_[g].params[i].second;
    copy_into(p, prev_params_[k]);  // same shape: writes into the parameter's own storage
    for (size_t b = 0; b < buffers_.size(); ++b) {
      if (prev_buffers_[b][k].defined()) copy_into(buffers_[b].second[k], prev_buffers_[b][k]);
      else buffers_[b].second[k] = Tensor();
    }
  }
  step_count_ = prev_step_count_;
  touched_.clear();
  nonfinite_.clear();
}

namespace {

// The gradient of a parameter, checked against its shape; undefined when it has none.
Tensor grad_of(const std::string& name, const Tensor& p) {
  Tensor g = p.grad();
  if (g.defined())
    check(g.shape() == p.shape(), "optimizer: gradient of '", name, "' has shape ", g.shape(), ", parameter ",
          p.shape());
  return g;
}

// Appends a kind of per-parameter buffer: one (undefined) slot per parameter.
std::vector<Tensor>& add_buffer_kind(std::vector<std::pair<std::string, std::vector<Tensor>>>& buffers,
                                     const std::string& kind, size_t num_params) {
  buffers.emplace_back(kind, std::vector<Tensor>(num_params));
  return buffers.back().second;
}

size_t count_params(const std::vector<ParamGroup>& groups) {
  size_t n = 0;
  for (const ParamGroup& g : groups) n += g.params.size();
  return n;
}

}  // namespace

// ---- SGD ------------------------------------------------------------------------------

SGD::SGD(std::vector<ParamGroup> groups, const SGDOptions& o) : Optimizer(std::move(groups)), options_(o) {
  check(o.lr >= 0.0, "SGD: lr ", o.lr, " must be >= 0");
  check(o.momentum >= 0.0, "SGD: momentum ", o.momentum, " must be >= 0");
  check(o.weight_decay >= 0.0, "SGD: weight_decay ", o.weight_decay, " must be >= 0");
  check(!o.nesterov || (o.momentum > 0.0 && o.dampening == 0.0),
        "SGD: nesterov momentum requires momentum > 0 and dampening = 0");
  // PyTorch keeps no buffer without momentum.
  if (o.momentum != 0.0) add_buffer_kind(buffers_, "momentum_buffer", count_params(groups_));
  set_lr(o.lr);
  set_weight_decay(o.weight_decay);
}

void SGD::update() {
  const bool use_momentum = options_.momentum != 0.0, nesterov = options_.nesterov;
  const float mu = static_cast<float>(options_.momentum);
  const float one_minus_dampening = static_cast<float>(1.0 - options_.dampening);
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const ParamGroup& group = groups_[gi];
    const bool decay = group.weight_decay != 0.0;
    const float wd = static_cast<float>(group.weight_decay), neg_lr = static_cast<float>(-group.lr);
    for (size_t i = 0; i < group.params.size(); ++i) {
      const auto& [name, p] = group.params[i];
      const Tensor grad = grad_of(name, p);
      if (!grad.defined()) continue;
      save_previous(gi, i);
      float* P = p.data();
      const float* G = grad.data();
      float* B = nullptr;
      bool first = false;  // the momentum buffer starts as a copy of d
      if (use_momentum) {
        Tensor& buf = buffers_[0].second[flat_index(gi, i)];
        first = !buf.defined();
        if (first) buf = empty(p.shape());
        B = buf.data();
      }
      std::atomic<bool> bad{false};
      parallel_for(p.numel(), kGrainElementwise, [&](int64_t begin, int64_t end) {
        for (int64_t j = begin; j < end; ++j) {
          float d = G[j];
          if (decay) d = std::fma(wd, P[j], d);  // d_p = d_p.add(param, alpha=wd)
          if (use_momentum) {
            // buf = clone(d_p), or buf.mul_(μ).add_(d_p, alpha=1 − dampening)
            B[j] = first ? d : std::fma(one_minus_dampening, d, B[j] * mu);
            d = nesterov ? std::fma(mu, B[j], d) : B[j];  // d_p.add(buf, alpha=μ) or buf
          }
          P[j] = std::fma(neg_lr, d, P[j]);  // param.add_(d_p, alpha=-lr)
        }
        if (has_nonfinite(P + begin, end - begin) || (B && has_nonfinite(B + begin, end - begin))) bad = true;
      });
      if (bad) note_nonfinite(gi, i);
    }
  }
}

// ---- AdamW ----------------------------------------------------------------------------

AdamW::AdamW(std::vector<ParamGroup> groups, const AdamWOptions& o) : Optimizer(std::move(groups)), options_(o) {
  check(o.lr >= 0.0, "AdamW: lr ", o.lr, " must be >= 0");
  check(o.eps >= 0.0, "AdamW: eps ", o.eps, " must be >= 0");
  check(o.beta1 >= 0.0 && o.beta1 < 1.0, "AdamW: beta1 ", o.beta1, " is not in [0, 1)");
  check(o.beta2 >= 0.0 && o.beta2 < 1.0, "AdamW: beta2 ", o.beta2, " is not in [0, 1)");
  check(o.weight_decay >= 0.0, "AdamW: weight_decay ", o.weight_decay, " must be >= 0");
  const size_t n = count_params(groups_);
  // PyTorch's state['step'] is per parameter: a parameter first updated late (DINO's frozen
  // last layer) starts its bias correction at t = 1 then.
  add_buffer_kind(buffers_, "step", n);
  add_buffer_kind(buffers_, "exp_avg", n);
  add_buffer_kind(buffers_, "exp_avg_sq", n);
  set_lr(o.lr);
  set_weight_decay(o.weight_decay);
}

void AdamW::update() {
  const double beta1 = options_.beta1, beta2 = options_.beta2;
  const float b1 = static_cast<float>(beta1), one_minus_b1 = static_cast<float>(1.0 - beta1);
  const float b2 = static_cast<float>(beta2), one_minus_b2 = static_cast<float>(1.0 - beta2);
  const float eps = static_cast<float>(options_.eps);
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const ParamGroup& group = groups_[gi];
    const double lr = group.lr;
    const float decay = static_cast<float>(1.0 - lr * group.weight_decay);
    for (size_t i = 0; i < group.params.size(); ++i) {
      const auto& [name, p] = group.params[i];
      const Tensor grad = grad_of(name, p);
      if (!grad.defined()) continue;
      save_previous(gi, i);
      const int64_t k = flat_index(gi, i);
      Tensor& step_t = buffers_[0].second[k];
      Tensor& exp_avg = buffers_[1].second[k];
      Tensor& exp_avg_sq = buffers_[2].second[k];
      if (!step_t.defined()) {
        step_t = zeros(Shape{1});  // a float32 count, like torch.tensor(0.)
        exp_avg = zeros(p.shape());
        exp_avg_sq = zeros(p.shape());
      }
      step_t.data()[0] += 1.f;
      const double t = step_t.data()[0];
      // In double, as PyTorch's Python scalars; rounded to float where they meet a tensor.
      const double bias_correction1 = 1.0 - std::pow(beta1, t);
      const double bias_correction2 = 1.0 - std::pow(beta2, t);
      const float neg_step_size = static_cast<float>(-(lr / bias_correction1));
      const float bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
      float* P = p.data();
      const float* G = grad.data();
      float* M = exp_avg.data();
      float* V = exp_avg_sq.data();
      std::atomic<bool> bad{false};
      parallel_for(p.numel(), kGrainElementwise, [&](int64_t begin, int64_t end) {
        for (int64_t j = begin; j < end; ++j) {
          const float g = G[j];
          const float pj = P[j] * decay;                        // param.mul_(1 − lr·wd)
          const float m = std::fma(one_minus_b1, g, M[j] * b1);  // exp_avg.mul_(β1).add_(g, alpha=1 − β1)
          const float v = std::fma(one_minus_b2 * g, g, V[j] * b2);  // exp_avg_sq.mul_(β2).addcmul_(g, g, 1 − β2)
          const float denom = std::sqrt(v) / bias_correction2_sqrt + eps;  // (√v / √bc2).add_(eps)
          M[j] = m;
          V[j] = v;
          P[j] = pj + neg_step_size * m / denom;  // param.addcdiv_(m, denom, value=−step_size)
        }
        const int64_t n = end - begin;
        if (has_nonfinite(P + begin, n) || has_nonfinite(M + begin, n) || has_nonfinite(V + begin, n)) bad = true;
      });
      if (bad) note_nonfinite(gi, i);
    }
  }
}

// ---- gradient clipping ------------------------------------------------------------------

namespace {

// Σ x² of a tensor in double, over fixed blocks summed in order: the same bits for any
// number of threads.
double sum_squares(const Tensor& t) {
  constexpr int64_t kBlock = 8192;
  const float* x = t.data();
  const int64_t n = t.numel(), nb = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<size_t>(nb), 0.0);
  parallel_for(nb, std::max<int64_t>(1, kGrainElementwise / kBlock), [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      double s = 0.0;
      for (int64_t j = b * kBlock, e = std::min(n, j + kBlock); j < e; ++j) s += static_cast<double>(x[j]) * x[j];
      partial[b] = s;
    }
  });
  double s = 0.0;
  for (double v : partial) s += v;
  return s;
}

void scale_(const Tensor& t, float c) {
  float* x = t.data();
  parallel_for(t.numel(), kGrainElementwise, [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j) x[j] *= c;
  });
}

}  // namespace

double grad_norm(const std::vector<Tensor>& params) {
  double s = 0.0;
  for (const Tensor& p : params) {
    const Tensor g = p.defined() ? p.grad() : Tensor();
    if (g.defined()) s += sum_squares(g);
  }
  return std::sqrt(s);
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  check(max_norm > 0.0, "clip_grad_norm: max_norm ", max_norm, " must be positive");
  const double total = grad_norm(params);
  if (!std::isfinite(total)) return total;
  // clip_coef = max_norm / (total + 1e-6), clamped to 1 (so scaling by it is a no-op then)
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1.0)
    for (const Tensor& p : params) {
      const Tensor g = p.defined() ? p.grad() : Tensor();
      if (g.defined()) scale_(g, static_cast<float>(coef));
    }
  return total;
}

std::vector<double> clip_grad_per_param(const std::vector<Tensor>& params, double clip) {
  check(clip > 0.0, "clip_grad_per_param: clip ", clip, " must be positive");
  std::vector<double> norms;
  norms.reserve(params.size());
  for (const Tensor& p : params) {
    const Tensor g = p.defined() ? p.grad() : Tensor();
    if (!g.defined()) {
      norms.push_back(0.0);
      continue;
    }
    const double norm = std::sqrt(sum_squares(g));
    norms.push_back(norm);
    const double coef = clip / (norm + 1e-6);
    if (coef < 1.0) scale_(g, static_cast<float>(coef));
  }
  return norms;
}

}  // namespace sima
