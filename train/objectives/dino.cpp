// DINO as an objective of the training loop (see dino_trainer.h for the step and the run
// folder, objective.h for the interface).
#include <cmath>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/rng.h"
#include "data/loader.h"
#include "data/multicrop.h"
#include "models/budget.h"
#include "models/io/checkpoint.h"
#include "models/registry.h"
#include "train/config/data_spec.h"
#include "train/distributed/distributed.h"
#include "train/loop/loop.h"
#include "train/loop/loop_common.h"
#include "train/objectives/dino_trainer.h"
#include "train/objectives/objective_setup.h"
#include "train/optim/ema.h"

namespace sima {

using json = nlohmann::json;

// What train_state's "ema" slot holds for DINO: the teacher (the EMA of the student), the
// loss with its center, and the running sums of the epoch's logged figures (so an epoch
// resumed midway logs the same means).
class DinoExtraState : public Module {
 public:
  enum Sum { kEntropy = 0, kKl = 1, kBatchEntropy = 2, kNumSums = 3 };
  DinoExtraState(std::shared_ptr<MultiCropWrapper> teacher, std::shared_ptr<DINOLoss> loss)
      : Module("DinoExtraState") {
    register_module("teacher", std::move(teacher));
    register_module("dino_loss", std::move(loss));
    epoch_sums = register_buffer("epoch_sums", zeros({int64_t(kNumSums)}));
  }
  Tensor epoch_sums;  // float sums, added to in the same order by a resumed run
};

DinoSchedules dino_schedules(const ExperimentConfig& c, int64_t steps_per_epoch) {
  check(steps_per_epoch > 0, "dino_schedules: steps_per_epoch must be positive, got ", steps_per_epoch);
  const ScheduleSteps steps = schedule_steps(c, steps_per_epoch);  // overflow: an error naming the key
  const int64_t total = steps.total;
  DinoSchedules s;
  s.lr = {.type = c.schedule.type,
          .base = c.effective_lr(),
          .final = c.schedule.min_lr,
          .warmup_steps = steps.warmup,
          .warmup_start = c.schedule.warmup_lr,
          .total_steps = total,
          .decay_steps = steps.decay,
          .decay_rate = c.schedule.decay_rate,
          .warmup_linspace = true};
  s.weight_decay = {.type = "cosine", .base = c.optimizer.weight_decay, .final = c.dino.weight_decay_end,
                    .total_steps = total};
  s.momentum = {.type = "cosine", .base = c.dino.momentum_teacher, .final = 1.0, .total_steps = total};
  validate_schedule(s.lr);
  validate_schedule(s.weight_decay);
  validate_schedule(s.momentum);
  return s;
}

void cancel_gradients_last_layer(int64_t epoch, Module& model, int64_t freeze_last_layer) {
  if (epoch >= freeze_last_layer) return;
  for (auto& [name, p] : model.named_parameters())
    if (name.find("last_layer") != std::string::npos) p.zero_grad();
}

MultiCropOptions dino_multicrop_options(const ExperimentConfig& c) {
  const DinoConfig& d = c.dino;
  MultiCropOptions mo;
  mo.global_size = c.model.img_size;
  mo.local_size = d.local_crops_size;
  mo.local_crops = d.local_crops_number;
  mo.global_scale = d.global_crops_scale;
  mo.local_scale = d.local_crops_scale;
  mo.mean = c.model.mean;
  mo.std = c.model.std;
  mo.to_three_channels = c.model.in_chans == 3;
  mo.blur_sigma = {float(d.blur_sigma.first), float(d.blur_sigma.second)};
  mo.blur_sigma_reference = d.blur_sigma_reference_size;
  mo.global1_blur_p = d.global1_blur_p;
  mo.global2_blur_p = d.global2_blur_p;
  mo.local_blur_p = d.local_blur_p;
  mo.solarize_p = d.solarize_p;
  mo.color_jitter_p = d.color_jitter_p;
  return mo;
}

namespace {

// The DINO loss between a student and its EMA teacher on multi-crop views; no labels.
class DinoObjective : public Objective {
 public:
  explicit DinoObjective(const ExperimentConfig& cfg) : cfg_(cfg) {
    check(cfg.dino.enabled, "DinoTrainer: the config does not enable dino (set dino.enabled to true)");
  }

  int64_t setup(Comm& comm, StepSchedules& sched) override;
  // DINO's get_params_groups: biases and 1-D parameters without weight decay.
  std::vector<ParamGroup> param_groups() override { return param_groups_no_decay(student->trainable_parameters(), {}); }
  Module& trained() override { return *student; }
  Module* extra_state() override { return extra_.get(); }
  void share(Comm& comm) override;
  std::string describe() const override;

  void start_epoch(int64_t epoch, int64_t batch) override { loader_->start_epoch(epoch, batch); }
  bool next_batch() override { return loader_->next(batch_); }
  int64_t batch_images() const override { return int64_t(batch_.indices.size()); }

  std::string loss_name() const override { return "DINO loss"; }
  std::string advice() const override {
    return "DINO training stopped. Lower the learning rate or resume from the last checkpoint with --resume";
  }
  StepLoss forward(const TrainPosition& pos) override;
  double clip_gradients(const std::vector<Tensor>& params) override;
  void before_update(const TrainPosition& pos) override {
    cancel_gradients_last_layer(pos.epoch, *student, cfg_.dino.freeze_last_layer);
  }
  void after_update(const TrainPosition&) override {
    ema_update_parameters(*teacher, *student, momentum_);  // EMA update of the teacher
  }
  void step_done(bool skipped) override;
  void step_fields(json& record) const override {
    record["teacher_entropy"] = stats_.teacher_entropy;
    record["kl"] = stats_.kl;
    record["momentum"] = momentum_;
    record["teacher_temp"] = stats_.teacher_temp;
  }

  bool end_epoch(TrainPosition& pos, json& record, double train_loss, double epoch_seconds) override;
  void save_checkpoints(const std::string& dir, int64_t step, bool best) override;

  std::shared_ptr<MultiCropWrapper> student, teacher;
  std::shared_ptr<DINOLoss> dino_loss;
  std::vector<DinoEpochStats> epochs;  // every epoch this process completed

 private:
  int64_t setup_data(Comm& comm);
  void setup_networks();

  const ExperimentConfig& cfg_;
  DataSpec spec_;
  std::vector<std::string> classes_;
  std::shared_ptr<const Dataset> train_raw_;
  std::unique_ptr<MultiViewLoader> loader_;
  MultiViewBatch batch_;
  std::shared_ptr<DinoExtraState> extra_;
  Comm* comm_ = nullptr;
  DinoSchedules sched_;
  double momentum_ = 0.0;  // the teacher momentum of the step in progress
  DINOLossStats stats_;    // the figures of the last step
};

int64_t DinoObjective::setup_data(Comm& comm) {
  const ExperimentConfig& c = cfg_;
  // Data: the training split through DINO's multi-crop, views grouped by resolution.
  spec_ = parse_data_spec(c.data.dataset);
  train_raw_ = training_images(c, spec_);  // a validation split is held out of pretraining too
  classes_ = class_names(spec_, c.model.num_classes);
  const MultiCropOptions mo = dino_multicrop_options(c);
  auto views = std::make_shared<MultiViewTransformedDataset>(train_raw_, dino_multiview_transform(mo));
  loader_ = std::make_unique<MultiViewLoader>(views, training_loader_options(c, comm), collate_views_by_resolution);
  const int64_t steps_per_epoch = checked_steps_per_epoch(loader_->batches_per_epoch(), c, train_raw_->size());
  schedule_steps(c, steps_per_epoch);  // overflow: an error naming the key, before any network
  return steps_per_epoch;
}

// Networks, seeded. The feature width comes from the backbone itself (CvT: the last stage).
void DinoObjective::setup_networks() {
  const ExperimentConfig& c = cfg_;
  const DinoConfig& d = c.dino;
  std::shared_ptr<Model> backbone = seeded_model(c);
  const int64_t D = backbone_feature_dim(*backbone, c.model.img_size);
  if (d.local_crops_number > 0) {
    try {
      backbone_feature_dim(*backbone, d.local_crops_size);
    } catch (const Error& e) {
      fail("dino.local_crops_size ", d.local_crops_size, ": the model cannot take ", d.local_crops_size, "x",
           d.local_crops_size, " crops (", e.what(), ")");
    }
  }
  const DINOHeadOptions ho{.in_dim = D, .out_dim = d.out_dim, .hidden_dim = d.hidden_dim,
                           .bottleneck_dim = d.bottleneck_dim, .nlayers = 3, .norm_last_layer = d.norm_last_layer};
  student = std::make_shared<MultiCropWrapper>(backbone, std::make_shared<DINOHead>(ho));
  teacher = std::make_shared<MultiCropWrapper>(create_model(dino_teacher_config(c.model)),
                                               std::make_shared<DINOHead>(ho));
  teacher->load_state_dict(student->state_dict());  // teacher and student start with the same weights
  for (auto& [name, p] : teacher->named_parameters()) p.requires_grad_(false);
  dino_loss = std::make_shared<DINOLoss>(DINOLossOptions{.out_dim = d.out_dim,
                                                         .ncrops = 2 + d.local_crops_number,
                                                         .warmup_teacher_temp = d.warmup_teacher_temp,
                                                         .teacher_temp = d.teacher_temp,
                                                         .warmup_teacher_temp_epochs = d.warmup_teacher_temp_epochs,
                                                         .nepochs = c.train.epochs,
                                                         .student_temp = d.student_temp,
                                                         .center_momentum = d.center_momentum});
  extra_ = std::make_shared<DinoExtraState>(teacher, dino_loss);
  student->train();
  teacher->train();  // as DINO: no dropout / drop path in it, BatchNorm on batch statistics
}

int64_t DinoObjective::setup(Comm& comm, StepSchedules& sched) {
  comm_ = &comm;
  const int64_t steps_per_epoch = setup_data(comm);
  setup_networks();
  sched_ = dino_schedules(cfg_, steps_per_epoch);
  sched = {sched_.lr, sched_.weight_decay};
  return steps_per_epoch;
}

void DinoObjective::share(Comm& comm) {  // the same start everywhere; the center over all ranks
  broadcast_module(comm, *student);
  broadcast_module(comm, *teacher);
  broadcast_module(comm, *dino_loss);
  if (cfg_.train.sync_batchnorm) {
    convert_sync_batchnorm(comm, *student);
    convert_sync_batchnorm(comm, *teacher);
  }
  dino_loss->sum_across = [&comm](double* data, int64_t n) { comm.allreduce_sum(data, n); };
}

std::string DinoObjective::describe() const {
  const ExperimentConfig& c = cfg_;
  return "DINO, " + c.model.arch + " backbone " + std::to_string(student->backbone->num_parameters()) +
         " parameters + head " + std::to_string(student->head->num_parameters()) + ", " +
         std::to_string(train_raw_->size()) + " images x " + std::to_string(2 + c.dino.local_crops_number) +
         " crops, " + std::to_string(loader_->batches_per_epoch()) + " steps/epoch, lr " +
         std::to_string(c.effective_lr());
}

StepLoss DinoObjective::forward(const TrainPosition& pos) {
  momentum_ = schedule_value(sched_.momentum, pos.step);  // the global iteration's
  const MultiViewBatch& batch = batch_;
  const int64_t B = int64_t(batch.indices.size());
  check(!batch.views.empty() && batch.views[0].size(0) >= 2 * B, "dino: a batch without its 2 global crops");
  // Only the 2 global views pass through the teacher.
  const Tensor global = batch.views[0].size(0) == 2 * B ? batch.views[0] : narrow(batch.views[0], 0, 0, 2 * B);
  Tensor teacher_out;
  {
    NoGradGuard no_grad;
    teacher_out = teacher->forward(std::vector<Tensor>{global});  // (2B, K)
  }
  Tensor student_out = student->forward(batch.views);  // ((2 + M)·B, K)
  stats_ = DINOLossStats{};
  Tensor loss = dino_loss->forward(student_out, teacher_out, pos.epoch, &stats_);
  if (comm_->size() > 1) {
    // The figures of the global batch as means over the ranks' equal slices: exact for the loss,
    // the mean entropy and the KL; the batch entropy becomes the mean of each slice's.
    double f[4] = {stats_.loss, stats_.teacher_entropy, stats_.kl, stats_.teacher_batch_entropy};
    comm_->allreduce_sum(f, 4);
    const double P = double(comm_->size());
    stats_.loss = f[0] / P, stats_.teacher_entropy = f[1] / P, stats_.kl = f[2] / P;
    stats_.teacher_batch_entropy = f[3] / P;
  }
  return {loss, stats_.loss};
}

// utils.clip_gradients: each parameter on its own; the logged norm is the global one before clipping.
double DinoObjective::clip_gradients(const std::vector<Tensor>& params) {
  if (cfg_.dino.clip_grad <= 0) return grad_norm(params);
  double sq = 0.0;
  for (double n : clip_grad_per_param(params, cfg_.dino.clip_grad)) sq += n * n;
  return std::sqrt(sq);
}

void DinoObjective::step_done(bool skipped) {
  if (skipped) return;
  float* sums = extra_->epoch_sums.data();
  sums[DinoExtraState::kEntropy] += float(stats_.teacher_entropy);
  sums[DinoExtraState::kKl] += float(stats_.kl);
  sums[DinoExtraState::kBatchEntropy] += float(stats_.teacher_batch_entropy);
}

bool DinoObjective::end_epoch(TrainPosition& pos, json& record, double train_loss, double epoch_seconds) {
  const ExperimentConfig& c = cfg_;
  float* sums = extra_->epoch_sums.data();
  const double n = double(std::max<int64_t>(1, pos.epoch_loss_count));
  DinoEpochStats e;
  e.epoch = pos.epoch + 1;
  e.loss = train_loss;
  e.teacher_entropy = sums[DinoExtraState::kEntropy] / n;
  e.kl = sums[DinoExtraState::kKl] / n;
  e.teacher_batch_entropy = sums[DinoExtraState::kBatchEntropy] / n;
  e.lr = record["lr"].get<double>();
  e.weight_decay = schedule_value(sched_.weight_decay, pos.step - 1);  // group 0's, as the last step set it
  e.momentum = schedule_value(sched_.momentum, pos.step - 1);
  e.teacher_temp = dino_loss->teacher_temp(pos.epoch);
  e.seconds = epoch_seconds;
  char line[256];
  std::snprintf(line, sizeof line,
                "epoch %lld/%lld  loss %.4f  teacher entropy %.3f (batch %.3f, log K %.3f)  KL %.4f  lr %.3e  "
                "wd %.3f  momentum %.5f  teacher temp %.3f",
                (long long)e.epoch, (long long)c.train.epochs, e.loss, e.teacher_entropy, e.teacher_batch_entropy,
                std::log(double(c.dino.out_dim)), e.kl, e.lr, e.weight_decay, e.momentum, e.teacher_temp);
  say(line);
  for (int i = 0; i < DinoExtraState::kNumSums; ++i) sums[i] = 0.f;
  record["teacher_entropy"] = e.teacher_entropy;
  record["kl"] = e.kl;
  record["teacher_batch_entropy"] = e.teacher_batch_entropy;
  record["weight_decay"] = e.weight_decay;
  record["momentum"] = e.momentum;
  record["teacher_temp"] = e.teacher_temp;
  epochs.push_back(e);
  return false;
}

void DinoObjective::save_checkpoints(const std::string& dir, int64_t step, bool) {
  std::map<std::string, std::string> meta = checkpoint_metadata(cfg_, spec_, classes_, step);
  meta["dino"] = "teacher backbone";
  save_checkpoint(dir + "/model.safetensors", *teacher->backbone, meta);
  meta["dino"] = "student backbone";
  save_checkpoint(dir + "/student.safetensors", *student->backbone, meta);
}

}  // namespace

struct DinoTrainer::State : LoopRun<DinoObjective> {
  using LoopRun::LoopRun;
};

DinoTrainer::DinoTrainer(ExperimentConfig cfg, TrainerOptions options)
    : s_(std::make_unique<State>(std::move(cfg), std::move(options))) {}
DinoTrainer::~DinoTrainer() = default;
MultiCropWrapper& DinoTrainer::student() { return *s_->objective.student; }
MultiCropWrapper& DinoTrainer::teacher() { return *s_->objective.teacher; }
DINOLoss& DinoTrainer::loss() { return *s_->objective.dino_loss; }

DinoTrainResult DinoTrainer::fit() {
  DinoTrainResult result;
  static_cast<LoopResult&>(result) = s_->loop.fit();
  result.epochs = s_->objective.epochs;
  return result;
}

DinoTrainResult train_dino(const ExperimentConfig& cfg, const TrainerOptions& options) {
  return DinoTrainer(cfg, options).fit();
}

}  // namespace sima
