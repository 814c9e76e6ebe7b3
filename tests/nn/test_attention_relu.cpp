// ReluAttention and its fused core relu_attention: gradients, agreement with the
// composition of core ops, hand-worked values, the exp count, options and errors.
#include "attention_testing.h"

#include <cmath>
#include <set>
#include <string>

#include "nn/attention/relu_attention.h"

using namespace sima;
using namespace sima::testing;

namespace {

const std::vector<std::string> kFns = {"relu", "relu2", "gelu", "softplus", "identity", "relu6", "sigmoid"};

// h(S) from core ops: the oracle for the fused kernel.
Tensor apply_fn(ScoreFn fn, const Tensor& s) {
  switch (fn) {
    case ScoreFn::Relu: return relu(s);
    case ScoreFn::Relu2: return square(relu(s));
    case ScoreFn::Gelu: return gelu(s);
    case ScoreFn::Softplus: return softplus(s);
    case ScoreFn::Identity: return s;
    case ScoreFn::Relu6: return relu6(s);
    case ScoreFn::Sigmoid: return sigmoid(s);
  }
  return s;
}

// out = N^-α · h(q kᵀ / √d) v, composed.
Tensor composed_core(const Tensor& q, const Tensor& k, const Tensor& v, ScoreFn fn, float alpha) {
  const float N = static_cast<float>(q.size(2)), d = static_cast<float>(q.size(3));
  Tensor s = mul(matmul(q, k, false, true), 1.f / std::sqrt(d));
  return matmul(mul(apply_fn(fn, s), std::pow(N, -alpha)), v);
}

struct Case {
  int64_t B, h, N, d;
};
// multi-head and single-head, N > d and N < d
const std::vector<Case> kCases = {{2, 2, 5, 4}, {2, 1, 3, 6}, {1, 3, 5, 4}, {2, 1, 5, 4}};

AttentionOptions small_options(const std::string& fn, bool qk_norm, bool gate, float alpha = 1.f) {
  AttentionOptions o = attention_options("relu", 8, 2);
  set_unchecked(o, "fn", fn);  // bad ones too: the constructor's checks
  set_unchecked(o, "alpha", alpha);
  o.with("qk_norm", qk_norm);
  o.with("gate", gate);
  return o;
}

// Every parameter set to modest random values (LayerNorm weight around 1), seeded.
void randomise(Module& m, uint64_t seed) {
  Generator g(seed);
  for (auto& [name, p] : m.named_parameters()) {
    Tensor r = randn(p.shape(), g);
    const bool is_norm_weight = name.find("norm.weight") != std::string::npos;
    for (int64_t i = 0; i < p.numel(); ++i)
      p.data()[i] = is_norm_weight ? 1.f + 0.3f * r.data()[i] : 0.4f * r.data()[i];
  }
}

}  // namespace

TEST_CASE("relu_attention: fused == composed, every fn, alpha 0 / 1 / 0.5, forward and gradients") {
  for (const Case& c : kCases)
    for (const std::string& name : kFns)
      for (float alpha : {0.f, 1.f, 0.5f}) {
        CAPTURE(c.N);
        CAPTURE(c.d);
        CAPTURE(c.h);
        CAPTURE(name);
        CAPTURE(alpha);
        const ScoreFn fn = parse_score_fn(name);
        // relu6 with scores up to ~±12 so that both of its kinks are crossed
        const float spread = fn == ScoreFn::Relu6 ? 3.f : 1.f;
        Tensor q = mul(randn_leaf({c.B, c.h, c.N, c.d}, 1), spread).detach().requires_grad_();
        Tensor k = mul(randn_leaf({c.B, c.h, c.N, c.d}, 2), spread).detach().requires_grad_();
        Tensor v = randn_leaf({c.B, c.h, c.N, c.d}, 3);
        check_same([&](auto& x) { return relu_attention(x[0], x[1], x[2], fn, alpha); },
                   [&](auto& x) { return composed_core(x[0], x[1], x[2], fn, alpha); }, {q, k, v});
      }
}

TEST_CASE("relu_attention: gradcheck w.r.t. q, k, v for every fn (multi-head, h = 1, N < d, N > d)") {
  for (size_t ci = 0; ci < kCases.size(); ++ci)
    for (const std::string& name : kFns) {
      const Case& c = kCases[ci];
      const float alpha = std::vector<float>{1.f, 0.5f, 0.f, 1.f}[ci];
      CAPTURE(c.N);
      CAPTURE(c.d);
      CAPTURE(c.h);
      CAPTURE(name);
      CAPTURE(alpha);
      const ScoreFn fn = parse_score_fn(name);
      Tensor q = randn_leaf({c.B, c.h, c.N, c.d}, 11), k = randn_leaf({c.B, c.h, c.N, c.d}, 12),
             v = randn_leaf({c.B, c.h, c.N, c.d}, 13);
      CHECK_GRADCHECK([&](auto& x) { return relu_attention(x[0], x[1], x[2], fn, alpha); }, {q, k, v});
    }
}

TEST_CASE("relu_attention: gradient to only some of q, k, v") {
  Tensor q = randn_leaf({2, 2, 5, 4}, 21), k = randn_leaf({2, 2, 5, 4}, 22, false),
         v = randn_leaf({2, 2, 5, 4}, 23, false);
  CHECK_GRADCHECK([](auto& x) { return relu_attention(x[0], x[1], x[2], ScoreFn::Gelu, 1.f); }, {q, k, v});
  Tensor q2 = randn_leaf({2, 2, 5, 4}, 21, false), v2 = randn_leaf({2, 2, 5, 4}, 23);
  CHECK_GRADCHECK([](auto& x) { return relu_attention(x[0], x[1], x[2], ScoreFn::Relu2, 1.f); }, {q2, k, v2});
}

TEST_CASE("relu_attention: known values worked by hand") {
  SUBCASE("d = 1, N = 2, relu, alpha 1 and 0, with gradients for dL/dO = 1") {
    // q = [1, -2], k = [2, 1], v = [3, 4] (one column each), scale d^-1/2 = 1.
    // S = q kᵀ = [[2, 1], [-4, -2]]; relu -> [[2, 1], [0, 0]]; times N^-1 = 1/2 -> P = [[1, .5], [0, 0]]
    // O = P v = [1·3 + .5·4, 0] = [5, 0]              (alpha 0: [2·3 + 1·4, 0] = [10, 0])
    // dv = Pᵀ 1 = [1 + 0, .5 + 0] = [1, .5]
    // dP = 1 vᵀ = [[3, 4], [3, 4]]; dS = dP ⊙ 1[S > 0] / 2 = [[1.5, 2], [0, 0]]
    // dq = dS k = [1.5·2 + 2·1, 0] = [5, 0];  dk = dSᵀ q = [1.5·1 + 0·(-2), 2·1 + 0] = [1.5, 2]
    Tensor q = from_vector({1, -2}, {1, 1, 2, 1}).requires_grad_(), k = from_vector({2, 1}, {1, 1, 2, 1}).requires_grad_(),
           v = from_vector({3, 4}, {1, 1, 2, 1}).requires_grad_();
    Tensor o = relu_attention(q, k, v, ScoreFn::Relu, 1.f);
    check_close(o, {5, 0});
    o.backward(ones(o.shape()));
    check_close(q.grad(), {5, 0});
    check_close(k.grad(), {1.5f, 2});
    check_close(v.grad(), {1, 0.5f});
    check_close(relu_attention(q, k, v, ScoreFn::Relu, 0.f), {10, 0});
    // identity, alpha 1: P = S / 2 = [[1, .5], [-2, -1]], O = [1·3 + .5·4, -2·3 - 1·4] = [5, -10]
    check_close(relu_attention(q, k, v, ScoreFn::Identity, 1.f), {5, -10});
  }
  SUBCASE("d = 4, N = 1: the d^-1/2 scale, relu2 and sigmoid") {
    // q = k = [1, 1, 1, 1]: q·k = 4, times 4^-1/2 -> S = 2; N^-alpha = 1 for N = 1.
    // relu2: P = 4, O = 4·v = [4, 8, 12, 16]   (16·v without the scale)
    // sigmoid: P = 1/(1 + e^-2) = 0.8807971, O = 0.8807971·[1, 2, 3, 4]
    Tensor q = ones({1, 1, 1, 4}), v = from_vector({1, 2, 3, 4}, {1, 1, 1, 4});
    check_close(relu_attention(q, q, v, ScoreFn::Relu2, 1.f), {4, 8, 12, 16});
    const float s = 0.88079708f;
    check_close(relu_attention(q, q, v, ScoreFn::Sigmoid, 1.f), {s, 2 * s, 3 * s, 4 * s}, 1e-5f, 1e-5f);
  }
}

TEST_CASE("relu_attention: exp count is what the forward evaluates") {
  Tensor q = randn_leaf({2, 2, 5, 4}, 31), k = randn_leaf({2, 2, 5, 4}, 32), v = randn_leaf({2, 2, 5, 4}, 33);
  for (const std::string& name : kFns) {
    CAPTURE(name);
    const ScoreFn fn = parse_score_fn(name);
    int64_t n = 0;
    relu_attention(q, k, v, fn, 1.f, &n);
    // one exp per score (B·h·N² = 100) for gelu (inside erf), sigmoid and softplus (all
    // scores ≤ 20 here); none for the others
    const bool has_exp = fn == ScoreFn::Gelu || fn == ScoreFn::Sigmoid || fn == ScoreFn::Softplus;
    CHECK(n == (has_exp ? 100 : 0));
  }
  // softplus skips exp above its threshold: q = [30, -1], k = [1, 1], d = 1 -> S = [[30, 30], [-1, -1]],
  // two scores ≤ 20 -> 2 exps; and counts accumulate.
  Tensor q1 = from_vector({30, -1}, {1, 1, 2, 1}), k1 = ones({1, 1, 2, 1});
  int64_t n = 5;
  relu_attention(q1, k1, k1, ScoreFn::Softplus, 1.f, &n);
  CHECK(n == 7);
  // the module counts its core's exps; qk_norm and gate add none
  for (bool extras : {false, true}) {
    auto m = std::make_shared<ReluAttention>(small_options("sigmoid", extras, extras));
    Tensor x = randn_leaf({3, 6, 8}, 34, false);
    m->forward(x);
    CHECK(m->exp_calls() == 3 * 2 * 6 * 6);  // B·h·N²
    m->forward(x);
    CHECK(m->exp_calls() == 2 * 3 * 2 * 6 * 6);
    m->reset_exp_calls();
    CHECK(m->exp_calls() == 0);
  }
  auto m = std::make_shared<ReluAttention>(small_options("relu", true, true));
  m->forward(randn_leaf({3, 6, 8}, 35, false));
  CHECK(m->exp_calls() == 0);
}

TEST_CASE("ReluAttention: parameter names follow timm") {
  auto names = [](const Module& m) {
    std::set<std::string> s;
    for (auto& [n, _] : m.named_parameters()) s.insert(n);
    return s;
  };
  CHECK(names(ReluAttention(small_options("relu", false, false))) ==
        std::set<std::string>{"qkv.weight", "qkv.bias", "proj.weight", "proj.bias"});
  CHECK(names(ReluAttention(small_options("relu", true, true))) ==
        std::set<std::string>{"qkv.weight", "qkv.bias", "proj.weight", "proj.bias", "q_norm.weight",
                              "q_norm.bias", "k_norm.weight", "k_norm.bias", "gate.weight", "gate.bias"});
  ReluAttention m(small_options("relu", true, false));
  CHECK(m.q_norm->weight.shape() == Shape{4});  // LayerNorm over the head dim d = C/h
  CHECK(m.q_norm->eps == 1e-6f);                 // timm's ViT LayerNorm, handed to its Attention
  CHECK(m.k_norm->eps == 1e-6f);
}

TEST_CASE("ReluAttention: module == composed (qkv, qk LayerNorm, core, gate on x, proj)") {
  for (bool qk_norm : {false, true})
    for (bool gate : {false, true}) {
      CAPTURE(qk_norm);
      CAPTURE(gate);
      auto m = std::make_shared<ReluAttention>(small_options("gelu", qk_norm, gate, 0.5f));
      randomise(*m, 41);
      Tensor x = randn_leaf({2, 5, 8}, 42, false);
      Tensor y = m->forward(x);
      // the same by hand from core ops
      Tensor t = permute(reshape(linear(x, m->qkv->weight, m->qkv->bias), {2, 5, 3, 2, 4}), {2, 0, 3, 1, 4});
      Tensor q = squeeze(narrow(t, 0, 0, 1), 0), k = squeeze(narrow(t, 0, 1, 1), 0),
             v = squeeze(narrow(t, 0, 2, 1), 0);
      if (qk_norm) {
        q = layer_norm(q, m->q_norm->weight, m->q_norm->bias, 1e-6f);
        k = layer_norm(k, m->k_norm->weight, m->k_norm->bias, 1e-6f);
      }
      Tensor o = reshape(permute(composed_core(q, k, v, ScoreFn::Gelu, 0.5f), {0, 2, 1, 3}), {2, 5, 8});
      if (gate) o = mul(o, linear(x, m->gate->weight, m->gate->bias));
      check_close(y, linear(o, m->proj->weight, m->proj->bias), 1e-5f, 1e-4f);
    }
}

TEST_CASE("ReluAttention: qk_norm_bias = false is Flax's normalize_qk (scale only): names, composed, gradcheck") {
  AttentionOptions o = small_options("relu", true, false);
  o.with("qk_norm_bias", false);
  auto m = std::make_shared<ReluAttention>(o);
  randomise(*m, 53);
  std::vector<std::string> names;
  for (auto& [name, p] : m->named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"qkv.weight", "qkv.bias", "proj.weight", "proj.bias", "q_norm.weight",
                                          "k_norm.weight"});
  CHECK(!m->q_norm->bias.defined());
  Tensor x = randn_leaf({2, 5, 8}, 54, false);
  Tensor t = permute(reshape(linear(x, m->qkv->weight, m->qkv->bias), {2, 5, 3, 2, 4}), {2, 0, 3, 1, 4});
  Tensor q = layer_norm(squeeze(narrow(t, 0, 0, 1), 0), m->q_norm->weight, Tensor(), 1e-6f);
  Tensor k = layer_norm(squeeze(narrow(t, 0, 1, 1), 0), m->k_norm->weight, Tensor(), 1e-6f);
  Tensor out = composed_core(q, k, squeeze(narrow(t, 0, 2, 1), 0), ScoreFn::Relu, 1.f);
  out = reshape(permute(out, {0, 2, 1, 3}), {2, 5, 8});
  check_close(m->forward(x), linear(out, m->proj->weight, m->proj->bias), 1e-5f, 1e-4f);
  GradcheckOptions go;
  go.eps = 1e-3;
  gradcheck_module(*m, randn_leaf({2, 5, 8}, 55), go);
}

TEST_CASE("ReluAttention: gradcheck w.r.t. x and every parameter (qk_norm, gate on / off)") {
  for (const char* name : {"relu", "relu2", "gelu", "softplus"})
    for (bool qk_norm : {false, true})
      for (bool gate : {false, true}) {
        CAPTURE(name);
        CAPTURE(qk_norm);
        CAPTURE(gate);
        auto m = std::make_shared<ReluAttention>(small_options(name, qk_norm, gate));
        randomise(*m, 51);
        CHECK(m->named_parameters().size() == 4u + (qk_norm ? 4u : 0u) + (gate ? 2u : 0u));
        // relu: a parameter step moves many scores at once, so a step of 1e-2 can cross
        // the kink at 0 (seen here); 1e-3 stays on one side and float32 is still accurate.
        GradcheckOptions go;
        if (std::string(name) == "relu") go.eps = 1e-3;
        gradcheck_module(*m, randn_leaf({2, 5, 8}, 52), go);
      }
}

TEST_CASE("ReluAttention: the qk hook sees the q, k that feed the scores") {
  auto m = std::make_shared<ReluAttention>(small_options("relu", true, false));
  Tensor seen_q;
  m->qk_hook = [&](const Tensor& q, const Tensor&) { seen_q = q; };
  m->forward(randn_leaf({2, 5, 8}, 61, false));
  REQUIRE(seen_q.defined());
  CHECK(seen_q.shape() == Shape{2, 2, 5, 4});
  // after the LayerNorm (weight 1, bias 0): every row has mean 0
  for (int64_t r = 0; r < 2 * 2 * 5; ++r) {
    float s = 0.f;
    for (int64_t c = 0; c < 4; ++c) s += seen_q.data()[r * 4 + c];
    CHECK(std::fabs(s) < 1e-5f);
  }
}

TEST_CASE("relu_attention: same thread count, same bits") {
  Tensor q = randn_leaf({2, 4, 16, 8}, 71), k = randn_leaf({2, 4, 16, 8}, 72), v = randn_leaf({2, 4, 16, 8}, 73);
  Tensor a = relu_attention(q, k, v, ScoreFn::Gelu, 1.f), b = relu_attention(q, k, v, ScoreFn::Gelu, 1.f);
  CHECK(max_abs_diff(a, b) == 0.f);
}

TEST_CASE("ReluAttention: bad options and shapes are sima::Error naming the culprit") {
  std::string m1 = error_message([] { ReluAttention a(small_options("tanh", false, false)); });
  CHECK(m1.find("ReluAttention") != std::string::npos);
  CHECK(m1.find("fn 'tanh'") != std::string::npos);
  CHECK(m1.find("relu6") != std::string::npos);
  AttentionOptions o = small_options("relu", false, false);
  o.attn_drop = 0.1f;
  CHECK(error_message([&] { ReluAttention a(o); }).find("attn_drop") != std::string::npos);
  o = small_options("relu", false, false, NAN);
  CHECK(error_message([&] { ReluAttention a(o); }).find("alpha") != std::string::npos);
  Tensor q = randn({1, 2, 3, 4}), k = randn({1, 2, 4, 4});
  CHECK(error_message([&] { relu_attention(q, k, k, ScoreFn::Relu); }).find("relu_attention") != std::string::npos);
  ReluAttention a(small_options("relu", false, true));
  CHECK(error_message([&] { a.forward(randn({2, 5, 6})); }).find("ReluAttention") != std::string::npos);
}
