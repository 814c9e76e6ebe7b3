// Data-parallel training with real processes: `mpirun -np 2 sima-train` against one process
// with the same global batch (train/distributed/distributed.h). Built only with SIMA_MPI (label "mpi").
//
// What "equal" means. Two ranks compute the same mean gradient as one process, but summed in
// another order: mean over 8 images per rank, then (g0 + g1)/2, against a mean over 16. The
// float32 rounding differs (relative ~1e-7 per sum). AdamW turns each gradient into an update
// lr·m/(√v + ε) of nearly fixed size whatever the gradient's scale, so where a gradient is
// itself at rounding level the two runs can move that element differently: measured after 3
// steps, most tensors agree to ~3e-7 and the worst element to 3e-6 (CvT) = 0.3% of one update
// (lr = 1e-3). kTol = 5e-5 absolute is 5% of one update; a wrong
// average (another slice of data, unsynchronised BatchNorm) moves parameters by a good part of
// lr and fails: the negative controls below must differ by more than 10·kTol.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "app_testing.h"
#include "data/temp_dir.h"
#include "models/io/safetensors.h"
#include "testing.h"

using namespace sima;
using sima::testing::Run;
using sima::testing::TempDir;
using json = nlohmann::json;

namespace {

constexpr double kTol = 5e-5;

// mpirun as root needs these; one thread per rank; no binding (other jobs share the cores).
const std::string kEnv = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 "
                         "OMP_WAIT_POLICY=passive SIMA_MPI_TIMEOUT=60 ";

Run sh(const std::string& cmd) {
  TempDir dir;
  const std::string out = dir.file("out.txt"), err = dir.file("err.txt");
  const int raw = std::system((cmd + " >" + out + " 2>" + err).c_str());
  Run r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  auto slurp = [](const std::string& p) {
    std::ifstream f(p);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

std::string train_bin() { return std::string(SIMA_BIN_DIR) + "/sima-train"; }

// `np` = 0: one plain process (no mpirun).
Run train(int np, const std::string& config, const std::string& out, const std::string& extra = "",
          const std::string& env = "") {
  const std::string args = " --config " + config + " --out " + out + " --quiet " + extra;
  if (np == 0) return sh(kEnv + env + train_bin() + args);
  return sh(kEnv + env + "mpirun -np " + std::to_string(np) + " --oversubscribe --bind-to none " + train_bin() + args);
}

std::string write_config(const TempDir& dir, const std::string& name, const json& j) {
  const std::string path = dir.file(name + ".json");
  std::ofstream(path) << j.dump(2);
  return path;
}

// A one-block SimA DeiT (LayerNorm only), 4 steps of a global batch of 16, no randomness
// that depends on the process (no dropout, drop path, mixup).
json deit_config() {
  return json::parse(R"({
    "name": "mpi_deit",
    "model": {"name": "deit_tiny_patch4_28_sima", "embed_dim": 32, "depth": 1, "num_heads": 2},
    "data": {"dataset": "fashion_mnist", "batch_size": 16, "train_subset": 64, "test_subset": 32, "num_workers": 0},
    "augment": {"crop": "random_crop", "padding": 2, "hflip": 0.5},
    "optimizer": {"type": "adamw", "lr": 1e-3, "weight_decay": 0.05},
    "schedule": {"type": "constant", "warmup_epochs": 0},
    "train": {"epochs": 1, "seed": 2, "label_smoothing": 0.1, "log_every": 1, "max_steps": 3,
              "allreduce_bucket_mb": 0.01}
  })");
}
// (Buckets of ~10 KB: the 61 KB of DeiT gradients go in 4 buckets, the CvT's 184 KB in 10, so
// several allreduces start during backward, between SyncBatchNorm's own.)

// A small CvT: BatchNorm in its convolutional projections. Softmax attention, not SimA: SimA's ℓ1
// norm has a kink at 0 (its backward takes sign(q)), so a q entry at rounding level can take the
// other side in another summation order and move a whole token's gradient. With SimA and oneDNN
// capped at AVX2 (ONEDNN_MAX_CPU_ISA=AVX2) one process's gradient was 1.5e-3 (relative) off the
// 2 ranks' and the AVX-512 run's (with SimA's smooth ℓ2 norm instead: 4e-7), and 3 steps later the
// weights 4e-3 apart; with softmax both ISAs give 3e-6. The sum across ranks is what this test
// checks; the attention is not.
json cvt_config() {
  json j = deit_config();
  j["name"] = "mpi_cvt";
  j["model"] = json::parse(R"({"name": "cvt_13_28", "stage_dims": [16, 32, 32], "stage_depths": [1, 1, 1],
                                "stage_heads": [1, 2, 2], "stage_drop_path": [0, 0, 0]})");
  return j;
}

// SGD, not AdamW: DINO's sharp softmaxes (teacher temperature 0.04) leave some gradients at
// rounding level (pos_embed: 1.9e-7 in one process, 1.5e-7 with 2 ranks), and AdamW's step,
// of nearly fixed size whatever the gradient, turned that into a 6.1e-5 parameter difference
// on one machine (6% of one update, over kTol). SGD's step is lr·g: 2 ranks then agree to 1e-7,
// and the half-batch control below still differs by 0.04. AdamW's averaging is the DeiT test's.
json dino_config() {
  return json::parse(R"({
    "name": "mpi_dino",
    "model": {"name": "deit_tiny_patch4_28_sima", "embed_dim": 32, "depth": 1, "num_heads": 2},
    "data": {"dataset": "fashion_mnist", "batch_size": 16, "train_subset": 64, "num_workers": 0},
    "augment": {"crop_pct": 1.0},
    "optimizer": {"type": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 0.04},
    "schedule": {"type": "cosine", "warmup_epochs": 0, "min_lr": 1e-6},
    "train": {"epochs": 1, "seed": 1, "log_every": 1, "max_steps": 3, "allreduce_bucket_mb": 0.01},
    "dino": {"enabled": true, "out_dim": 32, "hidden_dim": 32, "bottleneck_dim": 16,
             "local_crops_number": 2, "local_crops_size": 12, "warmup_teacher_temp": 0.04,
             "teacher_temp": 0.04, "warmup_teacher_temp_epochs": 0, "freeze_last_layer": 0}
  })");
}

// Largest |a − b| over the tensors whose name starts with `prefix` (both files must hold the same).
double max_diff(const std::string& a_path, const std::string& b_path, const std::string& prefix, int* count = nullptr) {
  SafetensorsFile a = load_safetensors(a_path), b = load_safetensors(b_path);
  double worst = 0.0;
  int n = 0;
  for (auto& [name, ta] : a.tensors) {
    if (name.rfind(prefix, 0) != 0) continue;
    Tensor tb = b.get(name);
    REQUIRE_MESSAGE(tb.defined(), name, " missing in ", b_path);
    REQUIRE(tb.numel() == ta.numel());
    for (int64_t i = 0; i < ta.numel(); ++i)
      worst = std::max(worst, double(sima::testing::abs_diff(ta.data()[i], tb.data()[i])));  // NaN: inf
    ++n;
  }
  if (count) *count = n;
  return worst;
}

std::string state(const std::string& dir) { return dir + "/train_state.safetensors"; }

}  // namespace

// The epoch record of a run's metrics.jsonl (the last one).
json epoch_record(const std::string& dir) {
  std::ifstream f(dir + "/metrics.jsonl");
  json last;
  for (std::string line; std::getline(f, line);)
    if (json r = json::parse(line); r.value("kind", "") == "epoch") last = r;
  return last;
}

TEST_CASE("mpirun -np 2 = one process with the same global batch (DeiT), rank 0 alone writes the run") {
  TempDir tmp;
  json j = deit_config();
  j["train"]["max_steps"] = 0;  // the whole epoch (4 steps) and its evaluation, split among the ranks
  const std::string cfg = write_config(tmp, "deit", j);
  Run one = train(0, cfg, tmp.str() + "/one");
  REQUIRE_MESSAGE(one.status == 0, one.err);
  Run two = train(2, cfg, tmp.str() + "/two");
  REQUIRE_MESSAGE(two.status == 0, two.err, two.out);
  int n = 0;
  const double d = max_diff(state(tmp.str() + "/one"), state(tmp.str() + "/two"), "model.", &n);
  MESSAGE("DeiT, 4 steps: max |2 ranks - 1 process| over ", n, " tensors = ", d);
  CHECK(n > 10);
  CHECK(d < kTol);
  CHECK(max_diff(state(tmp.str() + "/one"), state(tmp.str() + "/two"), "optim.") < kTol);
  // One metrics file with one record per step (rank 0 only), and the step's loss the global one.
  std::ifstream f(tmp.str() + "/two/metrics.jsonl");
  int steps = 0;
  for (std::string line; std::getline(f, line);) steps += json::parse(line).value("kind", "") == "step";
  CHECK(steps == 4);
  // The evaluation of the 32 test images split 16 + 16: the same figures as one process.
  const json e1 = epoch_record(tmp.str() + "/one"), e2 = epoch_record(tmp.str() + "/two");
  REQUIRE(e2.contains("test_top1"));
  CHECK(e2["test_top1"].get<double>() == e1["test_top1"].get<double>());
  CHECK(std::fabs(e2["test_loss"].get<double>() - e1["test_loss"].get<double>()) < 1e-4);
  CHECK(std::fabs(e2["train_loss"].get<double>() - e1["train_loss"].get<double>()) < 1e-5);

  // The test can fail: half the global batch on one process is another result.
  json half = j;
  half["data"]["batch_size"] = 8;
  half["train"]["max_steps"] = 4;
  Run h = train(0, write_config(tmp, "half", half), tmp.str() + "/half");
  REQUIRE(h.status == 0);
  const double dh = max_diff(state(tmp.str() + "/one"), state(tmp.str() + "/half"), "model.");
  MESSAGE("negative control, one process with half the batch: ", dh);
  CHECK(dh > 10 * kTol);
}

TEST_CASE("SyncBatchNorm: 2 ranks = one process on the concatenated batch (CvT, running stats too)") {
  TempDir tmp;
  json j = cvt_config();
  j["train"]["sync_batchnorm"] = true;
  const std::string cfg = write_config(tmp, "cvt", j);
  Run one = train(0, cfg, tmp.str() + "/one");
  REQUIRE_MESSAGE(one.status == 0, one.err);
  Run two = train(2, cfg, tmp.str() + "/two");
  REQUIRE_MESSAGE(two.status == 0, two.err);
  const double d = max_diff(state(tmp.str() + "/one"), state(tmp.str() + "/two"), "model.");
  MESSAGE("CvT + SyncBatchNorm, 3 steps: max |2 ranks - 1 process| = ", d);
  CHECK(d < kTol);
  // Without the sync each rank normalises its own 8 images: not the one-process result.
  Run local = train(2, cfg, tmp.str() + "/local", "--set train.sync_batchnorm=false");
  REQUIRE_MESSAGE(local.status == 0, local.err);
  const double dl = max_diff(state(tmp.str() + "/one"), state(tmp.str() + "/local"), "model.");
  MESSAGE("negative control, 2 ranks without SyncBatchNorm: ", dl);
  CHECK(dl > 10 * kTol);
}

TEST_CASE("DINO: 2 ranks = one process (student, teacher, center all-reduced)") {
  TempDir tmp;
  const std::string cfg = write_config(tmp, "dino", dino_config());
  Run one = train(0, cfg, tmp.str() + "/one");
  REQUIRE_MESSAGE(one.status == 0, one.err);
  Run two = train(2, cfg, tmp.str() + "/two");
  REQUIRE_MESSAGE(two.status == 0, two.err);
  const double ds = max_diff(state(tmp.str() + "/one"), state(tmp.str() + "/two"), "model.");
  const double dt = max_diff(state(tmp.str() + "/one"), state(tmp.str() + "/two"), "ema.teacher.");
  const double dc = max_diff(state(tmp.str() + "/one"), state(tmp.str() + "/two"), "ema.dino_loss.");  // the center
  MESSAGE("DINO, 3 steps: student ", ds, ", teacher ", dt, ", center ", dc);
  CHECK(ds < kTol);
  CHECK(dt < kTol);
  CHECK(dc < kTol);
  // Negative control: one process on half the batch (what a rank sees alone) is far off.
  json half = dino_config();
  half["data"]["batch_size"] = 8;
  Run h = train(0, write_config(tmp, "dino_half", half), tmp.str() + "/half");
  REQUIRE_MESSAGE(h.status == 0, h.err);
  const double hs = max_diff(state(tmp.str() + "/one"), state(tmp.str() + "/half"), "model.");
  const double hc = max_diff(state(tmp.str() + "/one"), state(tmp.str() + "/half"), "ema.dino_loss.");
  MESSAGE("negative control, one process with half the batch: student ", hs, ", center ", hc);
  CHECK(hs > 10 * kTol);
  CHECK(hc > 10 * kTol);
  // (ema.epoch_sums, the logged figures' running sums, differ on purpose: the batch entropy of
  // 2 ranks is the mean of each rank's, not the entropy of the whole batch; train/objectives/dino.cpp.)
}

TEST_CASE("resume across rank counts: 2 ranks for 2 steps, then 1 process = 1 process for 4 steps") {
  TempDir tmp;
  json j = deit_config();
  j["train"]["max_steps"] = 4;
  j["train"]["epochs"] = 2;  // 4 steps per epoch
  const std::string cfg = write_config(tmp, "deit", j);
  Run straight = train(0, cfg, tmp.str() + "/straight");
  REQUIRE_MESSAGE(straight.status == 0, straight.err);
  Run first = train(2, cfg, tmp.str() + "/split", "--set train.max_steps=2");
  REQUIRE_MESSAGE(first.status == 0, first.err);
  Run rest = train(0, cfg, tmp.str() + "/split", "--resume");
  REQUIRE_MESSAGE(rest.status == 0, rest.err);
  const double d = max_diff(state(tmp.str() + "/straight"), state(tmp.str() + "/split"), "model.");
  MESSAGE("resume 2 -> 1 ranks: max diff ", d);
  CHECK(d < kTol);
  // And 1 -> 2: the position is in global batches, so the data continue where they stopped.
  Run again = train(2, cfg, tmp.str() + "/straight", "--resume --set train.max_steps=5");
  CHECK_MESSAGE(again.status == 0, again.err);
}

TEST_CASE("failures end the job with a clear error, not a hang") {
  TempDir tmp;
  const std::string cfg = write_config(tmp, "deit", deit_config());
  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  Run thrown = train(2, cfg, tmp.str() + "/throw", "", "SIMA_TEST_FAULT=1:2 ");
  const double throw_s = std::chrono::duration<double>(Clock::now() - t0).count();
  CHECK(thrown.status != 0);
  CHECK_MESSAGE(thrown.err.find("sima-train: error: rank 1 of 2: SIMA_TEST_FAULT: injected failure at step 2") !=
                    std::string::npos,
                thrown.err);
  MESSAGE("a rank that throws: the job ended in ", throw_s, " s");
  CHECK(throw_s < 30);

  t0 = Clock::now();
  Run hung = train(2, cfg, tmp.str() + "/hang", "", "SIMA_TEST_FAULT=1:2:hang SIMA_MPI_TIMEOUT=3 ");
  const double hang_s = std::chrono::duration<double>(Clock::now() - t0).count();
  CHECK(hung.status != 0);
  CHECK_MESSAGE(hung.err.find("rank 0 of 2: no answer from the other ranks within SIMA_MPI_TIMEOUT = 3 s") !=
                    std::string::npos,
                hung.err);
  MESSAGE("a rank that hangs: the job ended in ", hang_s, " s (timeout 3 s)");
  CHECK(hang_s < 30);

  // A global batch the ranks cannot share equally.
  Run odd = train(2, cfg, tmp.str() + "/odd", "--set data.batch_size=15");
  CHECK(odd.status != 0);
  CHECK_MESSAGE(odd.err.find("global batch_size 15 does not divide among 2 processes") != std::string::npos, odd.err);
}
