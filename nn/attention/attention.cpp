#include "nn/attention/attention.h"

#include <cmath>

#include "core/error.h"
#include "core/ops/dropout.h"
#include "core/ops/elementwise.h"
#include "core/ops/shape_ops.h"

namespace sima {

Attention::Attention(const AttentionOptions& opt, const std::string& type_name, int qkv_outputs)
    : Module(type_name), opt_(opt) {
  check(opt.dim > 0 && opt.num_heads > 0, type_name, ": dim (", opt.dim, ") and num_heads (",
        opt.num_heads, ") must be positive");
  check(opt.dim % opt.num_heads == 0, type_name, ": num_heads ", opt.num_heads,
        " does not divide dim ", opt.dim);
  check(opt.attn_drop >= 0.f && opt.attn_drop < 1.f && opt.proj_drop >= 0.f && opt.proj_drop < 1.f,
        type_name, ": attn_drop and proj_drop must be in [0, 1)");
  if (opt.projections) {
    qkv = register_module("qkv", std::make_shared<Linear>(opt.dim, qkv_outputs * opt.dim, opt.qkv_bias));
    proj = register_module("proj", std::make_shared<Linear>(opt.dim, opt.dim));
  }
}

void Attention::split_heads(const Tensor& qkv_out, Tensor& q, Tensor& k, Tensor& v) const {
  const int64_t B = qkv_out.size(0), N = qkv_out.size(1), h = opt_.num_heads, d = head_dim();
  // (B, N, 3C) -> (B, N, 3, h, d) -> (3, B, h, N, d); the three are views of one copy.
  Tensor t = permute(reshape(qkv_out, {B, N, 3, h, d}), {2, 0, 3, 1, 4});
  q = squeeze(narrow(t, 0, 0, 1), 0);
  k = squeeze(narrow(t, 0, 1, 1), 0);
  v = squeeze(narrow(t, 0, 2, 1), 0);
}

Tensor Attention::merge_heads(const Tensor& o) {
  const int64_t B = o.size(0), h = o.size(1), N = o.size(2), d = o.size(3);
  return reshape(permute(o, {0, 2, 1, 3}), {B, N, h * d});
}

void Attention::check_projections() const {
  check(opt_.projections, type_name(), ": built without projections (core only); forward needs them");
}

Tensor Attention::project(const Tensor& o) {
  if (pending_residual_.defined() && !residual_added_ && (opt_.proj_drop == 0.f || !is_training())) {
    residual_added_ = true;  // forward() returns this: forward_add's sum
    return proj->forward_add(o, pending_residual_);
  }
  return dropout(proj->forward(o), opt_.proj_drop, is_training());
}

Tensor Attention::forward_add(const Tensor& x, const Tensor& residual, int64_t H, int64_t W) {
  struct Pending {  // cleared however forward() ends
    Attention& a;
    ~Pending() {
      a.pending_residual_ = Tensor();
      a.residual_added_ = false;
    }
  } pending{*this};
  pending_residual_ = residual;
  residual_added_ = false;
  Tensor y = forward(x, H, W);
  return residual_added_ ? y : add(residual, y);
}

Tensor Attention::forward(const Tensor& x, int64_t H, int64_t W) {
  check_projections();
  check(x.dim() == 3 && x.size(2) == opt_.dim, type_name(), ": input ", x.shape(),
        " must be (B, N, ", opt_.dim, ")");
  const Tensor qkv_out = qkv->forward(x);
  if (Tensor o = packed_core(qkv_out); o.defined()) return project(gate_heads(o, x));
  Tensor q, k, v;
  split_heads(qkv_out, q, k, v);
  return project(gate_heads(merge_heads(core(q, k, v, H, W)), x));
}

float Attention::softmax_scale() const {
  return opt_.softmax_scale > 0.f ? opt_.softmax_scale : 1.f / std::sqrt(static_cast<float>(head_dim()));
}

}  // namespace sima
