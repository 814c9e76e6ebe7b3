// Supervised training and distillation as an objective of the training loop (see trainer.h
// for the run folder and the step, objective.h for the interface).
#include <cmath>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/rng.h"
#include "data/loader.h"
#include "data/mixup.h"
#include "models/budget.h"
#include "models/io/checkpoint.h"
#include "models/registry.h"
#include "models/io/safetensors.h"
#include "train/distributed/distributed.h"
#include "train/loop/loop.h"
#include "train/loop/loop_common.h"
#include "train/objectives/distill.h"
#include "train/objectives/objective_setup.h"
#include "train/objectives/trainer.h"
#include "train/optim/ema.h"

namespace sima {

using json = nlohmann::json;

namespace {

// Seed of batch b's mixup generator: its own stream, apart from the loader's (seed, epoch, batch).
uint64_t mixup_seed(int64_t seed, int64_t epoch, int64_t batch) {
  return batch_seed(uint64_t(seed) ^ 0x6d69787570ULL /* "mixup" */, epoch, batch);
}

// Cross-entropy (label smoothing, or a distilled DeiT's teacher) on labelled images.
class SupervisedObjective : public Objective {
 public:
  explicit SupervisedObjective(const ExperimentConfig& cfg) : cfg_(cfg) {}

  int64_t setup(Comm& comm, StepSchedules& sched) override;
  std::vector<ParamGroup> param_groups() override {
    return param_groups_no_decay(model_->named_parameters(), cfg_.optimizer.no_weight_decay);
  }
  Module& trained() override { return *model_; }
  Module* extra_state() override { return ema_ ? &ema_->module() : nullptr; }
  void check_resumed(const std::string& state_path) override;
  void share(Comm& comm) override;
  std::string describe() const override;

  void start_epoch(int64_t epoch, int64_t batch) override { loader_->start_epoch(epoch, batch); }
  bool next_batch() override { return loader_->next(batch_); }
  int64_t batch_images() const override { return batch_.images.size(0); }

  std::string loss_name() const override { return "loss"; }
  std::string advice() const override {
    return "training stopped. Lower the learning rate, enable optimizer.clip_grad, or resume from the last "
           "checkpoint with --resume";
  }
  StepLoss forward(const TrainPosition& pos) override;
  double clip_gradients(const std::vector<Tensor>& params) override {
    const double norm = grad_norm(params);
    if (cfg_.optimizer.clip_grad > 0 && std::isfinite(norm)) clip_grad_norm(params, cfg_.optimizer.clip_grad);
    return norm;
  }
  void after_update(const TrainPosition&) override {
    if (ema_) ema_->update(*model_);
  }

  bool end_epoch(TrainPosition& pos, json& record, double train_loss, double epoch_seconds) override;
  void save_checkpoints(const std::string& dir, int64_t step, bool best) override;
  std::map<std::string, std::string> state_metadata() const override {
    if (!teacher_) return {};
    return {{"distill_teacher", teacher_->describe().dump()}};
  }

  Model& model() { return *model_; }
  const EvalResult& last_eval() const { return last_eval_; }

 private:
  int64_t setup_data(Comm& comm);
  EvalResult evaluate(Model& m);

  const ExperimentConfig& cfg_;
  Comm* comm_ = nullptr;
  DataSpec spec_;
  std::vector<std::string> classes_;
  std::shared_ptr<const Dataset> train_set_, test_set_;
  std::unique_ptr<DataLoader> loader_;
  Batch batch_;
  std::shared_ptr<Model> model_;
  std::unique_ptr<ModelEma> ema_;
  std::unique_ptr<DistillTeacher> teacher_;  // distill.type hard | soft
  std::unique_ptr<Mixup> mixup_;
  EvalResult last_eval_;
};

int64_t SupervisedObjective::setup_data(Comm& comm) {
  const ExperimentConfig& c = cfg_;
  // Data first: a wrong path fails before any model is built.
  spec_ = parse_data_spec(c.data.dataset);
  std::shared_ptr<const Dataset> test_raw;
  std::shared_ptr<const Dataset> train_raw = training_images(c, spec_, &test_raw);
  check(train_raw->num_classes() == c.model.num_classes, "model.num_classes is ", c.model.num_classes, " but ",
        c.data.dataset, " has ", train_raw->num_classes(), " classes");
  classes_ = class_names(spec_, c.model.num_classes);
  if (!test_raw) test_raw = open_dataset(spec_, false);  // no validation split: the test split
  if (c.data.test_subset > 0)
    test_raw = random_subset(test_raw, c.data.test_subset, uint64_t(c.train.seed) + 1, "data.test_subset");
  train_set_ = std::make_shared<TransformedDataset>(train_raw, train_transform(c.model, c.augment));
  test_set_ = std::make_shared<TransformedDataset>(test_raw, eval_transform(c.model, c.augment.crop_pct));
  loader_ = std::make_unique<DataLoader>(train_set_, training_loader_options(c, comm));
  return checked_steps_per_epoch(loader_->batches_per_epoch(), c, train_set_->size());
}

int64_t SupervisedObjective::setup(Comm& comm, StepSchedules& sched) {
  const ExperimentConfig& c = cfg_;
  comm_ = &comm;
  const int64_t steps_per_epoch = setup_data(comm);
  const ScheduleSteps steps = schedule_steps(c, steps_per_epoch);  // overflow: an error naming the key
  // The distillation teacher, checked against the student before any work (and before the
  // seed: building it draws initial weights it then overwrites).
  if (c.distill.type != "none") teacher_ = std::make_unique<DistillTeacher>(c.distill.teacher, c.model, classes_);

  // Model, seeded: the same seed gives the same initial weights.
  model_ = seeded_model(c);
  if (c.train.ema) ema_ = std::make_unique<ModelEma>(create_model(c.model), *model_, c.train.ema_decay);

  // Schedules, per step.
  sched.lr = {.type = c.schedule.type,
              .base = c.effective_lr(),
              .final = c.schedule.min_lr,
              .warmup_steps = steps.warmup,
              .warmup_start = c.schedule.warmup_lr,
              .total_steps = steps.total,
              .decay_steps = steps.decay,
              .decay_rate = c.schedule.decay_rate};
  validate_schedule(sched.lr);
  sched.weight_decay = {.type = c.schedule.weight_decay_end >= 0 ? "cosine" : "constant",
                        .base = c.optimizer.weight_decay,
                        .final = std::max(0.0, c.schedule.weight_decay_end),
                        .total_steps = steps.total};
  if (c.mixup.enabled())
    mixup_ = std::make_unique<Mixup>(MixupOptions{.mixup_alpha = c.mixup.mixup_alpha,
                                                  .cutmix_alpha = c.mixup.cutmix_alpha,
                                                  .prob = c.mixup.prob,
                                                  .switch_prob = c.mixup.switch_prob,
                                                  .label_smoothing = c.train.label_smoothing,
                                                  .num_classes = c.model.num_classes});
  return steps_per_epoch;
}

void SupervisedObjective::check_resumed(const std::string& state_path) {
  if (!teacher_) return;  // the teacher is part of the loss: a resumed run must see the same file
  auto meta = read_safetensors_metadata(state_path);
  std::string was;
  if (auto it = meta.find("distill_teacher"); it != meta.end()) {
    try {
      was = json::parse(it->second).at("crc32").get<std::string>();
    } catch (const json::exception&) {
    }
  }
  check(was == teacher_->crc32(), "distill.teacher: ", teacher_->path(), " has changed since the run started (crc32 ",
        was.empty() ? std::string("unknown") : was, ", now ", teacher_->crc32(),
        "); a resumed run must distill from the same teacher");
}

void SupervisedObjective::share(Comm& comm) {
  broadcast_module(comm, *model_);
  if (ema_) broadcast_module(comm, ema_->module());
  if (cfg_.train.sync_batchnorm) convert_sync_batchnorm(comm, *model_);
}

std::string SupervisedObjective::describe() const {
  const ExperimentConfig& c = cfg_;
  std::string line = c.model.arch + " " + std::to_string(model_->num_parameters()) + " parameters, " +
                     std::to_string(train_set_->size()) + " training images, " +
                     std::to_string(loader_->batches_per_epoch()) + " steps/epoch, lr " +
                     std::to_string(c.effective_lr()) + (c.optimizer.type == "adamw" ? " (AdamW)" : " (SGD)");
  if (teacher_)
    line += ", " + c.distill.type + " distillation (alpha " + json(c.distill.alpha).dump() +
            (c.distill.type == "soft" ? ", tau " + json(c.distill.tau).dump() : "") + ") from " + teacher_->path() +
            " (" + teacher_->model().config().arch + ")";
  return line;
}

StepLoss SupervisedObjective::forward(const TrainPosition& pos) {
  const ExperimentConfig& c = cfg_;
  Tensor images = batch_.images, soft_targets;
  if (mixup_) {
    Generator gen(mixup_seed(c.train.seed, pos.epoch, pos.batch));
    MixupResult mixed = (*mixup_)(batch_.images, batch_.labels, gen);
    images = mixed.images;
    soft_targets = mixed.targets;
  }
  auto label_loss = [&](const Tensor& logits) {
    return soft_targets.defined() ? cross_entropy(logits, soft_targets)
                                  : cross_entropy(logits, batch_.labels, float(c.train.label_smoothing));
  };
  // The teacher sees the same augmented, mixed images (no graph, eval mode, no random draws).
  Tensor teacher_logits = teacher_ ? teacher_->logits(images) : Tensor();
  model_->train();
  std::vector<Tensor> heads = model_->forward_heads(images);
  Tensor loss;
  if (teacher_) {
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
  // The loss of the global batch: the mean over the ranks' equal slices.
  return {loss, mean_over_ranks(*comm_, loss.item())};
}

EvalResult SupervisedObjective::evaluate(Model& m) {
  broadcast_buffers(*comm_, m);  // rank 0's BatchNorm running statistics (the saved ones)
  return evaluate_sharded(*comm_, m, test_set_,
                          {.batch_size = cfg_.data.eval_batch_size, .num_workers = int(cfg_.data.num_workers)});
}

bool SupervisedObjective::end_epoch(TrainPosition& pos, json& record, double train_loss, double) {
  const ExperimentConfig& c = cfg_;
  EvalResult eval;
  if (pos.epoch + 1 == c.train.epochs || (pos.epoch + 1) % c.train.eval_every == 0) {
    eval = evaluate(*model_);
    last_eval_ = eval;
    const std::string set = c.data.validation > 0 ? "val" : "test";  // what was evaluated
    record[set + "_loss"] = eval.loss;
    record[set + "_top1"] = eval.top1;
    record[set + "_top5"] = eval.top5;
    record["eval_img_per_s"] = eval.images_per_second;
    if (ema_) record["ema_" + set + "_top1"] = evaluate(static_cast<Model&>(ema_->module())).top1;
    char line[160];
    std::snprintf(line, sizeof line, "epoch %lld/%lld  train loss %.4f  %s loss %.4f  top-1 %.2f%%  top-5 %.2f%%",
                  (long long)(pos.epoch + 1), (long long)c.train.epochs, train_loss, set.c_str(), eval.loss, eval.top1,
                  eval.top5);
    say(line);
  }
  const bool best = eval.count > 0 && eval.top1 > pos.best_top1;
  if (best) pos.best_top1 = eval.top1;
  record["best_top1"] = std::max(0.0, pos.best_top1);
  return best;
}

void SupervisedObjective::save_checkpoints(const std::string& dir, int64_t step, bool best) {
  std::map<std::string, std::string> meta = checkpoint_metadata(cfg_, spec_, classes_, step);
  if (teacher_) {
    json d = {{"type", cfg_.distill.type}, {"alpha", cfg_.distill.alpha}, {"tau", cfg_.distill.tau},
              {"teacher", teacher_->describe()}};
    meta["distill"] = d.dump();
  }
  save_checkpoint(dir + "/model.safetensors", *model_, meta);
  if (ema_) save_checkpoint(dir + "/model_ema.safetensors", static_cast<Model&>(ema_->module()), meta);
  if (best) save_checkpoint(dir + "/best.safetensors", *model_, meta);
}

}  // namespace

struct Trainer::State : LoopRun<SupervisedObjective> {
  using LoopRun::LoopRun;
};

Trainer::Trainer(ExperimentConfig cfg, TrainerOptions options)
    : s_(std::make_unique<State>(std::move(cfg), std::move(options))) {}
Trainer::~Trainer() = default;
Model& Trainer::model() { return s_->objective.model(); }

TrainResult Trainer::fit() {
  TrainResult result;
  static_cast<LoopResult&>(result) = s_->loop.fit();
  result.last_eval = s_->objective.last_eval();
  result.best_top1 = std::max(0.0, s_->loop.position().best_top1);
  return result;
}

TrainResult train(const ExperimentConfig& cfg, const TrainerOptions& options) {
  return Trainer(cfg, options).fit();
}

}  // namespace sima
