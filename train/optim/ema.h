// Exponential moving average of a model's weights (timm's ModelEmaV2):
//   ema ← decay·ema + (1 − decay)·p   for every parameter, after each optimizer step;
//   buffers (BatchNorm running stats) are copied, not averaged.
// The average lives in a second model of the same config (so it can be evaluated and saved
// as a checkpoint of its own). DINO's EMA teacher uses the same update with a scheduled decay.
#pragma once
#include <memory>

#include "nn/module.h"

namespace sima {

class ModelEma {
 public:
  // `ema` must have the same parameter/buffer names and shapes as the model it will track;
  // it is overwritten with `model`'s current values.
  ModelEma(std::shared_ptr<Module> ema, const Module& model, double decay);

  void update(const Module& model);  // with the configured decay
  void update(const Module& model, double decay);
  Module& module() { return *ema_; }
  double decay() const { return decay_; }

 private:
  std::shared_ptr<Module> ema_;
  double decay_;
};

// ema ← decay·ema + (1 − decay)·model for parameters; buffers copied. Names/shapes must match.
void ema_update(Module& ema, const Module& model, double decay);
// DINO's teacher update: the same for the parameters only (main_dino.py zips
// student.parameters() with teacher.parameters()); the EMA model's buffers (BatchNorm
// running statistics, which the teacher gathers from its own forwards) are left alone.
void ema_update_parameters(Module& ema, const Module& model, double decay);

}  // namespace sima
