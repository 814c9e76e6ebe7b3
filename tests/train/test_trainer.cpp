// The supervised trainer end to end on real Fashion-MNIST images:
// - a tiny SimA CvT trained one epoch on 6 000 images reaches >= 70 % test top-1;
// - resuming from train_state.safetensors (mid-epoch, across an epoch end, with dropout,
//   drop path, mixup/cutmix and EMA all drawing random numbers) gives the same losses and
//   the same final weights as an uninterrupted run, bit for bit;
// - the run folder holds the resolved config, checkpoints and metric files;
// - a non-finite loss stops with the step number; a run folder is not overwritten.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "data/temp_dir.h"
#include "models/io/checkpoint.h"
#include "models/io/safetensors.h"
#include "testing.h"
#include "train/loop/metrics.h"
#include "train/objectives/trainer.h"

using namespace sima;
using sima::testing::error_message;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

// A small SimA CvT on Fashion-MNIST: three stages of widths 32/64/128, one block each.
// (Convolutional token embeddings learn much faster in one short epoch than a plain DeiT:
// a 2-block DeiT of width 64 reaches ~50% here, and so does its PyTorch twin.)
json tiny_config() {
  return json::parse(R"({
    "name": "tiny",
    "model": {"name": "cvt_13_28_sima", "stage_dims": [32, 64, 128], "stage_depths": [1, 1, 1],
              "stage_heads": [1, 2, 4], "stage_drop_path": [0, 0, 0]},
    "data": {"dataset": "fashion_mnist", "batch_size": 32, "train_subset": 6000, "test_subset": 2000,
             "num_workers": 2},
    "augment": {"crop": "none", "hflip": 0.0},
    "optimizer": {"type": "adamw", "lr": 2e-3, "weight_decay": 0.05},
    "schedule": {"type": "cosine", "warmup_epochs": 0.1, "min_lr": 1e-5},
    "train": {"epochs": 1, "seed": 3, "label_smoothing": 0.0, "log_every": 20}
  })");
}

// A one-block SimA DeiT with every source of randomness on, small enough for a few quick steps.
json random_everything_config() {
  json j = tiny_config();
  j["model"] = {{"name", "deit_tiny_patch4_28_sima"}, {"embed_dim", 32}, {"depth", 1}, {"num_heads", 4},
                {"drop_path_rate", 0.2}, {"drop_rate", 0.1}};
  j["augment"] = {{"crop", "random_crop"}, {"padding", 2}, {"hflip", 0.5}};
  j["data"]["train_subset"] = 192;
  j["data"]["test_subset"] = 64;
  j["data"]["batch_size"] = 32;  // 6 steps per epoch
  j["augment"]["random_erasing"] = 0.25;
  j["mixup"] = {{"mixup_alpha", 0.8}, {"cutmix_alpha", 1.0}};
  j["train"]["epochs"] = 2;
  j["train"]["ema"] = true;
  j["train"]["ema_decay"] = 0.9;
  j["train"]["label_smoothing"] = 0.1;
  j["train"]["log_every"] = 1;
  return j;
}

TrainResult run(const json& j, const std::string& dir, bool resume = false) {
  return train(experiment_from_json(j), {.run_dir = dir, .resume = resume, .quiet = true});
}

bool bit_equal(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

// Every tensor of two safetensors files bit-identical.
void check_same_tensors(const std::string& a, const std::string& b) {
  SafetensorsFile fa = load_safetensors(a), fb = load_safetensors(b);
  REQUIRE(fa.tensors.size() == fb.tensors.size());
  for (size_t i = 0; i < fa.tensors.size(); ++i) {
    INFO(fa.tensors[i].first);
    CHECK(fa.tensors[i].first == fb.tensors[i].first);
    std::vector<float> x = to_vector(fa.tensors[i].second), y = to_vector(fb.tensors[i].second);
    CHECK((x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0));
  }
}

}  // namespace

TEST_CASE("trainer: a tiny SimA CvT learns Fashion-MNIST (>= 70% after one epoch on 6000 images)") {
  testing::TempDir tmp;
  const std::string dir = tmp.str() + "/run";
  TrainResult r = run(tiny_config(), dir);
  MESSAGE("one epoch on 6000 images: " << r.seconds << " s, test top-1 " << r.last_eval.top1 << "%, loss "
                                        << r.last_eval.loss);
  CHECK(r.steps == 6000 / 32);
  CHECK(r.epochs_done == 1);
  CHECK_FALSE(r.interrupted);
  CHECK(r.last_eval.count == 2000);
  CHECK(r.last_eval.top1 >= 70.0);
  // The loss went down: mean of the last 10 steps well below the first 10 (ln 10 = 2.30 at the start).
  double first = 0, last = 0;
  for (int i = 0; i < 10; ++i) first += r.step_losses[size_t(i)] / 10, last += r.step_losses[r.step_losses.size() - 1 - size_t(i)] / 10;
  CHECK(first > 1.5);
  CHECK(last < 0.9 * first);

  // The run folder.
  for (const char* f : {"config.json", "model.safetensors", "best.safetensors", "train_state.safetensors",
                        "metrics.jsonl", "metrics.csv"})
    CHECK_MESSAGE(fs::exists(dir + "/" + f), f);
  json resolved = read_json_file(dir + "/config.json");
  CHECK(resolved["model"]["stage_dims"] == json::array({32, 64, 128}));
  CHECK(resolved["data"]["train_subset"] == 6000);
  // The checkpoint evaluates to the same accuracy through load_checkpoint.
  auto model = load_checkpoint(dir + "/model.safetensors");
  CHECK(model->config().stage_dims == std::vector<int64_t>{32, 64, 128});
  auto meta = read_safetensors_metadata(dir + "/model.safetensors");
  CHECK(meta.at("data") == "fashion_mnist");
  CHECK(json::parse(meta.at("classes")).size() == 10);
  CHECK(json::parse(meta.at("normalization"))["crop_pct"] == 0.875);
  // metrics.jsonl: step records every 20 steps and one epoch record.
  auto records = read_metrics_jsonl(dir + "/metrics.jsonl");
  int steps = 0, epochs = 0;
  for (auto& rec : records) {
    if (rec["kind"] == "step") ++steps;
    if (rec["kind"] == "epoch") {
      ++epochs;
      CHECK(rec["test_top1"].get<double>() == doctest::Approx(r.last_eval.top1));
    }
  }
  CHECK(steps == (6000 / 32) / 20);
  CHECK(epochs == 1);

  // The same folder again without --resume is refused.
  CHECK(error_message([&] { run(tiny_config(), dir); }).find("already holds a run") != std::string::npos);
}

TEST_CASE("trainer: resuming gives the same losses and weights as an uninterrupted run, bit for bit") {
  testing::TempDir tmp;
  const json base = random_everything_config();
  const std::string full = tmp.str() + "/full";
  TrainResult uninterrupted = run(base, full);
  REQUIRE(uninterrupted.steps == 12);
  REQUIRE(uninterrupted.step_losses.size() == 12);

  // Stop at steps 4 (mid-epoch 1), 6 (the end of epoch 1) and 9 (mid-epoch 2), resuming each time.
  const std::string parts = tmp.str() + "/parts";
  std::vector<double> losses;
  json j = base;
  j["train"]["max_steps"] = 4;
  TrainResult a = run(j, parts);
  CHECK(a.interrupted);
  CHECK(a.steps == 4);
  losses.insert(losses.end(), a.step_losses.begin(), a.step_losses.end());
  for (int stop : {6, 9, 0}) {
    j["train"]["max_steps"] = stop;
    TrainResult b = run(j, parts, /*resume=*/true);
    losses.insert(losses.end(), b.step_losses.begin(), b.step_losses.end());
  }
  CHECK(bit_equal(losses, uninterrupted.step_losses));
  check_same_tensors(full + "/model.safetensors", parts + "/model.safetensors");
  check_same_tensors(full + "/model_ema.safetensors", parts + "/model_ema.safetensors");
  // The metric log has every step exactly once.
  std::vector<int64_t> logged;
  for (auto& rec : read_metrics_jsonl(parts + "/metrics.jsonl"))
    if (rec["kind"] == "step") logged.push_back(rec["step"].get<int64_t>());
  std::vector<int64_t> expected(12);
  for (int i = 0; i < 12; ++i) expected[size_t(i)] = i + 1;
  CHECK(logged == expected);

  // A resumed run must keep the config (except the keys that change nothing computed).
  json changed = base;
  changed["optimizer"]["lr"] = 1e-3;
  std::string msg = error_message([&] { run(changed, parts, true); });
  CHECK(msg.find("the config differs from the run's in optimizer.lr") != std::string::npos);
  CHECK(error_message([&] { run(base, tmp.str() + "/nothing", true); }).find("nothing to resume") != std::string::npos);
}

TEST_CASE("trainer: a non-finite loss stops training and names the step") {
  testing::TempDir tmp;
  json j = random_everything_config();
  j["model"]["attention"] = {{"type", "sima"}, {"norm", "none"}};
  j["optimizer"]["lr"] = 1e30;  // the first update blows the weights up
  j["schedule"]["warmup_epochs"] = 0;
  j["mixup"] = {{"mixup_alpha", 0.0}};
  std::string msg = error_message([&] { run(j, tmp.str() + "/nan"); });
  INFO(msg);
  CHECK(msg.find("step 2 (epoch 1, batch 2)") != std::string::npos);
  CHECK(msg.find("not finite") != std::string::npos);
}

TEST_CASE("trainer: on_nonfinite = skip skips the bad steps and stops after 10 in a row") {
  testing::TempDir tmp;
  json j = random_everything_config();  // 6 steps per epoch, 2 epochs
  j["model"]["attention"] = {{"type", "sima"}, {"norm", "none"}};
  j["optimizer"]["lr"] = 1e30;  // step 1 blows the weights up; skipped steps leave them so
  j["schedule"]["warmup_epochs"] = 0;
  j["mixup"] = {{"mixup_alpha", 0.0}};
  j["train"]["on_nonfinite"] = "skip";
  std::string msg = error_message([&] { run(j, tmp.str() + "/skip"); });
  INFO(msg);
  CHECK(msg.find("step 11 (epoch 2, batch 5)") != std::string::npos);  // steps 2..11 skipped: the 10th fails
  CHECK(msg.find("not finite") != std::string::npos);
  CHECK(msg.find("(10 steps in a row)") != std::string::npos);
}

TEST_CASE("trainer: the dataset's class count must match the model's") {
  testing::TempDir tmp;
  json j = random_everything_config();
  j["model"]["num_classes"] = 7;
  CHECK(error_message([&] { run(j, tmp.str() + "/c"); }).find("model.num_classes is 7 but fashion_mnist has 10 classes") !=
        std::string::npos);
}

TEST_CASE("trainer: data.validation trains on the rest, evaluates the held-out images, never opens the test set") {
  testing::TempDir tmp;
  // A Fashion-MNIST root holding the training files only: opening the test split would fail.
  const std::string root = tmp.str() + "/fmnist_train_only";
  fs::create_directories(root);
  for (const char* f : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"})
    fs::create_symlink(std::string("/usr/share/datasets/fashion-mnist/") + f, root + "/" + f);
  json j = random_everything_config();
  j["data"]["dataset"] = "fashion_mnist:" + root;
  j["data"]["validation"] = 1000;
  j["data"]["validation_seed"] = 5;
  j["train"]["epochs"] = 1;
  const std::string dir = tmp.str() + "/v";
  run(j, dir);
  int epochs = 0;
  for (auto& rec : read_metrics_jsonl(dir + "/metrics.jsonl")) {
    if (rec["kind"] != "epoch") continue;
    ++epochs;
    CHECK(rec.contains("val_top1"));
    CHECK(rec.contains("ema_val_top1"));
    CHECK(!rec.contains("test_top1"));
    // The epoch's CPU seconds (training and evaluation), what the study's budget adds up.
    REQUIRE(rec.contains("epoch_cpu_seconds"));
    CHECK(rec["epoch_cpu_seconds"].get<double>() > 0.0);
  }
  CHECK(epochs == 1);
  // Without the split the same root fails, naming the missing test file.
  j["data"]["validation"] = 0;
  CHECK(error_message([&] { run(j, tmp.str() + "/t"); }).find("t10k-images-idx3-ubyte") != std::string::npos);
  // A split as large as the training set is refused with the valid range.
  j["data"]["validation"] = 60000;
  CHECK(error_message([&] { run(j, tmp.str() + "/w"); }).find("data.validation is 60000 but must be in [1, 59999]") !=
        std::string::npos);
}
