// The measurements behind sima-bench: the GEMM FLOP counter, exp() counts per variant
// (the paper's Table 1 column), SimA's product orders and the paper's presets, model-bench
// bookkeeping and errors; then the sima-bench binary itself in each mode on tiny shapes,
// so the app never rots.
#include <doctest/doctest.h>

#include <chrono>
#include <thread>

#include "app_testing.h"
#include "core/flops.h"
#include "core/ops.h"
#include "core/parallel.h"
#include "testing.h"
#include "train/bench/benchmark.h"

using namespace sima;
using sima::testing::error_message;
using sima::testing::Run;
using sima::testing::run_app;

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

TEST_CASE("bench: SOFT gets the patch grid after a class token (N = 1 + H·W)") {
  AttentionBenchConfig c;
  c.batch = 1, c.dim = 32, c.heads = 4;
  c.timing = {.warmup = 0, .reps = 1};
  c.variants = {"soft"};
  for (int64_t n : {16, 17}) {  // 4x4 grid; a class token + 4x4
    c.tokens = n;
    auto rows = bench_attention(c);
    REQUIRE(rows.size() == 1);
    CHECK_MESSAGE(rows[0].error.empty(), "N = ", n, ": ", rows[0].error);
    CHECK(rows[0].exp_calls > 0);
  }
  c.tokens = 18;  // neither N nor N - 1 is a square: an 18x1 strip, too thin for the 2x2 bottleneck
  auto rows = bench_attention(c);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].error.find("token grid 18x1") != std::string::npos);
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
        }).rfind("attention bench: attention variant 'mamba' is unknown (allowed: softmax, xca, sima, ", 0) == 0);
  CHECK(error_message([] {
          AttentionBenchConfig c;
          c.orders = {"kv_first", "backwards"};
          bench_attention(c);
        }) == "attention bench: order 'backwards' is not one of: auto, qk_first, kv_first");
  CHECK(error_message([] { attention_preset("table4", {}); }) ==
        "attention bench: preset 'table4' is not one of: table3, table3_head, fig1_tokens, fig1_dim");
}

TEST_CASE("bench: SimA runs once per order, each doing its own products") {
  AttentionBenchConfig c;
  c.batch = 1, c.tokens = 16, c.dim = 64, c.heads = 2;  // N = 16, d = 32
  c.timing = {.warmup = 0, .reps = 1};
  c.variants = {"sima", "softmax"};
  c.orders = {"qk_first", "kv_first", "auto"};
  auto rows = bench_attention(c);
  REQUIRE(rows.size() == 4);
  CHECK(rows[0].order == "qk_first");
  CHECK(rows[1].order == "kv_first");
  CHECK(rows[2].order == "auto");
  CHECK(rows[3].variant == "softmax");
  CHECK(rows[3].order.empty());
  // core products: qk_first 2·(N·N·d)·2 per head, kv_first 2·(N·d·d)·2; the linears are shared
  const double h = 2, N = 16, d = 32, linears = 2.0 * N * 64 * 4 * 64;
  CHECK(rows[0].gemm_gflop * 1e9 == doctest::Approx(linears + h * 4.0 * N * N * d));
  CHECK(rows[1].gemm_gflop * 1e9 == doctest::Approx(linears + h * 4.0 * N * d * d));
  CHECK(rows[2].gemm_gflop == doctest::Approx(rows[0].gemm_gflop));  // N < d: auto picks qk_first
}

TEST_CASE("bench: the paper's presets") {
  AttentionBenchConfig base;
  base.variants = {"sima"};
  auto t3 = attention_preset("table3", base);
  REQUIRE(t3.size() == 2);  // D = the token width (C), as the paper's section 2.1 defines it
  CHECK((t3[0].batch == 8 && t3[0].tokens == 256 && t3[0].dim == 64 && t3[0].heads == 8));
  CHECK((t3[1].batch == 8 && t3[1].tokens == 64 && t3[1].dim == 256 && t3[1].heads == 8));
  for (auto& c : t3) CHECK(c.orders == std::vector<std::string>{"qk_first", "auto"});  // like-for-like, then auto
  CHECK(t3[0].variants == base.variants);
  auto t3h = attention_preset("table3_head", base);
  REQUIRE(t3h.size() == 2);  // D = the head width: C = D * 8
  CHECK((t3h[0].batch == 8 && t3h[0].tokens == 256 && t3h[0].dim == 512 && t3h[0].heads == 8));
  CHECK((t3h[1].batch == 8 && t3h[1].tokens == 64 && t3h[1].dim == 2048 && t3h[1].heads == 8));
  for (auto& c : t3h) CHECK(c.orders == std::vector<std::string>{"qk_first", "auto"});
  auto tokens = attention_preset("fig1_tokens", base);
  REQUIRE(tokens.size() == 5);
  CHECK(tokens[0].tokens == 197);  // 224 / 16 = 14, 14² + cls
  CHECK(tokens[4].tokens == 3137);
  for (auto& c : tokens) CHECK((c.dim == 384 && c.heads == 6 && c.batch == 1 && c.orders.size() == 3));
  auto dims = attention_preset("fig1_dim", base);
  REQUIRE(dims.size() == 5);
  CHECK(dims[0].dim == 8 * 16);
  CHECK(dims[4].dim == 8 * 256);
  for (auto& c : dims) CHECK((c.tokens == 197 && c.heads == 8));
}

TEST_CASE("bench: best_ms takes the fastest run, median_ms the middle one; the SGEMM peak uses the fastest") {
  // Three slow runs (30 ms asleep) then two that return at once: the median is a slow one.
  int call = 0;
  auto f = [&] {
    if (call++ % 5 < 3) std::this_thread::sleep_for(std::chrono::milliseconds(30));
  };
  CHECK(median_ms(f, {.warmup = 0, .reps = 5}) >= 30.0);
  call = 0;
  CHECK(best_ms(f, {.warmup = 0, .reps = 5}) < 30.0);
  CHECK_THROWS_AS(best_ms(f, {.warmup = 0, .reps = 0}), Error);
  CHECK(measure_sgemm_peak(64, {.warmup = 0, .reps = 3}) > 0);
  CHECK_THROWS_AS(measure_sgemm_peak(64, {.warmup = 0, .reps = 0}), Error);
  CHECK_THROWS_AS(measure_sgemm_peak(32), Error);
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
  // The step repeats the forward's products and adds up to two per product in the backward (one
  // where no input gradient is needed, as for the patch embedding; recomputations add a few).
  CHECK(r.infer_gemm_gflop > 0);
  CHECK(r.train_gemm_gflop >= 2 * r.infer_gemm_gflop);
  CHECK(r.train_gemm_gflop <= 4 * r.infer_gemm_gflop);
  CHECK(r.infer_gflop_per_s == doctest::Approx(r.infer_gemm_gflop / (r.infer_ms * 1e-3)));
  CHECK(to_json(r)["infer_fraction_of_sgemm_peak"].get<double>() > 0);
  // At least the forward's per-head products: q k^T or k^T v and its product with q or v, 2 heads x 4 images.
  CHECK(r.train_gemm_calls >= 2 * 2 * 4);
  CHECK(to_json(r)["train_gemm_calls"] == r.train_gemm_calls);
  // The time inside the library's calls: some, and not more than the threads could spend in the
  // step that was timed (its wall time times the threads; a few microseconds for the clock reads).
  CHECK(r.train_gemm_ms > 0);
  CHECK(r.timed_step_ms > 0);
  CHECK(r.train_gemm_ms <= r.timed_step_ms * num_threads() + 0.01);
}

TEST_CASE("bench: the GEMM library's time is counted only while a GemmTiming lives") {
  Tensor a = randn({64, 64}), b = randn({64, 64});
  const int64_t before = gemm_ns();
  matmul(a, b);
  CHECK(gemm_ns() == before);
  {
    GemmTiming timing;
    matmul(a, b);
  }
  const int64_t timed = gemm_ns();
  CHECK(timed > before);
  matmul(a, b);
  CHECK(gemm_ns() == timed);
}

TEST_CASE("bench: GEMM calls per step count the library's calls, per head and per iteration") {
  auto bench = [](const char* attention, int64_t batch, int64_t img) {
    ModelBenchConfig c;
    c.model = nlohmann::json::parse(std::string(R"({"name": "deit_tiny_patch4_28", "embed_dim": 16, "depth": 1,
                                                    "num_heads": 2, "attention": )") + attention + "}");
    c.batch = batch;
    c.img_size = img;
    c.timing = {.warmup = 0, .reps = 1};
    return bench_model(c);
  };
  auto calls = [&](const char* attention, int64_t batch, int64_t img = 28) {
    return bench(attention, batch, img).train_gemm_calls;
  };
  const char* sima = R"({"type": "sima"})";
  // The per-head products are one call per image and head: twice the batch, more calls.
  CHECK(calls(sima, 8) > calls(sima, 4));
  // Nystromformer's pseudo-inverse iterates m×m products per image and head, forward and backward.
  // Up to m = 64 they go to small_gemm (core/ops/small_gemm.h): FLOPs in the count but no library
  // call, so more iterations add FLOPs and no calls.
  const char* nystrom1 = R"({"type": "nystromformer", "num_landmarks": 5, "pinv_iters": 1})";
  const char* nystrom6 = R"({"type": "nystromformer", "num_landmarks": 5, "pinv_iters": 6})";
  const ModelBenchResult one = bench(nystrom1, 4, 28), six = bench(nystrom6, 4, 28);
  CHECK(six.train_gemm_calls == one.train_gemm_calls);
  CHECK(six.train_gemm_gflop > one.train_gemm_gflop);
  // Past small_gemm's limit (65 landmarks of 36×36 images' 81 tokens) the library takes them, one
  // call per product: 4 a forward iteration, and in backward 4 again (the iterations rerun from the
  // saved A) and 11 for the step's reverse.
  const char* big1 = R"({"type": "nystromformer", "num_landmarks": 65, "pinv_iters": 1})";
  const char* big6 = R"({"type": "nystromformer", "num_landmarks": 65, "pinv_iters": 6})";
  const int64_t pairs = 2 * 2;  // batch 2 × 2 heads, one block (depth 1)
  CHECK(calls(big6, 2, 36) - calls(big1, 2, 36) == 5 * pairs * (4 + 4 + 11));
}

// ---- the sima-bench binary ----------------------------------------------------------------

TEST_CASE("sima-bench: each mode runs on tiny shapes and prints JSON") {
  Run att = run_app("sima-bench attention --n 16 --dim 32 --heads 2 --batch 1 --reps 1 --variants softmax,sima "
                    "--order qk_first,kv_first --json");
  INFO(att.err);
  REQUIRE(att.status == 0);
  std::vector<nlohmann::json> rows;
  std::stringstream lines(att.out);
  for (std::string line; std::getline(lines, line);) rows.push_back(nlohmann::json::parse(line));
  REQUIRE(rows.size() == 3);
  CHECK(rows[0]["variant"] == "softmax");
  CHECK(rows[1]["order"] == "qk_first");
  CHECK(rows[2]["order"] == "kv_first");
  for (auto& r : rows) CHECK(r["train_ms"].get<double>() > 0);

  Run table = run_app("sima-bench attention --n 16 --dim 32 --heads 2 --batch 1 --reps 1 --variants xca");
  REQUIRE(table.status == 0);
  CHECK(table.out.find("xca") != std::string::npos);

  Run model = run_app(
      "sima-bench model --model '{\"name\":\"deit_tiny_patch4_28_sima\",\"embed_dim\":16,\"depth\":1,"
      "\"num_heads\":2}' --batch 2 --reps 1 --json");
  INFO(model.err);
  REQUIRE(model.status == 0);
  nlohmann::json m = nlohmann::json::parse(model.out);
  for (const char* key : {"train_img_per_s", "infer_img_per_s", "latency_b1_ms", "peak_rss_mb",
                          "fraction_of_sgemm_peak", "infer_fraction_of_sgemm_peak", "train_gemm_gflop", "train_gemm_calls",
                          "parameters"})
    CHECK(m.contains(key));
  CHECK(m["batch"] == 2);
}

TEST_CASE("sima-bench: bad flags and values are one-line errors") {
  Run no_mode = run_app("sima-bench");
  CHECK(no_mode.status == 2);
  Run bad_preset = run_app("sima-bench attention --preset table9");
  CHECK(bad_preset.status == 1);
  CHECK(bad_preset.err.find("preset 'table9' is not one of") != std::string::npos);
  Run bad_model = run_app("sima-bench model --model '{\"name\":' --reps 1");
  CHECK(bad_model.status == 1);
  CHECK(bad_model.err.find("--model: not valid JSON") != std::string::npos);
  Run no_model = run_app("sima-bench model");
  CHECK(no_model.status == 2);
}
