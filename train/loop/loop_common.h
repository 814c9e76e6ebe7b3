// The pieces of a run that the one training loop (loop.cpp) and its objectives
// (train/objectives/supervised.cpp, dino.cpp) call: the run folder and its lock, the optimizer
// from the config, the non-finite step policy, the progress line and the checkpoints' metadata.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "train/config/data_spec.h"
#include "train/config/experiment_config.h"
#include "train/loop/progress.h"
#include "train/loop/run_lock.h"
#include "train/loop/train_state.h"
#include "train/optim/optim.h"

namespace sima {

// Creates `dir` (and parents) and locks it for this process (train/loop/run_lock.h: a folder
// another run is writing is refused, naming that run's pid). Then a folder that already
// holds train_state.safetensors is refused without `resume`, and `resume` needs one.
// Keep the returned lock for as long as the run writes the folder.
std::unique_ptr<RunLock> prepare_run_folder(const std::string& dir, bool resume);

// optimizer.type adamw | sgd over `groups`, at lr = cfg.effective_lr(); keeping the values
// before each step (Optimizer::set_keep_previous) when train.on_nonfinite = skip.
std::unique_ptr<Optimizer> make_optimizer(std::vector<ParamGroup> groups, const ExperimentConfig& cfg);

// The name of the first parameter (in the optimizer's order) whose gradient holds a
// non-finite value; "" when there is none.
std::string first_nonfinite_gradient(const Optimizer& optim);

// A step whose loss or gradient is not finite (`what` says which). With
// train.on_nonfinite = skip, fewer than 10 in a row: the gradients are dropped, `say`
// tells, and the step is skipped (returns). Otherwise fails, naming the step.
// `skipped_in_row` counts the skipped steps in a row (the caller resets it after a good step).
void handle_nonfinite_step(const std::string& what, const ExperimentConfig& cfg, const TrainPosition& pos,
                           int& skipped_in_row, Optimizer& optim, const std::function<void(const std::string&)>& say,
                           const std::string& advice);

// After optim.step(): when the update left a non-finite value in a parameter (or its
// optimizer state), `what` names it and true is returned; with train.on_nonfinite = skip
// the step is undone first (make_optimizer keeps the values for that). The caller then
// passes `what` to handle_nonfinite_step, as for a bad loss or gradient.
bool undo_nonfinite_update(const ExperimentConfig& cfg, Optimizer& optim, std::string& what);

// The live progress line after a step: the epoch's running loss, lr, img/s and the epoch's ETA.
void update_progress(ProgressBar& bar, const TrainPosition& pos, const ExperimentConfig& cfg,
                     int64_t steps_per_epoch, double step_loss, double lr, double img_per_s);

// The metadata every model checkpoint of a run carries: normalization (mean, std, img_size,
// crop_pct), data, classes and the global step.
std::map<std::string, std::string> checkpoint_metadata(const ExperimentConfig& cfg, const DataSpec& spec,
                                                       const std::vector<std::string>& classes, int64_t step);

}  // namespace sima
