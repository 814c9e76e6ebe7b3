// Configs accept nothing they then ignore, and counts derived
// from config values never wrap. Keys of another architecture, keys given twice, a model
// without arch or name, a section given a value by --set, integers beyond int64, and
// products that overflow are errors naming the key and what is valid.
#include <doctest/doctest.h>

#include <limits>

#include "core/error.h"
#include "models/registry.h"
#include "testing.h"
#include "train/config/experiment_config.h"

using namespace sima;
using sima::testing::error_message;
using json = nlohmann::json;

namespace {
std::string error_of(const std::string& text) {
  return error_message([&] { experiment_from_json(parse_json_strict(text, "cfg.json"), "cfg.json"); });
}
bool has(const std::string& s, const std::string& part) {
  INFO("message: " << s);
  return s.find(part) != std::string::npos;
}
}  // namespace

TEST_CASE("config strict: a model key its architecture does not read is an error listing the valid keys") {
  for (const char* key : {"embed_dim", "depth", "patch_size", "num_heads", "drop_path_rate", "distilled"}) {
    INFO(key);
    const std::string msg = error_of(R"({"model": {"name": "cvt_13_28", ")" + std::string(key) + R"(": 1}})");
    CHECK(has(msg, "cfg.json: model." + std::string(key) + ": arch 'cvt' does not read it (read by: "));
    CHECK(has(msg, "valid keys for arch cvt: arch, name, img_size"));
    CHECK(has(msg, "stage_dims"));
  }
  CHECK(has(error_of(R"({"model": {"name": "deit_tiny_patch4_28", "cls_attn_layers": 1}})"),
            "model.cls_attn_layers: arch 'deit' does not read it (read by: xcit; valid keys for arch deit:"));
  CHECK(has(error_of(R"({"model": {"name": "xcit_nano_12_p4_28", "stage_dims": [8]}})"),
            "model.stage_dims: arch 'xcit' does not read it (read by: cvt;"));
  CHECK(has(error_of(R"({"model": {"name": "xcit_nano_12_p4_28", "patch_embed": "conv"}})"),
            "model.patch_embed: arch 'xcit' does not read it (read by: deit;"));
  // "arch" is read first: it decides the keys, whatever the order in the object.
  CHECK(has(error_of(R"({"model": {"embed_dim": 8, "arch": "cvt"}})"), "model.embed_dim: arch 'cvt' does not read it"));
  CHECK(has(error_of(R"({"model": {"arch": "deit", "embedding": 8}})"),
            "model.embedding: unknown key (valid keys for arch deit: arch, name, img_size"));
}

TEST_CASE("config strict: the model section needs arch or name") {
  CHECK(has(error_of(R"({"model": {}})"), "cfg.json: model: needs \"arch\" (deit, xcit, cvt) or \"name\""));
  CHECK(has(error_of(R"({"model": {"num_classes": 10}})"), "model: needs \"arch\""));
  CHECK(has(error_of(R"({"name": "x"})"), "cfg.json: model: missing; every config needs a model section"));
  ExperimentConfig c = experiment_from_json(json::parse(R"({"model": {"arch": "cvt", "num_classes": 10}})"));
  CHECK(c.model.arch == "cvt");
  CHECK(c.model.num_classes == 10);
}

TEST_CASE("config strict: a key given twice is an error naming it and its lines") {
  const std::string text = "{\"model\": {\"name\": \"deit_tiny_patch4_28\"},\n \"train\": {\"epochs\": 2,\n  \"epochs\": 3}}";
  CHECK(error_of(text) == "cfg.json: key 'epochs' appears twice in one object (lines 2 and 3); a key may be given once");
  json doc = json::parse(R"({"model": {"name": "deit_tiny_patch4_28"}})");
  CHECK(error_message([&] { apply_override(doc, R"(model.attention={"type": "sima", "type": "softmax"})"); }) ==
        "--set model.attention={\"type\": \"sima\", \"type\": \"softmax\"}: key 'type' appears twice in one object "
        "(lines 1 and 1); a key may be given once");
}

TEST_CASE("config strict: --set on a section says it is a section and shows the form") {
  json doc = json::parse(R"({"model": {"name": "deit_tiny_patch4_28"}})");
  const std::string msg = error_message([&] { apply_override(doc, "train=5"); });
  CHECK(has(msg, "--set train=5: 'train' is a section, not a key; set one of its keys: --set train.epochs=5"));
  CHECK(has(msg, "(keys in train: epochs, seed,"));
  CHECK(has(error_message([&] { apply_override(doc, "optimizer=sgd"); }),
            "'optimizer' is a section, not a key; set one of its keys: --set optimizer.type=..."));
  CHECK(has(error_message([&] { apply_override(doc, "model=cvt_13_28"); }),
            "'model' is a section, not a key; set one of its keys: --set model.name=deit_tiny_patch4_28"));
  CHECK_NOTHROW(apply_override(doc, "name=run2"));  // a top-level key
}

TEST_CASE("config strict: integers beyond int64, fractional or negative are errors naming the key") {
  const std::string m = R"("model": {"name": "deit_tiny_patch4_28"}, )";
  CHECK(has(error_of("{" + m + R"("train": {"seed": 18446744073709551615}})"),
            "train.seed: 18446744073709551615 is too large (the largest allowed is 9223372036854775807)"));
  CHECK(has(error_of("{" + m + R"("train": {"seed": 1e19}})"), "train.seed: 1e+19 is too large"));
  CHECK(has(error_of("{" + m + R"("train": {"seed": -1}})"), "train.seed: must be >= 0, got -1"));
  CHECK(has(error_of("{" + m + R"("data": {"batch_size": 2.5}})"), "data.batch_size: expected an integer, got 2.5"));
  CHECK(has(error_of(R"({"model": {"name": "deit_tiny_patch4_28", "depth": 18446744073709551615}})"),
            "model.depth: 18446744073709551615 is too large"));
  CHECK(has(error_of(R"({"model": {"name": "deit_tiny_patch4_28", "mlp_ratio": 1e300}})"),
            "model.mlp_ratio: 1e+300 is beyond a float"));
  CHECK(has(error_of(R"({"model": {"name": "deit_tiny_patch4_28", "attention": {"type": "performer", "nb_features": 1e30}}})"),
            "model.attention.nb_features: 1e+30 is too large"));
}

TEST_CASE("config strict: counts derived from config values are overflow-checked, naming the key") {
  // One input batch: batch × channels × side² × 4 bytes.
  CHECK(has(error_of(R"({"model": {"name": "deit_tiny_patch4_28"}, "data": {"batch_size": 4611686018427387904}})"),
            "data.batch_size: 4611686018427387904 × 3136 bytes per image overflows a 64-bit count; the largest "
            "allowed is 2941126287262364"));
  CHECK(has(error_of(R"({"model": {"name": "deit_tiny_patch4_28", "img_size": 4294967296, "patch_size": 4}})"),
            "model.img_size: 4294967296 × 4294967296 (its square) overflows"));
  // Steps: train.epochs × steps per epoch (the trainers call schedule_steps).
  ExperimentConfig c = experiment_from_json(json::parse(R"({"model": {"name": "deit_tiny_patch4_28"},
      "data": {"batch_size": 128}, "train": {"epochs": 10}, "schedule": {"warmup_epochs": 1.5, "decay_epochs": 3}})"));
  ScheduleSteps s = schedule_steps(c, 468);
  CHECK(s.total == 4680);
  CHECK(s.warmup == 702);
  CHECK(s.decay == 1404);
  CHECK(s.samples == 4680 * 128);
  c.train.epochs = int64_t(1) << 60;  // wrapped to a negative count before
  CHECK(error_message([&] { schedule_steps(c, 468); }) ==
        "train.epochs: 1152921504606846976 × 468 steps per epoch overflows a 64-bit count; the largest allowed is "
        "19708059907809350");
  c.train.epochs = 19708059907809350;  // the steps fit, the images seen do not
  CHECK(error_message([&] { schedule_steps(c, 468); }) ==
        "train.epochs: 19708059907809350 × 59904 images per epoch overflows a 64-bit count; the largest allowed is "
        "153969218029760");
  c.train.epochs = 153969218029760;
  c.schedule.warmup_epochs = 0;
  CHECK(schedule_steps(c, 468).samples == 153969218029760 * 59904);
  c.train.epochs = 10;
  c.schedule.decay_epochs = 1e300;
  CHECK(has(error_message([&] { schedule_steps(c, 468); }), "schedule.decay_epochs: 1e+300 × 468 steps per epoch overflows"));
}

TEST_CASE("config strict: --config-reference documents every model key with its architectures, type and default") {
  const std::string md = config_reference_markdown();
  for (const auto& f : model_config_fields()) {
    INFO(f.key);
    CHECK(has(md, "| `model." + f.key + "` | " + f.type + " | "));
  }
  CHECK(has(md, "| `model.embed_dim` | integer | `192` | read by deit, xcit: token width D (valid: > 0) |"));
  CHECK(has(md, "| `model.cls_attn_layers` | integer | `2` | read by xcit: "));
  CHECK(has(md, "| `model.stage_dims` | list of integers | `[64,192,384]` | read by cvt: "));
  CHECK(has(md, "| `model.img_size` | integer | `224` | read by deit, xcit, cvt: "));
  CHECK(has(md, "| `model.arch` | string | required without name | "));
  CHECK(has(md, "| `model.attention.norm` | string | `\"l1\"` | read by sima: "));
}

TEST_CASE("config strict: a stored config with every architecture's keys (older checkpoints) still loads") {
  // config_to_json wrote every ModelConfig field before the model schema; the keys the
  // architecture does not read were never used and are dropped (stored_config_json).
  json old = json::parse(R"({"arch": "cvt", "name": "cvt_13_28", "img_size": 28, "in_chans": 1, "num_classes": 10,
    "mean": [0.286], "std": [0.353], "patch_size": 16, "embed_dim": 192, "depth": 12, "num_heads": 3,
    "mlp_ratio": 4.0, "act": "quick_gelu", "qkv_bias": true, "drop_rate": 0.0, "attn_drop_rate": 0.0,
    "drop_path_rate": 0.0, "norm_eps": 1e-5, "distilled": false, "patch_embed": "conv", "layer_scale_init": 0.0,
    "eta": 1.0, "tokens_norm": false, "cls_attn_layers": 2, "cls_attn_variant": "",
    "stage_dims": [64, 192, 384], "stage_depths": [1, 2, 10], "stage_heads": [1, 3, 6],
    "stage_embed_kernel": [3, 3, 3], "stage_embed_stride": [2, 2, 2], "stage_embed_padding": [1, 1, 1],
    "stage_drop_path": [0.0, 0.0, 0.1], "stage_stride_kv": [2, 2, 2], "attention": {"type": "softmax"}})");
  CHECK(has(error_message([&] { config_from_json(old); }), ": arch 'cvt' does not read it (read by: "));
  const ModelConfig c = stored_config_from_json(old);
  CHECK(c.arch == "cvt");
  CHECK(c.stage_embed_kernel == std::vector<int64_t>{3, 3, 3});
  // What is written today is what the architecture reads, and re-reads to the same config.
  const json now = config_to_json(c);
  CHECK(!now.contains("embed_dim"));
  CHECK(now.contains("stage_dims"));
  CHECK(config_to_json(config_from_json(now)) == now);
}
