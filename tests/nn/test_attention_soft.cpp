// SOFT attention (nn/attention/soft_gaussian.h): the fused Gaussian kernel and Newton–Raphson ops
// against hand-worked values, gradchecks and their compositions of core ops; the module's
// gradchecks (input and every parameter, both bottlenecks, one and several heads), its
// composed oracle, its exp count and its errors.
#include "nn/attention/soft_gaussian.h"

#include <cmath>
#include <string>

#include "attention_testing.h"

using namespace sima;
using namespace sima::testing;

namespace {

// exp(−s·‖a_i − b_j‖²) from primitive ops: (.., M, 1, d) − (.., 1, N, d), squared, summed.
Tensor kernel_composed(const Tensor& a, const Tensor& b, float s) {
  const int la = a.dim() - 1;  // insert the N axis of a / the M axis of b
  Tensor diff = sub(unsqueeze(a, la), unsqueeze(b, la - 1));
  return exp(mul(sum(square(diff), {-1}), -s));
}

Tensor eye(int64_t m) {
  std::vector<float> e(m * m, 0.f);
  for (int64_t i = 0; i < m; ++i) e[i * m + i] = 1.f;
  return from_vector(e, {m, m});
}

// Newton–Raphson from primitive ops as the official newton_inv: α = 1.8/n², n the max row
// sum of A, P = A + ridge·I, V₀ = α·P; α differentiated as everything else.
Tensor newton_composed(const Tensor& A, int64_t iters, float ridge = 0.f) {
  Tensor n = max(sum(abs(A), {-1}), -1, /*keepdim=*/true).values;  // (.., 1): max row sum
  Tensor alpha = unsqueeze(mul(pow(n, -2.f), kNewtonAlpha), -1);   // (.., 1, 1)
  Tensor P = add(A, mul(eye(A.size(-1)), ridge));
  Tensor V = mul(P, alpha);
  for (int64_t k = 0; k < iters; ++k) V = sub(mul(V, 2.f), matmul(matmul(V, P), V));
  return V;
}

void fill(const Tensor& t, float x) {
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = x;
}

// The official use_conv on v (B, h, H·W, d): the heads as channels of (B·d, h, H, W) images.
Tensor v_conv_composed(const Tensor& v, const Tensor& weight, int64_t H, int64_t W) {
  const int64_t B = v.size(0), h = v.size(1), d = v.size(3), k = weight.size(-1);
  Tensor img = reshape(permute(v, {0, 3, 1, 2}), {B * d, h, H, W});
  Tensor y = conv2d(img, weight, Tensor(), 1, static_cast<int>(k / 2), static_cast<int>(h));
  return permute(reshape(y, {B, d, h, H * W}), {0, 2, 3, 1});
}

AttentionOptions soft_options(int64_t C, int64_t h, const std::string& bottleneck, int64_t sr = 2,
                              int64_t iters = 20) {
  AttentionOptions o = attention_options("soft", C, h);
  set_unchecked(o, "bottleneck", bottleneck);
  set_unchecked(o, "sr", sr);
  set_unchecked(o, "nr_iters", iters);
  return o;
}

// The first SOFT module: no ridge, no v conv, backward through the iterations.
AttentionOptions legacy(AttentionOptions o) {
  o.with("ridge", 0.f);
  o.with("v_conv", 0);
  o.with("nr_backward", "unrolled");
  return o;
}

// A module with modest random values in every parameter. The tests keep A well-conditioned
// (‖A†‖ <= ~5), as it is in real models where d >= 32 puts the bottleneck tokens far apart:
// with nearby tokens A is near-singular, 20 iterations do not converge and float32 rounding
// is amplified by ‖A†‖ in every oracle. So the conv bottleneck is tested with d = 8 (after
// LayerNorm and GELU, tokens of d = 4 often nearly coincide), avgpool with a wider q.
std::shared_ptr<SoftAttention> make_soft(const AttentionOptions& opt, uint64_t seed = 5) {
  const float qkv_std = attention_option<std::string>(opt, "bottleneck") == "avgpool" ? 1.f : 0.4f;
  auto m = std::make_shared<SoftAttention>(opt);
  Generator g(seed);
  for (auto& [name, p] : m->named_parameters()) {
    Tensor r = randn(p.shape(), g);
    for (int64_t i = 0; i < p.numel(); ++i) {
      float v = r.data()[i];
      if (name == "norm.weight") v = 1.f + 0.1f * v;
      else if (name == "norm.bias") v = 0.1f * v;
      else if (name == "q_conv.weight") v = 0.3f * v;
      else if (name.rfind("qkv", 0) == 0) v = qkv_std * v;
      else v = 0.4f * v;
      p.data()[i] = v;
    }
  }
  return m;
}
std::shared_ptr<SoftAttention> make_soft(int64_t C, int64_t h, const std::string& bottleneck,
                                         uint64_t seed = 5) {
  return make_soft(soft_options(C, h, bottleneck), seed);
}

// The parameters of the module's core (the bottleneck's): all but qkv and proj.
std::vector<Tensor> core_params(const Module& m) {
  std::vector<Tensor> ps;
  for (auto& [name, p] : m.named_parameters())
    if (name.rfind("qkv", 0) != 0 && name.rfind("proj", 0) != 0) ps.push_back(p);
  return ps;
}

}  // namespace

// ---- gaussian_kernel ------------------------------------------------------------------

TEST_CASE("gaussian_kernel: hand-worked values and gradients") {
  // a = (0, 0); b = (0, 0), (1, 0), (1, 1); s = 1/2:
  //   K = exp(−‖a − b_j‖²/2) = (e^0, e^-½, e^-1) = (1, 0.60653066, 0.36787944)
  // With dK = 1: da = 2s Σ_j K_j (b_j − a) = K_1 (1, 0) + K_2 (1, 1) = (0.97441010, 0.36787944)
  //              db_j = 2s K_j (a − b_j): (0, 0), (−0.60653066, 0), (−0.36787944, −0.36787944)
  Tensor a = from_vector({0, 0}, {1, 1, 1, 2}).requires_grad_();
  Tensor b = from_vector({0, 0, 1, 0, 1, 1}, {1, 1, 3, 2}).requires_grad_();
  int64_t exps = 0;
  Tensor K = gaussian_kernel(a, b, 0.5f, &exps);
  CHECK(K.shape() == Shape({1, 1, 1, 3}));
  check_close(K, {1.f, 0.60653066f, 0.36787944f}, 1e-6f);
  CHECK(exps == 3);
  K.backward(ones(K.shape()));
  check_close(a.grad(), {0.97441010f, 0.36787944f}, 1e-6f);
  check_close(b.grad(), {0.f, 0.f, -0.60653066f, 0.f, -0.36787944f, -0.36787944f}, 1e-6f);
}

TEST_CASE("gaussian_kernel: gradcheck, one and several heads, M < d and M > d") {
  for (int64_t h : {1, 3})
    for (auto [M_, N_] : {std::pair<int64_t, int64_t>{3, 5}, {5, 3}})
      for (int64_t d : {4, 6}) {
        const auto& M = M_; const auto& N = N_;  // clang 14 cannot capture a structured binding
        CAPTURE(h);
        CAPTURE(M);
        CAPTURE(d);
        Tensor a = mul(randn_leaf({2, h, M, d}, 10 + d), 0.5f).detach().requires_grad_();
        Tensor b = mul(randn_leaf({2, h, N, d}, 20 + d), 0.5f).detach().requires_grad_();
        const float s = 0.5f / std::sqrt(static_cast<float>(d));
        CHECK_GRADCHECK([s](const std::vector<Tensor>& v) { return gaussian_kernel(v[0], v[1], s); },
                        {a, b});
        // a and b one tensor (the m×m matrix A): both gradients reach it
        CHECK_GRADCHECK([s](const std::vector<Tensor>& v) { return gaussian_kernel(v[0], v[0], s); },
                        {a});
      }
}

TEST_CASE("gaussian_kernel == exp(-s * sum((a_i - b_j)^2))") {
  Tensor a = randn_leaf({2, 3, 5, 4}, 1), b = randn_leaf({2, 3, 7, 4}, 2);
  check_same([](auto& v) { return gaussian_kernel(v[0], v[1], 0.25f); },
             [](auto& v) { return kernel_composed(v[0], v[1], 0.25f); }, {a, b});
  check_same([](auto& v) { return gaussian_kernel(v[0], v[0], 0.25f); },
             [](auto& v) { return kernel_composed(v[0], v[0], 0.25f); }, {a});
}

// ---- newton_inverse ---------------------------------------------------------------------

TEST_CASE("newton_inverse: hand-worked inverse and pseudo-inverse") {
  // [[2, 1], [1, 2]]⁻¹ = [[2, −1], [−1, 2]] / 3 (det 3).
  Tensor A = from_vector({2, 1, 1, 2}, {2, 2});
  check_close(newton_inverse(A, 20), {2.f / 3, -1.f / 3, -1.f / 3, 2.f / 3}, 1e-6f);
  // The all-ones J (3×3) is singular; from V₀ = αJ the iterations stay multiples of J and
  // converge to its pseudo-inverse J⁺ = J/9 (J·J = 3J: V = cJ -> (2c − 9c²)J, fixed at 1/9).
  Tensor J = ones({3, 3});
  check_close(newton_inverse(J, 20), std::vector<float>(9, 1.f / 9), 1e-6f);
  // No iterations: V₀ = 1.8/n² · A, n = max row sum = 3.
  check_close(newton_inverse(A, 0), {0.4f, 0.2f, 0.2f, 0.4f}, 1e-6f);
  // Ridge 0.1: (A + 0.1I)⁻¹ = [[2.1, −1], [−1, 2.1]] / 3.41; with no iterations
  // V₀ = α·(A + 0.1I) with α = 1.8/3² = 0.2 from A (not from A + 0.1I: 1.8/3.1²).
  // (α from A converges only while α·λ_max(A + rI)² < 2: here r < 0.16.)
  check_close(newton_inverse(A, 20, 0.1f), {2.1f / 3.41f, -1.f / 3.41f, -1.f / 3.41f, 2.1f / 3.41f}, 1e-6f);
  check_close(newton_inverse(A, 0, 0.1f), {0.42f, 0.2f, 0.2f, 0.42f}, 1e-6f);
  // α from the max ROW sum: rows of [[1, 2], [0, 1]] sum to 3 and 1 (columns to 1 and 3:
  // a column-sum α would be the same), so take [[1, 2], [0, 4]]: rows 3, 4 -> α = 1.8/16.
  check_close(newton_inverse(from_vector({1, 2, 0, 4}, {2, 2}), 0), {1.8f / 16, 3.6f / 16, 0.f, 7.2f / 16}, 1e-6f);
}

TEST_CASE("newton_inverse: A† A = I for well-conditioned matrices") {
  // A = I + M Mᵀ / m (symmetric, eigenvalues in [1, ~4]) and a Gaussian kernel matrix.
  const int64_t m = 6;
  Tensor M = randn_leaf({2, 3, m, m}, 3, false);
  Tensor A = add(matmul(M, M, false, true) / static_cast<float>(m), from_vector([&] {
                   std::vector<float> eye(m * m, 0.f);
                   for (int64_t i = 0; i < m; ++i) eye[i * m + i] = 1.f;
                   return eye;
                 }(), {m, m}));
  Tensor K = gaussian_kernel(randn_leaf({2, 3, m, 8}, 4, false), randn_leaf({2, 3, m, 8}, 4, false), 0.2f);
  for (const Tensor& X : {A, K}) {
    Tensor I = matmul(newton_inverse(X, 20), X);
    for (int64_t p = 0; p < 6; ++p)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < m; ++j) {
          CAPTURE(p);
          CAPTURE(i);
          CAPTURE(j);
          CHECK(std::fabs(I.data()[(p * m + i) * m + j] - (i == j ? 1.f : 0.f)) < 1e-4f);
        }
  }
}

TEST_CASE("newton_inverse: unrolled backward, gradcheck through the iterations, alpha and the ridge") {
  // Not symmetric, diagonally dominant: row sums are distinct, so the max row is not a
  // tie that a finite difference could flip.
  Tensor R = randn_leaf({2, 2, 4, 4}, 6, false);
  Tensor A = add(mul(R, 0.3f), mul(from_vector({2, 0, 0, 0, 0, 2.5f, 0, 0, 0, 0, 3, 0, 0, 0, 0, 3.5f},
                                               {4, 4}), 1.f))
                 .detach()
                 .requires_grad_();
  for (float ridge : {0.f, 0.5f})
    for (int64_t iters : {0, 1, 3, 20}) {
      CAPTURE(ridge);
      CAPTURE(iters);
      CHECK_GRADCHECK([=](const std::vector<Tensor>& v) { return newton_inverse(v[0], iters, ridge); }, {A});
    }
}

TEST_CASE("newton_inverse == its iterations composed from matmul ops") {
  Tensor R = randn_leaf({2, 3, 5, 5}, 7, false);
  Tensor A = add(mul(R, 0.2f), 0.f);  // made well-conditioned below
  for (int64_t p = 0; p < 6; ++p)
    for (int64_t i = 0; i < 5; ++i) A.data()[(p * 5 + i) * 5 + i] += 2.f + 0.3f * i;
  A = A.detach().requires_grad_();
  // 2: far from converged, so α's gradient matters; 60: the backward drops the converged steps
  for (float ridge : {0.f, 0.3f})
    for (int64_t iters : {2, 20, 60}) {
      CAPTURE(ridge);
      CAPTURE(iters);
      check_same([=](auto& v) { return newton_inverse(v[0], iters, ridge); },
                 [=](auto& v) { return newton_composed(v[0], iters, ridge); }, {A});
    }
}

TEST_CASE("newton_inverse: converged, its gradient is the inverse's, -A^-T G A^-T") {
  Tensor A = from_vector({3, 1, 0.5f, 0.2f, 2, 0.3f, 0.1f, 0.4f, 2.5f}, {3, 3}).requires_grad_();
  Tensor G = from_vector({1, -2, 0.5f, 0.3f, 1, -1, 2, 0.7f, -0.4f}, {3, 3});
  Tensor V = newton_inverse(A, 30);
  V.backward(G);
  Tensor Vd = V.detach();
  Tensor expected = neg(matmul(matmul(Vd, G, true, false), Vd, false, true));
  check_close(A.grad(), expected, 1e-5f, 1e-4f);
}

TEST_CASE("newton_inverse: inverse backward is -V^T G V^T at any iters, and differs from unrolled before convergence") {
  Tensor G = from_vector({1, -2, 0.5f, 0.3f, 1, -1, 2, 0.7f, -0.4f}, {3, 3});
  for (int64_t iters : {2, 30}) {
    CAPTURE(iters);
    Tensor A = from_vector({3, 1, 0.5f, 0.2f, 2, 0.3f, 0.1f, 0.4f, 2.5f}, {3, 3}).requires_grad_();
    Tensor V = newton_inverse(A, iters, 0.01f, NewtonBackward::Inverse);
    V.backward(G);
    Tensor Vd = V.detach();
    check_close(A.grad(), neg(matmul(matmul(Vd, G, true, false), Vd, false, true)), 1e-6f, 1e-6f);
    Tensor A2 = A.detach().requires_grad_();
    newton_inverse(A2, iters, 0.01f, NewtonBackward::Unrolled).backward(G);
    float diff = 0.f;
    for (int64_t i = 0; i < 9; ++i) diff = std::max(diff, std::fabs(A.grad().data()[i] - A2.grad().data()[i]));
    if (iters == 2) CHECK(diff > 1e-2f);  // 2 steps from V₀: far from A⁻¹, the gradients differ
    else CHECK(diff < 1e-5f);             // converged: the same gradient
  }
}

TEST_CASE("newton_inverse: inverse backward, gradcheck where the iterations have converged") {
  // −Vᵀ G Vᵀ is the derivative of the true inverse, so a finite difference of the forward
  // agrees with it only once V = (A + ridge·I)⁻¹ to float precision: 30 iterations on
  // diagonally dominant matrices (eigenvalues in ~[1.5, 4.5]) converge in ~12.
  Tensor R = randn_leaf({2, 2, 4, 4}, 6, false);
  Tensor A = add(mul(R, 0.3f), from_vector({2, 0, 0, 0, 0, 2.5f, 0, 0, 0, 0, 3, 0, 0, 0, 0, 3.5f}, {4, 4}))
                 .detach()
                 .requires_grad_();
  for (float ridge : {0.f, 0.01f, 0.5f}) {
    CAPTURE(ridge);
    CHECK_GRADCHECK([=](const std::vector<Tensor>& v) {
      return newton_inverse(v[0], 30, ridge, NewtonBackward::Inverse);
    }, {A});
  }
}

// ---- SoftAttention --------------------------------------------------------------------------

TEST_CASE("SoftAttention core: hand-worked value (avgpool, d = 1)") {
  // One head, d = 1 (so q / d^¼ = q), 2×2 grid, sr = 2: one bottleneck token
  // q̃ = mean(2, 0, 0, −2) = 0. P_j = exp(−(q_j − 0)²/2) = (e^-2, 1, 1, e^-2); A = [e^0] = [1],
  // A† = 1. P v = e^-2·1 + 2 + 3 + e^-2·4 = 5 + 5e^-2 = 5.67667642,
  // out_j = P_j · 5.67667642 = (0.76825461, 5.67667642, 5.67667642, 0.76825461).
  SoftAttention attn(legacy(soft_options(1, 1, "avgpool")));
  Tensor q = from_vector({2, 0, 0, -2}, {1, 1, 4, 1});
  Tensor v = from_vector({1, 2, 3, 4}, {1, 1, 4, 1});
  Tensor out = attn.core(q, q, v, 2, 2);
  check_close(out, {0.76825461f, 5.67667642f, 5.67667642f, 0.76825461f}, 1e-5f, 1e-5f);
  CHECK(attn.exp_calls() == 1 * 1 + 1 * 4);
  // The official ridge: A⁺ = (1 + 0.01)⁻¹, so every output is divided by 1.01.
  AttentionOptions o = legacy(soft_options(1, 1, "avgpool"));
  o.with("ridge", 0.01f);
  SoftAttention ridged(o);
  check_close(ridged.core(q, q, v, 2, 2),
              {0.76825461f / 1.01f, 5.67667642f / 1.01f, 5.67667642f / 1.01f, 0.76825461f / 1.01f}, 1e-5f, 1e-5f);
  // The v conv alone (one head, 1×1 kernel of weight 2): out += 2v.
  o.with("ridge", 0.f);
  o.with("v_conv", 1);
  SoftAttention conv(o);
  fill(conv.v_conv->weight, 2.f);
  check_close(conv.core(q, q, v, 2, 2), {2.76825461f, 9.67667642f, 11.67667642f, 8.76825461f}, 1e-5f, 1e-5f);
}

TEST_CASE("SoftAttention: v conv with a class token passes the extra token's v through") {
  // One head, d = 1, 1 + 2×2 tokens, 3×3 conv of all ones (padding 1): on a 2×2 grid every
  // output is the sum of the grid, 2 + 3 + 4 + 5 = 14; the class token gets its v = 1.
  AttentionOptions o = legacy(soft_options(1, 1, "avgpool"));
  o.with("v_conv", 3);
  SoftAttention attn(o);
  fill(attn.v_conv->weight, 1.f);
  Tensor v = from_vector({1, 2, 3, 4, 5}, {1, 1, 5, 1});
  check_close(attn.conv_v(v, 2, 2), {1.f, 14.f, 14.f, 14.f, 14.f}, 1e-6f);
}

TEST_CASE("SoftAttention core == its composition from core ops (forward and gradients)") {
  // official: ridge 0.01, 3×3 v conv, inverse backward (its 20 iterations have converged on
  // these well-conditioned A, so the composition's unrolled gradient is the same);
  // legacy: no ridge, no v conv, the unrolled backward, exactly the composition's.
  for (bool official : {true, false})
  for (const char* bottleneck : {"conv", "avgpool"})
    for (int64_t h : {1, 2}) {
      CAPTURE(official);
      CAPTURE(bottleneck);
      CAPTURE(h);
      const bool conv = bottleneck == std::string("conv");
      const int64_t d = conv ? 8 : 4, H = 4, W = 6, N = H * W;
      const AttentionOptions opt = soft_options(h * d, h, bottleneck);
      auto attn = make_soft(official ? opt : legacy(opt));
      const float ridge = attn->settings.ridge;
      Tensor q = mul(randn_leaf({2, h, N, d}, 30 + h), conv ? 1.f : 3.f).detach().requires_grad_();
      Tensor v = randn_leaf({2, h, N, d}, 40 + h);
      const int64_t H_ = H, W_ = W;
      const float q_scale = 1.f / std::sqrt(std::sqrt(static_cast<float>(d)));
      check_same([&](auto& x) { return attn->core(x[0], x[0], x[1], H_, W_); },
                 [&](auto& x) {
                   Tensor qs = mul(x[0], q_scale);
                   // q̃ as in the official code, from (B·h, d, H, W) images of the heads
                   Tensor grid = permute(reshape(qs, {2 * h, H_, W_, d}), {0, 3, 1, 2});
                   Tensor y = conv ? conv2d(grid, attn->q_conv->weight, Tensor(), 2) : avg_pool2d(grid, 2);
                   y = permute(reshape(y, {2 * h, d, 6}), {0, 2, 1});  // m = 2·3
                   if (conv) y = gelu(layer_norm(y, attn->norm->weight, attn->norm->bias, 1e-5f));
                   Tensor qt = reshape(y, {2, h, 6, d});
                   Tensor P = kernel_composed(qt, qs, 0.5f);
                   Tensor A = kernel_composed(qt, qt, 0.5f);
                   Tensor Pv = matmul(P, x[1]);
                   Tensor out = matmul(P, matmul(newton_composed(A, 20, ridge), Pv), true);
                   return official ? add(out, v_conv_composed(x[1], attn->v_conv->weight, H_, W_)) : out;
                 },
                 {q, v}, {.atol = 1e-5f, .rtol = 1e-4f}, core_params(*attn));
    }
}

TEST_CASE("SoftAttention: gradcheck w.r.t. x and every parameter") {
  struct Case { const char* bottleneck; int64_t C, h, H, W; };
  for (Case c : {Case{"conv", 8, 1, 4, 4}, Case{"conv", 16, 2, 4, 4}, Case{"avgpool", 8, 1, 4, 4},
                 Case{"avgpool", 8, 2, 2, 4}}) {
    CAPTURE(c.bottleneck);
    CAPTURE(c.h);
    CAPTURE(c.W);
    const int64_t C = c.C;
    // official (ridge, v conv, inverse backward: converged here) and legacy options
    for (bool official : {true, false}) {
      CAPTURE(official);
      const AttentionOptions opt = soft_options(C, c.h, c.bottleneck);
      auto attn = make_soft(official ? opt : legacy(opt));
      CHECK(attn->named_parameters().size() ==
            (c.bottleneck == std::string("conv") ? 7u : 4u) + (official ? 1u : 0u));
      const int64_t H = c.H, W = c.W;
      gradcheck_module(*attn, randn_leaf({2, c.H * c.W, C}, 50), {},
                       [&](const Tensor& x) { return attn->forward(x, H, W); });
    }
  }
}

TEST_CASE("SoftAttention: gradcheck with a class token before the grid (v conv on the grid only)") {
  auto attn = make_soft(soft_options(8, 2, "avgpool"));
  gradcheck_module(*attn, randn_leaf({2, 1 + 16, 8}, 51), {},
                   [&](const Tensor& x) { return attn->forward(x, 4, 4); });
}

TEST_CASE("SoftAttention: exp count is m^2 + m N per head per image") {
  for (const char* bottleneck : {"conv", "avgpool"}) {
    CAPTURE(bottleneck);
    auto attn = make_soft(8, 2, bottleneck);
    Tensor x = randn_leaf({3, 24, 8}, 60, false);
    attn->forward(x, 4, 6);  // m = (4/2)·(6/2) = 6, N = 24: 36 + 144 = 180 per (image, head)
    CHECK(attn->exp_calls() == 3 * 2 * 180);
    attn->forward(x, 4, 6);
    CHECK(attn->exp_calls() == 2 * 3 * 2 * 180);
    attn->reset_exp_calls();
    attn->forward(randn_leaf({1, 25, 8}, 61, false), 5, 5);  // floor: m = 2·2 = 4, N = 25
    CHECK(attn->exp_calls() == 1 * 2 * (16 + 4 * 25));
  }
}

TEST_CASE("SoftAttention: shapes and parameter names") {
  auto conv = make_soft(8, 2, "conv");
  std::vector<std::string> names;
  for (auto& [name, p] : conv->named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"qkv.weight", "qkv.bias", "proj.weight", "proj.bias",
                                          "v_conv.weight", "q_conv.weight", "norm.weight", "norm.bias"});
  CHECK(conv->v_conv->weight.shape() == Shape({2, 1, 3, 3}));  // (h, 1, k, k), groups h
  CHECK(conv->qkv->weight.shape() == Shape({16, 8}));  // Linear(C, 2C): q and v
  CHECK(conv->q_conv->weight.shape() == Shape({4, 4, 2, 2}));
  CHECK(conv->norm->weight.shape() == Shape({4}));
  auto pool = make_soft(8, 2, "avgpool");
  CHECK(pool->named_parameters().size() == 5);
  Tensor x = randn_leaf({2, 16, 8}, 70, false);
  CHECK(conv->forward(x, 4, 4).shape() == Shape({2, 16, 8}));
  CHECK(pool->forward(x, 4, 4).shape() == Shape({2, 16, 8}));
}

TEST_CASE("SoftAttention: errors name the module, the option and the allowed values") {
  auto throws_with = [](auto&& f, const std::string& what) {
    try {
      f();
      FAIL("no error, expected one mentioning '" << what << "'");
    } catch (const Error& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(what) != std::string::npos);
    }
  };
  throws_with([] { SoftAttention a(soft_options(8, 2, "maxpool")); }, "conv, avgpool");
  throws_with([] { SoftAttention a(soft_options(8, 2, "conv", 0)); }, "sr = 0");
  throws_with([] { SoftAttention a(soft_options(8, 2, "conv", 2, -1)); }, "nr_iters");
  AttentionOptions bad = soft_options(8, 2, "conv");
  bad.own["v_conv"] = 4;  // around the row's check: the constructor's own
  throws_with([&] { SoftAttention a(bad); }, "v_conv = 4 must be 0 (none) or an odd kernel size");
  bad = soft_options(8, 2, "conv");
  bad.own["ridge"] = -0.1f;  // around the row's check: the constructor's own
  throws_with([&] { SoftAttention a(bad); }, "ridge = -0.1");
  bad = soft_options(8, 2, "conv");
  bad.own["nr_backward"] = "exact";  // around the row's check: the constructor's own
  throws_with([&] { SoftAttention a(bad); }, "nr_backward = 'exact' is not one of: inverse, unrolled");
  throws_with([] { newton_inverse(ones({2, 2}), 5, -1.f); }, "ridge");
  auto attn = make_soft(8, 2, "conv");
  Tensor x = randn_leaf({1, 16, 8}, 80, false);
  throws_with([&] { attn->forward(x); }, "needs the token grid");
  throws_with([&] { attn->forward(x, 0, 0); }, "needs the token grid");
  throws_with([&] { attn->forward(x, 4, 5); }, "N = 16");
  throws_with([&] { attn->forward(randn_leaf({1, 4, 8}, 81, false), 1, 4); }, "sr = 2");
  throws_with([&] { attn->forward(randn_leaf({1, 16, 6}, 82, false), 4, 4); }, "(B, N, 8)");
  Tensor q = randn_leaf({1, 2, 16, 4}, 83, false), k = randn_leaf({1, 2, 16, 4}, 84, false);
  throws_with([&] { attn->core(q, k, q, 4, 4); }, "k = q");
  throws_with([] { newton_inverse(ones({2, 3}), 5); }, "(..., m, m)");
  throws_with([] { gaussian_kernel(ones({2, 3}), ones({2, 4}), 1.f); }, "same leading dims and d");
}
