// The one training loop (see loop.h).
#include "train/loop/loop.h"

#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <cstdlib>

#include "core/error.h"
#include "core/file_io.h"
#include "core/omp_wait.h"
#include "core/parallel.h"
#include "train/loop/loop_common.h"
#include "train/optim/schedule.h"
#include "train/viz/curves.h"

namespace sima {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// User + system CPU seconds of the whole process so far (every thread: OpenMP's, the loaders').
double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

}  // namespace

// The figures between two "step" records.
struct TrainingLoop::Window {
  Clock::time_point start = Clock::now();
  int64_t images = 0, steps = 0;
  double loss = 0.0, img_per_s = 0.0;
};

TrainingLoop::TrainingLoop(const ExperimentConfig& cfg, TrainerOptions options, Objective& objective)
    : cfg_(cfg), opt_(std::move(options)), obj_(objective), comm_(world()) {
  obj_.say = [this](const std::string& line) { say(line); };
  resolved_ = experiment_to_json(cfg_);
  dir_ = opt_.run_dir.empty() ? "runs/" + cfg_.name : opt_.run_dir;
  const std::string state_path = dir_ + "/train_state.safetensors";
  if (comm_.is_main()) run_lock_ = prepare_run_folder(dir_, opt_.resume);  // only rank 0 writes the run folder

  steps_per_epoch_ = obj_.setup(comm_, sched_);  // data first, then the networks (seeded)
  optim_ = make_optimizer(obj_.param_groups(), cfg_);
  for (auto& g : optim_->param_groups())
    for (auto& [name, p] : g.params) params_.push_back(p);

  if (opt_.resume) {
    json stored;
    pos_ = load_train_state(state_path, obj_.trained(), *optim_, obj_.extra_state(), &stored);
    check_resume_config(stored, resolved_, state_path);
    obj_.check_resumed(state_path);
  }
  autocast_ = parse_autocast_mode(cfg_.train.precision, "train.precision");
  const std::string unsupported = autocast_unsupported(autocast_);
  check(unsupported.empty(), "train.precision: ", unsupported);
  if (autocast_ == AutocastMode::FP16) scaler_ = std::make_unique<LossScaler>(pos_.amp);  // resumed: its state
  if (const char* s = std::getenv("SIMA_TEST_INF_GRADIENT_STEP")) inf_gradient_step_ = std::atoll(s);
  if (comm_.size() > 1) {  // the same start everywhere; gradients averaged from here on
    obj_.share(comm_);
    grad_sync_ = make_grad_sync(comm_, obj_.trained(), cfg_.train.allreduce_bucket_mb);
  }
  if (!comm_.is_main()) return;
  const std::string text = resolved_.dump(2) + "\n";
  write_file_atomic(dir_ + "/config.json", text.data(), text.size());
  log_.open(dir_, opt_.resume ? pos_.step : -1);
  if (!opt_.quiet) progress_ = std::make_unique<ProgressBar>(cfg_.train.log_every);
}

TrainingLoop::~TrainingLoop() = default;

void TrainingLoop::say(const std::string& line) {
  if (progress_) progress_->message(line);
}

void TrainingLoop::nonfinite(const std::string& what, bool& skipped) {  // skips the step or fails
  handle_nonfinite_step(what, cfg_, pos_, skipped_in_row_, *optim_, [this](const std::string& l) { say(l); },
                        obj_.advice());
  skipped = true;
}

double TrainingLoop::train_step(double& grad_norm_out, bool& skipped) {
  optim_->set_lr(schedule_value(sched_.lr, pos_.step));
  optim_->set_weight_decay(schedule_value(sched_.weight_decay, pos_.step));
  const AutocastGuard autocast(autocast_);  // forward and backward; evaluation runs outside the step
  if (scaler_) {  // float16: what this forward rounds, from here
    fp16_peak_take();
    fp16_attention_peak_take();
  }
  const StepLoss step = obj_.forward(pos_);
  if (scaler_) {
    const float peak = fp16_peak_take(), attention = fp16_attention_peak_take();
    pos_.amp.forward_peak = std::max(pos_.amp.forward_peak, peak);
    pos_.amp.forward_peak_attention = std::max(pos_.amp.forward_peak_attention, attention);
    window_peak_ = std::max(window_peak_, peak);
    window_peak_attention_ = std::max(window_peak_attention_, attention);
  }
  const double value = step.value;
  skipped = false;
  if (!std::isfinite(value)) {
    nonfinite("the " + obj_.loss_name() + " is not finite (" + std::to_string(value) + ")", skipped);
    return value;
  }
  if (grad_sync_) grad_sync_->begin();
  if (scaler_) step.loss.backward(scaler_->seed(step.loss));  // float16: the gradients of S · loss
  else step.loss.backward();
  if (grad_sync_) grad_sync_->finish();  // .grad = mean over the ranks
  if (pos_.step + 1 == inf_gradient_step_ && !params_.empty() && params_[0].grad().defined())
    params_[0].grad().data()[0] = INFINITY;  // the test seam: an overflow in the backward
  if (scaler_ && !scaler_->unscale(params_)) {  // an overflow: no update, S backs off (GradScaler)
    scaler_->update(true);
    optim_->zero_grad();
    obj_.after_update(pos_);  // as PyTorch, whose EMA / teacher update follows a skipped step too
    return value;
  }
  grad_norm_out = obj_.clip_gradients(params_);
  if (!std::isfinite(grad_norm_out)) {
    nonfinite("the gradient of '" + first_nonfinite_gradient(*optim_) + "' is not finite", skipped);
    return value;
  }
  obj_.before_update(pos_);
  optim_->step();
  if (std::string what; undo_nonfinite_update(cfg_, *optim_, what)) {  // a finite step can still overflow
    nonfinite(what, skipped);
    return value;
  }
  skipped_in_row_ = 0;
  if (scaler_) scaler_->update(false);
  optim_->zero_grad();
  obj_.after_update(pos_);
  return value;
}

// After step pos_.step: the sums, the "step" record, progress, the stop flag and max_steps.
void TrainingLoop::after_step(Window& w, double loss, double gnorm, bool skipped, LoopResult& result) {
  const ExperimentConfig& c = cfg_;
  if (!skipped) {
    pos_.epoch_loss_sum += loss;
    ++pos_.epoch_loss_count;
    w.loss += loss;
    ++w.steps;
  }
  obj_.step_done(skipped);
  w.images += obj_.batch_images() * comm_.size();  // the global batch
  const double lr = optim_->param_groups()[0].lr;
  const double window_s = seconds_since(w.start);
  if (window_s > 0) w.img_per_s = double(w.images) / window_s;
  if (pos_.step % c.train.log_every == 0) {
    json record = {{"kind", "step"},
                   {"step", pos_.step},
                   {"epoch", double(pos_.step) / double(steps_per_epoch_)},
                   {"loss", w.steps ? w.loss / double(w.steps) : loss},
                   {"lr", lr},
                   {"weight_decay", optim_->param_groups()[0].weight_decay},
                   {"grad_norm", gnorm},
                   {"img_per_s", w.img_per_s}};
    if (scaler_) {  // float16: the loss scale now, the steps skipped for overflows so far, the window's
      record["loss_scale"] = pos_.amp.scale;  // largest |value| in a forward's float16 roundings
      record["overflow_skipped_steps"] = pos_.amp.skipped_steps;
      record["fp16_forward_peak"] = window_peak_;
      record["fp16_forward_peak_attention"] = window_peak_attention_;
      window_peak_ = window_peak_attention_ = 0.f;
    }
    obj_.step_fields(record);
    log_.log(record);
    const double rate = w.img_per_s;
    w = Window{};
    w.img_per_s = rate;  // the window just closed: what the progress line shows until the next one measures
  }
  if (progress_) update_progress(*progress_, pos_, c, steps_per_epoch_, loss, lr, w.img_per_s);
  // A signal reaches the ranks at different moments: stop when any rank has it.
  const bool flagged = any_rank(comm_, opt_.stop_flag && opt_.stop_flag->load());
  const bool at_max = c.train.max_steps > 0 && pos_.step >= c.train.max_steps;
  if (flagged || at_max) {
    stop_ = true;
    result.interrupted = pos_.batch < steps_per_epoch_ || pos_.epoch + 1 < c.train.epochs;
    if (pos_.batch < steps_per_epoch_) save(false, false);
    if (flagged) say("stopped at step " + std::to_string(pos_.step) + "; continue with --resume");
  } else if (c.train.checkpoint_every > 0 && pos_.step % c.train.checkpoint_every == 0 &&
             pos_.batch < steps_per_epoch_) {
    save(false, false);
  }
}

bool TrainingLoop::run_epoch(LoopResult& result) {
  const auto t_epoch = Clock::now();
  const double cpu0 = process_cpu_seconds();
  obj_.start_epoch(pos_.epoch, pos_.batch);
  Window w;
  while (!stop_ && obj_.next_batch()) {
    fault_.at_step(comm_, pos_.step + 1);  // the failure tests' seam (SIMA_TEST_FAULT)
    double gnorm = 0.0;
    bool skipped = false;
    const double loss = train_step(gnorm, skipped);
    ++pos_.batch;
    ++pos_.step;
    result.step_losses.push_back(loss);
    after_step(w, loss, gnorm, skipped, result);
  }
  if (pos_.batch < steps_per_epoch_) return false;  // stopped mid-epoch
  finish_epoch(seconds_since(t_epoch), w.img_per_s, cpu0);
  return true;
}

// End of the epoch: the objective evaluates, the record, then the checkpoints. epoch_seconds is
// the training's wall time; epoch_cpu_seconds the process's CPU time for training and evaluation
// (what a study's budget counts: it does not depend on what else the machine runs).
void TrainingLoop::finish_epoch(double epoch_seconds, double img_per_s, double cpu_at_start) {
  const ExperimentConfig& c = cfg_;
  const double train_loss = pos_.epoch_loss_count ? pos_.epoch_loss_sum / double(pos_.epoch_loss_count) : NAN;
  const double lr = optim_->param_groups()[0].lr;
  if (progress_)
    progress_->end_epoch({.epoch = pos_.epoch, .epochs = c.train.epochs, .step = pos_.batch,
                          .steps = steps_per_epoch_, .loss = train_loss, .lr = lr, .images_per_second = img_per_s});
  json record = {{"kind", "epoch"},   {"epoch", pos_.epoch + 1}, {"step", pos_.step},
                 {"train_loss", train_loss}, {"lr", lr},           {"epoch_seconds", epoch_seconds}};
  if (scaler_) {
    record["loss_scale"] = pos_.amp.scale;
    record["overflow_skipped_steps"] = pos_.amp.skipped_steps;
    record["fp16_forward_peak"] = pos_.amp.forward_peak;  // over the epoch's forwards (≥ 65520: overflowed)
    record["fp16_forward_peak_attention"] = pos_.amp.forward_peak_attention;  // its attention cores' part
    pos_.amp.forward_peak = pos_.amp.forward_peak_attention = 0.f;
  }
  const bool best = obj_.end_epoch(pos_, record, train_loss, epoch_seconds);
  record["epoch_cpu_seconds"] = process_cpu_seconds() - cpu_at_start;
  ++pos_.epoch;
  pos_.batch = 0;
  pos_.epoch_loss_sum = 0.0;
  pos_.epoch_loss_count = 0;
  // The record before the save: a run killed between the two resumes from the state before
  // this epoch's end, and MetricsLog::open drops the records past that state's step.
  log_.log(record);
  save(true, best);
  std::string why = comm_.is_main() ? render_curves(log_.csv_path(), dir_ + "/curves.png") : "";
  if (!why.empty() && pos_.epoch == c.train.epochs) say("note: no curves.png (" + why + ")");
}

void TrainingLoop::save(bool epoch_end, bool best) {
  if (!comm_.is_main()) return;  // every rank holds the same weights: rank 0 writes them
  if (epoch_end) obj_.save_checkpoints(dir_, pos_.step, best);
  // The train state last: a run killed before this rename resumes from the previous state.
  save_train_state(dir_ + "/train_state.safetensors", obj_.trained(), *optim_, obj_.extra_state(), pos_, resolved_,
                   obj_.state_metadata());
}

LoopResult TrainingLoop::fit() {
  const ExperimentConfig& c = cfg_;
  LoopResult result;
  result.run_dir = dir_;
  const auto t_start = Clock::now();
  say("run " + dir_ + ": " + obj_.describe() +
      (opt_.resume ? ", resumed at step " + std::to_string(pos_.step) : "") + ranks_banner(comm_, c.data.batch_size) +
      (comm_.size() > 1 && c.train.sync_batchnorm ? ", SyncBatchNorm" : "") + ", " + std::to_string(num_threads()) +
      (num_threads() == 1 ? " thread" : " threads") + ", " + app_threading());
  stop_ = c.train.max_steps > 0 && pos_.step >= c.train.max_steps;  // already there
  result.interrupted = stop_ && pos_.epoch < c.train.epochs;
  while (pos_.epoch < c.train.epochs && !stop_)
    if (!run_epoch(result)) break;
  result.steps = pos_.step;
  result.epochs_done = pos_.epoch;
  result.seconds = seconds_since(t_start);
  result.ranks = comm_.size();
  if (grad_sync_) {
    result.allreduce_bytes_per_step = grad_sync_->stats().bytes_per_step;
    result.allreduce_wait_seconds = grad_sync_->stats().wait_seconds;
    result.allreduce_seconds = grad_sync_->stats().comm_seconds;
    result.allreduce_buckets = int64_t(grad_sync_->buckets().size());
  }
  return result;
}

}  // namespace sima
