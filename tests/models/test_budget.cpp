// models/budget.h: the parameter count from a config equals the built model's for every
// registered model, every config in configs/ and every attention variant with its
// parameter-carrying options (configs/: tests/train/test_budget_configs.cpp); a config claiming a huge model fails before any allocation
// with a message naming its size keys and the limit (SIMA_MEMORY_LIMIT, core/memory_limit.h).
#include <doctest/doctest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

#include "core/error.h"
#include "core/memory_limit.h"
#include "models/budget.h"
#include "models/registry.h"
#include "nn/attention/variants.h"
#include "testing.h"

using namespace sima;
using sima::testing::error_message;

namespace {

bool has(const std::string& s, const std::string& part) {
  INFO("message: " << s);
  return s.find(part) != std::string::npos;
}

void check_count(const ModelConfig& cfg, const std::string& label) {
  INFO(label);
  const int64_t built = create_model(cfg)->num_parameters();
  CHECK(count_parameters(cfg) == double(built));
}

// Sets an environment variable for one scope.
struct ScopedEnv {
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() { had_ ? ::setenv(name_, old_.c_str(), 1) : ::unsetenv(name_); }
  const char* name_;
  std::string old_;
  bool had_ = false;
};

}  // namespace

TEST_CASE("budget: the parameter count from the config equals num_parameters() of every registered model") {
  for (const std::string& name : model_names()) check_count(model_config(name), name);
}

TEST_CASE("budget: every attention variant and its parameter-carrying options count exactly, in DeiT, XCiT and CvT") {
  const char* variants[] = {"softmax", "xca", "sima", "relu", "soft", "linear_elu", "cosformer", "performer",
                            "nystromformer", "efficient", "linformer"};
  for (const char* arch : {"deit_tiny_patch4_32", "xcit_nano_12_p4_32", "cvt_13_32"})
    for (const char* v : variants) {
      ModelConfig c = model_config(arch);
      c.depth = 1, c.cls_attn_layers = 1, c.stage_depths = {1, 1, 1};
      c.attention.variant = v;
      if (c.arch == "xcit" && std::string(v) != "softmax" && std::string(v) != "sima") c.cls_attn_variant = "softmax";
      check_count(c, std::string(arch) + " " + v);
      const std::string var = v;
      if (var == "relu") c.attention.with("qk_norm", true).with("qk_norm_bias", true).with("gate", true);
      if (var == "soft") c.attention.with("v_conv", 3).with("bottleneck", "conv").with("sr", c.arch == "cvt" ? 1 : 2);
      if (var == "nystromformer") c.attention.with("conv_kernel_size", 3);
      if (var == "linformer") c.attention.with("sharing", "none").with("proj_len", 5);
      check_count(c, std::string(arch) + " " + v + " with options");
      if (var == "soft")  // CvT's last stage (the class token's) or every block of DeiT and XCiT as softmax
        for (int64_t most : {5, 65, 1000}) {
          c.attention = attention_options_from_json({{"softmax_max_tokens", most}}, c.attention);
          check_count(c, std::string(arch) + " soft, softmax_max_tokens " + std::to_string(most));
        }
      if (var == "soft") c.attention = attention_options_from_json({{"softmax_max_tokens", 0}}, c.attention);
      if (var == "linformer") c.attention.with("sharing", "kv");
      c.distilled = true, c.layer_scale_init = 0.1f, c.patch_embed = "conv_stem";
      c.num_classes = 0, c.qkv_bias = false, c.mlp_ratio = 2.5f;
      if (c.arch == "deit") c.num_classes = 3;  // DeiT needs a head
      check_count(c, std::string(arch) + " " + v + " shared kv, distilled, conv stem, no bias");
    }
}

TEST_CASE("budget: a config claiming a huge model fails before allocating, naming its size keys and the limit") {
  ModelConfig c = model_config("deit_tiny_patch16_224");
  c.embed_dim = 300000, c.num_heads = 3;  // 1e12 parameters: 4 TB
  const std::string msg = error_message([&] { create_model(c); });
  CHECK(has(msg, "embed_dim 300000"));
  CHECK(has(msg, "depth 12"));
  CHECK(has(msg, "more than the memory limit of"));
  CHECK(has(msg, "SIMA_MEMORY_LIMIT"));

  ModelConfig v = model_config("cvt_13_224");
  v.stage_depths = {1, 2, 100000000};
  const std::string cvt = error_message([&] { create_model(v); });
  CHECK(has(cvt, "stage_depths [1, 2, 100000000]"));
  CHECK(has(cvt, "stage_dims [64, 192, 384]"));
}

TEST_CASE("budget: SIMA_MEMORY_LIMIT sets the limit; a bad value is an error naming it") {
  {
    ScopedEnv env("SIMA_MEMORY_LIMIT", "8M");
    CHECK(memory_limit_bytes() == 8 << 20);
    // deit_tiny: 5.7 M parameters = 23 MB, over 8 MiB; the message names the variable's value.
    const std::string msg = error_message([] { create_model(std::string("deit_tiny_patch16_224")); });
    CHECK(has(msg, "SIMA_MEMORY_LIMIT=8M"));
    CHECK(has(msg, "5.7"));
  }
  {
    ScopedEnv env("SIMA_MEMORY_LIMIT", "lots");
    CHECK(has(error_message([] { memory_limit_bytes(); }), "SIMA_MEMORY_LIMIT='lots' is not a positive byte count"));
  }
  {
    ScopedEnv env("SIMA_MEMORY_LIMIT", "4G");
    CHECK(memory_limit_bytes() == int64_t(4) << 30);
    CHECK(create_model(std::string("deit_tiny_patch4_32"))->num_parameters() > 0);
  }
  CHECK(memory_limit_bytes() > 0);
}
