// The DINO trainer (see dino_trainer.h).
#include "train/dino_trainer.h"

#include <chrono>
#include <cmath>
#include <filesystem>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/rng.h"
#include "core/file_io.h"
#include "data/loader.h"
#include "data/multicrop.h"
#include "models/budget.h"
#include "models/checkpoint.h"
#include "models/registry.h"
#include "train/curves.h"
#include "train/data_spec.h"
#include "train/distributed.h"
#include "train/ema.h"
#include "train/loop_common.h"
#include "train/metrics.h"
#include "train/optim.h"
#include "train/progress.h"
#include "train/train_state.h"

namespace sima {

using json = nlohmann::json;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }


}  // namespace

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

struct DinoTrainer::State {
  ExperimentConfig cfg;
  TrainerOptions opt;
  Comm& comm = world();               // one process, or the ranks of mpirun (train/distributed.h)
  TestFault fault = TestFault::from_env();  // the failure tests' seam; inert in a normal run
  std::unique_ptr<GradSync> grad_sync;  // with more than one rank
  std::string dir;
  std::unique_ptr<RunLock> run_lock;  // rank 0: held while the run lives (train/run_lock.h)
  json resolved;

  std::shared_ptr<MultiCropWrapper> student, teacher;
  std::shared_ptr<DINOLoss> dino_loss;
  std::shared_ptr<DinoExtraState> extra;
  std::shared_ptr<const Dataset> train_raw;
  std::unique_ptr<MultiViewLoader> loader;
  std::unique_ptr<Optimizer> optim;
  std::vector<Tensor> params;  // what the optimizer trains (clipping, gradient checks)
  DinoSchedules sched;
  MetricsLog log;
  std::unique_ptr<ProgressBar> progress;
  DataSpec spec;
  std::vector<std::string> classes;

  TrainPosition pos;
  int64_t steps_per_epoch = 0, total_steps = 0;
  int skipped_in_row = 0;

  void setup();
  void save_all(bool epoch_end);
  double train_step(const MultiViewBatch& batch, DINOLossStats& stats, double& grad_norm_out, bool& skipped);
  void say(const std::string& line) {
    if (progress) progress->message(line);
  }
};

DinoTrainer::DinoTrainer(ExperimentConfig cfg, TrainerOptions options) : s_(std::make_unique<State>()) {
  s_->cfg = std::move(cfg);
  s_->opt = std::move(options);
  s_->setup();
}
DinoTrainer::~DinoTrainer() = default;
MultiCropWrapper& DinoTrainer::student() { return *s_->student; }
MultiCropWrapper& DinoTrainer::teacher() { return *s_->teacher; }
DINOLoss& DinoTrainer::loss() { return *s_->dino_loss; }

void DinoTrainer::State::setup() {
  const ExperimentConfig& c = cfg;
  const DinoConfig& d = c.dino;
  check(d.enabled, "DinoTrainer: the config does not enable dino (set dino.enabled to true)");
  resolved = experiment_to_json(c);
  dir = opt.run_dir.empty() ? "runs/" + c.name : opt.run_dir;
  const std::string state_path = dir + "/train_state.safetensors";
  if (comm.is_main()) run_lock = prepare_run_folder(dir, opt.resume);  // only rank 0 writes the run folder

  // Data: the training split through DINO's multi-crop, views grouped by resolution.
  spec = parse_data_spec(c.data.dataset);
  train_raw = open_dataset(spec, true);
  if (c.data.train_subset > 0) train_raw = random_subset(train_raw, c.data.train_subset, uint64_t(c.train.seed));
  classes = class_names(spec, c.model.num_classes);
  MultiCropOptions mo;
  mo.global_size = c.model.img_size;
  mo.local_size = d.local_crops_size;
  mo.local_crops = d.local_crops_number;
  mo.global_scale = d.global_crops_scale;
  mo.local_scale = d.local_crops_scale;
  mo.mean = c.model.mean;
  mo.std = c.model.std;
  mo.to_three_channels = c.model.in_chans == 3;
  auto views = std::make_shared<MultiViewTransformedDataset>(train_raw, dino_multiview_transform(mo));
  loader = std::make_unique<MultiViewLoader>(views,
                                             LoaderOptions{.batch_size = c.data.batch_size,
                                                           .shuffle = true,
                                                           .drop_last = true,
                                                           .num_workers = int(c.data.num_workers),
                                                           .seed = uint64_t(c.train.seed),
                                                           .num_replicas = comm.size(),
                                                           .rank = comm.rank()},
                                             collate_views_by_resolution);
  steps_per_epoch = loader->batches_per_epoch();
  check(steps_per_epoch > 0, "data.batch_size ", c.data.batch_size, " exceeds the ", train_raw->size(),
        " training images: no full batch");
  total_steps = schedule_steps(c, steps_per_epoch).total;

  // Networks, seeded. The feature width comes from the backbone itself (CvT: the last stage).
  manual_seed(uint64_t(c.train.seed));
  check_model_budget(c.model, c.data.batch_size);  // the run's batch, before any tensor (models/budget.h)
  std::shared_ptr<Model> backbone = create_model(c.model);
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
  extra = std::make_shared<DinoExtraState>(teacher, dino_loss);
  student->train();
  teacher->train();  // as DINO: no dropout / drop path in it, BatchNorm on batch statistics

  // Optimizer: DINO's get_params_groups (biases and 1-D parameters without weight decay).
  auto groups = param_groups_no_decay(student->trainable_parameters(), {});
  optim = make_optimizer(std::move(groups), c);
  for (auto& g : optim->param_groups())
    for (auto& [name, p] : g.params) params.push_back(p);
  sched = dino_schedules(c, steps_per_epoch);

  if (opt.resume) {
    json stored;
    pos = load_train_state(state_path, *student, *optim, extra.get(), &stored);
    check_resume_config(stored, resolved, state_path);
  }
  if (comm.size() > 1) {  // the same start everywhere; gradients and the center over all ranks
    broadcast_module(comm, *student);
    broadcast_module(comm, *teacher);
    broadcast_module(comm, *dino_loss);
    if (c.train.sync_batchnorm) {
      convert_sync_batchnorm(comm, *student);
      convert_sync_batchnorm(comm, *teacher);
    }
    dino_loss->sum_across = [this](double* data, int64_t n) { comm.allreduce_sum(data, n); };
    grad_sync = make_grad_sync(comm, *student, c.train.allreduce_bucket_mb);
  }
  if (!comm.is_main()) return;
  const std::string text = resolved.dump(2) + "\n";
  write_file_atomic(dir + "/config.json", text.data(), text.size());
  log.open(dir, opt.resume ? pos.step : -1);
  if (!opt.quiet) progress = std::make_unique<ProgressBar>(c.train.log_every);
}

double DinoTrainer::State::train_step(const MultiViewBatch& batch, DINOLossStats& stats, double& grad_norm_out,
                                      bool& skipped) {
  const ExperimentConfig& c = cfg;
  const int64_t it = pos.step;  // the global iteration the schedules are indexed by
  optim->set_lr(schedule_value(sched.lr, it));
  optim->set_weight_decay(schedule_value(sched.weight_decay, it));  // group 0 only (group 1: wd_scale 0)
  const double momentum = schedule_value(sched.momentum, it);

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
  Tensor loss = dino_loss->forward(student_out, teacher_out, pos.epoch, &stats);
  if (comm.size() > 1) {
    // The figures of the global batch as means over the ranks' equal slices: exact for the loss,
    // the mean entropy and the KL; the batch entropy becomes the mean of each slice's.
    double f[4] = {stats.loss, stats.teacher_entropy, stats.kl, stats.teacher_batch_entropy};
    comm.allreduce_sum(f, 4);
    const double P = double(comm.size());
    stats.loss = f[0] / P, stats.teacher_entropy = f[1] / P, stats.kl = f[2] / P, stats.teacher_batch_entropy = f[3] / P;
  }
  const double value = stats.loss;
  skipped = false;

  auto nonfinite = [&](const std::string& what) {  // skips the step or fails
    handle_nonfinite_step(what, c, pos, skipped_in_row, *optim, [&](const std::string& l) { say(l); },
                          "DINO training stopped. Lower the learning rate or resume from the last checkpoint "
                          "with --resume");
    skipped = true;
  };
  if (!std::isfinite(value)) {
    nonfinite("the DINO loss is not finite (" + std::to_string(value) + ")");
    return value;
  }
  if (grad_sync) grad_sync->begin();
  loss.backward();
  if (grad_sync) grad_sync->finish();  // .grad = mean over the ranks
  // utils.clip_gradients: each parameter on its own; the logged norm is the global one before clipping.
  double sq = 0.0;
  if (c.dino.clip_grad > 0) {
    for (double n : clip_grad_per_param(params, c.dino.clip_grad)) sq += n * n;
    grad_norm_out = std::sqrt(sq);
  } else {
    grad_norm_out = grad_norm(params);
  }
  if (!std::isfinite(grad_norm_out)) {
    nonfinite("the gradient of '" + first_nonfinite_gradient(*optim) + "' is not finite");
    return value;
  }
  cancel_gradients_last_layer(pos.epoch, *student, c.dino.freeze_last_layer);
  optim->step();
  if (std::string what; undo_nonfinite_update(c, *optim, what)) {  // a finite step can still overflow
    nonfinite(what);
    return value;
  }
  skipped_in_row = 0;
  optim->zero_grad();
  ema_update_parameters(*teacher, *student, momentum);  // EMA update of the teacher
  return value;
}

void DinoTrainer::State::save_all(bool epoch_end) {
  if (!comm.is_main()) return;  // every rank holds the same weights: rank 0 writes them
  json norm = {{"mean", cfg.model.mean}, {"std", cfg.model.std}, {"img_size", cfg.model.img_size},
               {"crop_pct", cfg.augment.crop_pct}};
  std::map<std::string, std::string> meta = {{"normalization", norm.dump()},
                                             {"data", to_string(spec)},
                                             {"classes", json(classes).dump()},
                                             {"step", std::to_string(pos.step)}};
  if (epoch_end) {
    meta["dino"] = "teacher backbone";
    save_checkpoint(dir + "/model.safetensors", *teacher->backbone, meta);
    meta["dino"] = "student backbone";
    save_checkpoint(dir + "/student.safetensors", *student->backbone, meta);
  }
  // The train state last: a run killed before this rename resumes from the previous state.
  save_train_state(dir + "/train_state.safetensors", *student, *optim, extra.get(), pos, resolved);
}

DinoTrainResult DinoTrainer::fit() {
  State& s = *s_;
  const ExperimentConfig& c = s.cfg;
  DinoTrainResult result;
  result.run_dir = s.dir;
  const auto t_start = Clock::now();
  s.say("run " + s.dir + ": DINO, " + c.model.arch + " backbone " + std::to_string(s.student->backbone->num_parameters()) +
        " parameters + head " + std::to_string(s.student->head->num_parameters()) + ", " +
        std::to_string(s.train_raw->size()) + " images x " + std::to_string(2 + c.dino.local_crops_number) +
        " crops, " + std::to_string(s.steps_per_epoch) + " steps/epoch, lr " + std::to_string(c.effective_lr()) +
        (s.opt.resume ? ", resumed at step " + std::to_string(s.pos.step) : "") +
        ranks_banner(s.comm, c.data.batch_size));

  float* sums = s.extra->epoch_sums.data();
  bool stop = c.train.max_steps > 0 && s.pos.step >= c.train.max_steps;
  result.interrupted = stop && s.pos.epoch < c.train.epochs;
  while (s.pos.epoch < c.train.epochs && !stop) {
    const auto t_epoch = Clock::now();
    s.loader->start_epoch(s.pos.epoch, s.pos.batch);
    MultiViewBatch batch;
    auto t_window = Clock::now();
    int64_t window_images = 0, window_steps = 0;
    double window_loss = 0.0, img_per_s = 0.0;
    double lr = 0.0, wd = 0.0, momentum = 0.0, temp = 0.0;
    while (!stop && s.loader->next(batch)) {
      s.fault.at_step(s.comm, s.pos.step + 1);  // the failure tests' seam (SIMA_TEST_FAULT)
      DINOLossStats st;
      double gnorm = 0.0;
      bool skipped = false;
      momentum = schedule_value(s.sched.momentum, s.pos.step);
      const double loss = s.train_step(batch, st, gnorm, skipped);
      lr = s.optim->param_groups()[0].lr;
      wd = s.optim->param_groups()[0].weight_decay;
      temp = st.teacher_temp;
      ++s.pos.batch;
      ++s.pos.step;
      result.step_losses.push_back(loss);
      if (!skipped) {
        s.pos.epoch_loss_sum += loss;
        ++s.pos.epoch_loss_count;
        sums[DinoExtraState::kEntropy] += float(st.teacher_entropy);
        sums[DinoExtraState::kKl] += float(st.kl);
        sums[DinoExtraState::kBatchEntropy] += float(st.teacher_batch_entropy);
        window_loss += loss;
        ++window_steps;
      }
      window_images += int64_t(batch.indices.size()) * s.comm.size();  // the global batch
      const double window_s = seconds_since(t_window);
      if (window_s > 0) img_per_s = double(window_images) / window_s;
      if (s.pos.step % c.train.log_every == 0) {
        s.log.log({{"kind", "step"},
                   {"step", s.pos.step},
                   {"epoch", double(s.pos.step) / double(s.steps_per_epoch)},
                   {"loss", window_steps ? window_loss / double(window_steps) : loss},
                   {"teacher_entropy", st.teacher_entropy},
                   {"kl", st.kl},
                   {"lr", lr},
                   {"weight_decay", wd},
                   {"momentum", momentum},
                   {"teacher_temp", temp},
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
        if (s.pos.batch < s.steps_per_epoch) s.save_all(false);
        if (flagged) s.say("stopped at step " + std::to_string(s.pos.step) + "; continue with --resume");
      } else if (c.train.checkpoint_every > 0 && s.pos.step % c.train.checkpoint_every == 0 &&
                 s.pos.batch < s.steps_per_epoch) {
        s.save_all(false);
      }
    }
    if (s.pos.batch < s.steps_per_epoch) break;  // stopped mid-epoch

    // End of the epoch: log the means, checkpoint.
    const double n = double(std::max<int64_t>(1, s.pos.epoch_loss_count));
    DinoEpochStats e;
    e.epoch = s.pos.epoch + 1;
    e.loss = s.pos.epoch_loss_count ? s.pos.epoch_loss_sum / n : NAN;
    e.teacher_entropy = sums[DinoExtraState::kEntropy] / n;
    e.kl = sums[DinoExtraState::kKl] / n;
    e.teacher_batch_entropy = sums[DinoExtraState::kBatchEntropy] / n;
    e.lr = s.optim->param_groups()[0].lr;
    e.weight_decay = s.optim->param_groups()[0].weight_decay;
    e.momentum = schedule_value(s.sched.momentum, s.pos.step - 1);
    e.teacher_temp = s.dino_loss->teacher_temp(s.pos.epoch);
    e.seconds = seconds_since(t_epoch);
    if (s.progress)
      s.progress->end_epoch({.epoch = s.pos.epoch, .epochs = c.train.epochs, .step = s.pos.batch,
                             .steps = s.steps_per_epoch, .loss = e.loss, .lr = e.lr, .images_per_second = img_per_s});
    char line[256];
    std::snprintf(line, sizeof line,
                  "epoch %lld/%lld  loss %.4f  teacher entropy %.3f (batch %.3f, log K %.3f)  KL %.4f  lr %.3e  "
                  "wd %.3f  momentum %.5f  teacher temp %.3f",
                  (long long)e.epoch, (long long)c.train.epochs, e.loss, e.teacher_entropy, e.teacher_batch_entropy,
                  std::log(double(c.dino.out_dim)), e.kl, e.lr, e.weight_decay, e.momentum, e.teacher_temp);
    s.say(line);
    ++s.pos.epoch;
    s.pos.batch = 0;
    s.pos.epoch_loss_sum = 0.0;
    s.pos.epoch_loss_count = 0;
    for (int i = 0; i < DinoExtraState::kNumSums; ++i) sums[i] = 0.f;
    // The record before the save: a run killed between the two resumes from the state before
    // this epoch's end, and MetricsLog::open drops the records past that state's step.
    s.log.log({{"kind", "epoch"},
               {"epoch", e.epoch},
               {"step", s.pos.step},
               {"train_loss", e.loss},
               {"teacher_entropy", e.teacher_entropy},
               {"kl", e.kl},
               {"teacher_batch_entropy", e.teacher_batch_entropy},
               {"lr", e.lr},
               {"weight_decay", e.weight_decay},
               {"momentum", e.momentum},
               {"teacher_temp", e.teacher_temp},
               {"epoch_seconds", e.seconds}});
    s.save_all(true);
    result.epochs.push_back(e);
    std::string why = s.comm.is_main() ? render_curves(s.log.csv_path(), s.dir + "/curves.png") : "";
    if (!why.empty() && s.pos.epoch == c.train.epochs) s.say("note: no curves.png (" + why + ")");
  }
  result.steps = s.pos.step;
  result.epochs_done = s.pos.epoch;
  result.seconds = seconds_since(t_start);
  return result;
}

DinoTrainResult train_dino(const ExperimentConfig& cfg, const TrainerOptions& options) {
  return DinoTrainer(cfg, options).fit();
}

}  // namespace sima
