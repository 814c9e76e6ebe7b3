// LinearEluAttention, CosformerAttention and their shared fused core linear_attention:
// gradients, agreement with the composition of core ops, hand-worked values, the exp
// count, the eps that keeps an all-zero φ(q) row finite, and errors; the cosFormer
// re-weightings cos1d / cos2d against the quadratic form with the cosines taken directly.
#include "attention_testing.h"

#include <cmath>
#include <functional>
#include <memory>
#include <set>
#include <string>

#include "nn/attention/linear_attention.h"

using namespace sima;
using namespace sima::testing;

namespace {

Tensor phi_composed(FeatureMap phi, const Tensor& x) {
  return phi == FeatureMap::EluPlusOne ? add(elu(x), 1.f) : relu(x);
}

// out = (φ(q) (φ(k)ᵀ v)) / (φ(q) Σ_j φ(k_j) + eps), composed.
Tensor composed_core(const Tensor& q, const Tensor& k, const Tensor& v, FeatureMap phi,
                     float eps = kLinearAttentionEps) {
  Tensor fq = phi_composed(phi, q), fk = phi_composed(phi, k);
  Tensor kv = matmul(fk, v, /*trans_a=*/true);           // (B, h, d, d)
  Tensor z = sum(fk, {2}, /*keepdim=*/true);              // (B, h, 1, d)
  Tensor den = add(sum(mul(fq, z), {3}, true), eps);      // (B, h, N, 1)
  return div(matmul(fq, kv), den);
}

// The re-weighting matrix C (N, N) from the angles directly, not from the factors:
// cos1d  C_ij = cos(π/2 (i − j)/N);  cos2d  C_ij = cos(π/2 (r_i − r_j)/H) cos(π/2 (c_i − c_j)/W),
// tokens before the grid at r = c = 0 (grid rows, cols from 1).
Tensor reweight_matrix(Reweight r, int64_t N, int64_t H = 0, int64_t W = 0) {
  const double hp = 1.5707963267948966;
  std::vector<float> c(N * N);
  const int64_t extra = N - H * W;
  auto row = [&](int64_t i) { return i < extra ? 0 : (i - extra) / W + 1; };
  auto col = [&](int64_t i) { return i < extra ? 0 : (i - extra) % W + 1; };
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < N; ++j)
      c[i * N + j] = static_cast<float>(
          r == Reweight::Cos1d ? std::cos(hp * static_cast<double>(i - j) / N)
                               : std::cos(hp * static_cast<double>(row(i) - row(j)) / H) *
                                     std::cos(hp * static_cast<double>(col(i) - col(j)) / W));
  return from_vector(c, {N, N});
}

// The official left_product: S = (φ(q) φ(k)ᵀ) ⊙ C, out = S v / max(S 1, eps), composed.
Tensor reweighted_composed(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& C,
                           float eps = kLinearAttentionEps) {
  Tensor S = mul(matmul(relu(q), relu(k), false, true), C);  // (B, h, N, N)
  return div(matmul(S, v), clamp_min(sum(S, {3}, true), eps));
}

struct Case {
  int64_t B, h, N, d;
};
const std::vector<Case> kCases = {{2, 2, 5, 4}, {2, 1, 3, 6}, {1, 3, 5, 4}, {2, 1, 5, 4}};
const char* name_of(FeatureMap phi) { return phi == FeatureMap::EluPlusOne ? "elu+1" : "relu"; }

// Runs f(c, phi) for every case and both feature maps, with the case captured.
template <class F>
void for_each_case(F&& f) {
  for (const Case& c : kCases)
    for (FeatureMap phi : {FeatureMap::EluPlusOne, FeatureMap::Relu}) {
      CAPTURE(c.N);
      CAPTURE(c.d);
      CAPTURE(c.h);
      CAPTURE(name_of(phi));
      f(c, phi);
    }
}

AttentionOptions small_options(const std::string& variant) {
  return attention_options(variant, 8, 2);
}

std::shared_ptr<Attention> make(const std::string& variant, const std::string& reweight = "none") {
  AttentionOptions o = small_options(variant);
  if (variant == "cosformer" || reweight != "none") set_unchecked(o, "reweight", reweight);  // bad ones too
  if (variant == "linear_elu") return std::make_shared<LinearEluAttention>(o);
  return std::make_shared<CosformerAttention>(o);
}

}  // namespace

TEST_CASE("linear_attention: fused == composed for elu+1 and relu, forward and gradients") {
  for_each_case([](const Case& c, FeatureMap phi) {
    Tensor q = randn_leaf({c.B, c.h, c.N, c.d}, 1), k = randn_leaf({c.B, c.h, c.N, c.d}, 2),
           v = randn_leaf({c.B, c.h, c.N, c.d}, 3);
    check_same([&](auto& x) { return linear_attention(x[0], x[1], x[2], phi); },
               [&](auto& x) { return composed_core(x[0], x[1], x[2], phi); }, {q, k, v});
  });
}

TEST_CASE("linear_attention: gradcheck w.r.t. q, k, v (multi-head, h = 1, N < d, N > d)") {
  for_each_case([](const Case& c, FeatureMap phi) {
    const Shape s{c.B, c.h, c.N, c.d};
    // relu has a kink at 0: keep q and k at least 0.1 away from it (a step of 1e-2
    // then never crosses it). elu+1 is C¹, plain normal values will do.
    Tensor q = phi == FeatureMap::Relu ? away_from_zero_leaf(s, 0.1f, 2.f, 11) : randn_leaf(s, 11);
    Tensor k = phi == FeatureMap::Relu ? away_from_zero_leaf(s, 0.1f, 2.f, 12) : randn_leaf(s, 12);
    Tensor v = randn_leaf(s, 13);
    CHECK_GRADCHECK([&](auto& x) { return linear_attention(x[0], x[1], x[2], phi); }, {q, k, v});
  });
}

TEST_CASE("linear_attention: gradient to only some of q, k, v") {
  Tensor q = randn_leaf({2, 2, 5, 4}, 21), k = randn_leaf({2, 2, 5, 4}, 22, false),
         v = randn_leaf({2, 2, 5, 4}, 23, false);
  CHECK_GRADCHECK([](auto& x) { return linear_attention(x[0], x[1], x[2], FeatureMap::EluPlusOne); }, {q, k, v});
  Tensor q2 = randn_leaf({2, 2, 5, 4}, 21, false), v2 = randn_leaf({2, 2, 5, 4}, 23);
  CHECK_GRADCHECK([](auto& x) { return linear_attention(x[0], x[1], x[2], FeatureMap::EluPlusOne); }, {q2, k, v2});
}

TEST_CASE("linear_attention: known values worked by hand") {
  // N = 2, d = 2: q = [[1, 0], [0, 2]], k = [[1, 0], [1, 1]], v = [[2, 4], [6, 8]].
  Tensor q = from_vector({1, 0, 0, 2}, {1, 1, 2, 2}), k = from_vector({1, 0, 1, 1}, {1, 1, 2, 2}),
         v = from_vector({2, 4, 6, 8}, {1, 1, 2, 2});
  SUBCASE("relu (cosformer)") {
    // φ(q) = q, φ(k) = k.  KV = φ(k)ᵀ v = [[1·2 + 1·6, 1·4 + 1·8], [0·2 + 1·6, 0·4 + 1·8]]
    //                                  = [[8, 12], [6, 8]];  z = column sums of k = [2, 1]
    // row 1, φ = [1, 0]: num = [8, 12], den = 2 -> [4, 6]
    // row 2, φ = [0, 2]: num = [12, 16], den = 2 -> [6, 8]      (eps 1e-6 is below tolerance)
    check_close(linear_attention(q, k, v, FeatureMap::Relu), {4, 6, 6, 8});
  }
  SUBCASE("elu + 1") {
    // φ(x) = x + 1 for x > 0, e^x for x ≤ 0 (e^0 = 1): φ(q) = [[2, 1], [1, 3]], φ(k) = [[2, 1], [2, 2]]
    // KV = φ(k)ᵀ v = [[2·2 + 2·6, 2·4 + 2·8], [1·2 + 2·6, 1·4 + 2·8]] = [[16, 24], [14, 20]];  z = [4, 3]
    // row 1, φ = [2, 1]: num = [2·16 + 14, 2·24 + 20] = [46, 68], den = 2·4 + 3 = 11
    // row 2, φ = [1, 3]: num = [16 + 3·14, 24 + 3·20] = [58, 84], den = 4 + 3·3 = 13
    check_close(linear_attention(q, k, v, FeatureMap::EluPlusOne), {46.f / 11, 68.f / 11, 58.f / 13, 84.f / 13});
  }
  SUBCASE("a negative entry goes through exp") {
    // q = [[-1], [-1]], k = [[0], [1]], v = [[3], [5]] (d = 1): φ(k) = [1, 2], KV = 1·3 + 2·5 = 13,
    // z = 3, φ(q_i) = e^-1: out_i = 13 e^-1 / (3 e^-1 + eps) = 13/3 up to eps
    Tensor q2 = from_vector({-1, -1}, {1, 1, 2, 1}), k1 = from_vector({0, 1}, {1, 1, 2, 1}),
           v1 = from_vector({3, 5}, {1, 1, 2, 1});
    check_close(linear_attention(q2, k1, v1, FeatureMap::EluPlusOne), {13.f / 3, 13.f / 3});
  }
}

TEST_CASE("linear_attention: eps keeps an all-zero phi(q) row finite (cosformer)") {
  // Row 0 of q is all negative -> φ(q_0) = 0 -> num = 0, den = eps: out_0 = 0, no NaN.
  Tensor q = randn_leaf({1, 1, 3, 4}, 31), k = randn_leaf({1, 1, 3, 4}, 32), v = randn_leaf({1, 1, 3, 4}, 33);
  for (int64_t c = 0; c < 4; ++c) q.at({0, 0, 0, c}) = -1.f - c;
  Tensor o = linear_attention(q, k, v, FeatureMap::Relu);
  for (int64_t c = 0; c < 4; ++c) CHECK(o.at({0, 0, 0, c}) == 0.f);
  o.backward(ones(o.shape()));
  for (const Tensor& g : {q.grad(), k.grad(), v.grad()})
    for (int64_t i = 0; i < g.numel(); ++i) CHECK(std::isfinite(g.data()[i]));
  // the value of eps is the one composed_core uses: a different eps changes the output
  Tensor q2 = from_vector({1, 0, 0, 2}, {1, 1, 2, 2}), k2 = from_vector({1, 0, 1, 1}, {1, 1, 2, 2});
  CHECK(linear_attention(q2, k2, k2, FeatureMap::Relu, 1.f).at({0, 0, 0, 0}) ==
        doctest::Approx(2.f / 3.f));  // KV = kᵀk = [[2, 1], [1, 1]], z = [2, 1]: num 2, den 2 + eps = 3
}

TEST_CASE("linear_attention: exp count is 2·N·d per pair for elu+1 (q and k), 0 for relu") {
  Tensor q = randn_leaf({2, 3, 5, 4}, 41), k = randn_leaf({2, 3, 5, 4}, 42), v = randn_leaf({2, 3, 5, 4}, 43);
  int64_t n = 0;
  linear_attention(q, k, v, FeatureMap::EluPlusOne, kLinearAttentionEps, &n);
  CHECK(n == 2 * 2 * 3 * 5 * 4);  // 2 · B·h·N·d
  n = 0;
  linear_attention(q, k, v, FeatureMap::Relu, kLinearAttentionEps, &n);
  CHECK(n == 0);
  for (const std::string variant : {"linear_elu", "cosformer"}) {
    CAPTURE(variant);
    auto m = make(variant);
    m->forward(randn_leaf({3, 6, 8}, 44, false));  // B 3, N 6, h 2, d 4
    CHECK(m->exp_calls() == (variant == "linear_elu" ? 2 * 3 * 2 * 6 * 4 : 0));
  }
}

TEST_CASE("LinearEluAttention / CosformerAttention: module == composed, and gradcheck of x and every parameter") {
  for (const std::string variant : {"linear_elu", "cosformer"}) {
    CAPTURE(variant);
    auto m = make(variant);
    randomize_parameters(*m, 51, 0.4f);
    std::set<std::string> names;
    for (auto& [name, _] : m->named_parameters()) names.insert(name);
    CHECK(names == std::set<std::string>{"qkv.weight", "qkv.bias", "proj.weight", "proj.bias"});

    const FeatureMap phi = variant == "linear_elu" ? FeatureMap::EluPlusOne : FeatureMap::Relu;
    Tensor x = randn_leaf({2, 5, 8}, 52);
    {
      NoGradGuard ng;
      Tensor t = permute(reshape(linear(x, m->qkv->weight, m->qkv->bias), {2, 5, 3, 2, 4}), {2, 0, 3, 1, 4});
      Tensor o = composed_core(squeeze(narrow(t, 0, 0, 1), 0), squeeze(narrow(t, 0, 1, 1), 0),
                               squeeze(narrow(t, 0, 2, 1), 0), phi);
      o = reshape(permute(o, {0, 2, 1, 3}), {2, 5, 8});
      check_close(m->forward(x), linear(o, m->proj->weight, m->proj->bias), 1e-5f, 1e-4f);
    }
    // cosformer: relu kinks move with every parameter; a step of 1e-3 keeps to one side
    GradcheckOptions go;
    if (variant == "cosformer") go.eps = 1e-3;
    gradcheck_module(*m, x, go);
  }
}

TEST_CASE("linear attention: the qk hook sees q and k, errors name the culprit") {
  auto m = make("linear_elu");
  int calls = 0;
  m->qk_hook = [&](const Tensor& q, const Tensor& k) {
    ++calls;
    CHECK(q.shape() == Shape{2, 2, 5, 4});
    CHECK(k.shape() == Shape{2, 2, 5, 4});
  };
  m->forward(randn_leaf({2, 5, 8}, 61, false));
  CHECK(calls == 1);
  AttentionOptions o = small_options("linear_elu");
  o.attn_drop = 0.1f;
  CHECK(error_message([&] { LinearEluAttention a(o); }).find("LinearEluAttention: attn_drop") != std::string::npos);
  o.variant = "cosformer";  // the options of the cosformer row, which reads reweight
  CHECK(error_message([&] { CosformerAttention a(o); }).find("CosformerAttention: attn_drop") != std::string::npos);
  Tensor q = randn({1, 2, 3, 4}), k = randn({1, 2, 3, 5});
  CHECK(error_message([&] { linear_attention(q, k, q, FeatureMap::Relu); }).find("linear_attention") != std::string::npos);
  CHECK(error_message([&] { linear_attention(q, q, q, FeatureMap::Relu, 0.f); }).find("eps") != std::string::npos);
}

// ---- cosFormer re-weighting -----------------------------------------------------------

TEST_CASE("reweight_factors: sum_t w_it w_jt is the cosine matrix (cos1d, cos2d, with a class token)") {
  struct R { Reweight r; int64_t N, H, W; };
  for (R c : {R{Reweight::Cos1d, 7, 0, 0}, R{Reweight::Cos2d, 12, 3, 4}, R{Reweight::Cos2d, 13, 3, 4}}) {
    CAPTURE(c.N);
    Tensor w = reweight_factors(c.r, c.N, c.H, c.W);
    CHECK(w.shape() == Shape{c.N, c.r == Reweight::Cos1d ? 2 : 4});
    check_close(matmul(w, w, false, true), reweight_matrix(c.r, c.N, c.H, c.W), 1e-6f, 1e-6f);
  }
  CHECK(!reweight_factors(Reweight::None, 5).defined());
}

TEST_CASE("cosformer cos1d: known values worked by hand") {
  // N = 2, d = 1, q = k = (1, 1), v = (2, 4): θ = (π/4, π/2), C_12 = cos(π/4) = 0.70710678
  // out_1 = (2 + 0.70710678·4)/(1 + 0.70710678) = 2.82842712
  // out_2 = (0.70710678·2 + 4)/(1 + 0.70710678) = 3.17157288
  Tensor q = from_vector({1, 1}, {1, 1, 2, 1}), v = from_vector({2, 4}, {1, 1, 2, 1});
  check_close(linear_attention(q, q, v, FeatureMap::Relu, kLinearAttentionEps, nullptr,
                               reweight_factors(Reweight::Cos1d, 2), true),
              {2.82842712f, 3.17157288f}, 1e-5f, 1e-5f);
}

TEST_CASE("cosformer: clamp_den is max(s, eps), not s + eps") {
  // as the eps test above with eps = 1: s = 2, num = 2 -> clamp 2/2 = 1, add 2/3
  Tensor q2 = from_vector({1, 0, 0, 2}, {1, 1, 2, 2}), k2 = from_vector({1, 0, 1, 1}, {1, 1, 2, 2});
  Tensor w = ones({2, 1});
  CHECK(linear_attention(q2, k2, k2, FeatureMap::Relu, 1.f, nullptr, w, true).at({0, 0, 0, 0}) ==
        doctest::Approx(1.f));
  CHECK(linear_attention(q2, k2, k2, FeatureMap::Relu, 1.f, nullptr, w, false).at({0, 0, 0, 0}) ==
        doctest::Approx(2.f / 3.f));
}

TEST_CASE("cosformer cos1d / cos2d: fused == the quadratic form (forward and gradients), and gradcheck") {
  struct R { Reweight r; int64_t N, H, W; };
  for (R c : {R{Reweight::Cos1d, 6, 0, 0}, R{Reweight::Cos1d, 3, 0, 0}, R{Reweight::Cos2d, 6, 2, 3},
              R{Reweight::Cos2d, 7, 2, 3}}) {
    for (int64_t h : {1, 2}) {
      CAPTURE(c.N);
      CAPTURE(c.H);
      CAPTURE(h);
      const Shape sh{2, h, c.N, 4};
      Tensor q = away_from_zero_leaf(sh, 0.1f, 2.f, 71), k = away_from_zero_leaf(sh, 0.1f, 2.f, 72),
             v = randn_leaf(sh, 73);
      const Tensor w = reweight_factors(c.r, c.N, c.H, c.W), C = reweight_matrix(c.r, c.N, c.H, c.W);
      auto fused = [&](auto& x) {
        return linear_attention(x[0], x[1], x[2], FeatureMap::Relu, kLinearAttentionEps, nullptr, w, true);
      };
      check_same(fused, [&](auto& x) { return reweighted_composed(x[0], x[1], x[2], C); }, {q, k, v});
      CHECK_GRADCHECK(fused, {q, k, v});
    }
  }
}

TEST_CASE("CosformerAttention reweight: module gradcheck of x and every parameter, errors") {
  for (const std::string rw : {"cos1d", "cos2d"}) {
    CAPTURE(rw);
    auto m = make("cosformer", rw);
    randomize_parameters(*m, 81, 0.4f);
    GradcheckOptions go;
    go.eps = 1e-3;  // relu kinks move with every parameter; a step of 1e-3 keeps to one side
    Tensor x = randn_leaf({2, 7, 8}, 82);  // a class token and a 2×3 grid
    gradcheck_module(*m, x, go, [&](const Tensor& t) { return m->forward(t, 2, 3); });
    // module == its composition with the quadratic form
    NoGradGuard ng;
    Tensor t = permute(reshape(linear(x, m->qkv->weight, m->qkv->bias), {2, 7, 3, 2, 4}), {2, 0, 3, 1, 4});
    Tensor o = reweighted_composed(squeeze(narrow(t, 0, 0, 1), 0), squeeze(narrow(t, 0, 1, 1), 0),
                                   squeeze(narrow(t, 0, 2, 1), 0),
                                   reweight_matrix(parse_reweight(rw), 7, 2, 3));
    o = reshape(permute(o, {0, 2, 1, 3}), {2, 7, 8});
    check_close(m->forward(x, 2, 3), linear(o, m->proj->weight, m->proj->bias), 1e-5f, 1e-4f);
  }
  auto m2 = make("cosformer", "cos2d");
  CHECK(error_message([&] { m2->forward(randn_leaf({1, 6, 8}, 83, false)); }).find("cos2d needs the token grid") !=
        std::string::npos);
  CHECK(error_message([&] { m2->forward(randn_leaf({1, 6, 8}, 83, false), 3, 3); }).find("more than N = 6") !=
        std::string::npos);
  CHECK(error_message([&] { make("cosformer", "cos3d"); }).find("not one of: none, cos1d, cos2d") != std::string::npos);
  CHECK(error_message([&] { make("linear_elu", "cos1d"); }).find("is a cosformer option") != std::string::npos);
  Tensor q = randn({1, 1, 3, 2});
  CHECK(error_message([&] { linear_attention(q, q, q, FeatureMap::Relu, 1e-6f, nullptr, ones({4, 2})); })
            .find("(N = 3, T)") != std::string::npos);
}
