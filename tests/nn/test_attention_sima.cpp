// SimA attention: the fused core against finite differences, against its composition from
// core ops, between its two product orders, on hand-worked values, and the module around it.
#include <cmath>
#include <memory>
#include <string>
#include <tuple>

#include "attention_testing.h"
#include "core/autograd.h"
#include "core/flops.h"
#include "nn/attention/sima.h"

using namespace sima;
using namespace sima::testing;

namespace {

// The oracle: SimA composed from core ops. l1 from primitives (abs, sum, clamp_min, div),
// l2 through normalize(), none raw; then both products with matmul.
Tensor col_norm_composed(const Tensor& x, SimaNorm norm, float eps) {
  if (norm == SimaNorm::None) return x;
  if (norm == SimaNorm::L2) return normalize(x, 2.f, 2, eps);
  return div(x, clamp_min(sum(abs(x), {2}, true), eps));
}
Tensor sima_composed(const Tensor& q, const Tensor& k, const Tensor& v, SimaNorm norm,
                     bool qk_first, float eps = 1e-12f) {
  Tensor qh = col_norm_composed(q, norm, eps), kh = col_norm_composed(k, norm, eps);
  if (qk_first) return matmul(matmul(qh, kh, false, true), v);
  return matmul(qh, matmul(kh, v, true, false));
}

const char* name(SimaNorm n) { return n == SimaNorm::L1 ? "l1" : n == SimaNorm::L2 ? "l2" : "none"; }

std::shared_ptr<SimaAttention> make_sima(int64_t dim, int64_t heads, const std::string& norm = "l1",
                                         const std::string& order = "auto") {
  AttentionOptions o = attention_options("sima", dim, heads);
  set_unchecked(o, "norm", norm);  // bad ones too: the constructor's checks
  set_unchecked(o, "order", order);
  return std::make_shared<SimaAttention>(o);
}

}  // namespace

// The gradcheck grid: every norm, both orders, h = 1 and 3, N < d and N > d; f(norm, order, h, N,
// d, seed) with a fresh seed per case.
template <class F>
void for_gradcheck_grid(uint64_t seed, F&& f) {
  for (SimaNorm norm : {SimaNorm::L1, SimaNorm::L2, SimaNorm::None})
    for (SimaOrder order : {SimaOrder::QkFirst, SimaOrder::KvFirst})
      for (int64_t h : {1, 3})
        for (auto [N_, d_] : {std::pair<int64_t, int64_t>{3, 4}, {5, 4}, {3, 6}, {5, 6}}) {
          const auto& N = N_; const auto& d = d_;  // clang 14 cannot capture a structured binding
          CAPTURE(name(norm));
          CAPTURE(order == SimaOrder::QkFirst);
          CAPTURE(h);
          CAPTURE(N);
          CAPTURE(d);
          f(norm, order, h, N, d, seed += 3);
        }
}

TEST_CASE("sima_attention: gradcheck w.r.t. q, k, v (every norm, both orders, h = 1 and 3, N < d and N > d)") {
  for_gradcheck_grid(100, [](SimaNorm norm, SimaOrder order, int64_t h, int64_t N, int64_t d, uint64_t seed) {
    // Away from 0: |x| has a kink there, which central differences would straddle.
    Tensor q = away_from_zero_leaf({2, h, N, d}, 0.1f, 1.5f, seed);
    Tensor k = away_from_zero_leaf({2, h, N, d}, 0.1f, 1.5f, seed + 1);
    Tensor v = randn_leaf({2, h, N, d}, seed + 2);
    CHECK_GRADCHECK([=](const std::vector<Tensor>& in) { return sima_attention(in[0], in[1], in[2], norm, order); },
                    {q, k, v});
  });
}

TEST_CASE("sima_attention: gradcheck with fewer key/value tokens than queries (N_kv != N)") {
  for (SimaOrder order : {SimaOrder::QkFirst, SimaOrder::KvFirst}) {
    Tensor q = away_from_zero_leaf({2, 2, 5, 4}, 0.1f, 1.5f, 1);
    Tensor k = away_from_zero_leaf({2, 2, 3, 4}, 0.1f, 1.5f, 2);
    Tensor v = randn_leaf({2, 2, 3, 4}, 3);
    CHECK_GRADCHECK([=](const std::vector<Tensor>& in) {
      return sima_attention(in[0], in[1], in[2], SimaNorm::L1, order);
    }, {q, k, v});
    check_same([=](auto& in) { return sima_attention(in[0], in[1], in[2], SimaNorm::L1, order); },
               [=](auto& in) { return sima_composed(in[0], in[1], in[2], SimaNorm::L1, true); },
               {q, k, v}, {.rel = 1e-4f});
  }
}

TEST_CASE("sima_attention == composition of core ops (forward and every gradient), every norm and order") {
  for (SimaNorm norm : {SimaNorm::L1, SimaNorm::L2, SimaNorm::None})
    for (SimaOrder order : {SimaOrder::QkFirst, SimaOrder::KvFirst})
      for (auto [N_, d_] : {std::pair<int64_t, int64_t>{7, 5}, {4, 8}}) {
        const auto& N = N_; const auto& d = d_;  // clang 14 cannot capture a structured binding
        CAPTURE(name(norm));
        CAPTURE(order == SimaOrder::QkFirst);
        CAPTURE(N);
        Tensor q = randn_leaf({2, 3, N, d}, 11), k = randn_leaf({2, 3, N, d}, 12),
               v = randn_leaf({2, 3, N, d}, 13);
        // The oracle computes in the other order on purpose: the orders must agree too.
        check_same([=](auto& in) { return sima_attention(in[0], in[1], in[2], norm, order); },
                   [=](auto& in) {
                     return sima_composed(in[0], in[1], in[2], norm, order != SimaOrder::QkFirst);
                   },
                   {q, k, v}, {.rel = 1e-4f});
      }
}

TEST_CASE("sima_attention: qk_first and kv_first agree to 1e-5 in forward and every gradient") {
  for (SimaNorm norm : {SimaNorm::L1, SimaNorm::L2}) {
    CAPTURE(name(norm));
    Tensor q = randn_leaf({2, 4, 24, 8}, 21), k = randn_leaf({2, 4, 24, 8}, 22),
           v = randn_leaf({2, 4, 24, 8}, 23);
    check_same([=](auto& in) { return sima_attention(in[0], in[1], in[2], norm, SimaOrder::QkFirst); },
               [=](auto& in) { return sima_attention(in[0], in[1], in[2], norm, SimaOrder::KvFirst); },
               {q, k, v}, {.rel = 1e-5f});
  }
}

TEST_CASE("sima_attention: known values on a hand-made 3-token input (B = 1, h = 1, N = 3, d = 2)") {
  // q = [[1, 2], [-1, 0], [2, -2]]: column ℓ1 norms 1+1+2 = 4 and 2+0+2 = 4
  //   q̂ = [[.25, .5], [-.25, 0], [.5, -.5]]
  // k = [[1, 1], [1, 0], [2, -1]]: column norms 4 and 2
  //   k̂ = [[.25, .5], [.25, 0], [.5, -.5]]
  // v = [[1, 0], [0, 1], [1, 1]]
  // M = k̂ᵀ v: row 0 = .25·[1,0] + .25·[0,1] + .5·[1,1] = [.75, .75]
  //           row 1 = .5·[1,0] + 0·[0,1] − .5·[1,1]    = [0, −.5]
  // out = q̂ M: row 0 = .25·[.75,.75] + .5·[0,−.5]   = [.1875, −.0625]
  //            row 1 = −.25·[.75,.75]               = [−.1875, −.1875]
  //            row 2 = .5·[.75,.75] − .5·[0,−.5]    = [.375, .625]
  // With L = Σ out (g = ones):
  //   dv[j, :] = Σ_i A[i, j] = (Σ_i q̂[i, :]) · k̂[j, :] = [.5, 0]·k̂[j, :] = .5·k̂[j, 0]
  //            = [[.125, .125], [.125, .125], [.25, .25]]
  //   dq̂[i, c] = Σ_e M[c, e] = [1.5, −.5] on every row
  //   dq column 0 (n = 4, y = [.25, −.25, .5]): s = 1.5·(.25 − .25 + .5) = .75,
  //     dx = (1.5 − sign(x)·.75)/4 = [.1875, .5625, .1875]
  //   dq column 1 (y = [.5, 0, −.5]): s = −.5·0 = 0, dx = −.5/4 = −.125
  for (SimaOrder order : {SimaOrder::QkFirst, SimaOrder::KvFirst}) {
    CAPTURE(order == SimaOrder::QkFirst);
    Tensor q = from_vector({1, 2, -1, 0, 2, -2}, {1, 1, 3, 2}).requires_grad_();
    Tensor k = from_vector({1, 1, 1, 0, 2, -1}, {1, 1, 3, 2});
    Tensor v = from_vector({1, 0, 0, 1, 1, 1}, {1, 1, 3, 2}).requires_grad_();
    Tensor q_hat, k_hat;
    Tensor out = sima_attention(q, k, v, SimaNorm::L1, order, 1e-12f, &q_hat, &k_hat);
    check_close(q_hat, {.25f, .5f, -.25f, 0.f, .5f, -.5f});
    check_close(k_hat, {.25f, .5f, .25f, 0.f, .5f, -.5f});
    check_close(out, {.1875f, -.0625f, -.1875f, -.1875f, .375f, .625f});
    sum(out).backward();
    check_close(v.grad(), {.125f, .125f, .125f, .125f, .25f, .25f});
    check_close(q.grad(), {.1875f, -.125f, .5625f, -.125f, .1875f, -.125f});
  }
}

TEST_CASE("sima_attention: all-zero columns take the eps path: no NaN, gradient g/eps") {
  const float eps = 1e-12f;
  for (SimaOrder order : {SimaOrder::QkFirst, SimaOrder::KvFirst})
    for (SimaNorm norm : {SimaNorm::L1, SimaNorm::L2}) {
      CAPTURE(order == SimaOrder::QkFirst);
      CAPTURE(name(norm));
      Tensor q = randn_leaf({2, 2, 4, 3}, 31), k = randn_leaf({2, 2, 4, 3}, 32),
             v = randn_leaf({2, 2, 4, 3}, 33);
      for (int64_t i = 0; i < 4; ++i) {  // column 1 of q in (b=0, h=1), column 2 of k in (1, 0)
        q.at({0, 1, i, 1}) = 0.f;
        k.at({1, 0, i, 2}) = 0.f;
      }
      Tensor out = sima_attention(q, k, v, norm, order, eps);
      CHECK(all_finite(out));
      Tensor gy = randn(out.shape());
      out.backward(gy);
      CHECK(all_finite(q.grad()));
      CHECK(all_finite(k.grad()));
      CHECK(all_finite(v.grad()));
      // dq̂, dk̂ from the products alone: q̂, k̂ as leaves.
      Tensor qh = normalize(q.detach(), norm == SimaNorm::L1 ? 1.f : 2.f, 2, eps).requires_grad_();
      Tensor kh = normalize(k.detach(), norm == SimaNorm::L1 ? 1.f : 2.f, 2, eps).requires_grad_();
      matmul(matmul(qh, kh, false, true), v.detach()).backward(gy);
      for (int64_t i = 0; i < 4; ++i) {
        CAPTURE(i);
        const float gq = qh.grad().at({0, 1, i, 1}), gk = kh.grad().at({1, 0, i, 2});
        CHECK(q.grad().at({0, 1, i, 1}) == doctest::Approx(gq / eps).epsilon(1e-5));
        CHECK(k.grad().at({1, 0, i, 2}) == doctest::Approx(gk / eps).epsilon(1e-5));
        CHECK(std::fabs(gq) > 0.f);
      }
      // and everything else as the composed oracle says (the oracle's clamp gives g/eps too)
      check_same([=](auto& in) { return sima_attention(in[0], in[1], in[2], norm, order, eps); },
                 [=](auto& in) { return sima_composed(in[0], in[1], in[2], norm, true, eps); },
                 {q.detach().requires_grad_(), k.detach().requires_grad_(), v.detach().requires_grad_()},
                 {.rel = 1e-4f});
    }
}

TEST_CASE("sima_attention: both sides of the eps clamp with a large eps agree with the composition") {
  const float eps = 0.05f;
  Tensor q = randn_leaf({1, 2, 4, 3}, 41), k = randn_leaf({1, 2, 4, 3}, 42), v = randn_leaf({1, 2, 4, 3}, 43);
  for (int64_t i = 0; i < 4; ++i) {  // tiny but non-zero columns: n < eps
    q.at({0, 0, i, 0}) = 1e-3f * (i + 1);
    k.at({0, 1, i, 2}) = -2e-3f * (i + 1);
  }
  for (SimaNorm norm : {SimaNorm::L1, SimaNorm::L2})
    for (SimaOrder order : {SimaOrder::QkFirst, SimaOrder::KvFirst}) {
      CAPTURE(name(norm));
      check_same([=](auto& in) { return sima_attention(in[0], in[1], in[2], norm, order, eps); },
                 [=](auto& in) { return sima_composed(in[0], in[1], in[2], norm, false, eps); },
                 {q, k, v}, {.rel = 1e-4f});
    }
}

// An input x (B, N, C) whose q and k (from m's qkv) stay at least the largest step a
// gradcheck with step `eps` can make in them away from 0, where ℓ1's |·| has its kink
// (central differences straddling it disagree with either one-sided slope). Tries seeds.
Tensor kink_free_input(SimaAttention& m, int64_t B, int64_t N, float eps) {
  const int64_t C = m.options().dim;
  float wmax = 1.f;
  for (const Tensor& t : {m.qkv->weight, m.qkv->bias})
    for (float w : to_vector(t)) wmax = std::fmax(wmax, std::fabs(w));
  for (uint64_t seed = 1; seed < 200; ++seed) {
    Tensor x = randn_leaf({B, N, C}, seed);
    float xmax = 0.f;
    for (float e : to_vector(x)) xmax = std::fmax(xmax, std::fabs(e));
    const float margin = 2.f * eps * std::fmax(std::fmax(xmax, wmax), 1.f);
    Tensor qk = narrow(m.qkv->forward(x.detach()), 2, 0, 2 * C);  // q and k channels
    bool ok = true;
    for (float e : to_vector(qk)) ok = ok && std::fabs(e) > margin;
    if (ok) return x;
  }
  FAIL("no kink-free input found");
  return Tensor();
}

TEST_CASE("SimaAttention: gradcheck of the module w.r.t. x and every parameter") {
  // ℓ1 with a small step (fewer kinks within reach); the smooth ones with the default 1e-2
  // (float rounding of the un-normalised "none" output needs the larger step).
  GradcheckOptions go;
  go.eps = 1e-3;
  for (std::string norm : {"l1", "l2", "none"})
    for (std::string order : {"qk_first", "kv_first"}) {
      CAPTURE(norm);
      CAPTURE(order);
      go.eps = norm == "l1" ? 1e-3 : 1e-2;
      auto m = make_sima(8, 2, norm, order);
      randomize_linears(*m, 5);
      gradcheck_module(*m, norm == "l1" ? kink_free_input(*m, 2, 5, go.eps) : randn_leaf({2, 5, 8}, 6), go);
    }
  go.eps = 1e-3;
  auto single = make_sima(6, 1);  // one head
  randomize_linears(*single, 7);
  gradcheck_module(*single, kink_free_input(*single, 2, 3, go.eps), go);
}

TEST_CASE("SimaAttention: order auto runs qk_first iff N < d; exp count 0; hook gets q̂, k̂") {
  auto m = make_sima(8, 2);  // d = 4
  CHECK(m->last_order() == SimaOrder::Auto);
  int hook_calls = 0;
  Tensor q_seen, k_seen;
  m->qk_hook = [&](const Tensor& qh, const Tensor& kh) {
    ++hook_calls;
    q_seen = qh;
    k_seen = kh;
  };
  for (int64_t N : {1, 3, 4, 5, 9}) {
    CAPTURE(N);
    Tensor y = m->forward(randn_leaf({2, N, 8}, 50 + N));
    CHECK(y.shape() == Shape{2, N, 8});
    CHECK(m->last_order() == (N < 4 ? SimaOrder::QkFirst : SimaOrder::KvFirst));
    CHECK(q_seen.shape() == Shape{2, 2, N, 4});
    CHECK(k_seen.shape() == Shape{2, 2, N, 4});
  }
  CHECK(hook_calls == 5);
  CHECK(m->exp_calls() == 0);
  // The hook's q̂ has unit ℓ1 columns (as long as they are not all zero).
  Tensor colsum = sum(abs(q_seen), {2});
  for (float c : to_vector(colsum)) CHECK(c == doctest::Approx(1.f).epsilon(1e-5));
  auto pinned = make_sima(8, 2, "l1", "kv_first");
  pinned->forward(randn_leaf({1, 2, 8}, 60));
  CHECK(pinned->last_order() == SimaOrder::KvFirst);
  CHECK(resolve_sima_order(SimaOrder::Auto, 63, 64) == SimaOrder::QkFirst);
  CHECK(resolve_sima_order(SimaOrder::Auto, 64, 64) == SimaOrder::KvFirst);
  CHECK(resolve_sima_order(SimaOrder::QkFirst, 640, 64) == SimaOrder::QkFirst);
}

TEST_CASE("SimaAttention: the module is merge(proj(sima_attention(split(qkv(x))))) and has timm's names") {
  auto m = make_sima(12, 3, "l2");
  randomize_linears(*m, 9);
  Tensor x = randn_leaf({2, 4, 12}, 10);
  Tensor y = m->forward(x);
  // by hand: qkv -> (B, N, 3, h, d) -> q, k, v (B, h, N, d)
  Tensor t = permute(reshape(m->qkv->forward(x), {2, 4, 3, 3, 4}), {2, 0, 3, 1, 4});
  Tensor o = sima_attention(squeeze(narrow(t, 0, 0, 1), 0), squeeze(narrow(t, 0, 1, 1), 0),
                            squeeze(narrow(t, 0, 2, 1), 0), SimaNorm::L2);
  Tensor expected = m->proj->forward(reshape(permute(o, {0, 2, 1, 3}), {2, 4, 12}));
  CHECK(max_abs_diff(y, expected) == 0.f);
  std::vector<std::string> names;
  for (auto& [n, p] : m->named_parameters()) names.push_back(n);
  CHECK(names == std::vector<std::string>{"qkv.weight", "qkv.bias", "proj.weight", "proj.bias"});
}

TEST_CASE("SimaAttention / sima_attention: bad options and shapes are sima::Error naming the culprit") {
  std::string m1 = error_message([] { make_sima(8, 2, "l3"); });
  CHECK(m1.find("SimaAttention") != std::string::npos);
  CHECK(m1.find("norm") != std::string::npos);
  CHECK(m1.find("l1, l2, none") != std::string::npos);
  std::string m2 = error_message([] { make_sima(8, 2, "l1", "fastest"); });
  CHECK(m2.find("order") != std::string::npos);
  CHECK(m2.find("auto, qk_first, kv_first") != std::string::npos);
  AttentionOptions o;
  o.variant = "sima";
  o.dim = 8;
  o.num_heads = 2;
  o.own["eps"] = 0.f;  // around the row's check: the constructor's own
  CHECK(error_message([&] { SimaAttention a(o); }).find("eps") != std::string::npos);
  Tensor q = randn({1, 2, 3, 4}), k4 = randn({1, 2, 3, 5}), v = randn({1, 2, 3, 4});
  CHECK(error_message([&] { sima_attention(q, k4, v); }).find("sima_attention") != std::string::npos);
  CHECK_THROWS_AS(sima_attention(q, q, randn({1, 2, 4, 4})), Error);
  CHECK_THROWS_AS(sima_attention(randn({2, 3, 4}), randn({2, 3, 4}), randn({2, 3, 4})), Error);
}

TEST_CASE("sima_attention: the parallel path (pairs split across threads) is correct and deterministic") {
  const int prev = num_threads();
  set_num_threads(2);  // sizes large enough for one pair per chunk
  for (SimaOrder order : {SimaOrder::QkFirst, SimaOrder::KvFirst}) {
    CAPTURE(order == SimaOrder::QkFirst);
    Tensor q = randn_leaf({2, 4, 64, 32}, 71), k = randn_leaf({2, 4, 64, 32}, 72),
           v = randn_leaf({2, 4, 64, 32}, 73);
    check_same([=](auto& in) { return sima_attention(in[0], in[1], in[2], SimaNorm::L1, order); },
               [=](auto& in) { return sima_composed(in[0], in[1], in[2], SimaNorm::L1, false); },
               {q, k, v}, {.rel = 1e-4f});
    auto run = [&] {
      std::vector<Tensor> in = leaf_copies({q, k, v});
      Tensor y = sima_attention(in[0], in[1], in[2], SimaNorm::L1, order);
      y.backward(ones(y.shape()));
      return std::vector<Tensor>{y, in[0].grad(), in[1].grad(), in[2].grad()};
    };
    std::vector<Tensor> a = run(), b = run();
    for (size_t i = 0; i < a.size(); ++i) CHECK(max_abs_diff(a[i], b[i]) == 0.f);
  }
  set_num_threads(prev);
}

// docs/attention_costs.md §2: `auto` is the official rule N < d (UCDvision/sima sima.py, SimA.forward),
// not a FLOP minimiser. With fewer keys than queries (CvT's strided k, v) it can pick the dearer
// order: the quickstart CvT's stage 1 has N = 49 queries, Nk = 16 keys, d = 32.
TEST_CASE("sima_attention: auto follows N < d, not the FLOPs: quickstart CvT stage 1 runs the costlier kv_first") {
  const int64_t N = 49, Nk = 16, d = 32;
  CHECK(resolve_sima_order(SimaOrder::Auto, N, d) == SimaOrder::KvFirst);
  CHECK(resolve_sima_order(SimaOrder::Auto, 31, 32) == SimaOrder::QkFirst);
  Tensor q = randn({1, 1, N, d}), k = randn({1, 1, Nk, d}), v = randn({1, 1, Nk, d});
  NoGradGuard no_grad;
  auto flops = [&](SimaOrder order) {
    const int64_t before = gemm_flops();
    sima_attention(q, k, v, SimaNorm::L1, order);
    return gemm_flops() - before;
  };
  const int64_t qk = flops(SimaOrder::QkFirst), kv = flops(SimaOrder::KvFirst), au = flops(SimaOrder::Auto);
  CHECK(qk == 4 * N * Nk * d);        // 100,352: the figure docs/attention_costs.md gives
  CHECK(kv == 2 * (N + Nk) * d * d);  // 133,120
  CHECK(qk == 100352);
  CHECK(kv == 133120);
  CHECK(au == kv);  // auto runs kv_first although qk_first costs 25 % fewer FLOPs
}

// The oracle of the packed core: split heads (a copy), sima_attention, merged heads (a copy).
Tensor sima_split_merged(const Tensor& qkv, int64_t h, SimaNorm norm, SimaOrder order) {
  const int64_t B = qkv.size(0), N = qkv.size(1), C = qkv.size(2) / 3;
  Tensor t = permute(reshape(qkv, {B, N, 3, h, C / h}), {2, 0, 3, 1, 4});
  auto part = [&](int64_t i) { return contiguous(squeeze(narrow(t, 0, i, 1), 0)); };
  return reshape(permute(sima_attention(part(0), part(1), part(2), norm, order), {0, 2, 1, 3}), {B, N, C});
}

TEST_CASE("sima_attention_packed == split heads, sima_attention, merged heads (forward and gradient, every norm, both orders)") {
  for (SimaNorm norm : {SimaNorm::L1, SimaNorm::L2, SimaNorm::None})
    for (SimaOrder order : {SimaOrder::QkFirst, SimaOrder::KvFirst, SimaOrder::Auto})
      for (const auto& [B_, N_, C_, h_] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{2, 65, 192, 3},
                                       {3, 5, 8, 2}, {1, 1, 4, 1}, {2, 9, 12, 4}}) {
        // clang 14 cannot capture a structured binding
        const auto& B = B_;
        const auto& N = N_;
        const auto& C = C_;
        const auto& h = h_;
        CAPTURE(name(norm));
        CAPTURE(int(order));
        CAPTURE(N);
        const Tensor qkv = randn_leaf({B, N, 3 * C}, 31);
        check_same([=](auto& in) { return sima_attention_packed(in[0], h, norm, order, 1e-12f); },
                   [=](auto& in) { return sima_split_merged(in[0], h, norm, order); }, {qkv},
                   {.rel = norm == SimaNorm::None ? 1e-5f : 1e-6f});
        NoGradGuard no_grad;  // the inference path (no norms or M kept) gives the same output
        CHECK(max_abs_diff(sima_attention_packed(qkv, h, norm, order, 1e-12f),
                           sima_split_merged(qkv, h, norm, order)) <= 1e-6f * (norm == SimaNorm::None ? float(N * C) : 1.f));
      }
}

TEST_CASE("sima_attention_packed: gradcheck w.r.t. qkv (every norm, both orders, h = 1 and 3, N < d and N > d)") {
  for_gradcheck_grid(300, [](SimaNorm norm, SimaOrder order, int64_t h, int64_t N, int64_t d, uint64_t seed) {
    Tensor qkv = away_from_zero_leaf({2, N, 3 * h * d}, 0.1f, 1.5f, seed);  // |x|'s kink at 0
    CHECK_GRADCHECK([=](const std::vector<Tensor>& in) { return sima_attention_packed(in[0], h, norm, order, 1e-12f); },
                    {qkv});
  });
}

TEST_CASE("sima_attention_packed: same bits at 1 and 2 threads, forward and gradient (both orders)") {
  const Tensor qkv = randn({2, 65, 3 * 192});
  for (SimaOrder order : {SimaOrder::QkFirst, SimaOrder::KvFirst}) {
    CAPTURE(order == SimaOrder::QkFirst);
    check_packed_same_bits_across_threads(
        qkv, [=](const Tensor& x) { return sima_attention_packed(x, 3, SimaNorm::L1, order, 1e-12f); });
  }
}

TEST_CASE("SimaAttention takes the packed core, with a gradient too; a hook falls back to split heads: same output and gradients") {
  for (const char* order : {"qk_first", "kv_first"}) {
    CAPTURE(order);
    auto m = make_sima(192, 3, "l1", order);
    randomize_linears(*m, 11);
    const Tensor x = randn_leaf({2, 65, 192}, 12);
    std::vector<Tensor> params;
    for (auto& [n, p] : m->named_parameters()) params.push_back(p);
    int calls = 0;
    check_same([&](auto& in) { m->qk_hook = nullptr; return m->forward(in[0]); },
               [&](auto& in) {  // a hook needs the split q̂, k̂: the packed core steps aside
                 m->qk_hook = [&](const Tensor& q, const Tensor&) { calls += q.dim() == 4; };
                 return m->forward(in[0]);
               },
               {x}, {.rel = 1e-6f}, params);
    CHECK(calls == 1);
    m->qk_hook = nullptr;
    const Tensor with_grad = m->forward(x);  // x requires grad: the packed core records its backward
    NoGradGuard ng;
    CHECK(max_abs_diff(with_grad, m->forward(x.detach())) == 0.f);  // the same bits without
    CHECK(m->last_order() == parse_sima_order(order));
  }
  CHECK_THROWS_AS(sima_attention_packed(randn({1, 4, 25}), 2, SimaNorm::L1, SimaOrder::Auto, 1e-12f), Error);
  CHECK_THROWS_AS(sima_attention_packed(randn({1, 4, 24}), 2, SimaNorm::L1, SimaOrder::Auto, 0.f), Error);
}
