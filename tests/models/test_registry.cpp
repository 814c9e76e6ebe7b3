// The registry (names, JSON configs with key-path errors) and model checkpoints
// (save -> load -> identical logits for every architecture; BatchNorm stats survive).
#include "testing.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "models/io/checkpoint.h"
#include "models/registry.h"
#include "nn/attention/variants.h"
#include "models/io/safetensors.h"

using namespace sima;
using namespace sima::testing;
using json = nlohmann::json;

namespace {
std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("sima_test_registry_" + name)).string();
}
// img_size × img_size inputs for a config (a 1-image batch, fixed values).
Tensor images_for(const ModelConfig& c, int64_t batch = 1, uint64_t seed = 3) {
  Generator g(seed);
  return randn({batch, c.in_chans, c.img_size, c.img_size}, g);
}
}  // namespace

TEST_CASE("every registered name builds and gives (B, num_classes) logits") {
  NoGradGuard ng;
  std::vector<std::string> names = model_names();
  CHECK(names.size() == 26);
  for (const std::string& n : names) {
    CAPTURE(n);
    ModelConfig c = model_config(n);
    CHECK(c.name == n);
    CHECK((n.size() < 5 || n.substr(n.size() - 5) != "_sima" || c.attention.variant == "sima"));
    auto m = create_model(c);
    m->eval();
    Tensor y = m->forward(images_for(c));
    CHECK(y.shape() == Shape{1, c.num_classes});
    CHECK(all_finite(y));
  }
  CHECK_THROWS_WITH_AS(model_config("resnet50"), doctest::Contains("model 'resnet50' is unknown (known: "), Error);
}

TEST_CASE("small configs: 28x28 grey and 32x32 colour inputs, 10 classes") {
  for (const char* n : {"deit_tiny_patch4_28", "xcit_nano_12_p4_28", "cvt_13_28"}) {
    ModelConfig c = model_config(n);
    CHECK(c.in_chans == 1);
    CHECK(c.img_size == 28);
    CHECK(c.num_classes == 10);
  }
  for (const char* n : {"deit_tiny_patch4_32", "xcit_nano_12_p4_32", "cvt_13_32"}) {
    ModelConfig c = model_config(n);
    CHECK(c.in_chans == 3);
    CHECK(c.img_size == 32);
  }
}

TEST_CASE("JSON: a model from an object, from a name plus overrides, and the round trip") {
  json j = json::parse(R"({"arch": "deit", "img_size": 16, "patch_size": 4, "embed_dim": 16, "depth": 2,
                           "num_heads": 2, "num_classes": 7, "attention": {"type": "sima", "order": "kv_first"}})");
  ModelConfig c = config_from_json(j);
  CHECK(c.arch == "deit");
  CHECK(c.embed_dim == 16);
  CHECK(c.attention.variant == "sima");
  CHECK(attention_option<std::string>(c.attention, "order") == "kv_first");
  CHECK(create_model(j)->forward(randn({1, 3, 16, 16})).shape() == Shape{1, 7});

  ModelConfig o = config_from_json(json::parse(R"({"name": "xcit_nano_12_p4_32", "depth": 2, "attention": {"type": "sima"}})"));
  CHECK(o.arch == "xcit");
  CHECK(o.depth == 2);
  CHECK(o.embed_dim == 128);
  CHECK(o.attention.variant == "sima");

  ModelConfig back = config_from_json(config_to_json(o));
  CHECK(config_to_json(back) == config_to_json(o));
}

TEST_CASE("JSON: unknown keys, wrong types and bad values name the key path") {
  auto err = [](const char* text) {
    try {
      config_from_json(json::parse(text));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(err(R"({"embed_dims": 3})").rfind("model.embed_dims: unknown key (valid keys for arch deit: arch, name, ", 0) == 0);
  CHECK(err(R"({"depth": "12"})") == R"(model.depth: expected an integer, got "12")");
  CHECK(err(R"({"depth": 0})") == "model.depth: must be positive, got 0");
  CHECK(err(R"({"drop_path_rate": 1.5})").rfind("model.drop_path_rate: must be in [0, 1), got 1.5", 0) == 0);
  CHECK(err(R"({"attention": {"type": "reformer"}})").rfind(
            "model.attention.type: attention variant 'reformer' is unknown (allowed: softmax, xca, sima, ", 0) == 0);
  CHECK(err(R"({"attention": {"type": "sima", "order": "sideways"}})") ==
        "model.attention.order: 'sideways' is not one of: auto, qk_first, kv_first");
  CHECK(err(R"({"attention": {"type": "sima", "eps": 0}})") == "model.attention.eps: must be > 0, got 0.0");
  CHECK(err(R"({"attention": {"type": "soft", "sr": 0}})") == "model.attention.sr: must be >= 1, got 0");
  CHECK(err(R"({"attention": {"type": "relu", "gate": 1}})") == "model.attention.gate: expected true or false, got 1");
  // A key the chosen variant does not read: named with the variant and what it reads.
  CHECK(err(R"({"attention": {"type": "softmax", "norm": "l2"}})") ==
        "model.attention.norm: attention variant 'softmax' does not read 'norm' (it reads: type; read by: sima)");
  CHECK(err(R"({"attention": {"type": "softmax", "gate": true}})") ==
        "model.attention.gate: attention variant 'softmax' does not read 'gate' (it reads: type; read by: relu)");
  CHECK(err(R"({"attention": {"type": "sima", "sr": 2}})") ==
        "model.attention.sr: attention variant 'sima' does not read 'sr' (it reads: type, norm, order, eps; read by: "
        "soft)");
  CHECK(err(R"({"attention": {"order": "auto"}})") ==  // no type: the default variant, softmax
        "model.attention.order: attention variant 'softmax' does not read 'order' (it reads: type; read by: sima)");
  CHECK(err(R"({"attention": {"type": "sima", "tau": 1}})") ==
        "model.attention.tau: attention variant 'sima' does not read 'tau' (it reads: type, norm, order, eps; no "
        "variant reads it)");
  CHECK(err(R"({"arch": "cvt", "stage_dims": [64, -1, 3]})") == "model.stage_dims[1]: must be positive, got -1");
  // A key of another architecture is read by none here (a config accepts nothing it ignores): named with its readers.
  CHECK(err(R"({"stage_dims": [64]})").rfind("model.stage_dims: arch 'deit' does not read it (read by: cvt; ", 0) == 0);
  CHECK(err(R"({"name": "vit_huge"})").rfind("model.name: model 'vit_huge' is unknown", 0) == 0);
  CHECK(err(R"([1, 2])") == "model: expected a JSON object, got [1,2]");
}

TEST_CASE("checkpoints: save -> load -> identical logits for every architecture; BN stats survive") {
  for (const char* n : {"deit_tiny_patch4_32_sima", "xcit_nano_12_p4_32", "cvt_13_28"}) {
    CAPTURE(n);
    ModelConfig c = std::string(n).rfind("cvt", 0) == 0
                        ? config_from_json(json{{"name", n}, {"stage_depths", {1, 1, 1}}})
                        : config_from_json(json{{"name", n}, {"depth", 2}});
    auto m = create_model(c);
    // One training step's worth of BatchNorm statistics, then compare in eval mode.
    m->train();
    m->forward(images_for(c, 2, 9));
    m->eval();
    Tensor x = images_for(c, 2);
    Tensor y = m->forward(x);
    std::string path = temp_path(std::string(n) + ".safetensors");
    save_checkpoint(path, *m);
    auto loaded = load_checkpoint(path);
    loaded->eval();
    CHECK(loaded->config().arch == c.arch);
    CHECK(max_abs_diff(loaded->forward(x), y) == 0.f);
    for (auto& [name, b] : m->named_buffers()) {
      CAPTURE(name);
      CHECK(max_abs_diff(b, loaded->state_dict().at(name)) == 0.f);
    }
    // The metadata holds the normalisation too.
    auto meta = read_safetensors_metadata(path);
    json norm = json::parse(meta.at("normalization"));
    CHECK(norm.at("mean").get<std::vector<float>>() == c.mean);
    std::filesystem::remove(path);
  }
}

TEST_CASE("checkpoints: a file from another model or without a config is a clear error") {
  auto a = create_model(config_from_json(json{{"name", "deit_tiny_patch4_32"}, {"depth", 1}}));
  auto b = create_model(config_from_json(json{{"name", "deit_tiny_patch4_32"}, {"depth", 2}}));
  std::string path = temp_path("a.safetensors");
  save_checkpoint(path, *a);
  try {
    load_weights(*b, path);
    FAIL("no error");
  } catch (const Error& e) {
    std::string msg = e.what();
    CHECK(msg.find(path) != std::string::npos);
    CHECK(msg.find("missing (12)") != std::string::npos);  // blocks.1.* of b
  }
  save_safetensors(path, {{"w", zeros({2})}}, {});
  CHECK_THROWS_WITH_AS(load_checkpoint(path), doctest::Contains("no model config in the metadata"), Error);
  save_safetensors(path, {{"w", zeros({2})}}, {{"config", "{not json"}});
  CHECK_THROWS_WITH_AS(load_checkpoint(path), doctest::Contains("not valid JSON"), Error);
  save_safetensors(path, {{"w", zeros({2})}}, {{"config", R"({"arch": "deit", "depth": -2})"}});
  CHECK_THROWS_WITH_AS(load_checkpoint(path), doctest::Contains("config.depth: must be positive"), Error);
  // A valid config of a model far larger than the file (fuzz finding, tests/fuzz/regressions/
  // checkpoint): create_model allocated what it said (here 4 x 40 GB Linear weights) before
  // the tensors were compared; now the file's size bounds the model built from it.
  // (embed_dim 2000: 48 M parameters, under the memory limit that models/budget.h checks first.)
  save_safetensors(path, {{"w", zeros({2})}},
                   {{"config", R"({"arch": "deit", "embed_dim": 2000, "num_heads": 1, "depth": 1, "img_size": 8,)"
                               R"( "patch_size": 4, "in_chans": 1, "mean": [0.5], "std": [0.5]})"}});
  const std::string too_large = path + ": the model config describes a larger model than the file's 2 values "
                                      "(its tensors need more than 1048592 bytes)";
  CHECK_THROWS_WITH_AS(load_checkpoint(path), doctest::Contains(too_large.c_str()), Error);
  // Past the memory limit, the config alone is refused (models/budget.h), naming its size keys.
  save_safetensors(path, {{"w", zeros({2})}},
                   {{"config", R"({"arch": "deit", "embed_dim": 100000, "num_heads": 1, "depth": 1, "img_size": 8,)"
                               R"( "patch_size": 4, "in_chans": 1, "mean": [0.5], "std": [0.5]})"}});
  CHECK_THROWS_WITH_AS(load_checkpoint(path), doctest::Contains((path + ": model config (deit): embed_dim 100000").c_str()),
                       Error);
  std::filesystem::remove(path);
}
