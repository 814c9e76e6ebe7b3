// The measurements behind sima-bench: the GEMM FLOP counter, exp() counts per variant
// (the paper's Table 1 column), model-bench bookkeeping and errors.
#include <doctest/doctest.h>

#include "core/flops.h"
#include "core/ops.h"
#include "testing.h"
#include "train/benchmark.h"

using namespace sima;
using sima::testing::error_message;

TEST_CASE("bench: the GEMM counter adds 2·m·n·k per product (matmul and linear)") {
  Tensor a = randn({3, 5, 7}), b = randn({7, 4});
  int64_t f0 = gemm_flops();
  matmul(a, b);
  CHECK(gemm_flops() - f0 == 2 * 15 * 4 * 7);
  Tensor x = randn({6, 8}), w = randn({10, 8});
  f0 = gemm_flops();
  linear(x, w);
  CHECK(gemm_flops() - f0 == 2 * 6 * 10 * 8);
}

TEST_CASE("bench: attention rows carry the exp() count of each variant and its GEMM work") {
  AttentionBenchConfig c;
  c.batch = 2, c.tokens = 16, c.dim = 32, c.heads = 4;
  c.timing = {.warmup = 0, .reps = 1};
  c.variants = {"softmax", "sima", "xca"};
  auto rows = bench_attention(c);
  REQUIRE(rows.size() == 3);
  const int64_t B = 2, h = 4, N = 16, d = 8, C = 32;
  CHECK(rows[0].exp_calls == B * h * N * N);  // softmax: one exp per score
  CHECK(rows[1].exp_calls == 0);              // SimA: none
  CHECK(rows[2].exp_calls == B * h * d * d);  // XCA: d×d channel attention
  CHECK(rows[1].order == "auto");
  // qkv (C -> 3C) and proj (C -> C) Linears: 2·B·N·C·4C; softmax adds q·kᵀ and A·v (2·2·B·h·N·N·d).
  const double linears = 2.0 * B * N * C * 4 * C;
  CHECK(rows[0].gemm_gflop * 1e9 == doctest::Approx(linears + 4.0 * B * h * N * N * d));
  for (auto& r : rows) {
    CHECK(r.error.empty());
    CHECK(r.forward_ms > 0);
    CHECK(r.train_ms > 0);
  }
  nlohmann::json j = to_json(rows[1], c);
  CHECK(j["variant"] == "sima");
  CHECK(j["exp_calls"] == 0);
  CHECK(j.contains("train_ms"));
}

TEST_CASE("bench: bad attention shapes and variants are errors") {
  CHECK(error_message([] {
          AttentionBenchConfig c;
          c.dim = 30, c.heads = 4;
          bench_attention(c);
        }) ==
        "attention bench: --heads 4 does not divide --dim 30");
  CHECK(error_message([] {
          AttentionBenchConfig c;
          c.variants = {"mamba"};
          bench_attention(c);
        }) == "attention bench: unknown variant 'mamba'");
}

TEST_CASE("bench: a model bench reports consistent rates") {
  ModelBenchConfig c;
  c.model = nlohmann::json::parse(R"({"name": "deit_tiny_patch4_28_sima", "embed_dim": 16, "depth": 1, "num_heads": 2})");
  c.batch = 4;
  c.timing = {.warmup = 0, .reps = 1};
  ModelBenchResult r = bench_model(c);
  CHECK(r.img_size == 28);
  CHECK(r.train_img_per_s == doctest::Approx(4.0 / (r.train_step_ms * 1e-3)));
  CHECK(r.infer_img_per_s == doctest::Approx(4.0 / (r.infer_ms * 1e-3)));
  CHECK(r.train_gemm_gflop > 0);
  CHECK(r.sgemm_peak_gflop_per_s > 0);
  CHECK(r.peak_rss_mb > 1);
  CHECK(to_json(r)["fraction_of_sgemm_peak"].get<double>() > 0);
}
