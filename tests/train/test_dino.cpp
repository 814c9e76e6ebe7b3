// DINO training pieces and the trainer end to end on real Fashion-MNIST images:
// - the per-step schedules equal DINO's utils.cosine_scheduler (written out here in double);
// - the last layer's gradient is dropped in the freeze epochs only; the teacher EMA averages
//   parameters and leaves its own buffers alone; the multi-crop wrapper is one backbone pass
//   per resolution and one head pass;
// - a tiny SimA CvT trained with DINO on a few hundred images: learning lowers the loss
//   (against a control run whose student does not learn), the teacher entropy stays well away
//   from collapse, the run folder holds a teacher backbone sima-eval can load;
// - resuming mid-epoch gives the same losses and weights as an uninterrupted run, bit for bit;
// - config errors.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <numbers>

#include "core/error.h"
#include "data/temp_dir.h"
#include "models/io/checkpoint.h"
#include "models/registry.h"
#include "models/io/safetensors.h"
#include "nn/init.h"
#include "nn/normalization.h"
#include "testing.h"
#include "train/loop/metrics.h"
#include "train/objectives/dino_trainer.h"
#include "train/optim/ema.h"

using namespace sima;
using sima::testing::error_message;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

// utils.cosine_scheduler(base, final, epochs, niter, warmup_epochs, start_warmup) in double.
std::vector<double> cosine_scheduler(double base, double final_value, int64_t epochs, int64_t niter,
                                     int64_t warmup_epochs = 0, double start_warmup = 0.0) {
  std::vector<double> out;
  const int64_t wi = warmup_epochs * niter;
  for (int64_t i = 0; i < wi; ++i)  // np.linspace(start_warmup, base, wi)
    out.push_back(wi == 1 ? start_warmup : start_warmup + (base - start_warmup) * double(i) / double(wi - 1));
  const int64_t n = epochs * niter - wi;
  for (int64_t i = 0; i < n; ++i)
    out.push_back(final_value + 0.5 * (base - final_value) * (1 + std::cos(std::numbers::pi * double(i) / double(n))));
  return out;
}

// A tiny SimA CvT on 192 Fashion-MNIST images (6 steps per epoch), DINO with 2 local
// 12-pixel crops and K = 64 prototypes.
json tiny_dino_config() {
  return json::parse(R"({
    "name": "tiny_dino",
    "model": {"name": "cvt_13_28_sima", "stage_dims": [16, 32, 64], "stage_depths": [1, 1, 1],
              "stage_heads": [1, 2, 4], "stage_drop_path": [0, 0, 0.1]},
    "data": {"dataset": "fashion_mnist", "batch_size": 32, "train_subset": 192, "num_workers": 1},
    "augment": {"crop_pct": 1.0},
    "optimizer": {"type": "adamw", "base_lr": 5e-4, "lr_base_batch": 256, "weight_decay": 0.04},
    "schedule": {"type": "cosine", "warmup_epochs": 1, "warmup_lr": 0.0, "min_lr": 1e-6},
    "train": {"epochs": 4, "seed": 1, "log_every": 4},
    "dino": {"enabled": true, "out_dim": 64, "hidden_dim": 64, "bottleneck_dim": 32,
             "local_crops_number": 2, "local_crops_size": 12, "warmup_teacher_temp": 0.04,
             "teacher_temp": 0.04, "warmup_teacher_temp_epochs": 0, "freeze_last_layer": 1}
  })");
}

DinoTrainResult run(const json& j, const std::string& dir, bool resume = false) {
  return train_dino(experiment_from_json(j), {.run_dir = dir, .resume = resume, .quiet = true});
}

bool bit_equal(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

}  // namespace

TEST_CASE("dino_schedules: DINO's cosine_scheduler for lr (linspace warmup), weight decay and momentum") {
  ExperimentConfig c = experiment_from_json(tiny_dino_config());
  c.train.epochs = 5;
  c.schedule.warmup_epochs = 2;
  c.schedule.warmup_lr = 0.0;
  c.schedule.min_lr = 1e-6;
  c.dino.weight_decay_end = 0.4;
  c.dino.momentum_teacher = 0.996;
  const int64_t niter = 7;
  DinoSchedules s = dino_schedules(c, niter);
  const double lr = 5e-4 * 32 / 256.0;
  CHECK(c.effective_lr() == doctest::Approx(lr));
  auto lr_ref = cosine_scheduler(lr, 1e-6, 5, niter, 2, 0.0);
  auto wd_ref = cosine_scheduler(0.04, 0.4, 5, niter);
  auto m_ref = cosine_scheduler(0.996, 1.0, 5, niter);
  REQUIRE(lr_ref.size() == 35);
  for (int64_t it = 0; it < 35; ++it) {
    CAPTURE(it);
    CHECK(schedule_value(s.lr, it) == doctest::Approx(lr_ref[size_t(it)]).epsilon(1e-12));
    CHECK(schedule_value(s.weight_decay, it) == doctest::Approx(wd_ref[size_t(it)]).epsilon(1e-12));
    CHECK(schedule_value(s.momentum, it) == doctest::Approx(m_ref[size_t(it)]).epsilon(1e-12));
  }
  CHECK(schedule_value(s.lr, 13) == doctest::Approx(lr));  // the warmup ends exactly at base (linspace)
  CHECK(schedule_value(s.weight_decay, 0) == doctest::Approx(0.04));
  CHECK(schedule_value(s.momentum, 0) == doctest::Approx(0.996));
  CHECK(schedule_value(s.momentum, 34) > 0.9999);
}

TEST_CASE("cancel_gradients_last_layer: only the last layer, only in the freeze epochs") {
  DINOHead head({.in_dim = 3, .out_dim = 5, .hidden_dim = 4, .bottleneck_dim = 2, .norm_last_layer = false});
  auto backward = [&] {
    head.zero_grad();
    sum(head.forward(ones({2, 3}))).backward();
  };
  backward();
  cancel_gradients_last_layer(0, head, 1);
  for (auto& [name, p] : head.named_parameters()) {
    CAPTURE(name);
    CHECK(p.grad().defined() == (name.find("last_layer") == std::string::npos));
  }
  backward();
  cancel_gradients_last_layer(1, head, 1);  // epoch 1 >= freeze_last_layer 1: untouched
  for (auto& [name, p] : head.named_parameters()) CHECK(p.grad().defined());
}

TEST_CASE("ema_update_parameters: parameters averaged, the EMA model's buffers kept") {
  BatchNorm2d a(3), b(3);
  constant_(a.weight, 2.f);
  constant_(b.weight, 4.f);
  constant_(a.running_mean, 1.f);
  constant_(b.running_mean, 7.f);
  ema_update_parameters(b, a, 0.75);  // b ← .75·b + .25·a
  for (float v : to_vector(b.weight)) CHECK(v == doctest::Approx(3.5f));
  for (float v : to_vector(b.running_mean)) CHECK(v == 7.f);
  ema_update(b, a, 0.75);  // the supervised EMA copies buffers
  for (float v : to_vector(b.running_mean)) CHECK(v == 1.f);
}

TEST_CASE("MultiCropWrapper: one backbone pass per resolution, the head on the concatenation") {
  manual_seed(2);
  ModelConfig mc = config_from_json(json{{"name", "deit_tiny_patch4_28_sima"}, {"embed_dim", 16}, {"depth", 1},
                                         {"num_heads", 2}});
  auto backbone = create_model(mc);
  auto head = std::make_shared<DINOHead>(DINOHeadOptions{.in_dim = 16, .out_dim = 9, .hidden_dim = 8,
                                                         .bottleneck_dim = 4});
  MultiCropWrapper w(backbone, head);
  w.eval();
  Generator g(3);
  Tensor global = randn({4, 1, 28, 28}, g), local = randn({6, 1, 12, 12}, g);
  Tensor out = w.forward(std::vector<Tensor>{global, local});
  REQUIRE(out.shape() == Shape{10, 9});
  Tensor expected = head->forward(cat({backbone->forward_features(global), backbone->forward_features(local)}, 0));
  CHECK(testing::max_abs_diff(out, expected) == 0.f);
  // the backbone's classifier is not trained (DINO swaps it for an identity)
  for (auto& [name, p] : w.trainable_parameters()) CHECK(name.rfind("backbone.head.", 0) != 0);
  CHECK(is_backbone_classifier("backbone.head.weight"));
  CHECK_FALSE(is_backbone_classifier("head.last_layer.weight_v"));
  // the teacher config drops stochastic depth and dropout only
  ModelConfig t = dino_teacher_config(experiment_from_json(tiny_dino_config()).model);
  CHECK(t.stage_drop_path == std::vector<float>{0.f, 0.f, 0.f});
  CHECK(t.stage_dims == std::vector<int64_t>{16, 32, 64});
}

TEST_CASE("DINO backbones: DeiT, XCiT and CvT (SimA and softmax) take 28-pixel global and 12-pixel local crops") {
  // DeiT interpolates its position embedding (bicubic) to the local grid, XCiT computes its
  // Fourier encoding for any grid, CvT is convolutional; the features keep their width.
  for (const char* j : {R"({"name": "deit_tiny_patch4_28_sima", "embed_dim": 16, "depth": 1, "num_heads": 2})",
                        R"({"name": "deit_tiny_patch4_28", "embed_dim": 16, "depth": 1, "num_heads": 2})",
                        R"({"name": "xcit_nano_12_p4_28_sima", "embed_dim": 16, "depth": 1, "num_heads": 2})",
                        R"({"name": "xcit_nano_12_p4_28", "embed_dim": 16, "depth": 1, "num_heads": 2})",
                        R"({"name": "cvt_13_28_sima", "stage_dims": [8, 16, 32], "stage_depths": [1, 1, 1],
                            "stage_heads": [1, 2, 4]})"}) {
    CAPTURE(j);
    manual_seed(1);
    auto m = create_model(json::parse(j));
    const int64_t D = backbone_feature_dim(*m, 28);
    CHECK(backbone_feature_dim(*m, 12) == D);
    CHECK(m->is_training());  // the probe leaves the mode as it was
  }
}

TEST_CASE("DINO end to end: learning lowers the loss, no collapse, a teacher checkpoint sima-eval can load") {
  // DINO's loss does not fall from step 0: with the center at 0 the first teacher targets are
  // sharp and alike for all images (a low loss), and as the center catches up with the
  // teacher's mean output they flatten towards the ~log K plateau DINO starts from; leaving
  // it takes far longer than a test.
  // So "the loss decreases" is measured against a control run with the same seed, data,
  // schedules and center dynamics whose student does not learn (lr ~ 0): learning must
  // lower the loss in every epoch.
  testing::TempDir tmp;
  const std::string dir = tmp.str() + "/run";
  DinoTrainResult r = run(tiny_dino_config(), dir);
  json frozen = tiny_dino_config();
  frozen["optimizer"]["base_lr"] = 1e-12;
  frozen["schedule"]["min_lr"] = 0.0;
  DinoTrainResult control = run(frozen, tmp.str() + "/control");
  REQUIRE(r.epochs.size() == 4);
  REQUIRE(control.epochs.size() == 4);
  CHECK(r.steps == 24);
  CHECK_FALSE(r.interrupted);
  const double log_k = std::log(64.0);
  for (size_t i = 0; i < r.epochs.size(); ++i) {
    const DinoEpochStats& e = r.epochs[i];
    MESSAGE("epoch " << e.epoch << ": loss " << e.loss << " (control " << control.epochs[i].loss
                     << "), teacher entropy " << e.teacher_entropy << " (batch " << e.teacher_batch_entropy
                     << ", log K " << log_k << "), KL " << e.kl << ", lr " << e.lr << ", momentum " << e.momentum
                     << ", teacher temp " << e.teacher_temp << ", " << e.seconds << " s");
    CHECK(std::isfinite(e.loss));
    CHECK(e.loss < control.epochs[i].loss);
    // KL = loss − H is a divergence: never negative (up to float rounding).
    CHECK(e.kl > -1e-4);
    // No collapse to one prototype: a collapsed teacher puts (almost) all mass on one of the
    // K outputs, entropy → 0 (0.02 nats after 48 steps when the centering is switched off);
    // 1 nat is the entropy of a uniform choice among e ≈ 2.7 outputs.
    CHECK(e.teacher_entropy > 1.0);
    // Entropy of a distribution over K outputs, and the batch mean is at least as spread
    // (concavity of H): both are what the logs must show.
    CHECK(e.teacher_entropy <= log_k + 1e-6);
    CHECK(e.teacher_batch_entropy >= e.teacher_entropy - 1e-6);
  }
  CHECK(r.epochs.back().loss < control.epochs.back().loss - 0.1);
  CHECK(r.epochs[0].momentum < r.epochs[3].momentum);

  // The run folder: the teacher backbone as a normal checkpoint, the student's, the state, logs.
  for (const char* f : {"config.json", "model.safetensors", "student.safetensors", "train_state.safetensors",
                        "metrics.jsonl", "metrics.csv"})
    CHECK(fs::exists(dir + "/" + f));
  std::shared_ptr<Model> loaded = load_checkpoint(dir + "/model.safetensors");
  DinoTrainer resumed(experiment_from_json(tiny_dino_config()), {.run_dir = dir, .resume = true, .quiet = true});
  Model& teacher_backbone = *resumed.teacher().backbone;
  loaded->eval();
  teacher_backbone.eval();
  Generator g(4);
  Tensor x = randn({3, 1, 28, 28}, g);
  {
    NoGradGuard ng;
    CHECK(testing::max_abs_diff(loaded->forward_features(x), teacher_backbone.forward_features(x)) == 0.f);
  }
  // The teacher is not the student (an EMA of it), and the center moved away from 0.
  float diff = 0.f;
  auto tp = resumed.teacher().named_parameters(), sp = resumed.student().named_parameters();
  REQUIRE(tp.size() == sp.size());
  for (size_t i = 0; i < tp.size(); ++i) diff = std::max(diff, testing::max_abs_diff(tp[i].second, sp[i].second));
  CHECK(diff > 0.f);
  float c = 0.f;
  for (float v : to_vector(resumed.loss().center)) c = std::max(c, std::fabs(v));
  CHECK(c > 0.f);
  // metrics: one epoch record per epoch with the collapse indicators
  auto records = read_metrics_jsonl(dir + "/metrics.jsonl");
  int epochs = 0;
  for (auto& rec : records)
    if (rec["kind"] == "epoch") {
      ++epochs;
      for (const char* k : {"train_loss", "teacher_entropy", "kl", "teacher_batch_entropy", "lr", "weight_decay",
                            "momentum", "teacher_temp"})
        CHECK(rec.contains(k));
    }
  CHECK(epochs == 4);
}

TEST_CASE("DINO resume: mid-epoch stop + --resume = one uninterrupted run, bit for bit") {
  testing::TempDir tmp;
  json j = tiny_dino_config();
  j["data"]["train_subset"] = 128;  // 4 steps per epoch
  j["train"]["epochs"] = 2;
  j["dino"]["teacher_temp"] = 0.07;  // np.linspace(0.04, 0.07, 1) = [0.04] in epoch 0, then 0.07
  j["dino"]["warmup_teacher_temp_epochs"] = 1;
  DinoTrainResult full = run(j, tmp.str() + "/full");
  REQUIRE(full.step_losses.size() == 8);
  REQUIRE(full.epochs.size() == 2);
  CHECK(full.epochs[0].teacher_temp == 0.04);
  CHECK(full.epochs[1].teacher_temp == 0.07);

  json part = j;
  part["train"]["max_steps"] = 3;  // stops mid-epoch 0
  DinoTrainResult a = run(part, tmp.str() + "/split");
  CHECK(a.interrupted);
  REQUIRE(a.step_losses.size() == 3);
  part["train"]["max_steps"] = 6;  // across the epoch end (freeze_last_layer ends), stops mid-epoch 1
  DinoTrainResult b = run(part, tmp.str() + "/split", true);
  REQUIRE(b.step_losses.size() == 3);
  DinoTrainResult rest = run(j, tmp.str() + "/split", true);
  REQUIRE(rest.step_losses.size() == 2);
  std::vector<double> joined = a.step_losses;
  joined.insert(joined.end(), b.step_losses.begin(), b.step_losses.end());
  joined.insert(joined.end(), rest.step_losses.begin(), rest.step_losses.end());
  CHECK(bit_equal(joined, full.step_losses));
  // same final weights (student, teacher, center, optimizer state)
  SafetensorsFile fa = load_safetensors(tmp.str() + "/full/train_state.safetensors"),
                  fb = load_safetensors(tmp.str() + "/split/train_state.safetensors");
  REQUIRE(fa.tensors.size() == fb.tensors.size());
  for (size_t i = 0; i < fa.tensors.size(); ++i) {
    INFO(fa.tensors[i].first);
    CHECK(fa.tensors[i].first == fb.tensors[i].first);
    CHECK(to_vector(fa.tensors[i].second) == to_vector(fb.tensors[i].second));
  }
  // the epoch means logged after a mid-epoch resume are those of the uninterrupted run
  REQUIRE(rest.epochs.size() == 1);
  REQUIRE(b.epochs.size() == 1);
  // (epoch 1 of the uninterrupted run is its second record)
  auto full_records = read_metrics_jsonl(tmp.str() + "/full/metrics.jsonl");
  auto split_records = read_metrics_jsonl(tmp.str() + "/split/metrics.jsonl");
  std::vector<json> fe, se;
  for (auto& r : full_records)
    if (r["kind"] == "epoch") fe.push_back(r);
  for (auto& r : split_records)
    if (r["kind"] == "epoch") se.push_back(r);
  REQUIRE(fe.size() == 2);
  REQUIRE(se.size() == 2);
  for (const char* k : {"train_loss", "teacher_entropy", "kl", "teacher_batch_entropy"}) {
    CAPTURE(k);
    CHECK(fe[1][k].get<double>() == se[1][k].get<double>());
  }
  // a changed key is refused on resume
  json changed = j;
  changed["dino"]["teacher_temp"] = 0.05;
  CHECK(error_message([&] { run(changed, tmp.str() + "/split", true); }).find("dino.teacher_temp") !=
        std::string::npos);
}

TEST_CASE("DINO config: defaults off, cross-key checks, crops the model cannot take") {
  ExperimentConfig d = experiment_from_json(json{{"model", {{"arch", "deit"}}}});
  CHECK_FALSE(d.dino.enabled);
  CHECK(d.dino.out_dim == 65536);
  CHECK(d.dino.momentum_teacher == 0.996);
  json j = tiny_dino_config();
  j["mixup"] = {{"mixup_alpha", 0.8}};
  CHECK(error_message([&] { experiment_from_json(j); }).find("mixup/cutmix cannot be used with dino.enabled") !=
        std::string::npos);
  j = tiny_dino_config();
  j["distill"] = {{"type", "hard"}, {"teacher", "t.safetensors"}};
  CHECK(error_message([&] { experiment_from_json(j); }).find("distill.type must be none with dino.enabled") !=
        std::string::npos);
  j = tiny_dino_config();
  j["optimizer"]["clip_grad"] = 1.0;
  CHECK(error_message([&] { experiment_from_json(j); }).find("dino.clip_grad") != std::string::npos);
  j = tiny_dino_config();
  j["dino"]["warmup_teacher_temp_epochs"] = 9;
  j["dino"]["teacher_temp"] = 0.07;
  CHECK(error_message([&] { experiment_from_json(j); }) ==
        "config: dino.warmup_teacher_temp_epochs 9 exceeds train.epochs 4");
  j = tiny_dino_config();
  j["dino"]["local_crops_scale"] = {0.0, 0.4};
  CHECK(error_message([&] { experiment_from_json(j); }) ==
        "config: dino.local_crops_scale: must lie in (0, 1], got [0, 0.4]");
  j = tiny_dino_config();
  j["dino"]["out_dim"] = 0;
  CHECK(error_message([&] { experiment_from_json(j); }) == "config: dino.out_dim: must be >= 1, got 0");
  j = tiny_dino_config();
  j["dino"]["blur_sigma"] = {0.5, 0.2};
  CHECK(error_message([&] { experiment_from_json(j); }) ==
        "config: dino.blur_sigma: low must not exceed high, got [0.5,0.2]");
  j["dino"]["blur_sigma"] = {0.0, 0.2};
  CHECK(error_message([&] { experiment_from_json(j); }) == "config: dino.blur_sigma: must be > 0, got [0, 0.2]");
  j = tiny_dino_config();
  j["dino"]["solarize_p"] = 1.5;
  CHECK(error_message([&] { experiment_from_json(j); }).rfind("config: dino.solarize_p: ", 0) == 0);
  // a DeiT with 4-pixel patches cannot take 10-pixel local crops: named before any training
  testing::TempDir tmp;
  j = tiny_dino_config();
  j["model"] = {{"name", "deit_tiny_patch4_28_sima"}, {"embed_dim", 16}, {"depth", 1}, {"num_heads", 2}};
  j["dino"]["local_crops_size"] = 10;
  CHECK(error_message([&] { run(j, tmp.str() + "/deit"); }).rfind("dino.local_crops_size 10: the model cannot take",
                                                                   0) == 0);
}

TEST_CASE("dino_multicrop_options: DINO's augmentations by default, each probability and the blur from its key") {
  json j = tiny_dino_config();
  MultiCropOptions o = dino_multicrop_options(experiment_from_json(j));
  const MultiCropOptions dino;  // DataAugmentationDINO's own values
  CHECK(o.global1_blur_p == dino.global1_blur_p);
  CHECK(o.global2_blur_p == dino.global2_blur_p);
  CHECK(o.local_blur_p == dino.local_blur_p);
  CHECK(o.solarize_p == dino.solarize_p);
  CHECK(o.color_jitter_p == dino.color_jitter_p);
  CHECK(o.blur_sigma == dino.blur_sigma);
  j["dino"]["global1_blur_p"] = 0.25;
  j["dino"]["global2_blur_p"] = 0.5;
  j["dino"]["local_blur_p"] = 0.75;
  j["dino"]["solarize_p"] = 0.0;
  j["dino"]["color_jitter_p"] = 0.125;
  j["dino"]["blur_sigma"] = {0.05, 0.5};
  j["dino"]["local_crops_size"] = 12;
  j["dino"]["local_crops_number"] = 3;
  o = dino_multicrop_options(experiment_from_json(j));
  CHECK(o.global1_blur_p == 0.25);
  CHECK(o.global2_blur_p == 0.5);
  CHECK(o.local_blur_p == 0.75);
  CHECK(o.solarize_p == 0.0);
  CHECK(o.color_jitter_p == 0.125);
  CHECK(o.blur_sigma == std::pair<float, float>{0.05f, 0.5f});
  CHECK(o.local_size == 12);
  CHECK(o.local_crops == 3);
  CHECK(o.blur_sigma_reference == 0);
  j["dino"]["blur_sigma_reference_size"] = 224;
  CHECK(dino_multicrop_options(experiment_from_json(j)).blur_sigma_reference == 224);
  j["dino"]["blur_sigma_reference_size"] = -1;
  CHECK(error_message([&] { experiment_from_json(j); }).find("dino.blur_sigma_reference_size") != std::string::npos);
}
