// train.precision end to end (core/ops/autocast.h, train/optim/loss_scaler.h):
// - fp32 is bit for bit the training of the code before train.precision existed: the step losses
//   and final weights of a fixed-seed run hash to the value recorded from that code;
// - bf16 and fp16 train (finite, close to fp32, not equal to it) and resume byte-exact;
// - fp16's loss scaler in the loop: an inf injected into a gradient skips that step (weights and
//   optimizer moments untouched, as the train state before it), halves the scale, and the step
//   records count it; the step and epoch records carry the forward's largest float16 magnitude.
#include <doctest/doctest.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/ops/autocast.h"
#include "data/temp_dir.h"
#include "models/io/safetensors.h"
#include "testing.h"
#include "train/loop/metrics.h"
#include "train/objectives/trainer.h"

using namespace sima;
using json = nlohmann::json;

namespace {

// A one-block SimA DeiT, dropout, drop path, augmentation, mixup and EMA on: 6 steps of 32 images.
json small_run(const std::string& precision = "") {
  json j = json::parse(R"({
    "name": "precision",
    "model": {"name": "deit_tiny_patch4_28_sima", "embed_dim": 32, "depth": 1, "num_heads": 4,
              "drop_path_rate": 0.2, "drop_rate": 0.1},
    "data": {"dataset": "fashion_mnist", "batch_size": 32, "train_subset": 192, "test_subset": 64, "num_workers": 2},
    "augment": {"crop": "random_crop", "padding": 2, "hflip": 0.5, "random_erasing": 0.25},
    "mixup": {"mixup_alpha": 0.8, "cutmix_alpha": 1.0},
    "optimizer": {"type": "adamw", "lr": 2e-3, "weight_decay": 0.05},
    "schedule": {"type": "cosine", "warmup_epochs": 0.1, "min_lr": 1e-5},
    "train": {"epochs": 1, "seed": 3, "label_smoothing": 0.1, "log_every": 1, "ema": true, "ema_decay": 0.9}
  })");
  if (!precision.empty()) j["train"]["precision"] = precision;
  return j;
}

TrainResult run(const json& j, const std::string& dir, bool resume = false) {
  return train(experiment_from_json(j), {.run_dir = dir, .resume = resume, .quiet = true});
}

// FNV-1a, 64 bits, over the step losses (float64, little-endian) and then every tensor of the
// safetensors file in name order (float32, little-endian): tests/train/precision_hash.py
// computes the same from a run folder of any build.
uint64_t run_hash(const std::vector<double>& losses, const std::string& file) {
  uint64_t h = 1469598103934665603ull;
  auto eat = [&](const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  };
  eat(losses.data(), losses.size() * sizeof(double));
  SafetensorsFile f = load_safetensors(file);
  std::sort(f.tensors.begin(), f.tensors.end(), [](auto& a, auto& b) { return a.first < b.first; });
  for (auto& [name, t] : f.tensors) {
    const std::vector<float> v = to_vector(t);
    eat(v.data(), v.size() * sizeof(float));
  }
  return h;
}

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

bool bit_equal(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

// The run in one go and in two parts (3 steps, then --resume): the same losses and files.
std::vector<double> check_resume_exact(const json& j, const std::string& dir) {
  TrainResult whole = run(j, dir + "/whole");
  REQUIRE(whole.steps == 6);
  json part = j;
  part["train"]["max_steps"] = 3;
  TrainResult a = run(part, dir + "/parts");
  part["train"]["max_steps"] = 0;
  TrainResult b = run(part, dir + "/parts", /*resume=*/true);
  std::vector<double> losses = a.step_losses;
  losses.insert(losses.end(), b.step_losses.begin(), b.step_losses.end());
  CHECK(bit_equal(losses, whole.step_losses));
  check_same_tensors(dir + "/whole/model.safetensors", dir + "/parts/model.safetensors");
  check_same_tensors(dir + "/whole/train_state.safetensors", dir + "/parts/train_state.safetensors");
  return whole.step_losses;
}

}  // namespace

// The run's bits depend on the GEMM kernels, which oneDNN picks by the host's instruction set, so
// there is one hash per set (OMP_NUM_THREADS=2, small_run()'s config; tests/train/precision_hash.py
// RUN_FOLDER prints it):
// - AVX-512 hosts: commit 732aa58's sima-train, before train.precision existed.
// - AVX2-only hosts: the sima-train of commit 08adf60 (C++ as at c1ce7c3), fp32 by default; on
//   AVX-512 hosts that same code gives the 732aa58 hash, so this guards the same fp32 path.
uint64_t fp32_run_hash() {
  const unsigned isa = unsigned(dnnl_get_effective_cpu_isa());
  auto has = [isa](dnnl_cpu_isa_t level) { return (isa & unsigned(level)) == unsigned(level); };
  if (has(dnnl_cpu_isa_avx512_core)) return 0xc65ff556f6a015f2ull;
  if (has(dnnl_cpu_isa_avx2)) return 0xfec59bc6822286fdull;
  FAIL("no fp32 run hash recorded for oneDNN's cpu isa 0x" << std::hex << isa << ": record one here");
  return 0;
}

TEST_CASE("train.precision fp32: bit for bit the training before train.precision existed") {
  testing::TempDir tmp;
  TrainResult r = run(small_run(), tmp.str() + "/default");
  const uint64_t h = run_hash(r.step_losses, tmp.str() + "/default/model.safetensors");
  char text[32];
  std::snprintf(text, sizeof text, "0x%016llx", static_cast<unsigned long long>(h));
  MESSAGE("fp32 run hash: ", std::string(text));
  CHECK(h == fp32_run_hash());
  TrainResult e = run(small_run("fp32"), tmp.str() + "/explicit");
  CHECK(run_hash(e.step_losses, tmp.str() + "/explicit/model.safetensors") == h);
}

TEST_CASE("train.precision bf16 and fp16: close to fp32, not equal, and resumed byte-exact") {
  testing::TempDir tmp;
  TrainResult ref = run(small_run(), tmp.str() + "/fp32");
  for (const char* p : {"bf16", "fp16"}) {
    if (std::string(p) == "bf16" && !autocast_unsupported(AutocastMode::BF16).empty()) {
      const std::string msg = testing::error_message([&] { run(small_run(p), tmp.str() + "/refused"); });
      CHECK(msg.find("AVX512-BF16") != std::string::npos);
      continue;
    }
    INFO(std::string(p));
    const std::vector<double> losses = check_resume_exact(small_run(p), tmp.str() + "/" + p);
    REQUIRE(losses.size() == ref.step_losses.size());
    double worst = 0;
    for (size_t i = 0; i < losses.size(); ++i) {
      CHECK(std::isfinite(losses[i]));
      worst = std::max(worst, std::fabs(losses[i] - ref.step_losses[i]));
    }
    MESSAGE(std::string(p), ": largest |loss - fp32 loss| over 6 steps ", worst);
    CHECK(worst > 0.0);
    CHECK(worst < 0.05);
  }
}

TEST_CASE("train.precision fp16: an inf gradient skips the step, leaves weights and moments, halves the scale") {
  testing::TempDir tmp;
  json j = small_run("fp16");
  j["train"]["max_steps"] = 2;
  run(j, tmp.str() + "/two");
  setenv("SIMA_TEST_INF_GRADIENT_STEP", "3", 1);  // the loop's test seam: an inf in a gradient at step 3
  j["train"]["max_steps"] = 3;
  run(j, tmp.str() + "/three");
  unsetenv("SIMA_TEST_INF_GRADIENT_STEP");
  // After the skipped step 3, the model and the optimizer (moments, step counts) are as after step 2.
  // (The EMA moved: PyTorch updates it after a skipped step as well.)
  SafetensorsFile two = load_safetensors(tmp.str() + "/two/train_state.safetensors");
  SafetensorsFile three = load_safetensors(tmp.str() + "/three/train_state.safetensors");
  REQUIRE(two.tensors.size() == three.tensors.size());
  int compared = 0;
  for (size_t i = 0; i < two.tensors.size(); ++i) {
    const std::string& name = two.tensors[i].first;
    if (name.rfind("model.", 0) != 0 && name.rfind("optim.", 0) != 0) continue;
    INFO(name);
    REQUIRE(three.tensors[i].first == name);
    const std::vector<float> x = to_vector(two.tensors[i].second), y = to_vector(three.tensors[i].second);
    CHECK((x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0));
    ++compared;
  }
  CHECK(compared > 10);
  j["train"]["max_steps"] = 0;
  run(j, tmp.str() + "/three", /*resume=*/true);  // steps 4-6: clean
  std::vector<json> steps;
  for (auto& rec : read_metrics_jsonl(tmp.str() + "/three/metrics.jsonl"))
    if (rec["kind"] == "step") steps.push_back(rec);
  REQUIRE(steps.size() == 6);
  CHECK(steps[0]["loss_scale"] == 65536.0);
  CHECK(steps[1]["overflow_skipped_steps"] == 0);
  CHECK(steps[2]["loss_scale"] == 32768.0);
  CHECK(steps[2]["overflow_skipped_steps"] == 1);
  CHECK(steps[5]["loss_scale"] == 32768.0);  // growth only after 2000 clean steps
  CHECK(steps[5]["overflow_skipped_steps"] == 1);
  // Each step record (log_every 1) has its forward's largest float16 magnitude: finite, above the
  // inputs' scale, below float16's 65504; the epoch's is the largest of its steps', resumed or not.
  double largest = 0, largest_attention = 0;
  for (const json& s : steps) {
    const double peak = s["fp16_forward_peak"].get<double>(), attention = s["fp16_forward_peak_attention"].get<double>();
    CHECK(peak > 1.0);
    CHECK(peak < 65504.0);
    CHECK(attention > 0.0);  // the SimA core's products (packed: gemm_block), part of the whole
    CHECK(attention <= peak);
    largest = std::max(largest, peak);
    largest_attention = std::max(largest_attention, attention);
  }
  std::vector<json> epochs;
  for (auto& rec : read_metrics_jsonl(tmp.str() + "/three/metrics.jsonl"))
    if (rec["kind"] == "epoch") epochs.push_back(rec);
  REQUIRE(epochs.size() == 1);
  CHECK(epochs[0]["fp16_forward_peak"].get<double>() == largest);
  CHECK(epochs[0]["fp16_forward_peak_attention"].get<double>() == largest_attention);
}
