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
// EMA update. With distill.type hard | soft (train/distill.h) the frozen teacher runs on the
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
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/model.h"
#include "train/config.h"
#include "train/evaluate.h"

namespace sima {

struct TrainerOptions {
  std::string run_dir;      // "" = runs/<config name>
  bool resume = false;      // continue from run_dir/train_state.safetensors
  bool quiet = false;       // no progress output (tests)
  // Checked after every step (e.g. set by a SIGINT handler): save the train state and stop.
  const std::atomic<bool>* stop_flag = nullptr;
};

// What every run reports (the training loop, train/loop.h; DinoTrainResult has it too).
struct LoopResult {
  std::string run_dir;
  int64_t steps = 0;            // global steps done in total
  int64_t epochs_done = 0;      // complete epochs
  bool interrupted = false;     // stopped by stop_flag or max_steps before the last epoch ended
  double seconds = 0.0;         // wall time of this process's training
  std::vector<double> step_losses;  // the loss of every step this process ran (tests, resume checks)
  // Data parallelism (mpirun, train/distributed.h): the ranks, and the gradient allreduce —
  // bytes per step, buckets, seconds waited for it after backward and spent in it in total.
  int ranks = 1;
  int64_t allreduce_bytes_per_step = 0, allreduce_buckets = 0;
  double allreduce_wait_seconds = 0.0, allreduce_seconds = 0.0;
};

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
