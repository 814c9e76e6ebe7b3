// Softmax attention: the fused core (softmax_attention) against finite differences, against
// the same formula composed from core ops, against hand-worked values, and the module; the
// packed core (softmax_attention_packed, forward and backward) against the split heads.
#include "attention_testing.h"

#include <cmath>
#include <tuple>

#include "core/parallel.h"
#include "core/ops/shape_ops.h"
#include "nn/attention/softmax_attention.h"

using namespace sima;
using namespace sima::testing;

namespace {
// The oracle: matmul, softmax and dropout from core, each gradchecked on its own.
Tensor composed_attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale, float p,
                          bool training) {
  Tensor P = softmax(mul(matmul(q, k, false, true), scale), -1);
  return matmul(dropout(P, p, training), v);
}

struct Case {
  int64_t B, h, Nq, Nk, d, dv;
};
// N < d and N > d, single head and multi-head, Nq != Nk and dv != d (CvT's strided keys).
const Case kCases[] = {{2, 2, 3, 3, 4, 4}, {2, 1, 5, 5, 4, 4}, {2, 2, 5, 5, 4, 4},
                       {2, 1, 3, 3, 6, 6}, {1, 2, 3, 5, 4, 6}};

std::vector<Tensor> qkv_leaves(const Case& c, uint64_t seed) {
  return {randn_leaf({c.B, c.h, c.Nq, c.d}, seed), randn_leaf({c.B, c.h, c.Nk, c.d}, seed + 1),
          randn_leaf({c.B, c.h, c.Nk, c.dv}, seed + 2)};
}

void reseed_dropout() { rng(RngStream::Dropout).manual_seed(4242); }

std::shared_ptr<SoftmaxAttention> make_module(int64_t dim, int64_t heads, float attn_drop = 0.f) {
  AttentionOptions opt = attention_options("softmax", dim, heads);
  opt.attn_drop = attn_drop;
  auto m = std::make_shared<SoftmaxAttention>(opt);
  randomize_parameters(*m, 99);
  return m;
}
}  // namespace

TEST_CASE("softmax_attention: gradcheck w.r.t. q, k, v") {
  for (const Case& c : kCases) {
    CAPTURE(c.h);
    CAPTURE(c.Nq);
    CAPTURE(c.Nk);
    CAPTURE(c.d);
    const float scale = 1.f / std::sqrt(float(c.d));
    CHECK_GRADCHECK([=](const std::vector<Tensor>& t) { return softmax_attention(t[0], t[1], t[2], scale); },
                    qkv_leaves(c, 10));
  }
}

TEST_CASE("softmax_attention: gradcheck in training with attention dropout (fixed mask)") {
  for (const Case& c : {kCases[0], kCases[4]}) {
    CHECK_GRADCHECK(
        [](const std::vector<Tensor>& t) {
          reseed_dropout();  // the same mask at every evaluation
          return softmax_attention(t[0], t[1], t[2], 0.5f, 0.3f, /*training=*/true);
        },
        qkv_leaves(c, 20));
  }
}

TEST_CASE("softmax_attention == matmul, softmax, dropout, matmul composed (values and gradients)") {
  for (const Case& c : kCases) {
    const float scale = 1.f / std::sqrt(float(c.d));
    check_same([=](auto& t) { return softmax_attention(t[0], t[1], t[2], scale); },
               [=](auto& t) { return composed_attention(t[0], t[1], t[2], scale, 0.f, false); },
               qkv_leaves(c, 30));
    // Dropout: both draw one uniform per attention weight in (B, h, Nq, Nk) order.
    check_same(
        [=](auto& t) {
          reseed_dropout();
          return softmax_attention(t[0], t[1], t[2], scale, 0.4f, true);
        },
        [=](auto& t) {
          reseed_dropout();
          return composed_attention(t[0], t[1], t[2], scale, 0.4f, true);
        },
        qkv_leaves(c, 40));
  }
  // Larger, with scores big enough that the max subtraction matters.
  Case big{2, 3, 17, 17, 8, 8};
  std::vector<Tensor> in = qkv_leaves(big, 50);
  for (Tensor& t : in) t = mul(t, 3.f).detach().requires_grad_();
  check_same([](auto& t) { return softmax_attention(t[0], t[1], t[2], 0.35f); },
             [](auto& t) { return composed_attention(t[0], t[1], t[2], 0.35f, 0.f, false); }, in);
}

TEST_CASE("softmax_attention: values and gradients worked out by hand") {
  // B = h = 1, N = 2, d = 4, scale = 4^-½ = 1/2.
  //   q = [[l, l, 0, 0], [0, 0, 0, 0]] with l = ln 3,  k = [[1, 1, 0, 0], [0, 0, 0, 0]]
  //   scores/2: row 0 = (2l/2, 0) = (ln 3, 0) -> P0 = (3/4, 1/4);  row 1 = (0, 0) -> P1 = (1/2, 1/2)
  //   v = [[4, 0, 1, 2], [8, 4, 1, -2]]
  //   o0 = 3/4 v0 + 1/4 v1 = (3+2, 0+1, 1, 1.5-0.5) = (5, 1, 1, 1)
  //   o1 = (v0 + v1)/2 = (6, 2, 1, 0)
  // Gradients of L = Σ o (dO = 1):
  //   dv_j = Σ_i P_ij (1, 1, 1, 1): dv0 = 3/4 + 1/2 = 5/4, dv1 = 1/4 + 1/2 = 3/4 (every column)
  //   dP_ij = Σ_c v_jc: (7, 11) in both rows
  //   row 0: r = 3/4·7 + 1/4·11 = 8, dS = (3/4·(7-8), 1/4·(11-8)) = (-3/4, 3/4)
  //   row 1: r = (7 + 11)/2 = 9,   dS = (1/2·(-2), 1/2·2) = (-1, 1)
  //   dq_i = 1/2 Σ_j dS_ij k_j: dq0 = 1/2·(-3/4)·k0 = (-3/8, -3/8, 0, 0), dq1 = (-1/2, -1/2, 0, 0)
  //   dk_j = 1/2 Σ_i dS_ij q_i: dk0 = 1/2·(-3/4)·q0 = -3/8·l (1, 1, 0, 0), dk1 = +3/8·l (1, 1, 0, 0)
  const float l = std::log(3.f);
  Tensor q = from_vector({l, l, 0, 0, 0, 0, 0, 0}, {1, 1, 2, 4}).requires_grad_();
  Tensor k = from_vector({1, 1, 0, 0, 0, 0, 0, 0}, {1, 1, 2, 4}).requires_grad_();
  Tensor v = from_vector({4, 0, 1, 2, 8, 4, 1, -2}, {1, 1, 2, 4}).requires_grad_();
  int64_t exps = 0;
  Tensor o = softmax_attention(q, k, v, 0.5f, 0.f, false, rng(RngStream::Dropout), &exps);
  check_close(o, {5, 1, 1, 1, 6, 2, 1, 0});
  CHECK(exps == 4);
  sum(o).backward();
  check_close(v.grad(), {1.25f, 1.25f, 1.25f, 1.25f, 0.75f, 0.75f, 0.75f, 0.75f});
  check_close(q.grad(), {-0.375f, -0.375f, 0, 0, -0.5f, -0.5f, 0, 0});
  const float a = 0.375f * l;
  check_close(k.grad(), {-a, -a, 0, 0, a, a, 0, 0});
}

TEST_CASE("SoftmaxAttention: gradcheck of the module w.r.t. x and every parameter") {
  struct M { int64_t dim, heads, N; };
  for (M c : {M{8, 2, 3}, M{8, 2, 5}, M{6, 1, 3}, M{4, 1, 5}}) {  // d = 4, 4, 6, 4: N < d and N > d
    CAPTURE(c.heads);
    CAPTURE(c.N);
    auto attn = make_module(c.dim, c.heads);
    CHECK(attn->named_parameters().size() == 4);  // qkv.weight, qkv.bias, proj.weight, proj.bias
    gradcheck_module(*attn, randn_leaf({2, c.N, c.dim}, 60));
  }
  // Training with attention dropout, the mask fixed by reseeding before every forward.
  auto attn = make_module(8, 2, 0.25f);
  attn->train();
  gradcheck_module(*attn, randn_leaf({2, 4, 8}, 61), {}, [&](const Tensor& x) {
    reseed_dropout();
    return attn->forward(x);
  });
}

TEST_CASE("SoftmaxAttention: parameter names as timm") {
  auto attn = make_module(8, 2);
  std::vector<std::string> names;
  for (auto& [name, p] : attn->named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"qkv.weight", "qkv.bias", "proj.weight", "proj.bias"});
  CHECK(attn->qkv->weight.shape() == Shape{24, 8});
}

TEST_CASE("SoftmaxAttention: #exp is h·N² per image") {
  auto attn = make_module(8, 2);
  CHECK(attn->exp_calls() == 0);
  attn->forward(randn({3, 5, 8}));
  CHECK(attn->exp_calls() == 3 * 2 * 5 * 5);
  attn->forward(randn({1, 7, 8}));
  CHECK(attn->exp_calls() == 150 + 2 * 7 * 7);
  attn->reset_exp_calls();
  CHECK(attn->exp_calls() == 0);
  // The free function counts Nq·Nk per (b, head).
  int64_t n = 0;
  softmax_attention(randn({2, 3, 4, 8}), randn({2, 3, 6, 8}), randn({2, 3, 6, 8}), 0.3f, 0.f, false,
                    rng(RngStream::Dropout), &n);
  CHECK(n == 2 * 3 * 4 * 6);
}

TEST_CASE("SoftmaxAttention: attention dropout") {
  Tensor x = randn({2, 6, 8});
  auto plain = make_module(8, 2, 0.f);
  auto dropped = make_module(8, 2, 0.5f);  // same parameters (same seed)
  NoGradGuard ng;
  SUBCASE("eval is the identity on the attention weights") {
    dropped->eval();
    plain->eval();
    CHECK(max_abs_diff(dropped->forward(x), plain->forward(x)) == 0.f);
  }
  SUBCASE("training: same seed same output, another seed another output") {
    dropped->train();
    rng(RngStream::Dropout).manual_seed(1);
    Tensor a = dropped->forward(x);
    rng(RngStream::Dropout).manual_seed(1);
    Tensor b = dropped->forward(x);
    rng(RngStream::Dropout).manual_seed(2);
    Tensor c = dropped->forward(x);
    CHECK(max_abs_diff(a, b) == 0.f);
    CHECK(max_abs_diff(a, c) > 1e-3f);
    plain->eval();
    CHECK(max_abs_diff(a, plain->forward(x)) > 1e-3f);
  }
  SUBCASE("training with p = 0 draws nothing") {
    plain->train();
    rng(RngStream::Dropout).manual_seed(3);
    Tensor a = plain->forward(x);
    const auto state = rng(RngStream::Dropout).state();
    rng(RngStream::Dropout).manual_seed(3);
    CHECK(state == rng(RngStream::Dropout).state());
    plain->eval();
    CHECK(max_abs_diff(a, plain->forward(x)) == 0.f);
  }
}

TEST_CASE("SoftmaxAttention: qk_hook sees q and k") {
  auto attn = make_module(8, 2);
  Shape seen;
  attn->qk_hook = [&](const Tensor& q, const Tensor& k) {
    CHECK(q.shape() == k.shape());
    seen = q.shape();
  };
  attn->forward(randn({2, 5, 8}));
  CHECK(seen == Shape{2, 2, 5, 4});
}

TEST_CASE("softmax_attention: same bits at 1 and 2 threads") {
  Case c{2, 4, 64, 64, 32, 32};  // big enough for one pair per chunk
  std::vector<Tensor> in = qkv_leaves(c, 70);
  auto run = [&](int threads) {
    const int before = num_threads();
    set_num_threads(threads);
    std::vector<Tensor> t;
    for (const Tensor& x : in) t.push_back(x.detach().clone().requires_grad_());
    reseed_dropout();
    Tensor o = softmax_attention(t[0], t[1], t[2], 0.2f, 0.1f, true);
    o.backward(ones(o.shape()));
    set_num_threads(before);
    return std::vector<Tensor>{o, t[0].grad(), t[1].grad(), t[2].grad()};
  };
  auto a = run(1), b = run(2);
  for (size_t i = 0; i < a.size(); ++i) CHECK(max_abs_diff(a[i], b[i]) == 0.f);
}

TEST_CASE("softmax_attention: bad shapes and options are sima::Error") {
  Tensor q = randn({2, 2, 3, 4});
  CHECK_THROWS_AS(softmax_attention(q, randn({2, 2, 3, 5}), randn({2, 2, 3, 4}), 0.5f), Error);
  CHECK_THROWS_AS(softmax_attention(q, q, randn({2, 2, 4, 4}), 0.5f), Error);
  CHECK_THROWS_AS(softmax_attention(randn({2, 3, 4}), q, q, 0.5f), Error);
  CHECK_THROWS_AS(softmax_attention(q, q, q, 0.5f, 1.f, true), Error);
  CHECK_THROWS_AS(softmax_attention(q, q, q, 0.f), Error);
  auto attn = make_module(8, 2);
  CHECK_THROWS_WITH_AS(attn->forward(randn({2, 3, 6})), doctest::Contains("SoftmaxAttention"), Error);
  AttentionOptions opt;
  opt.dim = 8;
  opt.num_heads = 3;
  CHECK_THROWS_AS(SoftmaxAttention{opt}, Error);
}

TEST_CASE("softmax_attention: the same values with and without a graph") {
  std::vector<Tensor> in = qkv_leaves(kCases[4], 80);
  Tensor with = softmax_attention(in[0], in[1], in[2], 0.5f);
  NoGradGuard ng;
  Tensor without = softmax_attention(in[0], in[1], in[2], 0.5f);
  CHECK(!without.requires_grad());
  CHECK(max_abs_diff(with, without) == 0.f);
}

// q, k, v (B, h, N, d) of a qkv output (B, N, 3C), as Attention::split_heads makes them.
std::vector<Tensor> split_qkv(const Tensor& qkv, int64_t h) {
  const int64_t B = qkv.size(0), N = qkv.size(1), d = qkv.size(2) / 3 / h;
  Tensor t = permute(reshape(qkv, {B, N, 3, h, d}), {2, 0, 3, 1, 4});
  return {contiguous(squeeze(narrow(t, 0, 0, 1), 0)), contiguous(squeeze(narrow(t, 0, 1, 1), 0)),
          contiguous(squeeze(narrow(t, 0, 2, 1), 0))};
}

Tensor split_merged(const Tensor& qkv, int64_t h, float scale) {  // the packed core's oracle
  const int64_t B = qkv.size(0), N = qkv.size(1), C = qkv.size(2) / 3;
  const std::vector<Tensor> s = split_qkv(qkv, h);
  return reshape(permute(softmax_attention(s[0], s[1], s[2], scale), {0, 2, 1, 3}), {B, N, C});
}

TEST_CASE("softmax_attention_packed == split heads, softmax_attention, merged heads (forward and gradient)") {
  // DeiT-Tiny's block (N = 65, 3 heads of 64) and small odd shapes
  for (const auto& [B_, N_, C_, h_] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{2, 65, 192, 3},
                                   {3, 5, 8, 2}, {1, 1, 4, 1}, {2, 7, 12, 4}}) {
    // clang 14 cannot capture a structured binding
    const auto& B = B_;
    const auto& N = N_;
    const auto& C = C_;
    const auto& h = h_;
    CAPTURE(N);
    CAPTURE(C);
    const Tensor qkv = randn_leaf({B, N, 3 * C}, 41);
    const float scale = 1.f / std::sqrt(float(C / h));
    int64_t exps = 0;
    check_same([&](auto& in) { return softmax_attention_packed(in[0], h, scale, &exps); },
               [&](auto& in) { return split_merged(in[0], h, scale); }, {qkv}, {.rel = 1e-6f});
    CHECK(exps == B * h * N * N);
    NoGradGuard no_grad;  // the inference path (P not kept)
    CHECK(max_abs_diff(softmax_attention_packed(qkv, h, scale), split_merged(qkv, h, scale)) <= 1e-6f);
  }
}

TEST_CASE("softmax_attention_packed: gradcheck w.r.t. qkv (h = 1 and 3, N < d and N > d)") {
  uint64_t seed = 500;
  for (int64_t h : {1, 3})
    for (auto [N_, d_] : {std::pair<int64_t, int64_t>{3, 4}, {5, 4}, {1, 2}}) {
      const auto& N = N_; const auto& d = d_;  // clang 14 cannot capture a structured binding
      CAPTURE(h);
      CAPTURE(N);
      Tensor qkv = randn_leaf({2, N, 3 * h * d}, ++seed);
      CHECK_GRADCHECK([=](const std::vector<Tensor>& in) { return softmax_attention_packed(in[0], h, 0.7f); }, {qkv});
    }
}

TEST_CASE("SoftmaxAttention takes the packed core, with a gradient too; a hook or attention dropout falls back to split heads") {
  auto attn = make_module(192, 3);
  randomize_linears(*attn, 13);
  const Tensor x = randn_leaf({2, 65, 192}, 14);
  std::vector<Tensor> params;
  for (auto& [n, p] : attn->named_parameters()) params.push_back(p);
  int calls = 0;
  check_same([&](auto& in) { attn->qk_hook = nullptr; return attn->forward(in[0]); },
             [&](auto& in) {  // a hook needs the split q and k: the packed core steps aside
               attn->qk_hook = [&](const Tensor& q, const Tensor&) { calls += q.dim() == 4; };
               return attn->forward(in[0]);
             },
             {x}, {.rel = 1e-6f}, params);
  CHECK(calls == 1);
  attn->qk_hook = nullptr;
  {
    const Tensor with_grad = attn->forward(x);  // x requires grad: the packed core records its backward
    NoGradGuard ng;
    CHECK(max_abs_diff(with_grad, attn->forward(x.detach())) == 0.f);  // the same bits without
  }
  auto dropping = make_module(192, 3, 0.5f);  // attention dropout in training: split heads (mask per pair)
  dropping->train();
  const int64_t before = dropping->exp_calls();
  reseed_dropout();
  const Tensor a = dropping->forward(x);
  dropping->qk_hook = [&](const Tensor&, const Tensor&) {};
  reseed_dropout();
  const Tensor b = dropping->forward(x);  // surely the split path: the same mask, the same output
  CHECK(max_abs_diff(a, b) == 0.f);
  CHECK(dropping->exp_calls() - before == 2 * 2 * 3 * 65 * 65);
}

TEST_CASE("softmax_attention_packed: same bits at 1 and 2 threads, forward and gradient; refuses bad shapes") {
  const Tensor qkv = randn({2, 65, 3 * 192});
  check_packed_same_bits_across_threads(qkv, [](const Tensor& x) { return softmax_attention_packed(x, 3, 0.125f); });
  CHECK_THROWS_AS(softmax_attention_packed(randn({1, 4, 24}), 2, 0.f), Error);          // scale not positive
  CHECK_THROWS_AS(softmax_attention_packed(randn({1, 4, 25}), 2, 1.f), Error);          // 3C not divisible
  CHECK_THROWS_AS(softmax_attention_packed(randn({4, 24}), 2, 1.f), Error);             // not (B, N, 3C)
}
