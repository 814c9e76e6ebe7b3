// SimA's inference cores (nn/attention/sima_inference.cpp): the normalisation folded into one
// scale per channel. Against the training cores to float rounding, on the eps clamp and on large
// activations, and the module's switch (set by set_inference_precision and pack_fp32_inference,
// tested in tests/models/test_precision.cpp).
#include <cmath>
#include <memory>
#include <string>

#include "attention_testing.h"
#include "core/autograd.h"
#include "nn/attention/sima.h"

using namespace sima;
using namespace sima::testing;

namespace {

const char* name(SimaNorm n) { return n == SimaNorm::L1 ? "l1" : n == SimaNorm::L2 ? "l2" : "none"; }

std::shared_ptr<SimaAttention> make_sima(int64_t dim, int64_t heads, const std::string& order) {
  AttentionOptions o = attention_options("sima", dim, heads);
  o.with("order", order);
  return std::make_shared<SimaAttention>(o);
}

}  // namespace

TEST_CASE("sima_attention_packed_inference == sima_attention_packed to float rounding (every norm, both orders)") {
  NoGradGuard ng;
  uint64_t seed = 10;
  for (SimaNorm norm : {SimaNorm::L1, SimaNorm::L2, SimaNorm::None})
    for (SimaOrder order : {SimaOrder::QkFirst, SimaOrder::KvFirst, SimaOrder::Auto})
      for (auto [B_, N_, C_, h_] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{2, 5, 8, 2},  // N = 5 > d = 4
                                {2, 3, 24, 2},                                               // N = 3 < d = 12
                                {2, 65, 192, 3}}) {                                          // DeiT-Tiny's block
        // clang 14 cannot capture a structured binding
        const auto& B = B_;
        const auto& N = N_;
        const auto& C = C_;
        const auto& h = h_;
        CAPTURE(name(norm));
        CAPTURE(static_cast<int>(order));
        CAPTURE(N);
        CAPTURE(C);
        const Tensor qkv = randn_leaf({B, N, 3 * C}, seed++, false);
        const Tensor want = sima_attention_packed(qkv, h, norm, order, 1e-12f);
        const Tensor got = sima_attention_packed_inference(qkv, h, norm, order, 1e-12f);
        CHECK(rel_error(got, want) < 2e-6f);
      }
}

TEST_CASE("sima_attention_inference == sima_attention on split heads, N_kv != N too (every norm, both orders)") {
  NoGradGuard ng;
  uint64_t seed = 40;
  for (SimaNorm norm : {SimaNorm::L1, SimaNorm::L2, SimaNorm::None})
    for (SimaOrder order : {SimaOrder::QkFirst, SimaOrder::KvFirst})
      for (auto [N_, Nkv_, d_] : {std::tuple<int64_t, int64_t, int64_t>{5, 5, 4}, {49, 16, 32}, {3, 7, 6}}) {
        // clang 14 cannot capture a structured binding
        const auto& N = N_;
        const auto& Nkv = Nkv_;
        const auto& d = d_;
        CAPTURE(name(norm));
        CAPTURE(order == SimaOrder::QkFirst);
        CAPTURE(N);
        CAPTURE(Nkv);
        const Tensor q = randn_leaf({2, 3, N, d}, seed++, false), k = randn_leaf({2, 3, Nkv, d}, seed++, false),
                     v = randn_leaf({2, 3, Nkv, d}, seed++, false);
        CHECK(rel_error(sima_attention_inference(q, k, v, norm, order, 1e-12f),
                        sima_attention(q, k, v, norm, order, 1e-12f)) < 2e-6f);
      }
}

TEST_CASE("SimA's inference cores: clamped all-zero columns and activations near float's range") {
  NoGradGuard ng;
  for (SimaOrder order : {SimaOrder::QkFirst, SimaOrder::KvFirst})
    for (SimaNorm norm : {SimaNorm::L1, SimaNorm::L2}) {
      CAPTURE(order == SimaOrder::QkFirst);
      CAPTURE(name(norm));
      Tensor q = randn_leaf({2, 2, 6, 4}, 1, false), k = randn_leaf({2, 2, 6, 4}, 2, false),
             v = randn_leaf({2, 2, 6, 4}, 3, false);
      for (int64_t i = 0; i < 6; ++i) {  // zero columns: r = eps, the clamp
        q.at({0, 1, i, 1}) = 0.f;
        k.at({1, 0, i, 2}) = 0.f;
      }
      const float eps = 0.5f;  // large enough that some non-zero columns are clamped as well
      CHECK(rel_error(sima_attention_inference(q, k, v, norm, order, eps), sima_attention(q, k, v, norm, order, eps)) <
            2e-6f);
      // q and k of magnitude 1e18: 1 / (r_q r_k) alone would leave float's normal range (1e-38);
      // the two reciprocals one after the other do not.
      const Tensor qb = mul(q, 1e18f), kb = mul(k, 1e18f);
      const Tensor want = sima_attention(qb, kb, v, norm, order, 1e-12f);
      const Tensor got = sima_attention_inference(qb, kb, v, norm, order, 1e-12f);
      REQUIRE(all_finite(got));
      CHECK(rel_error(got, want) < 2e-6f);
    }
}

TEST_CASE("SimA's inference cores refuse a gradient and bad shapes, naming the problem") {
  const Tensor q = randn_leaf({1, 2, 4, 3}, 1), k = randn_leaf({1, 2, 4, 3}, 2), v = randn_leaf({1, 2, 4, 3}, 3);
  CHECK_THROWS_WITH_AS(sima_attention_inference(q, k, v, SimaNorm::L1, SimaOrder::Auto, 1e-12f),
                       doctest::Contains("inference only"), Error);
  CHECK_THROWS_WITH_AS(sima_attention_packed_inference(randn_leaf({1, 4, 18}, 4), 2, SimaNorm::L1, SimaOrder::Auto, 1e-12f),
                       doctest::Contains("inference only"), Error);
  NoGradGuard ng;
  CHECK_THROWS_AS(sima_attention_packed_inference(randn({1, 4, 25}), 2, SimaNorm::L1, SimaOrder::Auto, 1e-12f), Error);
  CHECK_THROWS_AS(sima_attention_packed_inference(randn({1, 4, 24}), 2, SimaNorm::L1, SimaOrder::Auto, 0.f), Error);
  CHECK_THROWS_AS(sima_attention_inference(q, randn({1, 2, 4, 5}), v, SimaNorm::L1, SimaOrder::Auto, 1e-12f), Error);
  CHECK_THROWS_AS(sima_attention_inference(q, k, randn({1, 2, 5, 3}), SimaNorm::L1, SimaOrder::Auto, 1e-12f), Error);
}

TEST_CASE("SimaAttention: the inference core runs without a gradient only, and not for a qk_hook") {
  for (const char* order : {"qk_first", "kv_first"}) {
    CAPTURE(order);
    auto m = make_sima(192, 3, order);
    randomize_linears(*m, 11);
    const Tensor x = randn_leaf({2, 65, 192}, 12, false);
    Tensor train_out;
    {
      NoGradGuard ng;
      train_out = m->forward(x);
    }
    CHECK_FALSE(m->inference_core);  // set by set_inference_precision: models/test_precision.cpp
    m->inference_core = true;
    {
      NoGradGuard ng;
      const Tensor qkv = m->qkv->forward(x);
      const Tensor want = m->proj->forward(sima_attention_packed_inference(qkv, 3, SimaNorm::L1,
                                                                          parse_sima_order(order), 1e-12f));
      CHECK(max_abs_diff(m->forward(x), want) == 0.f);
      CHECK(rel_error(m->forward(x), train_out) < 2e-6f);
    }
    // With a gradient the training core runs: the same bits as with the switch off.
    const Tensor xg = x.detach().clone().requires_grad_();
    const Tensor with_grad = m->forward(xg);
    CHECK(max_abs_diff(with_grad.detach(), train_out) == 0.f);
    // A qk_hook needs q̂, k̂: the training core on split heads runs and hands them over.
    int calls = 0;
    m->qk_hook = [&](const Tensor& q, const Tensor&) { calls += q.dim() == 4; };
    NoGradGuard ng;
    CHECK(rel_error(m->forward(x), train_out) < 1e-6f);
    CHECK(calls == 1);
  }
}
