// Autocast (core/ops/autocast.h): every product of a training step at bf16 or float16.
// - float16 rounding: the F16C path equals exact integer rounding on special and random values;
//   overflow past 65504 gives ±inf; subnormals and ties to even as IEEE;
// - gemm() under BF16 / FP16 equals its definition (inputs rounded, float32 sums, FP16's output
//   rounded) on every transpose, with beta, split across threads and not;
// - each op built on gemm (linear, matmul, the fused MLP, conv2d, the SimA core), forward and
//   backward, at bf16 and fp16 against float32 within the bounds of docs/precision.md, and
//   really rounded (not equal to float32); the depthwise convolutions rounded at fp16 only
//   (float32 at bf16, bit for bit);
// - gemm_block (explicit leading dimensions, the packed attention cores' products) at bf16 and
//   fp16 gives gemm()'s bits on the same values stored contiguous, and reads nothing between rows;
// - the packed attention cores (SimA's and softmax's, read in place from qkv: DeiT's and XCiT's
//   path) are rounded like the split-head cores: not float32 under bf16 or fp16;
// - every attention variant's module (projections and core, forward and input gradient) at bf16
//   and fp16: finite, near float32 and rounded;
// - Off is float32 bit for bit;
// - float16's overflow: SimA without normalisation on large activations gives inf at fp16 and
//   stays finite at fp32 and with ℓ1 normalisation, by the split-head core and the packed one.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <functional>

#include "core/autograd.h"
#include "core/ops/autocast.h"
#include "core/ops/conv.h"
#include "core/ops/fused_mlp.h"
#include "core/ops/gemm.h"
#include "core/ops/matmul.h"
#include "core/ops/quantize.h"
#include "core/ops/reduce.h"
#include "nn/attention/sima.h"
#include "nn/attention/softmax_attention.h"
#include "nn/attention/variants.h"
#include "testing.h"

using namespace sima;
using namespace sima::testing;

namespace {

bool bf16_here() { return autocast_unsupported(AutocastMode::BF16).empty(); }

double rel_l2(const Tensor& got, const Tensor& want) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double d = double(got.data()[i]) - want.data()[i];
    num += d * d;
    den += double(want.data()[i]) * want.data()[i];
  }
  return std::sqrt(num / den);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.data(), b.data(), sizeof(float) * a.numel()) == 0;
}

// f on fresh leaf copies of `inputs` under `mode`, backward with one fixed random gradient:
// the output, then the gradient of every input that requires one.
std::vector<Tensor> run_op(AutocastMode mode, const std::function<Tensor(const std::vector<Tensor>&)>& f,
                           const std::vector<Tensor>& inputs) {
  std::vector<Tensor> x = leaf_copies(inputs);
  AutocastGuard guard(mode);
  Tensor y = f(x);
  Generator g(5);
  y.backward(randn(y.shape(), g));
  std::vector<Tensor> out{y.detach()};
  for (const Tensor& t : x)
    if (t.defined() && t.requires_grad()) out.push_back(t.grad());
  return out;
}

// Every result of f at bf16 and fp16 within `bf16_bound` / `fp16_bound` (relative ℓ2) of float32's,
// and not equal to it; Off bit for bit float32.
// bf16_is_fp32: the op stays float32 at bf16 (the depthwise convolutions): bit for bit there.
void check_op(const char* name, const std::function<Tensor(const std::vector<Tensor>&)>& f,
              const std::vector<Tensor>& inputs, double bf16_bound = 1e-2, double fp16_bound = 2e-3,
              bool bf16_is_fp32 = false) {
  const std::vector<Tensor> ref = run_op(AutocastMode::Off, f, inputs);
  const std::vector<Tensor> again = run_op(AutocastMode::Off, f, inputs);
  for (size_t i = 0; i < ref.size(); ++i) CHECK(same_bits(ref[i], again[i]));
  for (AutocastMode mode : {AutocastMode::BF16, AutocastMode::FP16}) {
    if (mode == AutocastMode::BF16 && !bf16_here()) continue;
    const std::vector<Tensor> got = run_op(mode, f, inputs);
    REQUIRE(got.size() == ref.size());
    if (mode == AutocastMode::BF16 && bf16_is_fp32) {
      for (size_t i = 0; i < ref.size(); ++i) CHECK(same_bits(got[i], ref[i]));
      continue;
    }
    int rounded_grads = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const double e = rel_l2(got[i], ref[i]);
      INFO(std::string(name), " at ", std::string(autocast_mode_name(mode)), ", result ", i,
           " (0: output, then gradients): rel. error ", e);
      MESSAGE(std::string(name), " at ", std::string(autocast_mode_name(mode)), ", result ", i, ": rel. error ", e);
      CHECK(e <= (mode == AutocastMode::BF16 ? bf16_bound : fp16_bound));
      if (i == 0) CHECK(e > 0.0);  // rounded: the mode is really on
      else rounded_grads += e > 0.0;  // (a bias gradient is a float32 sum of g: exact at bf16)
      CHECK(all_finite(got[i]));
    }
    CHECK(rounded_grads > 0);
  }
}

// C = op(A)·op(B) + beta·C by definition, in double: inputs (and C) through `round`, then `out`.
std::vector<float> reference_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const std::vector<float>& A,
                                  const std::vector<float>& B, float beta, std::vector<float> C,
                                  float (*round_in)(float), float (*round_out)(float)) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = beta != 0.f ? double(beta) * round_in(C[i * n + j]) : 0.0;
      for (int64_t p = 0; p < k; ++p)
        s += double(round_in(ta ? A[p * m + i] : A[i * k + p])) * round_in(tb ? B[j * k + p] : B[p * n + j]);
      C[i * n + j] = round_out(float(s));
    }
  return C;
}

float identity(float x) { return x; }
std::vector<float> abs_of(std::vector<float> v) {
  for (float& x : v) x = std::fabs(x);
  return v;
}
float fp16(float x) { return round_to_fp16(x); }
float bf16(float x) { return round_to_bf16(x); }

}  // namespace

TEST_CASE("autocast: fp16_peak_take is the largest |x| rounded to float16 since the last take") {
  fp16_peak_take();
  CHECK(fp16_peak_take() == 0.f);  // nothing rounded since
  // Long enough for several threads' chunks and the vector path, with the peak in a tail lane.
  std::vector<float> x(20011), y(x.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(float(i)) * 100.f;
  x[x.size() - 1] = -4321.5f;
  x[17] = NAN;  // not counted
  round_to_fp16(x.data(), y.data(), int64_t(x.size()));
  CHECK(fp16_peak_take() == 4321.5f);
  CHECK(fp16_peak_take() == 0.f);  // taken: restarted
  x[5000] = 70000.f;  // overflows to inf in float16; the peak keeps its size
  round_to_fp16(x.data(), x.data(), int64_t(x.size()));  // in place, as the products' C
  CHECK(std::isinf(x[5000]));
  CHECK(fp16_peak_take() == 70000.f);
  float small[3] = {1.f, -2.5f, 0.25f};  // shorter than a vector: the scalar loop alone
  round_to_fp16(small, small, 3);
  CHECK(fp16_peak_take() == 2.5f);
  // Inside an Fp16AttentionSite the sizes count for the attention cores too, outside only overall;
  // gemm_block (the packed attention cores' product) opens one at fp16.
  fp16_attention_peak_take();
  round_to_fp16(small, small, 3);
  CHECK(fp16_attention_peak_take() == 0.f);
  {
    const Fp16AttentionSite site;
    float big[2] = {300.f, -1.f};
    round_to_fp16(big, big, 2);
  }
  CHECK(fp16_attention_peak_take() == 300.f);
  CHECK(fp16_peak_take() == 300.f);
  const float A[4] = {100.f, 0.f, 0.f, 100.f}, B[4] = {3.f, 0.f, 0.f, 3.f};
  float C[4] = {};
  {
    const AutocastGuard fp16(AutocastMode::FP16);
    gemm_block(false, false, 2, 2, 2, A, 2, B, 2, 0.f, C, 2);
  }
  CHECK(C[0] == 300.f);
  CHECK(fp16_attention_peak_take() == 300.f);  // the largest of A, B and C
  gemm(false, false, 2, 2, 2, A, B, 0.f, C);     // not autocast: nothing rounded
  CHECK(fp16_attention_peak_take() == 0.f);
}

TEST_CASE("autocast: float16 rounding, F16C against integer rounding") {
  const float max16 = 65504.f;
  CHECK(round_to_fp16(max16) == max16);
  CHECK(round_to_fp16(65519.f) == max16);
  CHECK(std::isinf(round_to_fp16(65520.f)));  // the tie above the largest float16 overflows
  CHECK(round_to_fp16(-65520.f) == -INFINITY);
  CHECK(round_to_fp16(1e10f) == INFINITY);
  CHECK(round_to_fp16(1.f + 0x1p-11f) == 1.f);                  // tie, to even
  CHECK(round_to_fp16(1.f + 3 * 0x1p-11f) == 1.f + 0x1p-9f);    // tie, to even (up)
  CHECK(round_to_fp16(0x1p-24f) == 0x1p-24f);                   // the smallest subnormal
  CHECK(round_to_fp16(0x1p-25f) == 0.f);                        // tie, to even (zero)
  CHECK(round_to_fp16(3 * 0x1p-25f) == 0x1p-23f);               // tie, to even (up)
  CHECK(std::isnan(round_to_fp16(NAN)));
  for (float v : {max16, 65519.f, 65520.f, 1.f + 0x1p-11f, 0x1p-25f, 3 * 0x1p-25f, -0.f, 1e-30f, 0x1p-14f,
                  0x1p-14f - 0x1p-26f})
    CHECK(std::bit_cast<uint32_t>(round_to_fp16(v)) == std::bit_cast<uint32_t>(detail::round_to_fp16_reference(v)));
  // Random floats over every exponent float16 can meet, in bulk (the vector path) and one by one.
  Generator g(3);
  std::vector<float> x(100003);
  for (size_t i = 0; i < x.size(); ++i) {
    const uint32_t bits = uint32_t(g.next_u64());
    const int e = 127 - 30 + int(bits % 50);  // 2^-30 .. 2^19
    x[i] = std::bit_cast<float>((bits & 0x807fffffu) | (uint32_t(e) << 23));
  }
  std::vector<float> y(x.size());
  round_to_fp16(x.data(), y.data(), int64_t(x.size()));
  int64_t wrong = 0;
  for (size_t i = 0; i < x.size(); ++i)
    wrong += std::bit_cast<uint32_t>(y[i]) != std::bit_cast<uint32_t>(detail::round_to_fp16_reference(x[i]));
  CHECK(wrong == 0);
}

TEST_CASE("autocast: gemm at bf16 and fp16 is its definition, every transpose, beta, threads") {
  Generator g(11);
  for (auto [m_, n_, k_] : {std::tuple<int64_t, int64_t, int64_t>{5, 7, 3}, {70, 33, 65}, {300, 96, 192}}) {
    // clang 14 cannot capture a structured binding
    const auto& m = m_;
    const auto& n = n_;
    const auto& k = k_;
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      for (float beta : {0.f, 1.f}) {
        std::vector<float> A = to_vector(randn({m * k}, g)), B = to_vector(randn({k * n}, g)),
                           C0 = to_vector(randn({m * n}, g));
        for (AutocastMode mode : {AutocastMode::BF16, AutocastMode::FP16}) {
          if (mode == AutocastMode::BF16 && !bf16_here()) continue;
          INFO(std::string(autocast_mode_name(mode)), " ", m, "x", n, "x", k, " ta ", ta, " tb ", tb, " beta ", beta);
          std::vector<float> C = C0;
          {
            AutocastGuard guard(mode);
            gemm(ta, tb, m, n, k, A.data(), B.data(), beta, C.data());
          }
          // bf16: C stays float32 (its C is not rounded either); fp16: C in and out rounded.
          const std::vector<float> want =
              mode == AutocastMode::BF16
                  ? reference_gemm(ta, tb, m, n, k, A, B, beta, C0, bf16, identity)
                  : reference_gemm(ta, tb, m, n, k, A, B, beta, C0, fp16, fp16);
          // bf16's reference rounds C by bf16 too when beta = 1: undo that (C is float32 there).
          std::vector<float> want_bf = want;
          if (mode == AutocastMode::BF16 && beta != 0.f)
            for (size_t i = 0; i < want_bf.size(); ++i) want_bf[i] += C0[i] - bf16(C0[i]);
          // The float32 sums run in another order than the reference's: within γₖ Σ|terms| (γₖ = k·2⁻²⁴,
          // the bound of any order of float32 sums); fp16 also one float16 ulp of the result (the
          // float32 sum can fall on the other side of a float16 tie).
          double worst = 0;
          const std::vector<float> absum =
              reference_gemm(ta, tb, m, n, k, abs_of(A), abs_of(B), beta, abs_of(C0),
                             mode == AutocastMode::BF16 ? bf16 : fp16, identity);
          for (size_t i = 0; i < C.size(); ++i) {
            const double w = mode == AutocastMode::BF16 ? want_bf[i] : want[i];
            const double tol = double(k + 1) * 0x1p-24 * absum[i] +
                               (mode == AutocastMode::FP16 ? std::fabs(w) * 0x1p-10 : 0.0) + 1e-30;
            worst = std::max(worst, std::fabs(double(C[i]) - w) / tol);
            if (mode == AutocastMode::FP16) REQUIRE(round_to_fp16(C[i]) == C[i]);  // the output is a float16
          }
          CHECK(worst <= 1.0);
        }
      }
    }
  }
}

TEST_CASE("autocast: gemm_block with leading dimensions gives gemm()'s bits on the contiguous values") {
  Generator g(13);
  for (auto [m_, n_, k_] : {std::tuple<int64_t, int64_t, int64_t>{5, 7, 3}, {65, 65, 16}, {16, 16, 65}}) {
    // clang 14 cannot capture a structured binding
    const auto& m = m_;
    const auto& n = n_;
    const auto& k = k_;
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      const int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
      const int64_t lda = ac + 5, ldb = bc + 3, ldc = n + 2;  // rows apart, NaN between them
      for (float beta : {0.f, 1.f}) {
        const std::vector<float> A = to_vector(randn({ar * ac}, g)), B = to_vector(randn({br * bc}, g)),
                                 C0 = to_vector(randn({m * n}, g));
        std::vector<float> As(ar * lda, NAN), Bs(br * ldb, NAN), Cs(m * ldc, NAN);
        for (int64_t r = 0; r < ar; ++r) std::copy_n(&A[r * ac], ac, &As[r * lda]);
        for (int64_t r = 0; r < br; ++r) std::copy_n(&B[r * bc], bc, &Bs[r * ldb]);
        for (int64_t r = 0; r < m; ++r) std::copy_n(&C0[r * n], n, &Cs[r * ldc]);
        for (AutocastMode mode : {AutocastMode::Off, AutocastMode::BF16, AutocastMode::FP16}) {
          if (mode == AutocastMode::BF16 && !bf16_here()) continue;
          INFO(std::string(autocast_mode_name(mode)), " ", m, "x", n, "x", k, " ta ", ta, " tb ", tb, " beta ", beta);
          std::vector<float> want = C0, got = Cs;
          {
            AutocastGuard guard(mode);
            gemm(ta, tb, m, n, k, A.data(), B.data(), beta, want.data());
            gemm_block(ta, tb, m, n, k, As.data(), lda, Bs.data(), ldb, beta, got.data(), ldc);
          }
          int differ = 0;
          for (int64_t r = 0; r < m; ++r) {
            differ += std::memcmp(&got[r * ldc], &want[r * n], sizeof(float) * n) != 0;
            for (int64_t j = n; j < ldc; ++j) CHECK(std::isnan(got[r * ldc + j]));  // C's gaps untouched
          }
          CHECK(differ == 0);
        }
      }
    }
  }
}

TEST_CASE("autocast: operands rounded once (Bf16Operand) give the bits of a product that rounds its own") {
  if (!bf16_here()) return;
  Generator g(12);
  const int64_t m = 300, n = 96, k = 192;  // big enough to be cut into blocks across threads
  std::vector<float> A = to_vector(randn({m * k}, g)), B = to_vector(randn({k * n}, g));
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    INFO("ta ", ta, " tb ", tb);
    std::vector<float> want(m * n), both(m * n), only_a(m * n), only_b(m * n);
    AutocastGuard guard(AutocastMode::BF16);
    const Bf16Operand a16(A.data(), m * k), b16(B.data(), k * n);
    REQUIRE(a16.bits() != nullptr);
    gemm(ta, tb, m, n, k, A.data(), B.data(), 0.f, want.data());
    gemm(ta, tb, m, n, k, A.data(), a16, B.data(), b16, 0.f, both.data());
    gemm(ta, tb, m, n, k, A.data(), a16, B.data(), Bf16Operand(), 0.f, only_a.data());
    gemm(ta, tb, m, n, k, A.data(), Bf16Operand(), B.data(), b16, 0.f, only_b.data());
    CHECK(std::memcmp(want.data(), both.data(), want.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(want.data(), only_a.data(), want.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(want.data(), only_b.data(), want.size() * sizeof(float)) == 0);
  }
  // Made outside bf16 it holds nothing, and a float32 product ignores one made inside.
  CHECK(Bf16Operand(A.data(), m * k).bits() == nullptr);
  Bf16Operand a16;
  {
    AutocastGuard guard(AutocastMode::BF16);
    a16 = Bf16Operand(A.data(), m * k);
  }
  std::vector<float> f32(m * n), with(m * n);
  gemm_f32(false, false, m, n, k, A.data(), B.data(), 0.f, f32.data());
  gemm(false, false, m, n, k, A.data(), a16, B.data(), Bf16Operand(), 0.f, with.data());
  CHECK(std::memcmp(f32.data(), with.data(), f32.size() * sizeof(float)) == 0);
}

TEST_CASE("autocast: linear at bf16 reuses its rounded x, W and dy, with the bits of products that round their own") {
  if (!bf16_here()) return;
  const int64_t R = 4 * 65, in = 96, out = 48;
  const std::vector<Tensor> inputs{randn_leaf({4, 65, in}, 1), randn_leaf({out, in}, 2), randn_leaf({out}, 3)};
  const std::vector<Tensor> got = run_op(
      AutocastMode::BF16, [](const std::vector<Tensor>& t) { return linear(t[0], t[1], t[2]); }, inputs);
  // The same products, each rounding its operands itself (gemm() without operands).
  const float *x = inputs[0].data(), *w = inputs[1].data(), *b = inputs[2].data();
  Tensor y = empty({4, 65, out}), dx = empty({4, 65, in}), dw = empty({out, in});
  Generator g(5);
  const Tensor gy = randn({4, 65, out}, g);  // run_op's gradient
  {
    AutocastGuard guard(AutocastMode::BF16);
    for (int64_t r = 0; r < R; ++r) std::copy(b, b + out, y.data() + r * out);
    gemm(false, true, R, out, in, x, w, 1.f, y.data());
    gemm(false, false, R, in, out, gy.data(), w, 0.f, dx.data());
    gemm(true, false, out, in, R, gy.data(), x, 0.f, dw.data());
  }
  CHECK(same_bits(got[0], y));
  CHECK(same_bits(got[1], dx));
  CHECK(same_bits(got[2], dw));
}

TEST_CASE("autocast: Off is float32 bit for bit, also after a bf16 or fp16 product") {
  Generator g(2);
  std::vector<float> A = to_vector(randn({300 * 192}, g)), B = to_vector(randn({192 * 96}, g));
  std::vector<float> c1(300 * 96), c2(300 * 96), c3(300 * 96);
  gemm_f32(false, true, 300, 96, 192, A.data(), B.data(), 0.f, c1.data());
  {
    AutocastGuard guard(AutocastMode::FP16);
    gemm(false, true, 300, 96, 192, A.data(), B.data(), 0.f, c3.data());
    {
      AutocastGuard off(AutocastMode::Off);  // nested: restores FP16 after
      gemm(false, true, 300, 96, 192, A.data(), B.data(), 0.f, c2.data());
    }
    CHECK(autocast_mode() == AutocastMode::FP16);
  }
  CHECK(autocast_mode() == AutocastMode::Off);
  CHECK(std::memcmp(c1.data(), c2.data(), c1.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(c1.data(), c3.data(), c1.size() * sizeof(float)) != 0);
}

TEST_CASE("autocast: linear, matmul, fused MLP, conv2d and the SimA core against float32, forward and backward") {
  check_op("linear", [](const std::vector<Tensor>& t) { return linear(t[0], t[1], t[2]); },
           {randn_leaf({4, 65, 96}, 1), randn_leaf({48, 96}, 2), randn_leaf({48}, 3)});
  check_op("matmul, batched, b broadcast", [](const std::vector<Tensor>& t) { return matmul(t[0], t[1], false, true); },
           {randn_leaf({3, 2, 40, 32}, 4), randn_leaf({2, 24, 32}, 5)});
  check_op("matmul, a transposed", [](const std::vector<Tensor>& t) { return matmul(t[0], t[1], true, false); },
           {randn_leaf({6, 32, 40}, 6), randn_leaf({6, 32, 24}, 7)});
  check_op("fused MLP (GELU)",
           [](const std::vector<Tensor>& t) { return fused_mlp(t[0], t[1], t[2], t[3], t[4], MlpActivation::Gelu); },
           {randn_leaf({2, 50, 64}, 8), randn_leaf({128, 64}, 9), randn_leaf({128}, 10), randn_leaf({64, 128}, 11),
            randn_leaf({64}, 12)});
  check_op("conv2d 3x3 stride 2", [](const std::vector<Tensor>& t) { return conv2d(t[0], t[1], t[2], 2, 1); },
           {randn_leaf({2, 8, 15, 15}, 13), randn_leaf({16, 8, 3, 3}, 14), randn_leaf({16}, 15)});
  check_op("conv2d grouped", [](const std::vector<Tensor>& t) { return conv2d(t[0], t[1], t[2], 1, 1, 2); },
           {randn_leaf({2, 8, 9, 9}, 16), randn_leaf({8, 4, 3, 3}, 17), randn_leaf({8}, 18)});
  check_op("conv2d depthwise", [](const std::vector<Tensor>& t) { return conv2d(t[0], t[1], t[2], 1, 1, 8); },
           {randn_leaf({2, 8, 9, 9}, 22), randn_leaf({8, 1, 3, 3}, 23), randn_leaf({8}, 24)}, 0, 2e-3, true);
  check_op("conv2d depthwise, channels last",
           [](const std::vector<Tensor>& t) { return conv2d_depthwise_channels_last(t[0], t[1], t[2], 1, 1); },
           {randn_leaf({2, 7, 7, 16}, 25), randn_leaf({16, 1, 3, 3}, 26), randn_leaf({16}, 27)}, 0, 2e-3, true);
  check_op("conv2d depthwise over heads",
           [](const std::vector<Tensor>& t) { return conv2d_depthwise_heads(t[0], t[1], 6, 6, 1); },
           {randn_leaf({2, 3, 36, 8}, 28), randn_leaf({3, 1, 3, 3}, 29)}, 0, 2e-3, true);
  for (SimaOrder order : {SimaOrder::QkFirst, SimaOrder::KvFirst})
    check_op("SimA core, l1",
             [order](const std::vector<Tensor>& t) { return sima_attention(t[0], t[1], t[2], SimaNorm::L1, order); },
             {randn_leaf({2, 3, 33, 16}, 19), randn_leaf({2, 3, 33, 16}, 20), randn_leaf({2, 3, 33, 16}, 21)});
}

// q, k, v (B, h, N, d) of a qkv output (B, N, 3C), and a core's output (B, h, N, d) merged to (B, N, C).
std::vector<Tensor> split_qkv(const Tensor& qkv, int64_t h) {
  const int64_t B = qkv.size(0), N = qkv.size(1), d = qkv.size(2) / 3 / h;
  Tensor t = permute(reshape(qkv, {B, N, 3, h, d}), {2, 0, 3, 1, 4});
  return {contiguous(squeeze(narrow(t, 0, 0, 1), 0)), contiguous(squeeze(narrow(t, 0, 1, 1), 0)),
          contiguous(squeeze(narrow(t, 0, 2, 1), 0))};
}
Tensor merge(const Tensor& o) { return reshape(permute(o, {0, 2, 1, 3}), {o.size(0), o.size(2), o.size(1) * o.size(3)}); }

TEST_CASE("autocast: the packed attention cores round every product as the split-head cores do") {
  // The packed cores read q, k, v in place from qkv (DeiT's and XCiT's path); the split-head cores
  // go through gemm(). Under each mode both must round the same operands: their outputs and
  // gradients agree to float32's sum order (1e-5), far below one product left unrounded (~1e-3 at
  // fp16, ~1e-2 at bf16); and both differ from float32.
  using Fn = std::function<Tensor(const std::vector<Tensor>&)>;
  std::vector<std::tuple<std::string, Fn, Fn>> cores;
  for (SimaNorm norm : {SimaNorm::L1, SimaNorm::None})
    for (SimaOrder order : {SimaOrder::QkFirst, SimaOrder::KvFirst})
      cores.emplace_back(std::string("SimA ") + (norm == SimaNorm::L1 ? "l1 " : "none ") +
                             (order == SimaOrder::QkFirst ? "qk_first" : "kv_first"),
                         [=](const std::vector<Tensor>& t) { return sima_attention_packed(t[0], 3, norm, order, 1e-6f); },
                         [=](const std::vector<Tensor>& t) {
                           const std::vector<Tensor> s = split_qkv(t[0], 3);
                           return merge(sima_attention(s[0], s[1], s[2], norm, order, 1e-6f));
                         });
  cores.emplace_back("softmax", [](const std::vector<Tensor>& t) { return softmax_attention_packed(t[0], 3, 0.25f); },
                     [](const std::vector<Tensor>& t) {
                       const std::vector<Tensor> s = split_qkv(t[0], 3);
                       return merge(softmax_attention(s[0], s[1], s[2], 0.25f));
                     });
  const Tensor qkv = randn_leaf({2, 33, 3 * 48}, 30);
  for (const auto& [name_, packed_, split_] : cores)
    for (AutocastMode mode : {AutocastMode::BF16, AutocastMode::FP16}) {
      // clang 14 cannot capture a structured binding
      const auto& name = name_;
      const auto& packed = packed_;
      const auto& split = split_;
      if (mode == AutocastMode::BF16 && !bf16_here()) continue;
      const std::vector<Tensor> p = run_op(mode, packed, {qkv}), s = run_op(mode, split, {qkv}),
                                f = run_op(AutocastMode::Off, packed, {qkv});
      for (size_t i = 0; i < p.size(); ++i) {
        INFO(name, " at ", std::string(autocast_mode_name(mode)), ", result ", i, ": packed vs split ",
             rel_l2(p[i], s[i]), ", vs float32 ", rel_l2(p[i], f[i]));
        CHECK(rel_l2(p[i], s[i]) <= 1e-5);
        CHECK(rel_l2(p[i], f[i]) > 1e-4);
      }
    }
}

TEST_CASE("autocast: every attention variant's module at bf16 and fp16, forward and input gradient") {
  // A class token and a 4x4 grid of 32-wide tokens, 2 heads; each variant at its defaults.
  const int64_t H = 4, W = 4, N = 1 + H * W;
  const Tensor x = randn_leaf({2, N, 32}, 40);
  for (const AttentionVariant& v : attention_variants()) {
    AttentionOptions o;
    o.dim = 32;
    o.num_heads = 2;
    o.num_tokens = N;
    o = attention_options_from_json(nlohmann::json{{"type", v.name}}, o);
    std::shared_ptr<Attention> attn = make_attention(o);  // one module: the same weights in every mode
    auto f = [&](const std::vector<Tensor>& t) { return attn->forward(t[0], H, W); };
    // Bounds on the relative ℓ2 error: the rounding of the products, and in the input gradient the
    // masks that rounding can flip: a score or feature near 0 changes side of ReLU (relu, cosformer:
    // measured 2.5–3.6 % at bf16, 1.3 % at fp16) or of |q| (SimA's ℓ1 backward: 1.8 % at bf16).
    const bool relu_mask = v.name == "relu" || v.name == "cosformer";
    check_op(v.name.c_str(), f, {x}, relu_mask ? 6e-2 : 3e-2, relu_mask ? 3e-2 : 1e-2);
  }
}

TEST_CASE("autocast: float16 overflows where float32 does not (SimA without normalisation, large activations)") {
  // q, k, v of size ~300: q kᵀ sums 16 products of ~9e4 each, ~1e6 > 65504.
  Generator g(9);
  auto big = [&](uint64_t seed) {
    Tensor t = randn_leaf({1, 2, 40, 16}, seed);
    for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = 300.f + 30.f * t.data()[i];
    return t;
  };
  // One product past 65504: 16 · 300 · 300 = 1.44e6 is inf at fp16, itself at fp32 and bf16.
  std::vector<float> a(16, 300.f), b(16, 300.f);
  float c = 0.f;
  gemm(false, false, 1, 1, 16, a.data(), b.data(), 0.f, &c);
  CHECK(c == 1.44e6f);
  {
    AutocastGuard guard(AutocastMode::FP16);
    gemm(false, false, 1, 1, 16, a.data(), b.data(), 0.f, &c);
    CHECK(c == INFINITY);
    for (float& x : a) x = -x;
    gemm(false, false, 1, 1, 16, a.data(), b.data(), 0.f, &c);
    CHECK(c == -INFINITY);
  }
  const Tensor q = big(1), k = big(2), v = big(3);
  auto core = [&](SimaNorm norm) { return sima_attention(q, k, v, norm, SimaOrder::QkFirst); };
  CHECK(all_finite(core(SimaNorm::None)));
  {
    AutocastGuard guard(AutocastMode::FP16);
    CHECK_FALSE(all_finite(core(SimaNorm::None)));  // inf (and NaN after inf − inf)
    CHECK(all_finite(core(SimaNorm::L1)));          // ℓ1: |q̂ k̂ᵀ| <= 1, nothing grows
  }
  if (bf16_here()) {  // bf16 has float32's exponent: no overflow
    AutocastGuard guard(AutocastMode::BF16);
    CHECK(all_finite(core(SimaNorm::None)));
  }
  // The same through the packed core, as a DeiT or XCiT SimA block runs it: qkv (1, 40, 3·32), 2 heads.
  Tensor qkv = randn_leaf({1, 40, 96}, 4);
  for (int64_t i = 0; i < qkv.numel(); ++i) qkv.data()[i] = 300.f + 30.f * qkv.data()[i];
  auto packed = [&](SimaNorm norm) { return sima_attention_packed(qkv, 2, norm, SimaOrder::QkFirst, 1e-6f); };
  CHECK(all_finite(packed(SimaNorm::None)));
  {
    AutocastGuard guard(AutocastMode::FP16);
    CHECK_FALSE(all_finite(packed(SimaNorm::None)));
    CHECK(all_finite(packed(SimaNorm::L1)));
  }
}

TEST_CASE("autocast: train.precision names, and what the CPU needs") {
  CHECK(parse_autocast_mode("fp32", "x") == AutocastMode::Off);
  CHECK(parse_autocast_mode("bf16", "x") == AutocastMode::BF16);
  CHECK(parse_autocast_mode("fp16", "x") == AutocastMode::FP16);
  CHECK(error_message([] { parse_autocast_mode("int8", "train.precision"); }).find("fp32, bf16, fp16") !=
        std::string::npos);
  CHECK(autocast_unsupported(AutocastMode::Off).empty());
  CHECK(autocast_unsupported(AutocastMode::FP16).empty());
  const CpuFeatures& f = cpu_features();
  if (!f.avx512_bf16 && !f.amx_bf16) CHECK(autocast_unsupported(AutocastMode::BF16).find("AVX512-BF16") != std::string::npos);
  MESSAGE("bf16 training on this CPU: ", bf16_here() ? "yes" : autocast_unsupported(AutocastMode::BF16));
}
