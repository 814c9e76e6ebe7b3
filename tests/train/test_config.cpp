// Experiment configs: defaults, every section read, unknown keys / wrong types / bad values
// / inconsistent combinations rejected with the key path in the message, --set overrides,
// the resolved config round-tripping, and the generated reference table.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "testing.h"
#include "nn/attention/variants.h"
#include "train/config/experiment_config.h"

using namespace sima;
using sima::testing::error_message;
using json = nlohmann::json;

namespace {
ExperimentConfig parse(const std::string& text) { return experiment_from_json(json::parse(text), "cfg.json"); }
std::string error_of(const std::string& text) {
  return error_message([&] { parse(text); });
}
bool has(const std::string& s, const std::string& part) {
  INFO("message: " << s);
  return s.find(part) != std::string::npos;
}
}  // namespace

TEST_CASE("config: defaults are the DeiT recipe and every section is read") {
  ExperimentConfig d = parse(R"({"model": {"name": "deit_tiny_patch4_28"}})");  // model is required
  CHECK(d.optimizer.type == "adamw");
  CHECK(d.optimizer.base_lr == 5e-4);
  CHECK(d.optimizer.weight_decay == 0.05);
  CHECK(d.schedule.type == "cosine");
  CHECK(d.schedule.warmup_epochs == 5.0);
  CHECK(d.schedule.min_lr == 1e-5);
  CHECK(d.train.label_smoothing == 0.1);
  CHECK(d.effective_lr() == doctest::Approx(5e-4 * 128 / 512));

  ExperimentConfig c = parse(R"({
    "name": "exp1",
    "model": {"name": "deit_tiny_patch4_28_sima", "depth": 3, "embed_dim": 48},
    "data": {"dataset": "fashion_mnist", "batch_size": 64, "train_subset": 1000, "num_workers": 1},
    "augment": {"crop": "random_resized_crop", "scale": [0.5, 1.0], "hflip": 0.25, "random_erasing": 0.1},
    "mixup": {"mixup_alpha": 0.8, "cutmix_alpha": 1.0},
    "optimizer": {"type": "sgd", "lr": 0.05, "momentum": 0.8, "nesterov": true, "no_weight_decay": ["pos_embed"]},
    "schedule": {"type": "step", "warmup_epochs": 0.5, "decay_epochs": 2, "decay_rate": 0.5},
    "train": {"epochs": 4, "seed": 7, "ema": true, "ema_decay": 0.99, "max_steps": 3.0}
  })");
  CHECK(c.name == "exp1");
  CHECK(c.model.depth == 3);
  CHECK(c.model.embed_dim == 48);
  CHECK(c.model.attention.variant == "sima");
  CHECK(c.model.in_chans == 1);
  CHECK(c.data.batch_size == 64);
  CHECK(c.data.train_subset == 1000);
  CHECK(c.augment.crop == "random_resized_crop");
  CHECK(c.augment.scale == std::pair<double, double>{0.5, 1.0});
  CHECK(c.augment.hflip == 0.25);
  CHECK(c.mixup.enabled());
  CHECK(c.optimizer.type == "sgd");
  CHECK(c.optimizer.nesterov);
  CHECK(c.optimizer.no_weight_decay == std::vector<std::string>{"pos_embed"});
  CHECK(c.effective_lr() == 0.05);
  CHECK(c.schedule.type == "step");
  CHECK(c.schedule.warmup_epochs == 0.5);
  CHECK(c.train.epochs == 4);
  CHECK(c.train.seed == 7);
  CHECK(c.train.ema);
  CHECK(c.train.max_steps == 3);  // 3.0 accepted as an integer
}

TEST_CASE("config: errors name the key path and the allowed values") {
  CHECK(has(error_of(R"({"optimiser": {}})"), "cfg.json: unknown key 'optimiser'"));
  CHECK(has(error_of(R"({"optimizer": {"learning_rate": 1}})"), "unknown key 'optimizer.learning_rate'"));
  CHECK(has(error_of(R"({"optimizer": {"learning_rate": 1}})"), "base_lr"));  // lists the known keys
  CHECK(has(error_of(R"({"optimizer": {"lr": -1}})"), "optimizer.lr: must be >= 0, got -1"));
  CHECK(has(error_of(R"({"optimizer": {"lr": "fast"}})"), "optimizer.lr: expected a number, got \"fast\""));
  CHECK(has(error_of(R"({"optimizer": {"type": "adam"}})"), "optimizer.type: 'adam' is not one of: adamw, sgd"));
  CHECK(has(error_of(R"({"train": {"epochs": 0}})"), "train.epochs: must be in [1, 100000], got 0"));
  CHECK(has(error_of(R"({"train": {"epochs": 2.5}})"), "train.epochs: expected an integer, got 2.5"));
  CHECK(has(error_of(R"({"train": {"ema": 1}})"), "train.ema: expected true or false"));
  CHECK(has(error_of(R"({"augment": {"hflip": 1.5}})"), "augment.hflip: must be in [0, 1], got 1.5"));
  CHECK(has(error_of(R"({"augment": {"scale": [0.9, 0.1]}})"), "augment.scale: low must not exceed high"));
  CHECK(has(error_of(R"({"data": {"dataset": "imagenet"}})"), "data.dataset"));
  CHECK(has(error_of(R"({"data": 3})"), "data: expected an object"));
  CHECK(has(error_of(R"([1, 2])"), "expected a JSON object at the top level"));
  CHECK(has(error_of(R"({"name": "a/b"})"), "name: must be non-empty without '/'"));
  CHECK(has(error_of(R"({"model": {"name": "deit_tiny_patch4_28", "depth": -2}})"), "model.depth: must be positive"));
  CHECK(has(error_of(R"({"model": {"name": "no_such_model"}})"), "model.name: model 'no_such_model' is unknown"));
}

TEST_CASE("config: inconsistent combinations are errors naming both keys") {
  CHECK(has(error_of(R"({"model": {"name": "deit_tiny_patch4_28", "patch_size": 5}})"),
            "model.img_size 28 is not divisible by model.patch_size 5"));
  CHECK(has(error_of(R"({"model": {"name": "deit_tiny_patch4_28", "num_heads": 5}})"),
            "model.num_heads 5 does not divide model.embed_dim 192"));
  CHECK(has(error_of(R"({"model": {"name": "cvt_13_28", "stage_heads": [1, 3]}})"),
            "model.stage_heads has 2 entries but model.stage_dims has 3"));
  CHECK(has(error_of(R"({"model": {"name": "deit_tiny_patch4_28", "mean": [0.5, 0.5, 0.5]}})"),
            "model.mean and model.std need 1 values (model.in_chans)"));
  CHECK(has(error_of(R"({"model": {"arch": "deit"}, "train": {"epochs": 2}, "schedule": {"warmup_epochs": 3}})"),
            "schedule.warmup_epochs 3 exceeds train.epochs 2"));
  CHECK(has(error_of(R"({"model": {"arch": "deit"}, "data": {"batch_size": 33}, "mixup": {"mixup_alpha": 0.8}})"),
            "data.batch_size must be even with mixup/cutmix"));
  CHECK(has(error_of(R"({"model": {"arch": "deit"}, "optimizer": {"nesterov": true}})"),
            "optimizer.nesterov needs optimizer.type sgd"));
}

TEST_CASE("config: --set overrides, parsed as JSON or taken as a string") {
  json doc = json::parse(R"({"model": {"name": "deit_tiny_patch4_28_sima"}, "train": {"epochs": 3}})");
  apply_override(doc, "train.epochs=5");
  apply_override(doc, "optimizer.type=sgd");  // a bare word is a string
  apply_override(doc, "optimizer.no_weight_decay=[\"cls_token\"]");
  apply_override(doc, "model.depth=2");
  apply_override(doc, "model.attention.order=kv_first");  // a nested model key
  ExperimentConfig c = experiment_from_json(doc);
  CHECK(c.train.epochs == 5);
  CHECK(c.optimizer.type == "sgd");
  CHECK(c.optimizer.no_weight_decay == std::vector<std::string>{"cls_token"});
  CHECK(c.model.depth == 2);
  CHECK(attention_option<std::string>(c.model.attention, "order") == "kv_first");
  CHECK(has(error_message([&] { apply_override(doc, "train.epoch=5"); }), "--set train.epoch=5: unknown key 'train.epoch'"));
  CHECK(has(error_message([&] { apply_override(doc, "train.epochs"); }), "expected key.path=value"));
  CHECK(has(error_message([&] { apply_override(doc, "train..epochs=1"); }), "empty key"));
  CHECK(has(error_message([&] { apply_override(doc, "model.depth.x=1"); }), "'depth' is not an object"));
  // Bytes that are not UTF-8 (fuzz finding, tests/fuzz/regressions/config): a value kept as a
  // string made experiment_from_json throw nlohmann's type_error instead of a sima::Error.
  CHECK(has(error_message([&] { apply_override(doc, "optimizer.no_weight_decay=[\"pos_embed\"c\xa5"); }),
            "--set optimizer.no_weight_decay: not valid UTF-8 (byte 39 of the argument)"));
  CHECK(has(error_message([&] { apply_override(doc, "train.epo\xff" "chs=1"); }),
            "--set train.epo: not valid UTF-8 (byte 9 of the argument)"));
  CHECK(has(error_message([&] { experiment_from_json(doc); }), "(no error)"));  // doc left as it was
}

TEST_CASE("config: the resolved config re-reads to the same config") {
  ExperimentConfig c = parse(R"({"name": "r", "model": {"name": "xcit_nano_12_p4_28_sima", "depth": 2},
                                 "optimizer": {"clip_grad": 1.5}, "train": {"epochs": 2}, "schedule": {"warmup_epochs": 1}})");
  json resolved = experiment_to_json(c);
  CHECK(resolved["optimizer"]["clip_grad"] == 1.5);
  CHECK(resolved["model"]["depth"] == 2);
  CHECK(resolved["model"]["arch"] == "xcit");
  ExperimentConfig again = experiment_from_json(resolved);
  CHECK(experiment_to_json(again) == resolved);
}

TEST_CASE("config: the reference table lists every key with its default") {
  std::string md = config_reference_markdown();
  for (auto& f : config_fields()) CHECK(has(md, "| `" + f.key + "` |"));
  CHECK(has(md, "| `optimizer.base_lr` | number | `0.0005` |"));
  CHECK(has(md, "| `train.on_nonfinite` | string | `\"stop\"` |"));
}

TEST_CASE("config: read_json_file names the file and the position of a syntax error") {
  CHECK(has(error_message([] { read_json_file("/nonexistent/cfg.json"); }), "/nonexistent/cfg.json: cannot open"));
  char path[] = "/tmp/sima_cfg_XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  const char text[] = "{\"train\": {\"epochs\": 3,}}";
  REQUIRE(write(fd, text, sizeof text - 1) == ssize_t(sizeof text - 1));
  close(fd);
  std::string msg = error_message([&] { read_json_file(path); });
  CHECK(has(msg, std::string(path) + ": not valid JSON (byte"));
  // A number beyond double: nlohmann throws out_of_range, not parse_error (fuzz finding,
  // tests/fuzz/regressions/config); it escaped as nlohmann's exception, the file unnamed.
  const char big[] = "{\"train\": {\"epochs\": 1e999}}";
  FILE* f = std::fopen(path, "wb");
  REQUIRE(f != nullptr);
  REQUIRE(std::fwrite(big, 1, sizeof big - 1, f) == sizeof big - 1);
  std::fclose(f);
  CHECK(has(error_message([&] { read_json_file(path); }), std::string(path) + ": not valid JSON: [json.exception.out_of_range.406] number overflow parsing '1e999'"));
  json doc = json::object();
  CHECK(has(error_message([&] { apply_override(doc, "train.epochs=1e999"); }),
            "--set train.epochs=1e999: [json.exception.out_of_range.406] number overflow parsing '1e999'"));
  std::remove(path);
}

TEST_CASE("config: every config in configs/ and configs/paper/ is valid, and so is its resolved form") {
  int n = 0;
  for (const std::string dir : {"configs", "configs/paper"}) {
    const std::string prefix = dir == "configs" ? "" : "paper_";  // configs/paper/x.json is named paper_x
    for (auto& entry : std::filesystem::directory_iterator(std::string(SIMA_SOURCE_DIR) + "/" + dir)) {
      if (entry.path().extension() != ".json") continue;
      INFO(entry.path().string());
      ++n;
      ExperimentConfig c = experiment_from_json(read_json_file(entry.path().string()), entry.path().string());
      CHECK(c.name == prefix + entry.path().stem().string());  // the run folder is named after the file
      CHECK(experiment_to_json(experiment_from_json(experiment_to_json(c))) == experiment_to_json(c));
    }
  }
  CHECK(n >= 28);
}

TEST_CASE("config: docs/training.md ends with the generated key table (regenerate with sima-train --config-reference)") {
  std::ifstream in(std::string(SIMA_SOURCE_DIR) + "/docs/training.md");
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str(), table = config_reference_markdown();
  CHECK_MESSAGE((doc.size() >= table.size() && doc.compare(doc.size() - table.size(), table.size(), table) == 0),
                "docs/training.md's key table is out of date: replace everything from its '| key | type | default | "
                "meaning |' line to the end with the output of build/bin/sima-train --config-reference");
}

TEST_CASE("check_resume_config: changed keys are named; sections added since the run take their defaults") {
  const json resolved = experiment_to_json(experiment_from_json(json{{"model", {{"name", "deit_tiny_patch4_28"}}}}));
  CHECK_NOTHROW(check_resume_config(resolved, resolved, "run/train_state.safetensors"));
  json older = resolved;
  older.erase("distill");  // a run saved before the distill section existed
  older.erase("dino");
  CHECK_NOTHROW(check_resume_config(older, resolved, "run/train_state.safetensors"));
  json changed = resolved;
  changed["train"]["epochs"] = 99;
  changed["train"]["max_steps"] = 5;  // may change
  CHECK(error_message([&] { check_resume_config(changed, resolved, "run/train_state.safetensors"); }) ==
        "run/train_state.safetensors: the config differs from the run's in train.epochs (a resumed run must keep "
        "them; start a new run instead)");
}
