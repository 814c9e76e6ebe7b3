// XCA attention: the fused core against finite differences, against timm's formula composed
// from core ops (with and without attn_drop), on hand-worked values, and the module around it.
#include <cmath>
#include <memory>
#include <string>

#include "attention_testing.h"
#include "nn/attention/xca.h"

using namespace sima;
using namespace sima::testing;

namespace {

// The oracle, timm's XCA.forward after the qkv split, composed from core ops:
//   q, k, v = q.T, k.T, v.T                        (B, h, d, N)
//   q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
//   attn = softmax((q @ k.T) * temperature, -1); attn = attn_drop(attn)
//   out = (attn @ v).T                             (B, h, N, d)
Tensor xca_composed(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& tau,
                    float p = 0.f, bool training = false) {
  Tensor qt = normalize(transpose(q, 2, 3), 2.f, -1), kt = normalize(transpose(k, 2, 3), 2.f, -1);
  Tensor attn = softmax(mul(matmul(qt, kt, false, true), tau), -1);
  attn = dropout(attn, p, training);
  return transpose(matmul(attn, transpose(v, 2, 3)), 2, 3);
}

std::shared_ptr<XCAttention> make_xca(int64_t dim, int64_t heads, float attn_drop = 0.f) {
  AttentionOptions o = attention_options("xca", dim, heads);
  o.attn_drop = attn_drop;
  return std::make_shared<XCAttention>(o);
}

}  // namespace

TEST_CASE("xca_attention: gradcheck w.r.t. q, k, v and temperature (h = 1 and 3, N < d and N > d)") {
  uint64_t seed = 200;
  for (int64_t h : {1, 3})
    for (auto [N_, d_] : {std::pair<int64_t, int64_t>{3, 4}, {5, 4}, {3, 6}, {5, 6}}) {
      const auto& N = N_; const auto& d = d_;  // clang 14 cannot capture a structured binding
      CAPTURE(h);
      CAPTURE(N);
      CAPTURE(d);
      Tensor q = randn_leaf({2, h, N, d}, ++seed), k = randn_leaf({2, h, N, d}, ++seed);
      Tensor v = randn_leaf({2, h, N, d}, ++seed), tau = uniform_leaf({h, 1, 1}, 0.5f, 3.f, ++seed);
      CHECK_GRADCHECK([](const std::vector<Tensor>& in) {
        return xca_attention(in[0], in[1], in[2], in[3]);
      }, {q, k, v, tau});
    }
}

TEST_CASE("xca_attention: gradcheck with attn_drop in training (same mask every call)") {
  Tensor q = randn_leaf({2, 2, 5, 4}, 1), k = randn_leaf({2, 2, 5, 4}, 2), v = randn_leaf({2, 2, 5, 4}, 3);
  Tensor tau = uniform_leaf({2, 1, 1}, 0.5f, 2.f, 4);
  CHECK_GRADCHECK([](const std::vector<Tensor>& in) {
    manual_seed(9);
    return xca_attention(in[0], in[1], in[2], in[3], 0.3f, true);
  }, {q, k, v, tau});
}

TEST_CASE("xca_attention == timm's XCA composed from core ops (forward and every gradient)") {
  for (auto [N_, d_] : {std::pair<int64_t, int64_t>{7, 5}, {4, 8}, {16, 16}}) {
    const auto& N = N_; const auto& d = d_;  // clang 14 cannot capture a structured binding
    CAPTURE(N);
    CAPTURE(d);
    Tensor q = randn_leaf({2, 3, N, d}, 11), k = randn_leaf({2, 3, N, d}, 12), v = randn_leaf({2, 3, N, d}, 13);
    Tensor tau = uniform_leaf({3, 1, 1}, 0.2f, 4.f, 14);
    check_same([](auto& in) { return xca_attention(in[0], in[1], in[2], in[3]); },
               [](auto& in) { return xca_composed(in[0], in[1], in[2], in[3]); },
               {q, k, v, tau}, {.rel = 1e-4f});
    // attn_drop in training: the same mask as dropout() draws from the same seed
    check_same([](auto& in) {
      manual_seed(3);
      return xca_attention(in[0], in[1], in[2], in[3], 0.25f, true);
    }, [](auto& in) {
      manual_seed(3);
      return xca_composed(in[0], in[1], in[2], in[3], 0.25f, true);
    }, {q, k, v, tau}, {.rel = 1e-4f});
  }
}

TEST_CASE("xca_attention: attn_drop only in training; eval ignores it") {
  Tensor q = randn_leaf({1, 2, 6, 4}, 21), k = randn_leaf({1, 2, 6, 4}, 22), v = randn_leaf({1, 2, 6, 4}, 23);
  Tensor tau = ones({2, 1, 1});
  Tensor plain = xca_attention(q, k, v, tau);
  CHECK(max_abs_diff(xca_attention(q, k, v, tau, 0.5f, false), plain) == 0.f);
  CHECK(max_abs_diff(xca_attention(q, k, v, tau, 0.5f, true), plain) > 1e-3f);
}

TEST_CASE("xca_attention: known values on a hand-made input (B = 1, h = 1, N = 2, d = 2)") {
  // q = [[3, 0], [4, 1]]: column ℓ2 norms 5 and 1 -> q̂ = [[.6, 0], [.8, 1]]
  // k = [[2, 0], [0, 1]]: column norms 2 and 1    -> k̂ = [[1, 0], [0, 1]]
  // L = q̂ᵀ k̂ = [[.6, .8], [0, 1]]                  (L[c, c'] = Σ_i q̂[i, c] k̂[i, c'])
  // τ = 1: A row 0 = softmax(.6, .8) = [1/(1+e^.2), 1/(1+e^-.2)] = [.450166, .549834]
  //        A row 1 = softmax(0, 1)   = [1/(1+e),    1/(1+e^-1)]  = [.268941, .731059]
  // v = [[1, 2], [3, 4]], out[i, c] = Σ_c' A[c, c'] v[i, c']:
  //   out[0] = [.450166 + 2·.549834, .268941 + 2·.731059] = [1.549834, 1.731059]
  //   out[1] = [3·.450166 + 4·.549834, 3·.268941 + 4·.731059] = [3.549834, 3.731059]
  // τ = 2: row 0 = softmax(1.2, 1.6) = [1/(1+e^.4), ...] = [.401312, .598688],
  //        row 1 = softmax(0, 2) = [1/(1+e²), ...] = [.119203, .880797]
  //   out[0] = [.401312 + 2·.598688, .119203 + 2·.880797] = [1.598688, 1.880797]
  Tensor q = from_vector({3, 0, 4, 1}, {1, 1, 2, 2}), k = from_vector({2, 0, 0, 1}, {1, 1, 2, 2});
  Tensor v = from_vector({1, 2, 3, 4}, {1, 1, 2, 2});
  Tensor q_hat, k_hat;
  int64_t n_exp = 0;
  Tensor out = xca_attention(q, k, v, ones({1, 1, 1}), 0.f, false, &n_exp, &q_hat, &k_hat);
  check_close(q_hat, {.6f, 0.f, .8f, 1.f});
  check_close(k_hat, {1.f, 0.f, 0.f, 1.f});
  check_close(out, {1.549834f, 1.731059f, 3.549834f, 3.731059f});
  CHECK(n_exp == 4);
  check_close(xca_attention(q, k, v, full({1, 1, 1}, 2.f)), {1.598688f, 1.880797f, 3.598688f, 3.880797f});
}

TEST_CASE("xca_attention: an all-zero column of q or k takes the eps path without NaN") {
  Tensor q = randn_leaf({1, 2, 4, 3}, 31), k = randn_leaf({1, 2, 4, 3}, 32), v = randn_leaf({1, 2, 4, 3}, 33);
  Tensor tau = uniform_leaf({2, 1, 1}, 0.5f, 2.f, 34);
  for (int64_t i = 0; i < 4; ++i) {
    q.at({0, 0, i, 1}) = 0.f;
    k.at({0, 1, i, 2}) = 0.f;
  }
  Tensor out = xca_attention(q, k, v, tau);
  CHECK(all_finite(out));
  out.backward(randn(out.shape()));
  CHECK(all_finite(q.grad()));
  CHECK(all_finite(k.grad()));
  CHECK(all_finite(tau.grad()));
  check_same([](auto& in) { return xca_attention(in[0], in[1], in[2], in[3]); },
             [](auto& in) { return xca_composed(in[0], in[1], in[2], in[3]); },
             {q, k, v, tau}, {.rel = 1e-4f});
}

TEST_CASE("XCAttention: gradcheck of the module w.r.t. x and every parameter, temperature included") {
  for (int64_t heads : {2, 1}) {
    CAPTURE(heads);
    auto m = make_xca(8, heads);
    randomize_linears(*m, 5);
    {
      NoGradGuard ng;  // a generic temperature, not ones
      Generator g(6);
      g.fill_uniform(m->temperature.data(), heads, 0.5f, 2.f);
    }
    gradcheck_module(*m, randn_leaf({2, 5, 8}, 7));
  }
}

TEST_CASE("XCAttention: timm's parameters, exp count h·d² per image, hook gets unit-ℓ2 columns") {
  auto m = make_xca(12, 3);  // d = 4
  std::vector<std::string> names;
  for (auto& [n, p] : m->named_parameters()) names.push_back(n);
  CHECK(names == std::vector<std::string>{"temperature", "qkv.weight", "qkv.bias", "proj.weight", "proj.bias"});
  CHECK(m->temperature.shape() == Shape{3, 1, 1});
  CHECK(to_vector(m->temperature) == std::vector<float>{1.f, 1.f, 1.f});

  Tensor q_seen, k_seen;
  m->qk_hook = [&](const Tensor& qh, const Tensor& kh) { q_seen = qh, k_seen = kh; };
  Tensor x = randn_leaf({2, 7, 12}, 40);
  Tensor y = m->forward(x);
  CHECK(y.shape() == Shape{2, 7, 12});
  CHECK(m->exp_calls() == 2 * 3 * 4 * 4);  // B · h · d²
  m->forward(randn_leaf({5, 3, 12}, 41));
  CHECK(m->exp_calls() == 2 * 3 * 16 + 5 * 3 * 16);
  m->reset_exp_calls();
  CHECK(m->exp_calls() == 0);
  CHECK(q_seen.shape() == Shape{5, 3, 3, 4});
  for (float c : to_vector(sum(square(q_seen), {2}))) CHECK(c == doctest::Approx(1.f).epsilon(1e-5));
  for (float c : to_vector(sum(square(k_seen), {2}))) CHECK(c == doctest::Approx(1.f).epsilon(1e-5));

  // the module is proj(merge(xca_attention(split(qkv(x))))), in training with attn_drop too
  auto md = make_xca(12, 3, 0.2f);
  randomize_linears(*md, 8);
  manual_seed(4);
  Tensor yd = md->forward(x);
  Tensor t = permute(reshape(md->qkv->forward(x), {2, 7, 3, 3, 4}), {2, 0, 3, 1, 4});
  manual_seed(4);
  Tensor o = xca_composed(squeeze(narrow(t, 0, 0, 1), 0), squeeze(narrow(t, 0, 1, 1), 0),
                          squeeze(narrow(t, 0, 2, 1), 0), md->temperature, 0.2f, true);
  Tensor expected = md->proj->forward(reshape(permute(o, {0, 2, 1, 3}), {2, 7, 12}));
  CHECK(rel_error(yd, expected) <= 1e-5f);
  md->eval();
  CHECK(rel_error(md->forward(x), expected) > 1e-3f);  // no dropout in eval
}

TEST_CASE("xca_attention: bad shapes are sima::Error naming the culprit") {
  Tensor q = randn({1, 2, 3, 4});
  CHECK(error_message([&] { xca_attention(q, q, q, ones({3, 1, 1})); }).find("temperature") != std::string::npos);
  CHECK(error_message([&] { xca_attention(q, randn({1, 2, 4, 4}), q, ones({2, 1, 1})); }).find("xca_attention") !=
        std::string::npos);
  CHECK_THROWS_AS(xca_attention(q, q, q, ones({2, 1, 1}), 1.f, true), Error);
  AttentionOptions o;
  o.dim = 8;
  o.num_heads = 3;
  CHECK_THROWS_AS(XCAttention{o}, Error);
}

TEST_CASE("xca_attention: the parallel path (pairs split across threads) is correct and deterministic") {
  const int prev = num_threads();
  set_num_threads(2);  // sizes large enough for one pair per chunk
  Tensor q = randn_leaf({2, 4, 64, 32}, 71), k = randn_leaf({2, 4, 64, 32}, 72), v = randn_leaf({2, 4, 64, 32}, 73);
  Tensor tau = uniform_leaf({4, 1, 1}, 0.5f, 2.f, 74);
  check_same([](auto& in) { return xca_attention(in[0], in[1], in[2], in[3]); },
             [](auto& in) { return xca_composed(in[0], in[1], in[2], in[3]); },
             {q, k, v, tau}, {.rel = 1e-4f});
  auto run = [&] {
    std::vector<Tensor> in = leaf_copies({q, k, v, tau});
    Tensor y = xca_attention(in[0], in[1], in[2], in[3]);
    y.backward(ones(y.shape()));
    return std::vector<Tensor>{y, in[0].grad(), in[1].grad(), in[2].grad(), in[3].grad()};
  };
  std::vector<Tensor> a = run(), b = run();
  for (size_t i = 0; i < a.size(); ++i) CHECK(max_abs_diff(a[i], b[i]) == 0.f);
  set_num_threads(prev);
}
