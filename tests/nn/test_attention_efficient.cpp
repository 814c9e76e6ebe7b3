// EfficientAttention and its fused core efficient_attention: agreement with the composition
// of core ops, gradchecks, hand-worked values, the exp count, large inputs and errors.
#include "nn/attention/efficient.h"

#include <cmath>
#include <memory>
#include <set>
#include <string>

#include "attention_testing.h"

using namespace sima;
using namespace sima::testing;

namespace {

// out = softmax_d(q) (softmax_N(k)ᵀ v), composed from core ops.
Tensor composed_core(const Tensor& q, const Tensor& k, const Tensor& v) {
  Tensor qh = softmax(q, 3), kh = softmax(k, 2);  // q over its d channels, k over the N tokens
  return matmul(qh, matmul(kh, v, /*trans_a=*/true));
}

struct Case {
  int64_t B, h, N, d;
};
const std::vector<Case> kCases = {{2, 2, 5, 4}, {2, 1, 3, 6}, {1, 3, 7, 2}, {1, 1, 1, 3}};

std::shared_ptr<EfficientAttention> make(int64_t C = 8, int64_t h = 2) {
  return std::make_shared<EfficientAttention>(attention_options("efficient", C, h));
}

}  // namespace

TEST_CASE("efficient_attention: fused == composed, forward and gradients (multi-head, N < d, N > d, N = 1)") {
  for (const Case& c : kCases) {
    CAPTURE(c.N);
    CAPTURE(c.d);
    CAPTURE(c.h);
    Tensor q = randn_leaf({c.B, c.h, c.N, c.d}, 1), k = randn_leaf({c.B, c.h, c.N, c.d}, 2),
           v = randn_leaf({c.B, c.h, c.N, c.d}, 3);
    check_same([](auto& x) { return efficient_attention(x[0], x[1], x[2]); },
               [](auto& x) { return composed_core(x[0], x[1], x[2]); }, {q, k, v});
  }
}

TEST_CASE("efficient_attention: gradcheck w.r.t. q, k, v") {
  for (const Case& c : kCases) {
    CAPTURE(c.N);
    CAPTURE(c.d);
    const Shape s{c.B, c.h, c.N, c.d};
    Tensor q = randn_leaf(s, 11), k = randn_leaf(s, 12), v = randn_leaf(s, 13);
    CHECK_GRADCHECK([](auto& x) { return efficient_attention(x[0], x[1], x[2]); }, {q, k, v});
  }
}

TEST_CASE("efficient_attention: gradient to only some of q, k, v") {
  Tensor q = randn_leaf({2, 2, 5, 4}, 21), k = randn_leaf({2, 2, 5, 4}, 22, false),
         v = randn_leaf({2, 2, 5, 4}, 23, false);
  CHECK_GRADCHECK([](auto& x) { return efficient_attention(x[0], x[1], x[2]); }, {q, k, v});
  Tensor q2 = randn_leaf({2, 2, 5, 4}, 21, false), k2 = randn_leaf({2, 2, 5, 4}, 22);
  CHECK_GRADCHECK([](auto& x) { return efficient_attention(x[0], x[1], x[2]); }, {q2, k2, v});
  Tensor v2 = randn_leaf({2, 2, 5, 4}, 23);
  CHECK_GRADCHECK([](auto& x) { return efficient_attention(x[0], x[1], x[2]); }, {q2, k, v2});
}

TEST_CASE("efficient_attention: known values worked by hand") {
  // N = 2, d = 2: q = [[0, 0], [ln 3, 0]] -> q̂ = softmax per row = [[1/2, 1/2], [3/4, 1/4]]
  //               k = [[0, 0], [0, ln 3]] -> k̂ = softmax per column: col 0 [1/2, 1/2], col 1 [1/4, 3/4]
  //               v = [[1, 2], [3, 4]]
  // Ctx = k̂ᵀ v: row 0 = ½[1, 2] + ½[3, 4] = [2, 3];  row 1 = ¼[1, 2] + ¾[3, 4] = [2.5, 3.5]
  // out = q̂ Ctx: row 0 = ½[2, 3] + ½[2.5, 3.5] = [2.25, 3.25]; row 1 = ¾[2, 3] + ¼[2.5, 3.5] = [2.125, 3.125]
  const float l3 = std::log(3.f);
  Tensor q = from_vector({0, 0, l3, 0}, {1, 1, 2, 2}), k = from_vector({0, 0, 0, l3}, {1, 1, 2, 2}),
         v = from_vector({1, 2, 3, 4}, {1, 1, 2, 2});
  check_close(efficient_attention(q, k, v), {2.25f, 3.25f, 2.125f, 3.125f});
  // a shift of a query row or of a key column changes nothing (softmax is shift-invariant);
  // a shift of a key row does: that is the axis check (rows of q, columns of k)
  Tensor q_shift = from_vector({5, 5, l3 - 2, -2}, {1, 1, 2, 2});
  Tensor k_shift = from_vector({7, -1, 7, l3 - 1}, {1, 1, 2, 2});
  check_close(efficient_attention(q_shift, k_shift, v), {2.25f, 3.25f, 2.125f, 3.125f});
  Tensor k_row = from_vector({1, 1, 0, l3}, {1, 1, 2, 2});
  CHECK(max_abs_diff(efficient_attention(q, k_row, v), efficient_attention(q, k, v)) > 0.1f);
}

TEST_CASE("efficient_attention: large logits stay finite (max-subtracted softmaxes)") {
  Tensor q = mul(randn_leaf({1, 2, 6, 4}, 31, false), 200.f), k = mul(randn_leaf({1, 2, 6, 4}, 32, false), 200.f);
  Tensor v = randn_leaf({1, 2, 6, 4}, 33, false);
  Tensor o = efficient_attention(q, k, v);
  CHECK(all_finite(o));
  check_close(o, composed_core(q, k, v), 1e-5f, 1e-4f);
}

TEST_CASE("efficient_attention: exp count is 2·N·d per pair (every element of q and of k)") {
  Tensor q = randn_leaf({2, 3, 5, 4}, 41), k = randn_leaf({2, 3, 5, 4}, 42), v = randn_leaf({2, 3, 5, 4}, 43);
  int64_t n = 0;
  efficient_attention(q, k, v, &n);
  CHECK(n == 2 * 2 * 3 * 5 * 4);
  auto m = make();
  m->forward(randn_leaf({3, 6, 8}, 44, false));  // B 3, N 6, h 2, d 4
  CHECK(m->exp_calls() == 2 * 3 * 2 * 6 * 4);
  m->reset_exp_calls();
  CHECK(m->exp_calls() == 0);
}

TEST_CASE("EfficientAttention: module == composed, gradcheck of x and every parameter, factory") {
  auto m = make();
  randomize_parameters(*m, 51, 0.4f);
  std::set<std::string> names;
  for (auto& [name, _] : m->named_parameters()) names.insert(name);
  CHECK(names == std::set<std::string>{"qkv.weight", "qkv.bias", "proj.weight", "proj.bias"});
  Tensor x = randn_leaf({2, 5, 8}, 52);
  {
    NoGradGuard ng;
    Tensor t = permute(reshape(linear(x, m->qkv->weight, m->qkv->bias), {2, 5, 3, 2, 4}), {2, 0, 3, 1, 4});
    Tensor o = composed_core(squeeze(narrow(t, 0, 0, 1), 0), squeeze(narrow(t, 0, 1, 1), 0),
                             squeeze(narrow(t, 0, 2, 1), 0));
    o = reshape(permute(o, {0, 2, 1, 3}), {2, 5, 8});
    check_close(m->forward(x), linear(o, m->proj->weight, m->proj->bias), 1e-5f, 1e-4f);
  }
  gradcheck_module(*m, x);
  auto f = make_attention(attention_options("efficient", 8, 2));
  CHECK(f->type_name() == "EfficientAttention");
}

TEST_CASE("efficient attention: the qk hook sees q and k, errors name the culprit") {
  auto m = make();
  int calls = 0;
  m->qk_hook = [&](const Tensor& q, const Tensor& k) {
    ++calls;
    CHECK(q.shape() == Shape{2, 2, 5, 4});
    CHECK(k.shape() == Shape{2, 2, 5, 4});
  };
  m->forward(randn_leaf({2, 5, 8}, 61, false));
  CHECK(calls == 1);
  AttentionOptions o = attention_options("efficient", 8, 2);
  o.attn_drop = 0.1f;
  CHECK(error_message([&] { EfficientAttention a(o); }).find("EfficientAttention: attn_drop") != std::string::npos);
  Tensor q = randn({1, 2, 3, 4}), k = randn({1, 2, 3, 5}), empty_n = randn({1, 2, 0, 4});
  const std::string e = error_message([&] { efficient_attention(q, k, q); });
  CHECK(e.find("efficient_attention") != std::string::npos);
  CHECK(e.find("(1, 2, 3, 5)") != std::string::npos);
  CHECK(error_message([&] { efficient_attention(empty_n, empty_n, empty_n); }).find("positive") != std::string::npos);
  CHECK(error_message([&] { m->forward(randn({2, 5, 6})); }).find("EfficientAttention") != std::string::npos);
}
