// Class attention (XCiT / CaiT), softmax and SimA forms: the fused core (class_attention)
// against finite differences, against the formula composed from core ops, against
// hand-worked values, and the module (timm's cat([cls, x[:, 1:]]) return included).
#include "testing.h"

#include <cmath>

#include "nn/attention/class_attention.h"

using namespace sima;
using namespace sima::testing;

namespace {
// The oracle, as timm / the SimA code write it: qkv (B, T, 3C) -> (B, 1, C).
Tensor composed_class_attention(const Tensor& qkv, int64_t h, const std::string& variant, float eps) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, d = C / h;
  Tensor t = permute(reshape(qkv, {B, T, 3, h, d}), {2, 0, 3, 1, 4});  // (3, B, h, T, d)
  Tensor q = squeeze(narrow(t, 0, 0, 1), 0), k = squeeze(narrow(t, 0, 1, 1), 0),
         v = squeeze(narrow(t, 0, 2, 1), 0);
  Tensor attn;  // (B, h, 1, T)
  if (variant == "softmax") {
    Tensor qc = narrow(q, 2, 0, 1);
    attn = softmax(mul(matmul(qc, k, false, true), 1.f / std::sqrt(float(d))), -1);
  } else {
    Tensor qn = normalize(q, 1.f, -2, eps), kn = normalize(k, 1.f, -2, eps);
    attn = matmul(narrow(qn, 2, 0, 1), kn, false, true);
  }
  Tensor cls = matmul(attn, v);  // (B, h, 1, d)
  return reshape(permute(cls, {0, 2, 1, 3}), {B, 1, C});
}

struct Case {
  int64_t B, T, h, d;
};
// T = N+1 < d and T > d, single head and multi-head.
const Case kCases[] = {{2, 3, 2, 4}, {2, 5, 1, 4}, {2, 5, 2, 6}, {2, 3, 1, 6}};

Tensor qkv_leaf(const Case& c, uint64_t seed) { return randn_leaf({c.B, c.T, 3 * c.h * c.d}, seed); }
// For gradchecks: |x| >= 0.1, so the ±1e-2 steps never cross the kink of |x| in Σ|x|.
Tensor qkv_leaf_away_from_zero(const Case& c, uint64_t seed) {
  return away_from_zero_leaf({c.B, c.T, 3 * c.h * c.d}, 0.1f, 1.5f, seed);
}

// For the SimA gradchecks: q and k biases of ±[1.5, 2) and small weights keep every q, k
// value far from 0 (the kink of Σ|x|) under the gradcheck's steps.
void keep_qk_away_from_zero(ClassAttention& m, uint64_t seed) {
  Generator g(seed);
  g.fill_normal(m.qkv->weight.data(), m.qkv->weight.numel(), 0.f, 0.1f);
  float* b = m.qkv->bias.data();
  for (int64_t i = 0; i < 2 * m.options().dim; ++i) {
    const float mag = 1.5f + 0.5f * g.uniform();
    b[i] = g.uniform() < 0.5f ? -mag : mag;
  }
}
float min_abs_qk(ClassAttention& m, const Tensor& x) {
  NoGradGuard ng;
  Tensor y = m.qkv->forward(x);
  const int64_t C = m.options().dim, rows = y.numel() / (3 * C);
  float mn = 1e30f;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < 2 * C; ++j) mn = std::fmin(mn, std::fabs(y.data()[r * 3 * C + j]));
  return mn;
}

std::shared_ptr<ClassAttention> make_module(int64_t dim, int64_t heads, const std::string& variant,
                                            float proj_drop = 0.f) {
  ClassAttentionOptions opt;
  opt.dim = dim;
  opt.num_heads = heads;
  opt.variant = variant;
  opt.proj_drop = proj_drop;
  auto m = std::make_shared<ClassAttention>(opt);
  randomize_parameters(*m, 99);
  return m;
}
}  // namespace

TEST_CASE("class_attention: gradcheck w.r.t. qkv, softmax and sima") {
  for (const std::string variant : {"softmax", "sima"})
    for (const Case& c : kCases) {
      CAPTURE(variant);
      CAPTURE(c.T);
      CAPTURE(c.h);
      CAPTURE(c.d);
      CHECK_GRADCHECK([=](const std::vector<Tensor>& t) { return class_attention(t[0], c.h, variant); },
                      {qkv_leaf_away_from_zero(c, 10)});
    }
}

TEST_CASE("class_attention sima: gradcheck below the eps floor (dx = g / eps)") {
  // One q column and one k column of tiny values: Σ|x| < eps, and stays below it under
  // the ±1e-3 gradcheck steps, so the clamp branch is what is checked there.
  const Case c{1, 3, 1, 2};
  Tensor x = qkv_leaf(c, 11);
  for (int64_t t = 0; t < c.T; ++t) {
    x.at({0, t, 0}) = 1e-3f * float(t + 1) * (t % 2 ? -1.f : 1.f);  // q channel 0
    x.at({0, t, 3}) = -1e-3f * float(t + 1);                         // k channel 1
  }
  GradcheckOptions go;
  go.eps = 1e-3;
  CHECK_GRADCHECK([](const std::vector<Tensor>& t) { return class_attention(t[0], 1, "sima", 0.05f); },
                  {x}, go);
}

TEST_CASE("class_attention == its composition from core ops (values and gradients)") {
  for (const std::string variant : {"softmax", "sima"})
    for (const Case& c : kCases) {
      CAPTURE(variant);
      CAPTURE(c.T);
      check_same([=](auto& t) { return class_attention(t[0], c.h, variant, 1e-6f); },
                 [=](auto& t) { return composed_class_attention(t[0], c.h, variant, 1e-6f); },
                 {qkv_leaf(c, 20)});
    }
  // Both sides of the ℓ1 clamp: with eps = 0.05, the q and k columns of channel 0 of
  // head 0 are tiny (Σ|x| < eps), the others are not.
  const Case c{2, 4, 2, 3};
  const int64_t C = c.h * c.d;
  Tensor x = qkv_leaf(c, 21);
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t t = 0; t < c.T; ++t) {
      x.at({b, t, 0}) *= 1e-3f;
      x.at({b, t, C}) *= 1e-3f;
    }
  check_same([=](auto& t) { return class_attention(t[0], c.h, "sima", 0.05f); },
             [=](auto& t) { return composed_class_attention(t[0], c.h, "sima", 0.05f); }, {x});
  // More tokens and heads, larger scores (the softmax max subtraction matters).
  const Case big{3, 17, 4, 8};
  Tensor y = mul(qkv_leaf(big, 22), 3.f).detach().requires_grad_();
  for (const std::string variant : {"softmax", "sima"}) {
    check_same([=](auto& t) { return class_attention(t[0], big.h, variant); },
               [=](auto& t) { return composed_class_attention(t[0], big.h, variant, 1e-6f); }, {y});
  }
}

TEST_CASE("class_attention: values worked out by hand") {
  SUBCASE("softmax, two heads of d = 1 (scale 1)") {
    // qkv rows: [q_h0, q_h1, k_h0, k_h1, v_h0, v_h1], T = 2, l = ln 3.
    //   token 0: q = (l, 0), k = (1, 7), v = (4, 1);  token 1: q = (9, 9) (unused), k = (0, 3), v = (8, 5)
    //   head 0: z = (l·1, l·0) = (ln 3, 0) -> a = (3/4, 1/4), out = 3/4·4 + 1/4·8 = 5
    //   head 1: z = (0·7, 0·3) = (0, 0)    -> a = (1/2, 1/2), out = (1 + 5)/2 = 3
    // Gradient of L = Σ out w.r.t. v: dv(t, head) = a_t: (3/4, 1/2) at token 0, (1/4, 1/2) at token 1.
    // Head 0 w.r.t. q(0): da = v = (4, 8), r = Σ a da = 5, dz = a (da − r) = (-3/4, 3/4),
    //   dq = Σ dz k = -3/4·1 + 3/4·0 = -3/4;  dk = dz q = (-3/4·l, 3/4·l).
    // Head 1: da = (1, 5), r = 3, dz = (1/2·(-2), 1/2·2) = (-1, 1), dq = -7 + 3 = -4, dk = dz·0 = 0.
    const float l = std::log(3.f);
    Tensor qkv = from_vector({l, 0, 1, 7, 4, 1, 9, 9, 0, 3, 8, 5}, {1, 2, 6}).requires_grad_();
    int64_t exps = 0;
    Tensor attn;
    Tensor out = class_attention(qkv, 2, "softmax", 1e-6f, &exps, &attn);
    check_close(out, {5, 3});
    check_close(attn, {0.75f, 0.25f, 0.5f, 0.5f});
    CHECK(exps == 4);
    sum(out).backward();
    check_close(qkv.grad(), {-0.75f, -4, -0.75f * l, 0, 0.75f, 0.5f,  //
                             0, 0, 0.75f * l, 0, 0.25f, 0.5f});
  }
  SUBCASE("sima, one head of d = 2") {
    // token 0: q = (1, -2), k = (1, 2), v = (3, 0);  token 1: q = (3, 2), k = (-3, 2), v = (1, 4)
    //   ℓ1 over tokens: q columns (1, 3) and (-2, 2) have Σ|q| = 4, 4 -> q̂(0) = (1/4, -1/2)
    //                   k columns (1, -3) and (2, 2) have Σ|k| = 4, 4 -> k̂ = [(1/4, 1/2), (-3/4, 1/2)]
    //   a_0 = 1/4·1/4 − 1/2·1/2 = -3/16,  a_1 = 1/4·(-3/4) − 1/2·1/2 = -7/16
    //   out = -3/16·(3, 0) − 7/16·(1, 4) = (-16/16, -28/16) = (-1, -7/4)
    Tensor qkv = from_vector({1, -2, 1, 2, 3, 0, 3, 2, -3, 2, 1, 4}, {1, 2, 6}).requires_grad_();
    int64_t exps = 0;
    Tensor attn;
    Tensor out = class_attention(qkv, 1, "sima", 1e-6f, &exps, &attn);
    check_close(out, {-1.f, -1.75f});
    check_close(attn, {-3.f / 16, -7.f / 16});
    CHECK(exps == 0);
    // Gradient w.r.t. v of L = Σ out: dv(t, c) = a_t.
    // w.r.t. k: da = Σ_c v(t, c) = (3, 5); dq̂(0) = Σ_t da_t k̂(t) = (3/4 − 15/4, 3/2 + 5/2) = (-3, 4)
    //   k column 0 (n = 4, signs (+, -)): dk̂ = da·q̂(0,0) = (3/4, 5/4), s = q̂ dq̂ = 1/4·(-3) = -3/4,
    //     dk = (dk̂ − sign(k)·s)/4 = ((3/4 + 3/4)/4, (5/4 − 3/4)/4) = (3/8, 1/8)
    //   k column 1: dk̂ = da·(-1/2) = (-3/2, -5/2), s = -1/2·4 = -2, signs (+, +):
    //     dk = ((-3/2 + 2)/4, (-5/2 + 2)/4) = (1/8, -1/8)
    //   q column 0: g = (-3, 0), s = -3·1/4 = -3/4, signs (+, +): dq = ((-3 + 3/4)/4, (3/4)/4) = (-9/16, 3/16)
    //   q column 1: g = (4, 0), s = 4·(-1/2) = -2, signs (-, +): dq = ((4 − 2)/4, (0 + 2)/4) = (1/2, 1/2)
    sum(out).backward();
    const float a0 = -3.f / 16, a1 = -7.f / 16;
    check_close(qkv.grad(), {-9.f / 16, 0.5f, 3.f / 8, 1.f / 8, a0, a0,  //
                             3.f / 16, 0.5f, 1.f / 8, -1.f / 8, a1, a1});
  }
}

TEST_CASE("ClassAttention: gradcheck of the module w.r.t. x and every parameter") {
  struct M { int64_t dim, heads, T; };
  for (const std::string variant : {"softmax", "sima"})
    for (M c : {M{8, 2, 3}, M{8, 2, 5}, M{6, 1, 3}, M{4, 1, 5}}) {  // d = 4, 4, 6, 4
      CAPTURE(variant);
      CAPTURE(c.heads);
      CAPTURE(c.T);
      auto attn = make_module(c.dim, c.heads, variant);
      Tensor x = randn_leaf({2, c.T, c.dim}, 60);
      if (variant == "sima") {
        keep_qk_away_from_zero(*attn, 61);
        REQUIRE(min_abs_qk(*attn, x) > 0.2f);
      }
      CHECK(attn->named_parameters().size() == 4);
      gradcheck_module(*attn, x);
    }
}

TEST_CASE("ClassAttention: returns cat([proj(cls), x[:, 1:]]) as timm") {
  for (const std::string variant : {"softmax", "sima"}) {
    CAPTURE(variant);
    auto attn = make_module(8, 2, variant);
    Tensor x = randn_leaf({2, 4, 8}, 70);
    Tensor y = attn->forward(x);
    REQUIRE(y.shape() == Shape{2, 4, 8});
    // Patch positions: x itself.
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t t = 1; t < 4; ++t)
        for (int64_t c = 0; c < 8; ++c) CHECK(y.at({b, t, c}) == x.at({b, t, c}));
    // Class position: proj of the fused core on qkv(x).
    Tensor cls = attn->proj->forward(class_attention(attn->qkv->forward(x), 2, variant));
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t c = 0; c < 8; ++c) CHECK(y.at({b, 0, c}) == doctest::Approx(cls.at({b, 0, c})));
    // The patch rows pass their gradient straight through (plus what flows via k, v).
    Tensor g = zeros({2, 4, 8});
    for (int64_t c = 0; c < 8; ++c) g.at({1, 2, c}) = 1.f;  // only a patch output row
    y.backward(g);
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t t = 0; t < 4; ++t)
        for (int64_t c = 0; c < 8; ++c) CHECK(x.grad().at({b, t, c}) == (b == 1 && t == 2 ? 1.f : 0.f));
  }
  // Only a class token: nothing to append.
  auto attn = make_module(8, 2, "sima");
  CHECK(attn->forward(randn({2, 1, 8})).shape() == Shape{2, 1, 8});
}

TEST_CASE("ClassAttention: parameter names as timm, #exp, attn_hook") {
  auto attn = make_module(8, 2, "softmax");
  std::vector<std::string> names;
  for (auto& [name, p] : attn->named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"qkv.weight", "qkv.bias", "proj.weight", "proj.bias"});
  ClassAttentionOptions nb;
  nb.dim = 8;
  nb.qkv_bias = false;
  CHECK(ClassAttention(nb).named_parameters().size() == 3);

  attn->forward(randn({3, 5, 8}));
  CHECK(attn->exp_calls() == 3 * 2 * 5);  // h·(N+1) per image
  attn->forward(randn({1, 9, 8}));
  CHECK(attn->exp_calls() == 30 + 2 * 9);
  attn->reset_exp_calls();
  CHECK(attn->exp_calls() == 0);
  auto sima = make_module(8, 2, "sima");
  sima->forward(randn({3, 5, 8}));
  CHECK(sima->exp_calls() == 0);

  Tensor seen;
  attn->attn_hook = [&](const Tensor& a) { seen = a; };
  attn->forward(randn({2, 5, 8}));
  REQUIRE(seen.shape() == Shape{2, 2, 5});
  for (int64_t i = 0; i < 4; ++i) {  // softmax rows sum to 1
    float s = 0.f;
    for (int64_t t = 0; t < 5; ++t) s += seen.data()[i * 5 + t];
    CHECK(s == doctest::Approx(1.f));
  }
}

TEST_CASE("ClassAttention: proj_drop is the identity in eval, reproducible in training") {
  auto plain = make_module(8, 2, "sima", 0.f), dropped = make_module(8, 2, "sima", 0.5f);
  Tensor x = randn({2, 6, 8});
  NoGradGuard ng;
  dropped->eval();
  CHECK(max_abs_diff(dropped->forward(x), plain->forward(x)) == 0.f);
  dropped->train();
  rng(RngStream::Dropout).manual_seed(5);
  Tensor a = dropped->forward(x);
  rng(RngStream::Dropout).manual_seed(5);
  Tensor b = dropped->forward(x);
  CHECK(max_abs_diff(a, b) == 0.f);
  CHECK(max_abs_diff(a, plain->forward(x)) > 1e-3f);
}

TEST_CASE("ClassAttention: bad options and shapes are sima::Error") {
  ClassAttentionOptions opt;
  opt.dim = 8;
  opt.num_heads = 2;
  opt.variant = "xca";
  CHECK_THROWS_WITH_AS(ClassAttention{opt}, doctest::Contains("variant 'xca' is not one of softmax, sima"),
                       Error);
  opt.variant = "sima";
  opt.num_heads = 3;
  CHECK_THROWS_AS(ClassAttention{opt}, Error);
  opt.num_heads = 2;
  opt.eps = 0.f;
  CHECK_THROWS_AS(ClassAttention{opt}, Error);
  opt.eps = 1e-6f;
  opt.proj_drop = 1.f;
  CHECK_THROWS_AS(ClassAttention{opt}, Error);
  opt.proj_drop = 0.f;
  ClassAttention attn(opt);
  CHECK_THROWS_WITH_AS(attn.forward(randn({2, 3, 6})), doctest::Contains("ClassAttention"), Error);
  CHECK_THROWS_AS(attn.forward(randn({2, 0, 8})), Error);
  CHECK_THROWS_AS(class_attention(randn({2, 3, 10}), 2, "softmax"), Error);
  CHECK_THROWS_AS(class_attention(randn({2, 3, 12}), 2, "relu"), Error);
}
