// DINO self-supervised training (facebookresearch/dino main_dino.py), run by sima-train
// when the config's dino section is enabled. No labels are used.
//
//   runs/<name>/config.json              the config as resolved
//   runs/<name>/model.safetensors        the TEACHER backbone: a normal model checkpoint
//                                        (sima-eval and k-NN / linear-probe evaluation load it)
//   runs/<name>/student.safetensors      the student backbone
//   runs/<name>/train_state.safetensors  everything --resume needs (below)
//   runs/<name>/metrics.jsonl, metrics.csv, curves.png
//
// Networks: student = MultiCropWrapper(backbone, DINOHead), teacher = the same with the
// backbone built without dropout / drop path (dino_model.h). The teacher starts as a copy
// of the student, gets no gradient and stays in train mode as in DINO (which never calls
// teacher.eval(); BatchNorm layers of a CvT / XCiT teacher normalise with batch statistics
// and keep their own running statistics, which the EMA does not touch).
//
// One step (global step it, epoch e), in main_dino.py's order:
//   lr, weight decay (group 0 only: DINO decays every parameter of 2+ dims, so
//   optimizer.no_weight_decay is not used) and teacher momentum from their per-step
//   schedules; teacher forward on the 2 global crops (no graph); student forward on all
//   crops, one backbone pass per resolution; DINOLoss (center updated); a non-finite loss
//   stops (or skips, train.on_nonfinite); backward; per-parameter clipping to dino.clip_grad;
//   while e < dino.freeze_last_layer the head's last_layer gradients are dropped (so AdamW
//   leaves it untouched); AdamW step; teacher ← m·teacher + (1 − m)·student (parameters).
// Schedules (utils.cosine_scheduler, warmup as np.linspace): lr from schedule.warmup_lr to
// the effective lr over schedule.warmup_epochs then cosine to schedule.min_lr; weight decay
// cosine optimizer.weight_decay → dino.weight_decay_end; momentum cosine
// dino.momentum_teacher → 1. τ_t per epoch (dino_loss.h).
//
// Exact resume: train_state.safetensors holds the student ("model.*"), the optimizer
// ("optim.*"), and under "ema.*" the teacher ("ema.teacher.*"), the loss center
// ("ema.dino_loss.center") and the running sums of the epoch's logged figures
// ("ema.epoch_sums"), with the position and the RNG streams in its metadata. Data order and
// crops are functions of (seed, epoch, batch) and the schedules of the step, so a run
// resumed mid-epoch computes the same losses as an uninterrupted one, bit for bit at the
// same thread count.
//
// Logs: a "step" record every train.log_every steps and an "epoch" record per epoch with the
// mean loss, teacher entropy, KL(teacher ‖ student) and batch entropy (dino_loss.h), and
// lr, weight decay, momentum and τ_t, so a collapse shows: entropy → 0 (one prototype) or
// → log K with KL → 0 (uniform).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "data/multicrop.h"
#include "nn/dino_loss.h"
#include "train/config/experiment_config.h"
#include "train/objectives/dino_model.h"
#include "train/objectives/trainer.h"
#include "train/optim/schedule.h"

namespace sima {

// The three per-step schedules of a DINO run with `steps_per_epoch` steps per epoch.
struct DinoSchedules {
  ScheduleOptions lr, weight_decay, momentum;
};
DinoSchedules dino_schedules(const ExperimentConfig& cfg, int64_t steps_per_epoch);

// The multi-crop augmentation of a DINO run: sizes, crop scales and counts, the photometric
// augmentations' probabilities and blur range from the dino section, normalisation from the model.
MultiCropOptions dino_multicrop_options(const ExperimentConfig& cfg);

// utils.cancel_gradients_last_layer: while epoch < freeze_last_layer, drops the gradient of
// every parameter whose name contains "last_layer" (the optimizer then skips them).
void cancel_gradients_last_layer(int64_t epoch, Module& model, int64_t freeze_last_layer);

// The epoch means of what one epoch logged.
struct DinoEpochStats {
  int64_t epoch = 0;  // 1-based, as logged
  double loss = 0.0, teacher_entropy = 0.0, kl = 0.0, teacher_batch_entropy = 0.0;
  double lr = 0.0, weight_decay = 0.0, momentum = 0.0, teacher_temp = 0.0;
  double seconds = 0.0;
};

struct DinoTrainResult : LoopResult {     // LoopResult: train/loop/run_options.h
  std::vector<DinoEpochStats> epochs;  // every epoch this process completed
};

class DinoTrainer {
 public:
  DinoTrainer(ExperimentConfig cfg, TrainerOptions options);
  ~DinoTrainer();
  DinoTrainResult fit();
  MultiCropWrapper& student();
  MultiCropWrapper& teacher();
  DINOLoss& loss();

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// Convenience: DinoTrainer(cfg, options).fit().
DinoTrainResult train_dino(const ExperimentConfig& cfg, const TrainerOptions& options);

}  // namespace sima
