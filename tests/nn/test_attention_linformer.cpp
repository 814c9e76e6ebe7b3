// LinformerAttention and its fused core linformer_attention: agreement with the composition of
// core ops (every sharing mode, with and without attention dropout), gradchecks of q, k, v, E
// and F, the exp count, the module's parameters and token count, errors (the models that build
// it: tests/models/test_linformer_models.cpp).
#include "nn/attention/linformer.h"

#include <cmath>
#include <memory>
#include <set>
#include <string>

#include "attention_testing.h"

using namespace sima;
using namespace sima::testing;

namespace {

// The dropout mask linformer_attention draws: one uniform per element of (B, h, N, k).
Tensor dropout_mask(const Shape& s, float p, uint64_t seed) {
  Generator g(seed);
  Tensor m = empty(s);
  for (int64_t i = 0; i < m.numel(); ++i) m.data()[i] = g.uniform() >= p ? 1.f / (1.f - p) : 0.f;
  return m;
}

// softmax(q (E k)ᵀ · s) ⊙ mask · (F v), composed. E, F (k, N) or (h, k, N) broadcast over batch.
Tensor composed_core(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& E, const Tensor& F,
                     float s, const Tensor& mask = Tensor()) {
  Tensor Kc = matmul(E, k), Vc = matmul(F, v);                      // (B, h, k, d)
  Tensor P = softmax(mul(matmul(q, Kc, false, /*trans_b=*/true), s), 3);  // (B, h, N, k)
  if (mask.defined()) P = mul(P, mask);
  return matmul(P, Vc);
}

struct Case {
  int64_t B, h, N, d, kl;
  std::string sharing;  // headwise: E, F (k, N); kv: F = E; none: (h, k, N)
};
const std::vector<Case> kCases = {{2, 2, 5, 4, 3, "headwise"}, {1, 3, 6, 2, 2, "none"}, {2, 2, 4, 3, 5, "kv"},
                                  {1, 1, 3, 4, 1, "headwise"}};

struct Maps {
  Tensor E, F;
};
Maps maps(const Case& c, uint64_t seed) {
  const Shape s = c.sharing == "none" ? Shape{c.h, c.kl, c.N} : Shape{c.kl, c.N};
  Tensor E = mul(randn_leaf(s, seed, false), 0.5f).detach().requires_grad_();
  Tensor F = c.sharing == "kv" ? E : mul(randn_leaf(s, seed + 1, false), 0.5f).detach().requires_grad_();
  return {E, F};
}

template <class F>
void for_each_case(F&& f) {
  for (const Case& c : kCases) {
    CAPTURE(c.N);
    CAPTURE(c.d);
    CAPTURE(c.kl);
    CAPTURE(c.sharing);
    f(c);
  }
}

AttentionOptions lin_options(int64_t N, int64_t kl = 3, const std::string& sharing = "headwise") {
  AttentionOptions o = attention_options("linformer", 8, 2);
  o.num_tokens = N;
  set_unchecked(o, "proj_len", kl);
  set_unchecked(o, "sharing", sharing);
  return o;
}

}  // namespace

TEST_CASE("linformer_attention: fused == composed, forward and gradients of q, k, v, E, F") {
  for_each_case([](const Case& c) {
    const Shape s{c.B, c.h, c.N, c.d};
    Tensor q = randn_leaf(s, 1), k = randn_leaf(s, 2), v = randn_leaf(s, 3);
    Maps m = maps(c, 4);
    const float sc = 1.f / std::sqrt(float(c.d));
    // E and F enter as parameters: check_same compares their gradients too
    check_same([&](auto& x) { return linformer_attention(x[0], x[1], x[2], m.E, m.F, sc); },
               [&](auto& x) { return composed_core(x[0], x[1], x[2], m.E, m.F, sc); }, {q, k, v}, {},
               c.sharing == "kv" ? std::vector<Tensor>{m.E} : std::vector<Tensor>{m.E, m.F});
  });
}

TEST_CASE("linformer_attention: fused == composed with attention dropout (same mask)") {
  for_each_case([](const Case& c) {
    const Shape s{c.B, c.h, c.N, c.d};
    Tensor q = randn_leaf(s, 5), k = randn_leaf(s, 6), v = randn_leaf(s, 7);
    Maps m = maps(c, 8);
    Tensor mask = dropout_mask({c.B, c.h, c.N, c.kl}, 0.3f, 99);
    check_same(
        [&](auto& x) {
          Generator g(99);
          return linformer_attention(x[0], x[1], x[2], m.E, m.F, 0.5f, 0.3f, /*training=*/true, g);
        },
        [&](auto& x) { return composed_core(x[0], x[1], x[2], m.E, m.F, 0.5f, mask); }, {q, k, v}, {},
        c.sharing == "kv" ? std::vector<Tensor>{m.E} : std::vector<Tensor>{m.E, m.F});
    // not training: no mask
    Generator g(99);
    NoGradGuard ng;
    check_close(linformer_attention(q, k, v, m.E, m.F, 0.5f, 0.3f, false, g),
                composed_core(q, k, v, m.E, m.F, 0.5f), 1e-5f, 1e-4f);
  });
}

TEST_CASE("linformer_attention: gradcheck w.r.t. q, k, v, E and F (every sharing mode)") {
  for_each_case([](const Case& c) {
    const Shape s{c.B, c.h, c.N, c.d};
    Tensor q = randn_leaf(s, 11), k = randn_leaf(s, 12), v = randn_leaf(s, 13);
    Maps m = maps(c, 14);
    const float sc = 1.f / std::sqrt(float(c.d));
    if (c.sharing == "kv")
      CHECK_GRADCHECK([sc](auto& x) { return linformer_attention(x[0], x[1], x[2], x[3], x[3], sc); },
                      {q, k, v, m.E});
    else
      CHECK_GRADCHECK([sc](auto& x) { return linformer_attention(x[0], x[1], x[2], x[3], x[4], sc); },
                      {q, k, v, m.E, m.F});
  });
}

TEST_CASE("linformer_attention: gradcheck with dropout (mask fixed by reseeding), and with only some grads") {
  Tensor q = randn_leaf({2, 2, 5, 4}, 21), k = randn_leaf({2, 2, 5, 4}, 22), v = randn_leaf({2, 2, 5, 4}, 23);
  Tensor E = randn_leaf({3, 5}, 24), F = randn_leaf({3, 5}, 25);
  CHECK_GRADCHECK(
      [](auto& x) {
        Generator g(7);
        return linformer_attention(x[0], x[1], x[2], x[3], x[4], 0.5f, 0.25f, true, g);
      },
      {q, k, v, E, F});
  Tensor q2 = randn_leaf({2, 2, 5, 4}, 21, false), E2 = randn_leaf({3, 5}, 24, false);
  CHECK_GRADCHECK([](auto& x) { return linformer_attention(x[0], x[1], x[2], x[3], x[4], 0.5f); },
                  {q2, k, v, E2, F});
  Tensor k3 = randn_leaf({2, 2, 5, 4}, 22, false), v3 = randn_leaf({2, 2, 5, 4}, 23, false);
  CHECK_GRADCHECK([](auto& x) { return linformer_attention(x[0], x[1], x[2], x[3], x[4], 0.5f); },
                  {q, k3, v3, E, F});
}

TEST_CASE("linformer_attention: known values worked by hand") {
  // N = 2, d = 1, k = 1: E = [1, 1], F = [1, -1]; q = [[0], [1]], k = [[1], [2]], v = [[3], [5]]
  // K' = E k = 3, V' = F v = -2: one key, so the softmax over it is 1 and out_i = V' = -2.
  Tensor q = from_vector({0, 1}, {1, 1, 2, 1}), k = from_vector({1, 2}, {1, 1, 2, 1}),
         v = from_vector({3, 5}, {1, 1, 2, 1});
  check_close(linformer_attention(q, k, v, from_vector({1, 1}, {1, 2}), from_vector({1, -1}, {1, 2}), 1.f),
              {-2.f, -2.f});
  // k = 2 with E = I, F = I: plain softmax attention over the two tokens. Row 1 (q = 1):
  // logits 1·1, 1·2 -> p = (1, e)/(1 + e); out = (3 + 5e)/(1 + e). Row 0 (q = 0): (3 + 5)/2 = 4.
  Tensor I = from_vector({1, 0, 0, 1}, {2, 2});
  const float e = std::exp(1.f);
  check_close(linformer_attention(q, k, v, I, I, 1.f), {4.f, (3.f + 5.f * e) / (1.f + e)});
}

TEST_CASE("linformer_attention: exp count is N·k per pair") {
  Tensor q = randn_leaf({2, 3, 5, 4}, 41), k = randn_leaf({2, 3, 5, 4}, 42), v = randn_leaf({2, 3, 5, 4}, 43);
  Tensor E = randn_leaf({2, 5}, 44);
  int64_t n = 0;
  linformer_attention(q, k, v, E, E, 0.5f, 0.f, false, rng(RngStream::Dropout), &n);
  CHECK(n == 2 * 3 * 5 * 2);
  LinformerAttention m(lin_options(6, 3));
  m.forward(randn_leaf({3, 6, 8}, 45, false));  // B 3, N 6, h 2, k 3
  CHECK(m.exp_calls() == 3 * 2 * 6 * 3);
}

TEST_CASE("LinformerAttention: parameters named as fairseq's, proj_len default N/4, sharing modes") {
  auto names_of = [](const Module& m) {
    std::set<std::string> s;
    for (auto& [name, _] : m.named_parameters()) s.insert(name);
    return s;
  };
  LinformerAttention a(lin_options(6, 3));
  CHECK(names_of(a) == std::set<std::string>{"qkv.weight", "qkv.bias", "proj.weight", "proj.bias",
                                             "compress_k.weight", "compress_v.weight"});
  CHECK(a.E.shape() == Shape{3, 6});
  CHECK(a.F.shape() == Shape{3, 6});
  LinformerAttention kv(lin_options(6, 3, "kv"));
  CHECK(names_of(kv) == std::set<std::string>{"qkv.weight", "qkv.bias", "proj.weight", "proj.bias",
                                              "compress_k.weight"});
  CHECK(kv.F.impl() == kv.E.impl());
  LinformerAttention none(lin_options(6, 3, "none"));
  CHECK(none.E.shape() == Shape{2, 3, 6});
  LinformerAttention def(lin_options(197, 0));
  CHECK(def.proj_len() == 49);  // 197 / 4, fairseq's compression ratio 4
  CHECK(LinformerAttention(lin_options(3, 0)).proj_len() == 1);
  // fairseq's init: U(±√½·√(6/(k + N)))
  const float bound = std::sqrt(0.5f * 6.f / (49 + 197));
  float mx = 0.f;
  for (int64_t i = 0; i < def.E.numel(); ++i) mx = std::fmax(mx, std::fabs(def.E.data()[i]));
  CHECK(mx <= bound);
  CHECK(mx > 0.9f * bound);
}

TEST_CASE("LinformerAttention: module == composed, gradcheck of x and every parameter") {
  for (const std::string sharing : {"headwise", "kv", "none"}) {
    CAPTURE(sharing);
    LinformerAttention m(lin_options(5, 3, sharing));
    randomize_parameters(m, 51, 0.4f);
    Tensor x = randn_leaf({2, 5, 8}, 52);
    {
      NoGradGuard ng;
      Tensor t = permute(reshape(linear(x, m.qkv->weight, m.qkv->bias), {2, 5, 3, 2, 4}), {2, 0, 3, 1, 4});
      Tensor o = composed_core(squeeze(narrow(t, 0, 0, 1), 0), squeeze(narrow(t, 0, 1, 1), 0),
                               squeeze(narrow(t, 0, 2, 1), 0), m.E, m.F, 0.5f);
      o = reshape(permute(o, {0, 2, 1, 3}), {2, 5, 8});
      check_close(m.forward(x), linear(o, m.proj->weight, m.proj->bias), 1e-5f, 1e-4f);
    }
    gradcheck_module(m, x);
  }
}

TEST_CASE("LinformerAttention compress = input (fairseq's order): without a qkv bias the same function as kv") {
  for (const std::string sharing : {"headwise", "kv"}) {
    CAPTURE(sharing);
    AttentionOptions o = lin_options(5, 3, sharing);
    o.qkv_bias = false;
    LinformerAttention a(o);
    o.with("compress", "input");
    LinformerAttention b(o);
    randomize_parameters(a, 71, 0.4f);
    b.load_state_dict(a.state_dict());
    Tensor x = randn_leaf({2, 5, 8}, 72);
    // a's forward and gradients are the oracle of b's (E (x W) = (E x) W)
    std::vector<Tensor> pa, pb;
    for (auto& [_, p] : a.named_parameters()) pa.push_back(p);
    for (auto& [_, p] : b.named_parameters()) pb.push_back(p);
    Tensor ya = a.forward(x), yb = b.forward(x);
    check_close(yb, ya, 1e-5f, 1e-4f);
    Tensor gy = randn(ya.shape());
    ya.backward(gy);
    yb.backward(gy);
    REQUIRE(pa.size() == pb.size());
    for (size_t i = 0; i < pa.size(); ++i) check_close(pb[i].grad(), pa[i].grad(), 1e-5f, 1e-4f);
    CHECK(b.exp_calls() == 2 * 2 * 5 * 3);  // B·h·N·k, as kv
  }
}

TEST_CASE("LinformerAttention compress = input with the qkv bias: differs from kv by the bias, gradcheck") {
  AttentionOptions o = lin_options(5, 3);
  LinformerAttention a(o);
  o.with("compress", "input");
  LinformerAttention b(o);
  randomize_parameters(a, 81, 0.4f);
  b.load_state_dict(a.state_dict());
  Tensor x = randn_leaf({2, 5, 8}, 82);
  {
    NoGradGuard ng;
    CHECK(max_abs_diff(a.forward(x), b.forward(x)) > 1e-2f);  // E (xW + 1bᵀ) ≠ (E x) W + 1bᵀ
  }
  gradcheck_module(b, x);
  o.with("sharing", "kv");
  LinformerAttention kv(o);
  randomize_parameters(kv, 83, 0.4f);
  gradcheck_module(kv, x);
}

TEST_CASE("linformer: errors name the culprit") {
  CHECK(error_message([] { LinformerAttention a(lin_options(0)); }).find("num_tokens = 0") != std::string::npos);
  CHECK(error_message([] { LinformerAttention a(lin_options(5, -1)); }).find("proj_len = -1") != std::string::npos);
  CHECK(error_message([] { LinformerAttention a(lin_options(5, 2, "layer")); }).find("sharing = 'layer'") !=
        std::string::npos);
  AttentionOptions o = lin_options(5, 2, "none");
  o.with("compress", "input");
  CHECK(error_message([&] { LinformerAttention a(o); }).find("sharing = 'none'") != std::string::npos);
  o.with("sharing", "headwise");
  o.projections = false;
  CHECK(error_message([&] { LinformerAttention a(o); }).find("needs projections") != std::string::npos);
  set_unchecked(o, "compress", "x");
  CHECK(error_message([&] { LinformerAttention a(o); }).find("compress = 'x'") != std::string::npos);
  for (const std::string compress : {"kv", "input"}) {
    CAPTURE(compress);
    AttentionOptions c = lin_options(5);
    c.with("compress", compress);
    LinformerAttention m(c);
    const std::string e = error_message([&] { m.forward(randn({1, 4, 8})); });
    CHECK(e.find("num_tokens = 5") != std::string::npos);
    CHECK(e.find("N = 4") != std::string::npos);
  }
  Tensor q = randn({1, 2, 5, 4}), E = randn({3, 5}), E_bad = randn({3, 4}), E_heads = randn({3, 3, 5});
  CHECK(error_message([&] { linformer_attention(q, q, q, E_bad, E_bad, 0.5f); }).find("(3, 4)") != std::string::npos);
  CHECK(error_message([&] { linformer_attention(q, q, q, E_heads, E_heads, 0.5f); }).find("h = 2") !=
        std::string::npos);
  CHECK(error_message([&] { linformer_attention(q, q, q, E, E_bad, 0.5f); }).find("linformer_attention") !=
        std::string::npos);
  CHECK(error_message([&] { linformer_attention(q, randn({1, 2, 4, 4}), q, E, E, 0.5f); }).find("one shape") !=
        std::string::npos);
}
