// What a kind of training adds to the one training loop (train/loop/loop.h): how a batch becomes
// a loss, which modules are trained and saved, what is evaluated and logged. The loop owns
// everything else: the run folder and its lock, the optimizer, the step's tail (non-finite
// check → gradient sync → backward → clip → step), the logging windows, progress, signals,
// checkpoints, resume and curves.
//
//   supervised.cpp  SupervisedObjective: cross-entropy, mixup, EMA, distillation (trainer.h)
//   dino.cpp        DinoObjective: student / teacher, multi-crop, DINOLoss (dino_trainer.h)
//
// The loop calls, in this order: setup → param_groups → (resume: trained / extra_state,
// check_resumed) → (ranks > 1: share) → describe; per epoch start_epoch and next_batch; per
// step forward → clip_gradients → before_update → after_update → step_done → step_fields;
// per epoch end end_epoch → save_checkpoints.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tensor.h"
#include "nn/module.h"
#include "train/loop/train_state.h"
#include "train/optim/optim.h"
#include "train/optim/schedule.h"

namespace sima {

class Comm;

// The per-step schedules the loop applies before every step (indexed by the global step).
struct StepSchedules {
  ScheduleOptions lr, weight_decay;
};

// One step's loss: the tensor to differentiate and its value for the global batch (the
// mean over the ranks' equal slices, so every rank takes the same decisions).
struct StepLoss {
  Tensor loss;
  double value = 0.0;
};

class Objective {
 public:
  virtual ~Objective() = default;

  // ---- set up (once, from TrainingLoop's constructor)
  // Data, networks (seeded), schedules. Returns the batches per epoch (> 0) and fills `sched`.
  virtual int64_t setup(Comm& comm, StepSchedules& sched) = 0;
  // The optimizer's parameter groups (the loop builds the optimizer over them).
  virtual std::vector<ParamGroup> param_groups() = 0;
  // train_state.safetensors: "model.*" (also what the gradients are synchronised over) and "ema.*".
  virtual Module& trained() = 0;
  virtual Module* extra_state() = 0;
  // After a resume loaded the state at `state_path`: refuse what has changed since.
  virtual void check_resumed(const std::string& /*state_path*/) {}
  // More than one rank: the same start everywhere (broadcasts, SyncBatchNorm, shared sums).
  virtual void share(Comm& comm) = 0;
  // The start line's middle: "run <dir>: " + describe() + ", resumed at …".
  virtual std::string describe() const = 0;

  // ---- data
  virtual void start_epoch(int64_t epoch, int64_t batch) = 0;
  virtual bool next_batch() = 0;               // false at the epoch's end
  virtual int64_t batch_images() const = 0;    // this rank's images in the current batch

  // ---- the step
  virtual std::string loss_name() const = 0;   // "loss", "DINO loss": in the non-finite message
  virtual std::string advice() const = 0;      // the non-finite failure's advice
  virtual StepLoss forward(const TrainPosition& pos) = 0;
  // Clips the gradients of `params` and returns the norm to log.
  virtual double clip_gradients(const std::vector<Tensor>& params) = 0;
  virtual void before_update(const TrainPosition& /*pos*/) {}  // after clipping, before optimizer.step
  virtual void after_update(const TrainPosition& /*pos*/) {}   // after a step that was taken
  virtual void step_done(bool /*skipped*/) {}                  // after every step, taken or skipped
  virtual void step_fields(nlohmann::json& /*record*/) const {}  // adds to the "step" record

  // ---- the epoch's end (pos.epoch still the finished epoch's index)
  // Adds to the "epoch" record (evaluation, the objective's figures); may update
  // pos.best_top1 and returns true when these weights are the best so far.
  virtual bool end_epoch(TrainPosition& pos, nlohmann::json& record, double train_loss, double epoch_seconds) = 0;
  // Rank 0: the epoch's model files in `dir` (train_state.safetensors is the loop's).
  virtual void save_checkpoints(const std::string& dir, int64_t step, bool best) = 0;
  // Extra metadata of train_state.safetensors.
  virtual std::map<std::string, std::string> state_metadata() const { return {}; }

  // Set by the loop: a line for the progress output.
  std::function<void(const std::string&)> say = [](const std::string&) {};
};

}  // namespace sima
