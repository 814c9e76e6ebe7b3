// LowpLinear and int8_bmm over oneDNN's matmul primitive (lowp_gemm.h).
//
// oneDNN memory descriptors used (row-major "ab"; "ba" = the transposed layout of a 2-d K×N):
//   x_q  (M, in)   u8  ab      the quantized input, x_q + Z
//   W    (in, out) s8  any     the weight (out, in) row-major is (in, out) "ba"; oneDNN packs it
//   acc  (M, out)  s32 ab      exact int32 sums
// The primitive depends on M, so one is made per row count seen (a batch and the last,
// smaller batch of an evaluation) and kept with its packed weights.
#include "core/ops/lowp_gemm.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <cmath>
#include <cstring>
#include <map>
#include <tuple>
#include <mutex>
#include <unordered_map>

#include "core/error.h"
#include "core/ops/activation_fns.h"
#include "core/ops/dnnl_context.h"
#include "core/ops/gemm.h"
#include "core/parallel.h"

namespace sima {

namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

// An MLP activation as oneDNN's eltwise post-op: GELU is its gelu_erf (x·Φ(x), erf-based), QuickGELU
// its swish with α = 1.702 (x·σ(1.702x)), ReLU its relu (slope 0).
void append_act(dnnl::post_ops& ops, MlpActivation act) {
  switch (act) {
    case MlpActivation::Gelu: return ops.append_eltwise(1.f, dnnl::algorithm::eltwise_gelu_erf, 0.f, 0.f);
    case MlpActivation::QuickGelu: return ops.append_eltwise(1.f, dnnl::algorithm::eltwise_swish, 1.702f, 0.f);
    case MlpActivation::Relu: return ops.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
  }
}

// A matmul primitive for src (M, K) and weights (K, N) in the given types, weights packed as
// oneDNN prefers, with a float32 bias (N) added as it stores when `bias`, then `act` when given
// (a post-op: applied to each value as it stores, no second pass), then a float32 (M, N) tensor
// added when `residual` (a binary post-op: the residual stream of a block, read as it stores);
// throws dnnl::error when no implementation exists on this CPU.
dnnl::matmul::primitive_desc matmul_pd(int64_t M, int64_t K, int64_t N, dt src, dt wei, dt dst, bool bias = false,
                                       const MlpActivation* act = nullptr, bool residual = false) {
  memory::desc a({M, K}, src, tag::ab), w({K, N}, wei, tag::any), c({M, N}, dst, tag::ab);
  dnnl::primitive_attr attr;
  dnnl::post_ops ops;
  if (act) append_act(ops, *act);
  if (residual) ops.append_binary(dnnl::algorithm::binary_add, memory::desc({M, N}, dt::f32, tag::ab));
  if (act || residual) attr.set_post_ops(ops);
  const dnnl::matmul::desc d = bias ? dnnl::matmul::desc(a, w, memory::desc({1, N}, dt::f32, tag::ab), c)
                                    : dnnl::matmul::desc(a, w, c);
  return dnnl::matmul::primitive_desc(d, attr, dnnl_ctx().eng);
}

// The activation of an MLP's hidden layer as a functor (activation_fns.h), or none: f(v) = v.
template <class F>
void with_act(const MlpActivation* act, F&& f) {
  if (!act) return f(IdentityFn{});
  switch (*act) {
    case MlpActivation::Gelu: return f(GeluFn{});
    case MlpActivation::QuickGelu: return f(QuickGeluFn{});
    case MlpActivation::Relu: return f(ReluFn{});
  }
}

// y (M×N) = act(y + b) in one pass; b may be null (no bias), act null (none).
void bias_act(float* y, int64_t M, int64_t N, const float* b, const MlpActivation* act) {
  if (!b && !act) return;
  with_act(act, [&](auto fn) {
    using Fn = decltype(fn);
    parallel_for(M, grain_for(act ? kGrainTranscendental : kGrainElementwise, N), [&](int64_t m0, int64_t m1) {
      for (int64_t m = m0; m < m1; ++m) {
        float* ym = y + m * N;
        if (b)
          for (int64_t n = 0; n < N; ++n) ym[n] = Fn::f(ym[n] + b[n]);
        else
          for (int64_t n = 0; n < N; ++n) ym[n] = Fn::f(ym[n]);
      }
    });
  });
}

// Σ_k q[r,k] for every row r of q (rows × cols)
std::vector<int32_t> row_sums(const std::vector<int8_t>& q, int64_t rows, int64_t cols) {
  std::vector<int32_t> s(static_cast<size_t>(rows), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < cols; ++k) s[r] += q[r * cols + k];
  return s;
}

}  // namespace

Dnnl& dnnl_ctx() {
  static Dnnl c;
  return c;
}

bool bf16_native() {
  static const bool ok = [] {
    try {
      matmul_pd(64, 64, 64, dt::bf16, dt::bf16, dt::f32);
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return ok;
}

// ---- LowpLinear -------------------------------------------------------------------------

struct LowpLinear::Impl {
  Precision p;
  int64_t out, in;
  std::vector<int8_t> q;       // Int8: W_q (out, in)
  std::vector<float> scale;    // Int8: s_w (out)
  std::vector<int32_t> wsum;   // Int8: Σ_k W_q[n,k] (out)
  std::vector<uint16_t> wb;    // BF16 native: W as bf16 bits (out, in)
  std::vector<float> wr;       // BF16 emulated: W rounded to bf16, as float32 (out, in)
  std::vector<float> wf;       // F32: W as it is (out, in), packed by oneDNN in the plan
  std::vector<float> bias;     // (out) or empty
  std::vector<float> zeros_;   // (out) zeros: the bias of a Linear without one
  // F32 and native BF16: the primitive adds the bias as it stores (none when bias is empty), and an
  // MLP's activation after it (a post-op).
  bool primitive_stores() const { return p == Precision::F32 || (p == Precision::BF16 && bf16_native()); }
  bool bias_in_primitive() const { return !bias.empty() && primitive_stores(); }
  struct Plan {
    dnnl::matmul prim;
    memory weights;     // packed for prim
    int residual_post_op = -1;  // the residual's post-op index (after act's), -1: none
  };
  // F32 and native BF16 (primitive_stores): a residual is added by the primitive too (a post-op);
  // else in a pass after
  // per row count M, activation (-1: none; else the MlpActivation's value), whether the primitive
  // stores bf16 (an MLP's hidden layer: lowp_mlp) rather than float32, and whether it adds a residual
  mutable std::map<std::tuple<int64_t, int, bool, bool>, Plan> plans;
  mutable std::mutex mu;

  const Plan& plan(int64_t M, const MlpActivation* act = nullptr, bool bf16_out = false, bool residual = false) const;
  // y (M, out) = act(x Wᵀ + b) (+ res, (M, out), when given: F32 and native BF16 only); act null: none
  void forward_int8(const float* x, int64_t M, float* y, const MlpActivation* act) const;
  void forward_bf16(const float* x, int64_t M, float* y, const MlpActivation* act, const float* res = nullptr) const;
  void forward_f32(const float* x, int64_t M, float* y, const MlpActivation* act, const float* res = nullptr) const;
  // the primitive: y = act(a Wᵀ (+ b)) (+ res (M, out) when the plan adds one)
  void run(const Plan& pl, const memory& a, const memory& y, const float* res = nullptr) const;
  void run(const Plan& pl, const memory& a, float* y, int64_t M, const float* res = nullptr) const;  // y float32
  memory bf16_input(const float* x, int64_t M, std::unique_ptr<uint16_t[]>& xb) const;  // x rounded into xb
};

const LowpLinear::Impl::Plan& LowpLinear::Impl::plan(int64_t M, const MlpActivation* act, bool bf16_out,
                                                    bool residual) const {
  const std::tuple<int64_t, int, bool, bool> key{M, act ? static_cast<int>(*act) : -1, bf16_out, residual};
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = plans.find(key); it != plans.end()) return it->second;
  if (plans.size() >= 8) plans.clear();  // a few row counts are normal; many are a caller's loop
  const bool i8 = p == Precision::Int8, f32 = p == Precision::F32;
  const dt w_type = i8 ? dt::s8 : f32 ? dt::f32 : dt::bf16;
  const dt y_type = i8 ? dt::s32 : bf16_out ? dt::bf16 : dt::f32;
  auto pd = matmul_pd(M, in, out, i8 ? dt::u8 : w_type, w_type, y_type, bias_in_primitive(), act, residual);
  Plan plan{dnnl::matmul(pd), memory(), residual ? (act ? 1 : 0) : -1};
  for (auto& [m, other] : plans)  // the same packed layout: share the packed weights
    if (other.weights.get_desc() == pd.weights_desc()) plan.weights = other.weights;
  if (!plan.weights) {
    memory::desc user({in, out}, w_type, tag::ba);  // (out, in) row-major
    memory src(user, dnnl_ctx().eng, i8 ? (void*)q.data() : f32 ? (void*)wf.data() : (void*)wb.data());
    plan.weights = memory(pd.weights_desc(), dnnl_ctx().eng);
    dnnl::reorder(src, plan.weights).execute(dnnl_ctx().st, src, plan.weights);
    dnnl_ctx().st.wait();
  }
  return plans.emplace(key, std::move(plan)).first->second;
}

// y (M, out) = act(dequant(x_q (M, in) · W_qᵀ) + b)
void LowpLinear::Impl::forward_int8(const float* x, int64_t M, float* y, const MlpActivation* act) const {
  const int Q = int8_input_range();
  std::unique_ptr<uint8_t[]> xq(new uint8_t[M * in]);  // uninitialised: written in full below
  std::unique_ptr<int32_t[]> acc(new int32_t[M * out]);
  std::vector<float> sx(static_cast<size_t>(M));
  quantize_rows_u8(x, M, in, in, Q, xq.get(), sx.data());
  const Plan& pl = plan(M);
  auto& c = dnnl_ctx();
  memory a(memory::desc({M, in}, dt::u8, tag::ab), c.eng, xq.get());
  memory d(memory::desc({M, out}, dt::s32, tag::ab), c.eng, acc.get());
  pl.prim.execute(c.st, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, pl.weights}, {DNNL_ARG_DST, d}});
  c.st.wait();
  const int32_t Z = Q + 1;  // the zero point's share of sum n is Z Σ_k W_q[n,k] (quantize.h)
  const std::vector<float>& b = bias.empty() ? zeros_ : bias;
  with_act(act, [&](auto fn) {
    using Fn = decltype(fn);
    parallel_for(M, grain_for(act ? kGrainTranscendental : kGrainElementwise, out), [&](int64_t m0, int64_t m1) {
      for (int64_t m = m0; m < m1; ++m) {
        const int32_t* am = acc.get() + m * out;
        float* ym = y + m * out;
        for (int64_t n = 0; n < out; ++n)
          ym[n] = Fn::f(static_cast<float>(am[n] - Z * wsum[n]) * (sx[m] * scale[n]) + b[n]);
      }
    });
  });
}

void LowpLinear::Impl::run(const Plan& pl, const memory& a, const memory& y, const float* res) const {
  auto& c = dnnl_ctx();
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, pl.weights}, {DNNL_ARG_DST, y}};
  if (bias_in_primitive())
    args[DNNL_ARG_BIAS] = memory(memory::desc({1, out}, dt::f32, tag::ab), c.eng, const_cast<float*>(bias.data()));
  if (res) {  // the binary post-op, after the activation's when there is one
    check(pl.residual_post_op >= 0, "LowpLinear: a residual for a plan that adds none");
    args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(pl.residual_post_op) | DNNL_ARG_SRC_1] = memory(y.get_desc(), c.eng, const_cast<float*>(res));
  }
  pl.prim.execute(c.st, args);
  c.st.wait();
}

void LowpLinear::Impl::run(const Plan& pl, const memory& a, float* y, int64_t M, const float* res) const {
  run(pl, a, memory(memory::desc({M, out}, dt::f32, tag::ab), dnnl_ctx().eng, y), res);
}

// x (M, in) float32 rounded to bf16 bits in xb (allocated here), as a oneDNN memory over xb
memory LowpLinear::Impl::bf16_input(const float* x, int64_t M, std::unique_ptr<uint16_t[]>& xb) const {
  xb.reset(new uint16_t[M * in]);  // uninitialised: written in full below
  floats_to_bf16_bits(x, xb.get(), M * in);
  return memory(memory::desc({M, in}, dt::bf16, tag::ab), dnnl_ctx().eng, xb.get());
}

// y (M, out) = act(bf16(x) · bf16(W)ᵀ + b), float32 sums
void LowpLinear::Impl::forward_bf16(const float* x, int64_t M, float* y, const MlpActivation* act,
                                    const float* res) const {
  if (bf16_native()) {
    std::unique_ptr<uint16_t[]> xb;
    run(plan(M, act, false, res), bf16_input(x, M, xb), y, M, res);  // the primitive added the bias and applied act
  } else {
    std::vector<float> xr(static_cast<size_t>(M * in));
    for (int64_t i = 0; i < M * in; ++i) xr[i] = round_to_bf16(x[i]);
    gemm(false, true, M, out, in, xr.data(), wr.data(), 0.f, y);
    bias_act(y, M, out, bias.empty() ? nullptr : bias.data(), act);
  }
}

// y (M, out) = x · Wᵀ + b in float32, W packed once by oneDNN: at small M the sgemm's packing of
// W at every call is a fifth of the product's time, which this saves (docs/latency.md).
void LowpLinear::Impl::forward_f32(const float* x, int64_t M, float* y, const MlpActivation* act,
                                   const float* res) const {
  run(plan(M, act, false, res), memory(memory::desc({M, in}, dt::f32, tag::ab), dnnl_ctx().eng, const_cast<float*>(x)),
      y, M, res);
  // the primitive added the bias and applied act
}

LowpLinear::LowpLinear(Precision p, const Tensor& weight, const Tensor& bias) : impl_(std::make_shared<Impl>()) {
  check(weight.defined() && weight.dim() == 2, "LowpLinear: weight must be (out, in)");
  Impl& I = *impl_;
  I.p = p;
  I.out = weight.size(0);
  I.in = weight.size(1);
  const float* w = weight.data();
  if (p == Precision::F32) {
    I.wf.assign(w, w + I.out * I.in);
  } else if (p == Precision::Int8) {
    I.q.resize(static_cast<size_t>(I.out * I.in));
    I.scale.resize(static_cast<size_t>(I.out));
    quantize_rows_s8(w, I.out, I.in, I.q.data(), I.scale.data());
    I.wsum = row_sums(I.q, I.out, I.in);
  } else if (bf16_native()) {
    I.wb.resize(static_cast<size_t>(I.out * I.in));
    floats_to_bf16_bits(w, I.wb.data(), I.out * I.in);
  } else {
    I.wr.resize(static_cast<size_t>(I.out * I.in));
    for (int64_t i = 0; i < I.out * I.in; ++i) I.wr[i] = round_to_bf16(w[i]);
  }
  if (bias.defined())  // (the message reads bias.shape(), which an undefined bias does not have)
    check(bias.dim() == 1 && bias.size(0) == I.out, "LowpLinear: bias ", bias.shape(), " does not match weight ",
          weight.shape());
  if (bias.defined()) I.bias.assign(bias.data(), bias.data() + I.out);
  I.zeros_.assign(static_cast<size_t>(I.out), 0.f);
}

LowpLinear::LowpLinear(std::vector<int8_t> q, std::vector<float> scale, int64_t out, int64_t in, const Tensor& bias)
    : impl_(std::make_shared<Impl>()) {
  check(out > 0 && in > 0 && static_cast<int64_t>(q.size()) == out * in &&
            static_cast<int64_t>(scale.size()) == out,
        "LowpLinear: int8 weight of ", q.size(), " values and ", scale.size(), " scales for (", out, ", ", in, ")");
  for (size_t i = 0; i < q.size(); ++i)
    check(q[i] >= -127, "LowpLinear: int8 weight value ", int(q[i]), " outside [-127, 127]");
  for (size_t n = 0; n < scale.size(); ++n)
    check(std::isfinite(scale[n]) && scale[n] > 0.f, "LowpLinear: weight scale[", n, "] = ", scale[n],
          " is not a positive finite number");
  check(!bias.defined() || (bias.dim() == 1 && bias.size(0) == out), "LowpLinear: bias does not match (", out, ")");
  Impl& I = *impl_;
  I.p = Precision::Int8;
  I.out = out;
  I.in = in;
  I.q = std::move(q);
  I.scale = std::move(scale);
  I.wsum = row_sums(I.q, out, in);
  if (bias.defined()) I.bias.assign(bias.data(), bias.data() + out);
  I.zeros_.assign(static_cast<size_t>(out), 0.f);
}

Tensor LowpLinear::forward(const Tensor& x) const { return forward_impl(x, nullptr, nullptr); }
Tensor LowpLinear::forward(const Tensor& x, MlpActivation act) const { return forward_impl(x, &act, nullptr); }
Tensor LowpLinear::forward_add(const Tensor& x, const Tensor& residual) const { return forward_impl(x, nullptr, &residual); }

namespace {
// x (..., in) -> an uninitialised y (..., out), or an error naming what; a residual (undefined:
// none) must be shaped as y
Tensor output_for(const Tensor& x, int64_t in, int64_t out, const Tensor& residual, const char* what) {
  check(x.defined() && x.dim() >= 1 && x.size(-1) == in, what, ": input ", x.shape(), " does not end in ", in,
        " features");
  Shape ys = x.shape();
  ys[ys.ndim() - 1] = out;
  check(!residual.defined() || residual.shape() == ys, what, ": residual ",
        residual.defined() ? residual.shape().str() : "", " does not match the output ", ys);
  return empty(ys);
}

// y += r, both n floats
void add_into(float* y, const float* r, int64_t n) {
  parallel_for(n, kGrainElementwise, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) y[i] += r[i];
  });
}
}  // namespace

Tensor LowpLinear::forward_impl(const Tensor& x, const MlpActivation* act, const Tensor* residual) const {
  const Impl& I = *impl_;
  Tensor y = output_for(x, I.in, I.out, residual ? *residual : Tensor(), "LowpLinear");
  const int64_t M = x.numel() / I.in;
  if (M == 0) return y;
  const float* res = residual && I.primitive_stores() ? residual->data() : nullptr;
  try {
    if (I.p == Precision::Int8) I.forward_int8(x.data(), M, y.data(), act);
    else if (I.p == Precision::F32) I.forward_f32(x.data(), M, y.data(), act, res);
    else I.forward_bf16(x.data(), M, y.data(), act, res);
  } catch (const dnnl::error& e) {
    fail("LowpLinear (", precision_name(I.p), ", ", I.in, " -> ", I.out, "): oneDNN: ", e.what());
  }
  if (residual && !res) add_into(y.data(), residual->data(), y.numel());
  count_gemm_flops(2 * M * I.out * I.in);
  return y;
}

// fc2(act(fc1(x))) for an MLP (lowp_gemm.h). Native bf16: fc1's primitive stores its output in
// bf16 (the same rounding to nearest even that fc2's input would get), and fc2 reads it as it is.
Tensor lowp_mlp(const LowpLinear& fc1, const LowpLinear& fc2, const Tensor& x, MlpActivation act,
                const Tensor& residual) {
  const LowpLinear::Impl &A = *fc1.impl_, &B = *fc2.impl_;
  const bool chain = A.p == Precision::BF16 && B.p == Precision::BF16 && bf16_native();
  if (!chain || A.out != B.in)
    return residual.defined() ? fc2.forward_add(fc1.forward(x, act), residual) : fc2.forward(fc1.forward(x, act));
  Tensor y = output_for(x, A.in, B.out, residual, "lowp_mlp");
  const int64_t M = x.numel() / A.in;
  if (M == 0) return y;
  const float* res = residual.defined() ? residual.data() : nullptr;
  try {
    std::unique_ptr<uint16_t[]> xb;
    std::unique_ptr<uint16_t[]> h(new uint16_t[M * A.out]);  // (M, hidden) bf16, written in full by fc1
    const memory hm(memory::desc({M, A.out}, dt::bf16, tag::ab), dnnl_ctx().eng, h.get());
    A.run(A.plan(M, &act, true), A.bf16_input(x.data(), M, xb), hm);
    B.run(B.plan(M, nullptr, false, res), hm, y.data(), M, res);
  } catch (const dnnl::error& e) {
    fail("lowp_mlp (bf16, ", A.in, " -> ", A.out, " -> ", B.out, "): oneDNN: ", e.what());
  }
  count_gemm_flops(2 * M * A.out * A.in + 2 * M * B.out * B.in);
  return y;
}

Precision LowpLinear::precision() const { return impl_->p; }
int64_t LowpLinear::in_features() const { return impl_->in; }
int64_t LowpLinear::out_features() const { return impl_->out; }
const std::vector<int8_t>& LowpLinear::int8_weight() const { return impl_->q; }
const std::vector<float>& LowpLinear::weight_scale() const { return impl_->scale; }

// ---- int8_bmm ----------------------------------------------------------------------------

namespace {
// The P matrices X[p] (r×c, or c×r when t: then read transposed) as P row-major r×c copies.
std::vector<float> rows_of(const float* X, bool t, int64_t P, int64_t r, int64_t c) {
  std::vector<float> out(static_cast<size_t>(P * r * c));
  parallel_for(P, grain_for(kGrainElementwise, r * c), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p)
      for (int64_t i = 0; i < r; ++i)
        for (int64_t j = 0; j < c; ++j)
          out[(p * r + i) * c + j] = t ? X[(p * c + j) * r + i] : X[(p * r + i) * c + j];
  });
  return out;
}
}  // namespace

// op(A) (P, m, k) -> u8 per row; op(B)ᵀ (P, n, k) -> s8 per row (= per column of op(B));
// oneDNN: src (P, m, k) u8 "abc", weights (P, k, n) s8 "acb" (stored as (P, n, k)), dst s32.
void int8_bmm(int64_t P, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* A, const float* B,
              float* C) {
  if (P == 0 || m == 0 || n == 0) return;
  const int Q = int8_input_range();
  std::vector<float> a = ta ? rows_of(A, true, P, m, k) : std::vector<float>();
  std::vector<float> bt = tb ? std::vector<float>() : rows_of(B, true, P, n, k);
  std::unique_ptr<uint8_t[]> aq(new uint8_t[P * m * k]);  // uninitialised: written in full below
  std::vector<int8_t> bq(static_cast<size_t>(P * n * k));
  std::vector<float> sa(static_cast<size_t>(P * m)), sb(static_cast<size_t>(P * n));
  std::unique_ptr<int32_t[]> acc(new int32_t[P * m * n]);
  quantize_rows_u8(ta ? a.data() : A, P * m, k, k, Q, aq.get(), sa.data());
  quantize_rows_s8(tb ? B : bt.data(), P * n, k, bq.data(), sb.data());
  const std::vector<int32_t> bsum = row_sums(bq, P * n, k);
  try {
    auto& c = dnnl_ctx();
    memory::desc ad({P, m, k}, dt::u8, tag::abc), bd({P, k, n}, dt::s8, tag::acb), cd({P, m, n}, dt::s32, tag::abc);
    dnnl::matmul prim(dnnl::matmul::primitive_desc(dnnl::matmul::desc(ad, bd, cd), c.eng));
    memory am(ad, c.eng, aq.get()), bm(bd, c.eng, bq.data()), cm(cd, c.eng, acc.get());
    prim.execute(c.st, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
    c.st.wait();
  } catch (const dnnl::error& e) {
    fail("int8_bmm (", P, " x ", m, "x", k, " . ", k, "x", n, "): oneDNN: ", e.what());
  }
  const int32_t Z = Q + 1;
  parallel_for(P * m, grain_for(kGrainElementwise, n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {  // r = p m + i
      const int64_t p = r / m;
      for (int64_t j = 0; j < n; ++j)
        C[r * n + j] = static_cast<float>(acc[r * n + j] - Z * bsum[p * n + j]) * (sa[r] * sb[p * n + j]);
    }
  });
  count_gemm_flops(2 * P * m * n * k);
}

}  // namespace sima
