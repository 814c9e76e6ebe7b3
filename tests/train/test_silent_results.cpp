// Inputs that used to give a result with no word, each now refused naming the culprit and what
// would be valid: a flag given twice or empty, a train.epochs that never ends or whose step
// count overflows int64, --check passing a model the budget refuses, data.train_subset larger
// than the data; sima-eval's --topk beyond the classes, a DINO backbone evaluated as a
// classifier, a folder whose classes are not the checkpoint's; checkpoint metadata naming fewer
// classes than the head has, or an img_size of 1e9.
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "app_testing.h"
#include "data/image_io.h"
#include "data/temp_dir.h"
#include "models/io/checkpoint.h"
#include "models/registry.h"
#include "models/io/safetensors.h"
#include "testing.h"
#include "train/eval/evaluate.h"

using namespace sima;
using namespace sima::testing;
using nlohmann::json;

namespace {

void write_text(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

bool has(const std::string& s, const std::string& part) {
  INFO("message: " << s);
  return s.find(part) != std::string::npos;
}

std::string tiny_config(const TempDir& d) {
  const std::string cfg = d.file("tiny.json");
  write_text(cfg, R"({"name": "tiny",
    "model": {"name": "deit_tiny_patch4_28_sima", "embed_dim": 16, "depth": 1, "num_heads": 2},
    "data": {"train_subset": 64, "test_subset": 32, "batch_size": 32, "num_workers": 0},
    "schedule": {"warmup_epochs": 0}, "train": {"epochs": 1}})");
  return cfg;
}

std::shared_ptr<Model> tiny_deit() {
  return create_model(json{{"name", "deit_tiny_patch4_28"}, {"depth", 1}, {"embed_dim", 16}, {"num_heads", 2}});
}

}  // namespace

TEST_CASE("sima-train: a flag given twice or empty is refused, never the last one or runs/<name> unseen") {
  TempDir d;
  const std::string cfg = tiny_config(d);
  Run r = run_app("sima-train --check --config " + cfg + " --config " + cfg);
  CHECK(r.status == 2);
  CHECK(has(r.err, "sima-train: error: --config is given twice ('" + cfg + "' and '" + cfg + "'); give it once"));
  r = run_app("sima-train --config " + cfg + " --out ''");
  CHECK(r.status == 2);
  CHECK(has(r.err, "--out is empty; give a DIR"));
  r = run_app("sima-train --config " + cfg + " --out a --out=b --check");
  CHECK(r.status == 2);
  CHECK(has(r.err, "--out is given twice ('a' and 'b')"));
  r = run_app("sima-eval --checkpoint x --precision int8 --precision bf16");
  CHECK(r.status == 2);
  CHECK(has(r.err, "--precision is given twice ('int8' and 'bf16'); give it once"));
}

TEST_CASE("sima-train --check: train.epochs bounded, the step counts and the budget checked as the run's start does") {
  TempDir d;
  const std::string t = "sima-train --check --config " + tiny_config(d);
  for (const char* epochs : {"1000000000000", "2305843009213693953"}) {
    const Run r = run_app(t + " --set train.epochs=" + epochs);
    CHECK(r.status == 1);
    CHECK(has(r.err, std::string("train.epochs: must be in [1, 100000], got ") + epochs));
  }
  // warmup in epochs times the steps: overflows int64 even at one step per epoch
  Run r = run_app(t + " --set schedule.warmup_epochs=1e300");
  CHECK(r.status == 1);
  CHECK(has(r.err, "schedule.warmup_epochs"));
  // A model the memory budget refuses at start is refused by --check too.
  ::setenv("SIMA_MEMORY_LIMIT", "1M", 1);
  r = run_app(t);
  ::unsetenv("SIMA_MEMORY_LIMIT");
  CHECK(r.status == 1);
  CHECK(has(r.err, "more than the memory limit"));
  CHECK(run_app(t).status == 0);
}

TEST_CASE("sima-train: data.train_subset larger than the training set names both sizes") {
  TempDir d;
  const Run r = run_app("sima-train --config " + tiny_config(d) + " --set data.train_subset=60001 --out " +
                        d.file("run") + " --quiet");
  CHECK(r.status == 1);
  CHECK(has(r.err, "data.train_subset is 60001 but "));
  CHECK(has(r.err, "has only 60000 images: give at most 60000 (0 = all)"));
}

TEST_CASE("data.test_subset, sima-eval --limit and --train-limit larger than their split name both sizes") {
  TempDir d;
  Run r = run_app("sima-train --config " + tiny_config(d) + " --set data.test_subset=10001 --out " + d.file("run") +
                  " --quiet");
  CHECK(r.status == 1);
  CHECK(has(r.err, "data.test_subset is 10001 but "));
  CHECK(has(r.err, "has only 10000 images: give at most 10000 (0 = all)"));
  // With a validation split the test images are the 500 held out.
  r = run_app("sima-train --config " + tiny_config(d) + " --set data.validation=500 --set data.test_subset=501 --out " +
              d.file("run2") + " --quiet");
  CHECK(r.status == 1);
  CHECK(has(r.err, "data.test_subset is 501 but "));
  CHECK(has(r.err, "has only 500 images"));

  auto model = tiny_deit();
  const std::string ckpt = d.file("model.safetensors");
  save_checkpoint(ckpt, *model, {{"data", "fashion_mnist"}});
  r = run_app("sima-eval --checkpoint " + ckpt + " --limit 10001");
  CHECK(r.status == 1);
  CHECK(has(r.err, "--limit is 10001 but "));
  CHECK(has(r.err, "has only 10000 images: give at most 10000 (0 = all)"));
  r = run_app("sima-eval --checkpoint " + ckpt + " --knn --k 1 --limit 10001");
  CHECK(r.status == 1);
  CHECK(has(r.err, "--limit is 10001 but "));
  r = run_app("sima-eval --checkpoint " + ckpt + " --knn --k 1 --validation 100 --limit 50 --train-limit 59901");
  CHECK(r.status == 1);
  CHECK(has(r.err, "--train-limit is 59901 but "));
  CHECK(has(r.err, "has only 59900 images: give at most 59900 (0 = all)"));
}

TEST_CASE("sima-eval: --topk beyond the classes, a DINO backbone as a classifier, a folder of other classes") {
  TempDir d;
  auto model = tiny_deit();
  const std::string ckpt = d.file("model.safetensors"), dino = d.file("dino.safetensors");
  const std::string fmnist = R"(["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
                                   "Sneaker", "Bag", "Ankle boot"])";
  save_checkpoint(ckpt, *model, {{"data", "fashion_mnist"}, {"classes", fmnist}});
  save_checkpoint(dino, *model, {{"data", "fashion_mnist"}, {"dino", "teacher backbone"}});
  const std::string png = d.file("x.png");
  write_png(png, Image(1, 28, 28, 0.5f));

  Run r = run_app("sima-eval --checkpoint " + ckpt + " --image " + png + " --topk 11");
  CHECK(r.status == 1);
  CHECK(has(r.err, "--topk: 11 is not in [1, 10] (the model has 10 classes)"));
  CHECK(run_app("sima-eval --checkpoint " + ckpt + " --image " + png + " --topk 10").status == 0);

  r = run_app("sima-eval --checkpoint " + dino + " --image " + png);
  CHECK(r.status == 1);
  CHECK(has(r.err, dino + " is a DINO backbone: its classifier head was never trained"));
  CHECK(has(r.err, "--knn or --linear-probe"));

  // A folder whose classes are not the checkpoint's (Fashion-MNIST's names).
  const std::string root = d.dir("folder");
  for (int c = 0; c < 10; ++c) write_png(d.file("folder/val/c" + std::to_string(c) + "/1.png"), Image(1, 28, 28, 0.5f));
  r = run_app("sima-eval --checkpoint " + ckpt + " --data folder:" + root);
  CHECK(r.status == 1);
  CHECK(has(r.err, "folder:" + root + ": class 0 is 'c0' but " + ckpt + " was trained with class 0 = 'T-shirt/top'"));
}

TEST_CASE("checkpoint metadata: two class names for a 10-class head, or an img_size of 1e9, are refused") {
  TempDir d;
  auto model = tiny_deit();
  const std::string two = d.file("two.safetensors");
  save_checkpoint(two, *model, {{"classes", R"(["a", "b"])"}});
  CHECK(has(error_message([&] { read_checkpoint_eval_info(two); }),
            two + ": metadata \"classes\" names 2 classes but the model has 10 outputs"));
  const Run r = run_app("sima-eval --checkpoint " + two + " --data fashion_mnist --limit 8");
  CHECK(r.status == 1);
  CHECK(has(r.err, "names 2 classes but the model has 10 outputs"));

  // img_size 1e9 in the stored config: the budget names it before any tensor is made.
  SafetensorsFile f = load_safetensors(d.file("two.safetensors"));
  json cfg = json::parse(f.metadata.at("config"));
  cfg["img_size"] = 1000000000;
  f.metadata["config"] = cfg.dump();
  f.metadata.erase("classes");
  const std::string huge = d.file("huge.safetensors");
  save_safetensors(huge, f.tensors, f.metadata);
  const std::string msg = error_message([&] { load_checkpoint(huge); });
  CHECK(has(msg, huge + ": model config (deit"));
  CHECK(has(msg, "img_size 1000000000"));
  CHECK(has(msg, "more than the memory limit"));
}
