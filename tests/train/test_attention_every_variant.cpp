// Every row of the attention variant table (nn/attention/variants.h) end to end, on tiny
// shapes: DeiT, XCiT and CvT forward and backward (a finite gradient on every parameter),
// the heatmap token maps (and the class row exactly where traits.softmax_row says), and
// sima-bench attention (the function and the binary). A new row is covered here without
// touching this file.
#include "testing.h"

#include "app_testing.h"
#include "core/parallel.h"
#include "models/registry.h"
#include "nn/attention/variants.h"
#include "train/bench/benchmark.h"
#include "train/viz/attention_heatmap.h"

using namespace sima;
using namespace sima::testing;
using json = nlohmann::json;

namespace {

// Tiny models run on one thread (OpenBLAS threads even GEMMs of a few hundred multiply-adds).
struct OneThread {
  int saved = num_threads();
  OneThread() { set_num_threads(1); }
  ~OneThread() { set_num_threads(saved); }
};

// One model per architecture, with 16x16 (DeiT: 4x4 grid + cls), 32x32 (XCiT: 4x4 grid) and
// 28x28 grey (CvT: grids 7, 4, 2 (+ cls in the last stage)) images.
struct Arch {
  std::string name;
  json config;
  Shape image;
};
std::vector<Arch> archs(const std::string& variant) {
  const json attention = {{"type", variant}};
  return {
      {"deit",
       {{"arch", "deit"}, {"img_size", 16}, {"patch_size", 4}, {"embed_dim", 16}, {"depth", 1}, {"num_heads", 2},
        {"num_classes", 5}, {"attention", attention}},
       {2, 3, 16, 16}},
      {"xcit",
       {{"arch", "xcit"}, {"img_size", 32}, {"patch_size", 8}, {"embed_dim", 16},
        {"depth", 1}, {"num_heads", 2}, {"cls_attn_layers", 1}, {"num_classes", 5}, {"attention", attention}},
       {2, 3, 32, 32}},
      {"cvt",
       {{"name", "cvt_13_28"}, {"stage_dims", {8, 16, 24}}, {"stage_depths", {1, 1, 1}}, {"stage_heads", {1, 2, 3}},
        {"attention", attention}},
       {2, 1, 28, 28}},
  };
}

}  // namespace

TEST_CASE("every variant: DeiT, XCiT and CvT forward and backward, a finite gradient on every parameter") {
  OneThread one;
  for (const std::string& v : attention_variant_names())
    for (const Arch& a : archs(v)) {
      CAPTURE(v);
      CAPTURE(a.name);
      auto model = create_model(a.config);
      REQUIRE(!model->attention_layers().empty());
      for (Attention* layer : model->attention_layers()) CHECK(layer->options().variant == v);
      Tensor x = randn_leaf(a.image, 11, false);
      Tensor logits = model->forward(x);
      REQUIRE(logits.shape() == Shape{a.image[0], model->config().num_classes});
      REQUIRE(all_finite(logits));
      cross_entropy(logits, {1, 3}).backward();
      for (auto& [n, p] : model->named_parameters()) {
        CAPTURE(n);
        REQUIRE(p.grad().defined());
        CHECK(all_finite(p.grad()));
      }
    }
}

TEST_CASE("every variant: heatmap token maps; the class row exactly for traits.softmax_row") {
  OneThread one;
  for (const std::string& v : attention_variant_names()) {
    CAPTURE(v);
    const bool softmax_row = attention_variant(v).traits.softmax_row;
    for (const Arch& a : archs(v)) {
      CAPTURE(a.name);
      auto model = create_model(a.config);
      Tensor x = randn_leaf({1, a.image[1], a.image[2], a.image[3]}, 5, false);
      const TokenMaps tm = token_maps(*model, x, -1);
      CHECK(tm.variant == v);
      CHECK(tm.q.size() == size_t(tm.layout.q.height * tm.layout.q.width));
      CHECK(tm.k.size() == size_t(tm.layout.k.height * tm.layout.k.width));
      for (float f : tm.q) CHECK(std::isfinite(f));
      if (a.name == "xcit") continue;  // its self-attention layers see no class token
      if (softmax_row) {
        const TokenMaps with_cls = token_maps(*model, x, -1, true);
        double sum = 0.0;
        for (float p : with_cls.cls) sum += p;
        CHECK(sum > 0.0);
        CHECK(sum <= 1.0 + 1e-5);  // a share of the softmax row (the rest went to the class key)
      } else {
        CHECK_THROWS_WITH_AS(token_maps(*model, x, -1, true), doctest::Contains("forms no softmax attention matrix"), Error);
      }
    }
  }
}

TEST_CASE("every variant: sima-bench attention measures each row, the binary lists each") {
  AttentionBenchConfig c;
  c.batch = 1, c.tokens = 16, c.dim = 16, c.heads = 2;
  c.timing = {.warmup = 0, .reps = 1};
  c.orders = {"qk_first", "kv_first"};
  const auto rows = bench_attention(c);  // no list: every row of the table
  size_t expected = 0;
  for (const auto& v : attention_variants()) expected += v.option("order") ? 2 : 1;
  REQUIRE(rows.size() == expected);
  for (const auto& r : rows) {
    CAPTURE(r.variant);
    CHECK(r.error.empty());
    CHECK(r.forward_ms > 0);
    CHECK(r.train_ms > 0);
  }
  Run run = run_app("sima-bench attention --n 16 --dim 16 --heads 2 --batch 1 --reps 1 --json");
  REQUIRE_MESSAGE(run.status == 0, run.err);
  for (const std::string& v : attention_variant_names()) {
    CAPTURE(v);
    CHECK(run.out.find("\"variant\":\"" + v + "\"") != std::string::npos);
  }
  CHECK(run.out.find("\"error\"") == std::string::npos);
}
