// Linformer inside the models: DeiT, XCiT and CvT pass their token count N to the attention
// (AttentionOptions.num_tokens), the config reads proj_len and sharing, and an image of another
// size is a clear error naming both token counts.
#include <memory>
#include <string>

#include "models/registry.h"
#include "nn/attention/linformer.h"
#include "testing.h"

using namespace sima;
using namespace sima::testing;

TEST_CASE("linformer: the models pass their token count; config reads proj_len and sharing") {
  nlohmann::json j = {{"arch", "deit"},   {"img_size", 16}, {"patch_size", 4}, {"num_classes", 3},
                      {"embed_dim", 16},  {"depth", 1},     {"num_heads", 2},
                      {"attention", {{"type", "linformer"}, {"proj_len", 5}, {"sharing", "kv"}}}};
  auto deit = create_model(j);
  auto* a = dynamic_cast<LinformerAttention*>(deit->attention_layers().at(0));
  REQUIRE(a != nullptr);
  CHECK(a->num_tokens() == 17);  // 4² patches + the class token
  CHECK(a->E.shape() == Shape{5, 17});
  CHECK(!a->compress_v);
  CHECK(deit->forward(randn({2, 3, 16, 16})).shape() == Shape{2, 3});
  // another image size gives another N: a clear error naming both counts
  const std::string e = error_message([&] { deit->forward(randn({1, 3, 20, 20})); });
  CHECK(e.find("num_tokens = 17") != std::string::npos);
  CHECK(e.find("N = 26") != std::string::npos);

  j["arch"] = "xcit";
  j["attention"] = {{"type", "linformer"}};
  auto xcit = create_model(j);
  CHECK(dynamic_cast<LinformerAttention*>(xcit->attention_layers().at(0))->num_tokens() == 16);
  CHECK(xcit->forward(randn({1, 3, 16, 16})).shape() == Shape{1, 3});

  ModelConfig c = model_config("cvt_13_224");  // stages: kernel 7 stride 4 pad 2, then 3, 2, 1 twice
  c.img_size = 32;
  c.stage_depths = {1, 1, 1};
  c.num_classes = 3;
  c.attention.variant = "linformer";
  auto cvt = create_model(c);
  std::vector<int64_t> tokens;
  for (Attention* l : cvt->attention_layers()) tokens.push_back(dynamic_cast<LinformerAttention*>(l)->num_tokens());
  CHECK(tokens == std::vector<int64_t>{8 * 8, 4 * 4, 1 + 2 * 2});  // 32 / 4, / 2, / 2; cls in the last
  CHECK(cvt->forward(randn({1, 3, 32, 32})).shape() == Shape{1, 3});
  CHECK(error_message([] { config_from_json({{"attention", {{"sharing", "all"}}}}); }).find("sharing") !=
        std::string::npos);
}
