#include "train/loop/loop_common.h"

#include <cmath>
#include <filesystem>

#include "core/durable_file.h"
#include "core/error.h"
#include "core/tensor.h"
#include <nlohmann/json.hpp>

namespace sima {

namespace fs = std::filesystem;

std::unique_ptr<RunLock> prepare_run_folder(const std::string& dir, bool resume) {
  const std::string state_path = dir + "/train_state.safetensors";
  const std::string nothing = ": nothing to resume (no train_state.safetensors); start without --resume";
  if (resume) check(fs::exists(state_path), dir, nothing);  // before creating the folder
  std::error_code ec;
  fs::create_directories(dir, ec);
  check(!ec && fs::is_directory(dir), dir, ": cannot create the run folder (", ec.message(), ")");
  // Locked before anything is read or written in the folder: a second writer stops here.
  auto lock = std::make_unique<RunLock>(dir);
  if (resume) {
    check(fs::exists(state_path), dir, nothing);
  } else {
    check(!fs::exists(state_path), dir, " already holds a run (train_state.safetensors); pass --resume to continue it, "
          "or choose another --out");
  }
  // A run killed inside a save leaves its temporary file; the saved files themselves are whole.
  remove_stale_temp_files(dir);
  return lock;
}

namespace {

// optimizer.type adamw | sgd over `groups`, at lr = cfg.effective_lr().
std::unique_ptr<Optimizer> make_optimizer_of_type(std::vector<ParamGroup> groups, const ExperimentConfig& c) {
  const double lr = c.effective_lr();
  if (c.optimizer.type == "adamw")
    return std::make_unique<AdamW>(std::move(groups), AdamWOptions{.lr = lr,
                                                                   .beta1 = c.optimizer.beta1,
                                                                   .beta2 = c.optimizer.beta2,
                                                                   .eps = c.optimizer.eps,
                                                                   .weight_decay = c.optimizer.weight_decay});
  return std::make_unique<SGD>(std::move(groups), SGDOptions{.lr = lr,
                                                             .momentum = c.optimizer.momentum,
                                                             .weight_decay = c.optimizer.weight_decay,
                                                             .nesterov = c.optimizer.nesterov});
}

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(std::vector<ParamGroup> groups, const ExperimentConfig& c) {
  std::unique_ptr<Optimizer> optim = make_optimizer_of_type(std::move(groups), c);
  // on_nonfinite = skip undoes a step that leaves a weight non-finite: keep what it changes.
  optim->set_keep_previous(c.train.on_nonfinite == "skip");
  return optim;
}

std::string first_nonfinite_gradient(const Optimizer& optim) {
  for (const auto& g : optim.param_groups())
    for (const auto& [name, p] : g.params) {
      if (!p.grad().defined()) continue;
      for (float v : to_vector(p.grad()))
        if (!std::isfinite(v)) return name;
    }
  return "";
}

void handle_nonfinite_step(const std::string& what, const ExperimentConfig& c, const TrainPosition& pos,
                           int& skipped_in_row, Optimizer& optim, const std::function<void(const std::string&)>& say,
                           const std::string& advice) {
  if (c.train.on_nonfinite == "skip" && ++skipped_in_row < 10) {
    optim.zero_grad();
    say("step " + std::to_string(pos.step + 1) + ": " + what + "; step skipped (train.on_nonfinite = skip)");
    return;
  }
  fail("step ", pos.step + 1, " (epoch ", pos.epoch + 1, ", batch ", pos.batch + 1, "): ", what,
       c.train.on_nonfinite == "skip" ? " (10 steps in a row)" : "", "; ", advice);
}

bool undo_nonfinite_update(const ExperimentConfig& c, Optimizer& optim, std::string& what) {
  const std::string& name = optim.nonfinite_after_step();
  if (name.empty()) return false;
  what = "the update left a NaN or inf in '" + name + "' (its weights or optimizer state)";
  if (c.train.on_nonfinite == "skip") optim.undo_step();
  return true;
}

void update_progress(ProgressBar& bar, const TrainPosition& pos, const ExperimentConfig& c, int64_t steps_per_epoch,
                     double step_loss, double lr, double img_per_s) {
  const double remaining = double(steps_per_epoch - pos.batch) * double(c.data.batch_size);
  bar.update({.epoch = pos.epoch,
              .epochs = c.train.epochs,
              .step = pos.batch,
              .steps = steps_per_epoch,
              .loss = pos.epoch_loss_count ? pos.epoch_loss_sum / double(pos.epoch_loss_count) : step_loss,
              .lr = lr,
              .images_per_second = img_per_s,
              .eta_seconds = img_per_s > 0 ? remaining / img_per_s : 0.0});
}

std::map<std::string, std::string> checkpoint_metadata(const ExperimentConfig& c, const DataSpec& spec,
                                                       const std::vector<std::string>& classes, int64_t step) {
  const nlohmann::json norm = {{"mean", c.model.mean}, {"std", c.model.std}, {"img_size", c.model.img_size},
                               {"crop_pct", c.augment.crop_pct}};
  return {{"normalization", norm.dump()},
          {"data", to_string(spec)},
          {"classes", nlohmann::json(classes).dump()},
          {"step", std::to_string(step)}};
}

}  // namespace sima
