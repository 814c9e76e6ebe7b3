#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <filesystem>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/rng.h"
#include "core/file_io.h"
#include "data/loader.h"
#include "data/mixup.h"
#include "models/budget.h"
#include "models/checkpoint.h"
#include "models/registry.h"
#include "models/safetensors.h"
#include "train/curves.h"
#include "train/data_spec.h"
#include "train/distill.h"
#include "train/distributed.h"
#include "train/ema.h"
#include "train/loop_common.h"
#include "train/metrics.h"
#include "train/optim.h"
#include "train/progress.h"
#include "train/schedule.h"
#include "train/train_state.h"

namespace sima {

using json = nlohmann::json;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Seed of batch b's mixup generator: its own stream, apart from the loader's (seed, epoch, batch).
uint64_t mixup_seed(int64_t seed, int64_t epoch, int64_t batch) {
  return batch_seed(uint64_t(seed) ^ 0x6d69787570ULL /* "mixup" */, epoch, batch);
}


}  // namespace

struct Trainer::State {
  ExperimentConfig cfg;
  TrainerOptions opt;
  Comm& comm = world();               // one process, or the ranks of mpirun (train/distributed.h)
  TestFault fault = TestFault::from_env();  // the failure tests' seam; inert in a normal run
  std::unique_ptr<GradSync> grad_sync;  // with more than one rank
  std::string dir;
  std::unique_ptr<RunLock> run_lock;  // rank 0: held while the run lives (train/run_lock.h)
  json resolved;  // experiment_to_json(cfg)

  std::shared_ptr<Model> model;
  std::unique_ptr<ModelEma> ema;
  std::unique_ptr<DistillTeacher> teacher;  // distill.type hard | soft
  std::shared_ptr<const Dataset> train_set, test_set;
  std::unique_ptr<DataLoader> loader;
  std::unique_ptr<Optimizer> optim;
  std::vector<Tensor> params;
  ScheduleOptions lr_schedule, wd_schedule;
  std::unique_ptr<Mixup> mixup;
  MetricsLog log;
  std::unique_ptr<ProgressBar> progress;
  std::vector<std::string> classes;
  DataSpec spec;

  TrainPosition pos;
  int64_t steps_per_epoch = 0, total_steps = 0;
  int skipped_in_row = 0;

  void setup();
  void save_all(bool epoch_end, bool best);
  EvalResult run_eval();
  double train_step(const Batch& batch, double& grad_norm_out, bool& skipped);
  void say(const std::string& line) {
    if (progress) progress->message(line);
  }
};

Trainer::Trainer(ExperimentConfig cfg, TrainerOptions options) : s_(std::make_unique<State>()) {
  s_->cfg = std::move(cfg);
  s_->opt = std::move(options);
  s_->setup();
}
Trainer::~Trainer() = default;
Model& Trainer::model() { return *s_->model; }

void Trainer::State::setup() {
  const ExperimentConfig& c = cfg;
  resolved = experiment_to_json(c);
  dir = opt.run_dir.empty() ? "runs/" + c.name : opt.run_dir;
  const std::string state_path = dir + "/train_state.safetensors";
  if (comm.is_main()) run_lock = prepare_run_folder(dir, opt.resume);  // only rank 0 writes the run folder

  // Data first: a wrong path fails before any model is built.
  spec = parse_data_spec(c.data.dataset);
  std::shared_ptr<const Dataset> train_raw = open_dataset(spec, true), test_raw = open_dataset(spec, false);
  check(train_raw->num_classes() == c.model.num_classes, "model.num_classes is ", c.model.num_classes, " but ",
        c.data.dataset, " has ", train_raw->num_classes(), " classes");
  classes = class_names(spec, c.model.num_classes);
  if (c.data.train_subset > 0) train_raw = random_subset(train_raw, c.data.train_subset, uint64_t(c.train.seed));
  if (c.data.test_subset > 0) test_raw = random_subset(test_raw, c.data.test_subset, uint64_t(c.train.seed) + 1);
  train_set = std::make_shared<TransformedDataset>(train_raw, train_transform(c.model, c.augment));
  test_set = std::make_shared<TransformedDataset>(test_raw, eval_transform(c.model, c.augment.crop_pct));
  loader = std::make_unique<DataLoader>(train_set, LoaderOptions{.batch_size = c.data.batch_size,
                                                                 .shuffle = true,
                                                                 .drop_last = true,
                                                                 .num_workers = int(c.data.num_workers),
                                                                 .seed = uint64_t(c.train.seed),
                                                                 .num_replicas = comm.size(),
                                                                 .rank = comm.rank()});
  steps_per_epoch = loader->batches_per_epoch();
  check(steps_per_epoch > 0, "data.batch_size ", c.data.batch_size, " exceeds the ", train_set->size(),
        " training images: no full batch");
  const ScheduleSteps steps = schedule_steps(c, steps_per_epoch);  // overflow: an error naming the key
  total_steps = steps.total;

  // The distillation teacher, checked against the student before any work (and before the
  // seed: building it draws initial weights it then overwrites).
  if (c.distill.type != "none") teacher = std::make_unique<DistillTeacher>(c.distill.teacher, c.model, classes);

  // Model, seeded: the same seed gives the same initial weights.
  manual_seed(uint64_t(c.train.seed));
  check_model_budget(c.model, c.data.batch_size);  // the run's batch, before any tensor (models/budget.h)
  model = create_model(c.model);
  if (c.train.ema) {
    auto copy = create_model(c.model);
    ema = std::make_unique<ModelEma>(copy, *model, c.train.ema_decay);
  }

  // Optimizer over two parameter groups (with and without weight decay).
  auto groups = param_groups_no_decay(model->named_parameters(), c.optimizer.no_weight_decay);
  optim = make_optimizer(std::move(groups), c);
  for (auto& g : optim->param_groups())
    for (auto& [name, p] : g.params) params.push_back(p);

  // Schedules, per step.
  lr_schedule = {.type = c.schedule.type,
                 .base = c.effective_lr(),
                 .final = c.schedule.min_lr,
                 .warmup_steps = steps.warmup,
                 .warmup_start = c.schedule.warmup_lr,
                 .total_steps = total_steps,
                 .decay_steps = steps.decay,
                 .decay_rate = c.schedule.decay_rate};
  validate_schedule(lr_schedule);
  wd_schedule = {.type = c.schedule.weight_decay_end >= 0 ? "cosine" : "constant",
                 .base = c.optimizer.weight_decay,
                 .final = std::max(0.0, c.schedule.weight_decay_end),
                 .total_steps = total_steps};

  if (c.mixup.enabled())
    mixup = std::make_unique<Mixup>(MixupOptions{.mixup_alpha = c.mixup.mixup_alpha,
                                                 .cutmix_alpha = c.mixup.cutmix_alpha,
                                                 .prob = c.mixup.prob,
                                                 .switch_prob = c.mixup.switch_prob,
                                                 .label_smoothing = c.train.label_smoothing,
                                                 .num_classes = c.model.num_classes});

  if (opt.resume) {
    json stored;
    pos = load_train_state(state_path, *model, *optim, ema ? &ema->module() : nullptr, &stored);
    check_resume_config(stored, resolved, state_path);
    if (teacher) {  // the teacher is part of the loss: a resumed run must see the same file
      auto meta = read_safetensors_metadata(state_path);
      std::string was;
      if (auto it = meta.find("distill_teacher"); it != meta.end()) {
        try {
          was = json::parse(it->second).at("crc32").get<std::string>();
        } catch (const json::exception&) {
        }
      }
      check(was == teacher->crc32(), "distill.teacher: ", teacher->path(), " has changed since the run started (crc32 ",
            was.empty() ? std::string("unknown") : was, ", now ", teacher->crc32(),
            "); a resumed run must distill from the same teacher");
    }
  }
  if (comm.size() > 1) {  // the same start everywhere; gradients averaged from here on
    broadcast_module(comm, *model);
    if (ema) broadcast_module(comm, ema->module());
    if (c.train.sync_batchnorm) convert_sync_batchnorm(comm, *model);
    grad_sync = make_grad_sync(comm, *model, c.train.allreduce_bucket_mb);
  }
  if (!comm.is_main()) return;
  const std::string text = resolved.dump(2) + "\n";
  write_file_atomic(dir + "/config.json", text.data(), text.size());
  log.open(dir, opt.resume ? pos.step : -1);
  if (!opt.quiet) progress = std::make_unique<ProgressBar>(c.train.log_every);
}

double Trainer::State::train_step(const Batch& batch, double& grad_norm_out, bool& skipped) {
  const ExperimentConfig& c = cfg;
  optim->set_lr(schedule_value(lr_schedule, pos.step));
  optim->set_weight_decay(schedule_value(wd_schedule, pos.step));

  Tensor images = batch.images, soft_targets;
  if (mixup) {
    Generator gen(mixup_seed(c.train.seed, pos.epoch, pos.batch));
    MixupResult mixed = (*mixup)(batch.images, batch.labels, gen);
    images = mixed.images;
    soft_targets = mixed.targets;
  }
  auto label_loss = [&](const Tensor& logits) {
    return soft_targets.defined() ? cross_entropy(logits, soft_targets)
                                  : cross_entropy(logits, batch.labels, float(c.train.label_smoothing));
  };
  // The teacher sees the same augmented, mixed images (no graph, eval mode, no random draws).
  Tensor teacher_logits = teacher ? teacher->logits(images) : Tensor();
  model->train();
  std::vector<Tensor> heads = model->forward_heads(images);
  Tensor loss;
  if (teacher) {
    // DeiT distillation: the class head learns the labels, the distillation head the teacher.
    loss = distillation_loss(label_loss(heads[0]), heads[1], teacher_logits, c.distill);
  } else {
    // Every head learns the labels; a distilled DeiT without a teacher trains both heads.
    for (auto& logits : heads) {
      Tensor l = label_loss(logits);
      loss = loss.defined() ? add(loss, l) : l;
    }
    if (heads.size() > 1) loss = mul(loss, 1.0f / float(heads.size()));
  }
  // The loss of the global batch: the mean over the ranks' equal slices (every rank then
  // takes the same decisions below).
  const double value = mean_over_ranks(comm, loss.item());
  skipped = false;

  auto nonfinite = [&](const std::string& what) {  // skips the step or fails
    handle_nonfinite_step(what, c, pos, skipped_in_row, *optim, [&](const std::string& l) { say(l); },
                          "training stopped. Lower the learning rate, enable optimizer.clip_grad, or resume from "
                          "the last checkpoint with --resume");
    skipped = true;
  };
  if (!std::isfinite(value)) {
    nonfinite("the loss is not finite (" + std::to_string(value) + ")");
    return value;
  }
  if (grad_sync) grad_sync->begin();
  loss.backward();
  if (grad_sync) grad_sync->finish();  // .grad = mean over the ranks
  grad_norm_out = grad_norm(params);
  if (!std::isfinite(grad_norm_out)) {
    nonfinite("the gradient of '" + first_nonfinite_gradient(*optim) + "' is not finite");
    return value;
  }
  if (c.optimizer.clip_grad > 0) clip_grad_norm(params, c.optimizer.clip_grad);
  optim->step();
  if (std::string what; undo_nonfinite_update(c, *optim, what)) {  // a finite step can still overflow
    nonfinite(what);
    return value;
  }
  skipped_in_row = 0;
  optim->zero_grad();
  if (ema) ema->update(*model);
  return value;
}

EvalResult Trainer::State::run_eval() {
  EvalOptions eo{.batch_size = cfg.data.eval_batch_size, .num_workers = int(cfg.data.num_workers)};
  broadcast_buffers(comm, *model);  // rank 0's BatchNorm running statistics (the saved ones)
  return evaluate_sharded(comm, *model, test_set, eo);
}

void Trainer::State::save_all(bool epoch_end, bool best) {
  json norm = {{"mean", cfg.model.mean}, {"std", cfg.model.std}, {"img_size", cfg.model.img_size},
               {"crop_pct", cfg.augment.crop_pct}};
  std::map<std::string, std::string> meta = {
      {"normalization", norm.dump()}, {"data", to_string(spec)}, {"classes", json(classes).dump()},
      {"step", std::to_string(pos.step)}};
  std::map<std::string, std::string> state_meta;
  if (teacher) {
    json d = {{"type", cfg.distill.type}, {"alpha", cfg.distill.alpha}, {"tau", cfg.distill.tau},
              {"teacher", teacher->describe()}};
    meta["distill"] = d.dump();
    state_meta["distill_teacher"] = teacher->describe().dump();
  }
  if (!comm.is_main()) return;  // every rank holds the same weights: rank 0 writes them
  if (epoch_end) {
    save_checkpoint(dir + "/model.safetensors", *model, meta);
    if (ema) save_checkpoint(dir + "/model_ema.safetensors", static_cast<Model&>(ema->module()), meta);
    if (best) save_checkpoint(dir + "/best.safetensors", *model, meta);
  }
  // The train state last: a run killed before this rename resumes from the previous state.
  save_train_state(dir + "/train_state.safetensors", *model, *optim, ema ? &ema->module() : nullptr, pos, resolved,
                   state_meta);
}

TrainResult Trainer::fit() {
  State& s = *s_;
  const ExperimentConfig& c = s.cfg;
  TrainResult result;
  result.run_dir = s.dir;
  result.best_top1 = std::max(0.0, s.pos.best_top1);
  const auto t_start = Clock::now();
  s.say("run " + s.dir + ": " + c.model.arch + " " + std::to_string(s.model->num_parameters()) + " parameters, " +
        std::to_string(s.train_set->size()) + " training images, " + std::to_string(s.steps_per_epoch) +
        " steps/epoch, lr " + std::to_string(c.effective_lr()) +
        (c.optimizer.type == "adamw" ? " (AdamW)" : " (SGD)") +
        (s.teacher ? ", " + c.distill.type + " distillation (alpha " + json(c.distill.alpha).dump() +
                         (c.distill.type == "soft" ? ", tau " + json(c.distill.tau).dump() : "") + ") from " +
                         s.teacher->path() + " (" + s.teacher->model().config().arch + ")"
                   : "") +
        (s.opt.resume ? ", resumed at step " + std::to_string(s.pos.step) : "") +
        ranks_banner(s.comm, c.data.batch_size) +
        (s.comm.size() > 1 && c.train.sync_batchnorm ? ", SyncBatchNorm" : ""));

  bool stop = c.train.max_steps > 0 && s.pos.step >= c.train.max_steps;  // already there
  result.interrupted = stop && s.pos.epoch < c.train.epochs;
  while (s.pos.epoch < c.train.epochs && !stop) {
    const auto t_epoch = Clock::now();
    s.loader->start_epoch(s.pos.epoch, s.pos.batch);
    Batch batch;
    auto t_window = Clock::now();
    int64_t window_images = 0, window_steps = 0;
    double window_loss = 0.0;
    double img_per_s = 0.0;
    while (!stop && s.loader->next(batch)) {
      s.fault.at_step(s.comm, s.pos.step + 1);  // the failure tests' seam (SIMA_TEST_FAULT)
      double gnorm = 0.0;
      bool skipped = false;
      const double loss = s.train_step(batch, gnorm, skipped);
      ++s.pos.batch;
      ++s.pos.step;
      result.step_losses.push_back(loss);
      if (!skipped) {
        s.pos.epoch_loss_sum += loss;
        ++s.pos.epoch_loss_count;
        window_loss += loss;
        ++window_steps;
      }
      window_images += batch.images.size(0) * s.comm.size();  // the global batch
      const double lr = s.optim->param_groups()[0].lr;
      const double window_s = seconds_since(t_window);
      if (window_s > 0) img_per_s = double(window_images) / window_s;
      if (s.pos.step % c.train.log_every == 0) {
        s.log.log({{"kind", "step"},
                   {"step", s.pos.step},
                   {"epoch", double(s.pos.step) / double(s.steps_per_epoch)},
                   {"loss", window_steps ? window_loss / double(window_steps) : loss},
                   {"lr", lr},
                   {"weight_decay", s.optim->param_groups()[0].weight_decay},
                   {"grad_norm", gnorm},
                   {"img_per_s", img_per_s}});
        t_window = Clock::now();
        window_images = window_steps = 0;
        window_loss = 0.0;
      }
      if (s.progress) {
        update_progress(*s.progress, s.pos, c, s.steps_per_epoch, loss, lr, img_per_s);
      }
      // A signal reaches the ranks at different moments: stop when any rank has it.
      const bool flagged = any_rank(s.comm, s.opt.stop_flag && s.opt.stop_flag->load());
      const bool at_max = c.train.max_steps > 0 && s.pos.step >= c.train.max_steps;
      if (flagged || at_max) {
        stop = true;
        result.interrupted = s.pos.batch < s.steps_per_epoch || s.pos.epoch + 1 < c.train.epochs;
        if (s.pos.batch < s.steps_per_epoch) s.save_all(false, false);
        if (flagged) s.say("stopped at step " + std::to_string(s.pos.step) + "; continue with --resume");
      } else if (c.train.checkpoint_every > 0 && s.pos.step % c.train.checkpoint_every == 0 &&
                 s.pos.batch < s.steps_per_epoch) {
        s.save_all(false, false);
      }
    }
    if (s.pos.batch < s.steps_per_epoch) break;  // stopped mid-epoch

    // End of the epoch: evaluate, log, checkpoint.
    const double train_loss = s.pos.epoch_loss_count ? s.pos.epoch_loss_sum / double(s.pos.epoch_loss_count) : NAN;
    const double epoch_s = seconds_since(t_epoch);
    if (s.progress)
      s.progress->end_epoch({.epoch = s.pos.epoch, .epochs = c.train.epochs, .step = s.pos.batch,
                             .steps = s.steps_per_epoch, .loss = train_loss,
                             .lr = s.optim->param_groups()[0].lr, .images_per_second = img_per_s});
    json record = {{"kind", "epoch"},
                   {"epoch", s.pos.epoch + 1},
                   {"step", s.pos.step},
                   {"train_loss", train_loss},
                   {"lr", s.optim->param_groups()[0].lr},
                   {"epoch_seconds", epoch_s}};
    const bool last = s.pos.epoch + 1 == c.train.epochs;
    EvalResult eval;
    if (last || (s.pos.epoch + 1) % c.train.eval_every == 0) {
      eval = s.run_eval();
      result.last_eval = eval;
      record["test_loss"] = eval.loss;
      record["test_top1"] = eval.top1;
      record["test_top5"] = eval.top5;
      record["eval_img_per_s"] = eval.images_per_second;
      if (s.ema) {
        broadcast_buffers(s.comm, s.ema->module());
        EvalResult e = evaluate_sharded(s.comm, static_cast<Model&>(s.ema->module()), s.test_set,
                                {.batch_size = c.data.eval_batch_size, .num_workers = int(c.data.num_workers)});
        record["ema_test_top1"] = e.top1;
      }
      char line[160];
      std::snprintf(line, sizeof line, "epoch %lld/%lld  train loss %.4f  test loss %.4f  top-1 %.2f%%  top-5 %.2f%%",
                    (long long)(s.pos.epoch + 1), (long long)c.train.epochs, train_loss, eval.loss, eval.top1,
                    eval.top5);
      s.say(line);
    }
    ++s.pos.epoch;
    s.pos.batch = 0;
    s.pos.epoch_loss_sum = 0.0;
    s.pos.epoch_loss_count = 0;
    const bool best = eval.count > 0 && eval.top1 > s.pos.best_top1;
    if (best) s.pos.best_top1 = eval.top1;
    record["best_top1"] = std::max(0.0, s.pos.best_top1);
    // The record before the save: a run killed between the two resumes from the state before
    // this epoch's end, and MetricsLog::open drops the records past that state's step.
    s.log.log(record);
    s.save_all(true, best);
    std::string why = s.comm.is_main() ? render_curves(s.log.csv_path(), s.dir + "/curves.png") : "";
    if (!why.empty() && s.pos.epoch == c.train.epochs) s.say("note: no curves.png (" + why + ")");
  }
  result.steps = s.pos.step;
  result.epochs_done = s.pos.epoch;
  result.best_top1 = std::max(0.0, s.pos.best_top1);
  result.seconds = seconds_since(t_start);
  result.ranks = s.comm.size();
  if (s.grad_sync) {
    result.allreduce_bytes_per_step = s.grad_sync->stats().bytes_per_step;
    result.allreduce_wait_seconds = s.grad_sync->stats().wait_seconds;
    result.allreduce_seconds = s.grad_sync->stats().comm_seconds;
    result.allreduce_buckets = int64_t(s.grad_sync->buckets().size());
  }
  return result;
}

TrainResult train(const ExperimentConfig& cfg, const TrainerOptions& options) {
  return Trainer(cfg, options).fit();
}

}  // namespace sima
