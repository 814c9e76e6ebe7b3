// The supervised trainer: one ExperimentConfig in, a trained model in a run folder out.
//
//   runs/<name>/config.json              the config as resolved (every key)
//   runs/<name>/model.safetensors        the last epoch's weights (sima-eval loads it)
//   runs/<name>/best.safetensors         the weights of the best test top-1 so far
//   runs/<name>/model_ema.safetensors    with train.ema: the EMA weights
//   runs/<name>/train_state.safetensors  everything --resume needs (below)
//   runs/<name>/metrics.jsonl, metrics.csv, curves.png
//
// One step: lr/wd from the schedules (by global step) → batch from the loader (seeded by
// (seed, epoch, batch)) → mixup/cutmix (generator seeded by (seed, epoch, batch)) → forward
// in train mode → cross-entropy (label smoothing or the mixed soft targets; a distilled
// DeiT's two heads each get half) → backward → non-finite check → clip → optimizer step →
// EMA update. With distill.type hard | soft (train/objectives/distill.h) the frozen teacher runs on the
// same mixed batch first, and the loss is (1 − α)·CE(class head) + α·distillation term of the
// distillation head; the checkpoints' metadata "distill" names the teacher (path, bytes,
// crc32), and a resumed run refuses a teacher file whose crc32 has changed.
//
// Exact resume. train_state.safetensors holds the model ("model.*"), the optimizer moments
// ("optim.*"), the EMA weights ("ema.*"), and in its metadata the global step, the epoch and
// the batch within it, the RNG streams (dropout / drop path draw from them), the running
// epoch loss and the best accuracy. Since data order, augmentation and mixing are pure
// functions of (seed, epoch, batch) and the schedules of the step, a resumed run computes
// the same losses as an uninterrupted one, bit for bit at the same thread count.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/model.h"
#include "train/config/experiment_config.h"
#include "train/eval/evaluate.h"
#include "train/loop/run_options.h"

namespace sima {

struct TrainResult : LoopResult {
  EvalResult last_eval;         // the last evaluation (count 0 if none ran)
  double best_top1 = 0.0;
};

class Trainer {
 public:
  Trainer(ExperimentConfig cfg, TrainerOptions options);
  ~Trainer();
  TrainResult fit();
  Model& model();

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// Convenience: Trainer(cfg, options).fit().
TrainResult train(const ExperimentConfig& cfg, const TrainerOptions& options);

}  // namespace sima
