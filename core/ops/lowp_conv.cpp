// LowpConv2d over oneDNN's convolution primitive (lowp_conv.h).
//
// oneDNN memory descriptors used:
//   x  (B, Cin, H, W)           f32        nchw or nhwc     the caller's input
//   src                         f32/bf16   any              what the primitive reads: x reordered
//                                                           (and rounded to bf16) when it differs
//   W  (Cout, Cin, kh, kw)      f32/bf16   any              packed once from the caller's oihw;
//      (G, Cout/G, Cin/G, kh, kw)          (goihw when grouped)
//   b  (Cout)                   f32        a
//   y  (B, Cout, Ho, Wo)        f32        nchw or nhwc     written by the primitive
#include "core/ops/lowp_conv.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/flops.h"
#include "core/ops/dnnl_context.h"
#include "core/ops/lowp_gemm.h"

namespace sima {

namespace {
using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

tag layout_tag(ConvLayout l) { return l == ConvLayout::NHWC ? tag::nhwc : tag::nchw; }
}  // namespace

struct LowpConv2d::Impl {
  bool bf16;
  int64_t Cout, Cin, kh, kw;  // Cin: the input's channels (the weight holds Cin / groups)
  int stride, padding, groups;
  std::vector<float> w, b;  // (Cout, Cin/groups, kh, kw) as given, (Cout) or empty
  struct Plan {
    dnnl::convolution_forward prim;
    memory::desc src;  // what prim reads
    memory::desc dst;  // what prim writes: the caller's layout
    memory weights;    // packed for prim
    int64_t Ho, Wo;
  };
  // per (B, H, W, in layout, out layout)
  mutable std::map<std::tuple<int64_t, int64_t, int64_t, int, int>, Plan> plans;
  mutable std::mutex mu;

  memory::dims weight_dims() const {
    if (groups == 1) return {Cout, Cin, kh, kw};
    return {groups, Cout / groups, Cin / groups, kh, kw};
  }
  const Plan& plan(int64_t B, int64_t H, int64_t W, ConvLayout in, ConvLayout out) const;
};

const LowpConv2d::Impl::Plan& LowpConv2d::Impl::plan(int64_t B, int64_t H, int64_t W, ConvLayout in,
                                                    ConvLayout out) const {
  const std::tuple<int64_t, int64_t, int64_t, int, int> key{B, H, W, int(in), int(out)};
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = plans.find(key); it != plans.end()) return it->second;
  if (plans.size() >= 8) plans.clear();  // a few shapes are normal; many are a caller's loop
  auto& c = dnnl_ctx();
  const int64_t Ho = (H + 2 * padding - kh) / stride + 1, Wo = (W + 2 * padding - kw) / stride + 1;
  const dt op = bf16 ? dt::bf16 : dt::f32;
  const memory::desc src({B, Cin, H, W}, op, tag::any), wei(weight_dims(), op, tag::any);
  const memory::desc dst({B, Cout, Ho, Wo}, dt::f32, layout_tag(out)), bias({Cout}, dt::f32, tag::a);
  const memory::dims st{stride, stride}, pad{padding, padding};
  using conv = dnnl::convolution_forward;
  const auto kind = dnnl::prop_kind::forward_inference;
  const conv::desc d = b.empty() ? conv::desc(kind, dnnl::algorithm::convolution_direct, src, wei, dst, st, pad, pad)
                                 : conv::desc(kind, dnnl::algorithm::convolution_direct, src, wei, bias, dst, st, pad, pad);
  const conv::primitive_desc pd(d, c.eng);
  Plan p{conv(pd), pd.src_desc(), dst, memory(), Ho, Wo};
  for (auto& [k, other] : plans)  // the same packed layout: share the packed weights
    if (other.weights.get_desc() == pd.weights_desc()) p.weights = other.weights;
  if (!p.weights) {
    p.weights = memory(pd.weights_desc(), c.eng);
    memory user({weight_dims(), dt::f32, groups == 1 ? tag::oihw : tag::goihw}, c.eng, const_cast<float*>(w.data()));
    dnnl::reorder(user, p.weights).execute(c.st, user, p.weights);  // packs, and rounds to bf16
    c.st.wait();
  }
  return plans.emplace(key, std::move(p)).first->second;
}

LowpConv2d::LowpConv2d(Precision p, const Tensor& weight, const Tensor& bias, int stride, int padding, int groups)
    : impl_(std::make_shared<Impl>()) {
  check(weight.defined() && weight.dim() == 4 && weight.size(2) == weight.size(3), "LowpConv2d: weight ",
        weight.defined() ? weight.shape().str() : "undefined", " must be (Cout, Cin/groups, k, k)");
  check(stride >= 1 && padding >= 0 && groups >= 1 && weight.size(0) % groups == 0, "LowpConv2d: stride ", stride,
        ", padding ", padding, ", groups ", groups, " for weight ", weight.shape());
  check(!bias.defined() || (bias.dim() == 1 && bias.size(0) == weight.size(0)), "LowpConv2d: bias ",
        bias.defined() ? bias.shape().str() : "", " does not match weight ", weight.shape());
  Impl& I = *impl_;
  // depthwise: float32 at every precision (lowp_conv.h)
  I.bf16 = p == Precision::BF16 && bf16_native() && !(groups == weight.size(0) && weight.size(1) == 1);
  I.Cout = weight.size(0);
  I.Cin = weight.size(1) * groups;
  I.kh = weight.size(2);
  I.kw = weight.size(3);
  I.stride = stride;
  I.padding = padding;
  I.groups = groups;
  I.w.assign(weight.data(), weight.data() + weight.numel());
  if (bias.defined()) I.b.assign(bias.data(), bias.data() + bias.numel());
}

bool LowpConv2d::runs_bf16() const { return impl_->bf16; }

Tensor LowpConv2d::forward(const Tensor& x, ConvLayout in, ConvLayout out) const {
  const Impl& I = *impl_;
  const bool nhwc = in == ConvLayout::NHWC;
  check(x.defined() && x.dim() == 4 && x.size(nhwc ? 3 : 1) == I.Cin, "LowpConv2d: input ",
        x.defined() ? x.shape().str() : "undefined", " must be ", nhwc ? "(B, H, W, " : "(B, ", I.Cin,
        nhwc ? ")" : ", H, W)");
  const int64_t B = x.size(0), H = x.size(nhwc ? 1 : 2), W = x.size(nhwc ? 2 : 3);
  check(H + 2 * I.padding >= I.kh && W + 2 * I.padding >= I.kw, "LowpConv2d: kernel ", I.kh, "x", I.kw,
        " is bigger than the padded input ", x.shape());
  const int64_t Ho = (H + 2 * I.padding - I.kh) / I.stride + 1, Wo = (W + 2 * I.padding - I.kw) / I.stride + 1;
  Tensor y = empty(out == ConvLayout::NHWC ? Shape{B, Ho, Wo, I.Cout} : Shape{B, I.Cout, Ho, Wo});
  if (B == 0) return y;  // (oneDNN makes no primitive for an empty batch)
  auto& c = dnnl_ctx();
  try {
    const Impl::Plan& p = I.plan(B, H, W, in, out);
    const memory::desc user({B, I.Cin, H, W}, dt::f32, layout_tag(in));
    memory xm(user, c.eng, const_cast<float*>(x.data()));
    memory src = xm;
    if (p.src != user) {  // another layout or bf16: one reorder pass
      src = memory(p.src, c.eng);
      dnnl::reorder(xm, src).execute(c.st, xm, src);
    }
    memory ym(p.dst, c.eng, y.data());
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, p.weights}, {DNNL_ARG_DST, ym}};
    if (!I.b.empty())
      args[DNNL_ARG_BIAS] = memory({{I.Cout}, dt::f32, tag::a}, c.eng, const_cast<float*>(I.b.data()));
    p.prim.execute(c.st, args);
    c.st.wait();
    count_gemm_flops(2 * B * p.Ho * p.Wo * I.Cout * (I.Cin / I.groups) * I.kh * I.kw);
    return y;
  } catch (const dnnl::error& e) {
    fail("LowpConv2d (", I.bf16 ? "bf16" : "fp32", ", ", I.Cin, " -> ", I.Cout, ", ", I.kh, "x", I.kw, " stride ",
         I.stride, "): oneDNN: ", e.what());
  }
}

}  // namespace sima
