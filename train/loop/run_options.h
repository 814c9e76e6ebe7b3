// What a run is given (TrainerOptions) and what every run reports (LoopResult): shared by the
// training loop (loop.h) and the trainers over it (train/objectives/trainer.h, dino_trainer.h).
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace sima {

struct TrainerOptions {
  std::string run_dir;      // "" = runs/<config name>
  bool resume = false;      // continue from run_dir/train_state.safetensors
  bool quiet = false;       // no progress output (tests)
  // Checked after every step (e.g. set by a SIGINT handler): save the train state and stop.
  const std::atomic<bool>* stop_flag = nullptr;
};

// What every run reports (TrainingLoop::fit; TrainResult and DinoTrainResult extend it).
struct LoopResult {
  std::string run_dir;
  int64_t steps = 0;            // global steps done in total
  int64_t epochs_done = 0;      // complete epochs
  bool interrupted = false;     // stopped by stop_flag or max_steps before the last epoch ended
  double seconds = 0.0;         // wall time of this process's training
  std::vector<double> step_losses;  // the loss of every step this process ran (tests, resume checks)
  // Data parallelism (mpirun, train/distributed/distributed.h): the ranks, and the gradient
  // allreduce — bytes per step, buckets, seconds waited for it after backward and spent in it
  // in total.
  int ranks = 1;
  int64_t allreduce_bytes_per_step = 0, allreduce_buckets = 0;
  double allreduce_wait_seconds = 0.0, allreduce_seconds = 0.0;
};

}  // namespace sima
