// train_state.safetensors: everything a resumed run needs, in one file written atomically
// (temporary file + rename, models/io/safetensors.h), so a run killed at any moment leaves
// either the previous state or the new one, never a mix.
//
//   tensors:  "model.<name>"  the model's parameters and buffers
//             "optim.<kind>.<name>", "optim.step"  the optimizer state (train/optim/optim.h)
//             "ema.<name>"    the EMA model (when there is one)
//   metadata: "format" = "sima.cpp/train_state/1", "position" = TrainPosition as JSON,
//             "rng" = the four RNG stream states, "config" = the resolved experiment config.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "nn/module.h"
#include "train/optim/loss_scaler.h"
#include "train/optim/optim.h"

namespace sima {

struct TrainPosition {
  int64_t step = 0;   // global optimizer steps done
  int64_t epoch = 0;  // the epoch in progress (== epochs when training is complete)
  int64_t batch = 0;  // batches of that epoch done
  double epoch_loss_sum = 0.0;  // running sums of the epoch in progress (its mean train loss)
  int64_t epoch_loss_count = 0;
  double best_top1 = -1.0;  // best test top-1 so far (-1: none yet)
  LossScalerState amp = {};  // train.precision fp16 only (scale 0 otherwise: not written)
};

// `extra_metadata` adds keys (e.g. "distill_teacher"); the four above cannot be replaced.
void save_train_state(const std::string& path, const Module& model, const Optimizer& optim, const Module* ema,
                      const TrainPosition& pos, const nlohmann::json& config,
                      const std::map<std::string, std::string>& extra_metadata = {});

// Loads into the given objects (all checked before anything changes: names, shapes, format)
// and restores the RNG streams. Returns the position; `config` receives the stored config.
TrainPosition load_train_state(const std::string& path, Module& model, Optimizer& optim, Module* ema,
                               nlohmann::json* config = nullptr);

}  // namespace sima
