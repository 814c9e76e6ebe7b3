// The one training loop, shared by supervised training, distillation and DINO; what differs
// between them is an Objective (train/loop/objective.h).
//
// The loop owns the run folder (lock, config.json, metrics.jsonl / .csv, curves.png), the
// optimizer, the position and resume, the step's tail, the logging windows, the progress
// line, the stop flag and max_steps, and the checkpoints' cadence. One step, at global step s:
//   lr and weight decay from the schedules at s → objective.forward (the loss, its mean over
//   the ranks) → a non-finite loss skips or stops → backward (gradients averaged over the
//   ranks) → objective.clip_gradients → a non-finite gradient skips or stops →
//   objective.before_update → optimizer step (an update leaving a non-finite value is undone
//   with on_nonfinite = skip, else stops) → objective.after_update (e.g. EMA).
// With train.precision bf16 or fp16, forward and backward run under autocast (core/ops/autocast.h);
// with fp16 the loss is scaled (train/optim/loss_scaler.h): the backward starts from S, the
// gradients are unscaled after it, and an inf or NaN among them skips the update and backs S off.
// A "step" record every train.log_every steps holds the window's mean loss; at an epoch's
// end the objective evaluates, the "epoch" record is written (with the epoch's wall and CPU seconds), then the checkpoints and the
// train state last (a run killed between the two resumes from the previous state, and
// MetricsLog::open drops the records past it).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/ops/autocast.h"
#include "train/config/experiment_config.h"
#include "train/distributed/distributed.h"
#include "train/loop/metrics.h"
#include "train/loop/objective.h"
#include "train/loop/progress.h"
#include "train/loop/run_lock.h"
#include "train/loop/run_options.h"
#include "train/optim/loss_scaler.h"

namespace sima {

class TrainingLoop {
 public:
  // Sets up the run: folder and lock, the objective's data and networks, the optimizer,
  // the resumed state, the ranks. `cfg` and `objective` must outlive the loop.
  TrainingLoop(const ExperimentConfig& cfg, TrainerOptions options, Objective& objective);
  ~TrainingLoop();
  LoopResult fit();
  const TrainPosition& position() const { return pos_; }
  const std::string& dir() const { return dir_; }

 private:
  struct Window;
  void say(const std::string& line);
  bool run_epoch(LoopResult& result);  // false when stopped mid-epoch
  void after_step(Window& w, double loss, double gnorm, bool skipped, LoopResult& result);
  void finish_epoch(double epoch_seconds, double img_per_s, double cpu_at_start);
  double train_step(double& grad_norm_out, bool& skipped);
  void nonfinite(const std::string& what, bool& skipped);
  void save(bool epoch_end, bool best);

  const ExperimentConfig& cfg_;
  TrainerOptions opt_;
  Objective& obj_;
  Comm& comm_;
  TestFault fault_ = TestFault::from_env();  // the failure tests' seam; inert in a normal run
  std::unique_ptr<GradSync> grad_sync_;      // with more than one rank
  std::string dir_;
  std::unique_ptr<RunLock> run_lock_;        // rank 0: held while the run lives
  nlohmann::json resolved_;                  // experiment_to_json(cfg)
  std::unique_ptr<Optimizer> optim_;
  std::vector<Tensor> params_;               // what the optimizer trains (clipping, checks)
  StepSchedules sched_;
  MetricsLog log_;
  std::unique_ptr<ProgressBar> progress_;
  TrainPosition pos_;
  int64_t steps_per_epoch_ = 0;
  int skipped_in_row_ = 0;
  float window_peak_ = 0.f;  // float16: the largest forward_peak since the last step record
  float window_peak_attention_ = 0.f;  // ... and of its attention cores' products
  bool stop_ = false;
  AutocastMode autocast_ = AutocastMode::Off;  // train.precision: the products of forward and backward
  std::unique_ptr<LossScaler> scaler_;         // train.precision fp16: over pos_.amp
  int64_t inf_gradient_step_ = -1;  // SIMA_TEST_INF_GRADIENT_STEP: the scaler tests' seam (an inf at that step)
};

// A config, an objective of type O over it and the loop running them: what a trainer holds.
template <class O>
struct LoopRun {
  LoopRun(ExperimentConfig c, TrainerOptions options)
      : cfg(std::move(c)), objective(cfg), loop(cfg, std::move(options), objective) {}
  ExperimentConfig cfg;
  O objective;
  TrainingLoop loop;
};

}  // namespace sima
