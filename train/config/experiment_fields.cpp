// The experiment schema: every key of an experiment config outside "model" (ExperimentConfig's
// sections), with its type, valid values, default (the struct's) and help. Reading, writing,
// validation and the documentation table derive from it (core/json_schema.h is the mechanism,
// shared with the model schema, models/config_fields.cpp).
#include "core/error.h"
#include "train/config/data_spec.h"
#include "train/config/experiment_config.h"

namespace sima {

using json = nlohmann::json;

namespace {

// train.epochs at most this: more is a typo or a run that never ends (a million steps per epoch
// times this still fits every step count in int64).
constexpr int64_t kMaxEpochs = 100000;

// The field `member` of the section `section` of ExperimentConfig, under its full path.
template <class Sec, class T>
ConfigField field(std::string path, Sec ExperimentConfig::*section, T Sec::*member, std::string help,
                  Rule<T> rule = any_value<T>()) {
  return schema_field<T, ExperimentConfig>(
      std::move(path), [=](ExperimentConfig& c) -> T& { return (c.*section).*member; }, std::move(rule),
      std::move(help));
}

// An integer in [lo, hi].
Rule<int64_t> int_within(int64_t lo, int64_t hi) { return within<int64_t>(lo, hi); }

using E = ExperimentConfig;

void add_name_and_data_fields(std::vector<ConfigField>& f) {
  f.push_back(schema_field<std::string, E>(
      "name", [](E& c) -> std::string& { return c.name; },
      Rule<std::string>{"non-empty, without '/'",
                        [](const std::string& n) {
                          return !n.empty() && n.find('/') == std::string::npos
                                     ? std::string()
                                     : "must be non-empty without '/', got '" + n + "'";
                        }},
      "run name (the default run folder is runs/<name>)"));

  // data
  f.push_back(field("data.dataset", &E::data, &DataConfig::dataset,
                    "data spec: fashion_mnist[:ROOT], mnist:ROOT, cifar10:ROOT, cifar100:ROOT, folder:ROOT",
                    Rule<std::string>{"a data spec", [](const std::string& s) {
                      try {
                        parse_data_spec(s);
                      } catch (const Error& e) {
                        return std::string(e.what());
                      }
                      return std::string();
                    }}));
  f.push_back(field("data.train_subset", &E::data, &DataConfig::train_subset,
                    "train on a seeded random subset of this many images (0 = all)", at_least<int64_t>(0)));
  f.push_back(field("data.test_subset", &E::data, &DataConfig::test_subset,
                    "evaluate on a seeded random subset of this many images (0 = all)", at_least<int64_t>(0)));
  f.push_back(field("data.validation", &E::data, &DataConfig::validation,
                    "hold out this many training images as the validation set, evaluated instead of the test set "
                    "(0 = train on all, evaluate on the test set)",
                    at_least<int64_t>(0)));
  f.push_back(field("data.validation_seed", &E::data, &DataConfig::validation_seed,
                    "seed of the validation split (the same split for every train.seed)", at_least<int64_t>(0)));
  f.push_back(field("data.batch_size", &E::data, &DataConfig::batch_size, "training batch size (>= 1)", at_least<int64_t>(1)));
  f.push_back(field("data.eval_batch_size", &E::data, &DataConfig::eval_batch_size, "evaluation batch size (>= 1)",
                    at_least<int64_t>(1)));
  f.push_back(field("data.num_workers", &E::data, &DataConfig::num_workers,
                    "loader threads decoding and augmenting ahead (0 = in the training thread)", at_least<int64_t>(0)));

}

void add_augment_fields(std::vector<ConfigField>& f) {
  // augment
  f.push_back(field("augment.crop", &E::augment, &AugmentOptions::crop,
                    "random_crop (with padding) | random_resized_crop (scale, ratio) | none",
                    one_of({"random_crop", "random_resized_crop", "none"})));
  f.push_back(field("augment.scale", &E::augment, &AugmentOptions::scale,
                    "random_resized_crop: range of the crop's share of the image area"));
  f.push_back(field("augment.ratio", &E::augment, &AugmentOptions::ratio,
                    "random_resized_crop: range of the crop's aspect ratio"));
  f.push_back(field("augment.padding", &E::augment, &AugmentOptions::padding,
                    "random_crop: zero padding on each side in pixels", at_least<int64_t>(0)));
  f.push_back(field("augment.hflip", &E::augment, &AugmentOptions::hflip, "horizontal flip probability [0, 1]",
                    within<double>(0, 1)));
  f.push_back(field("augment.rand_augment", &E::augment, &AugmentOptions::rand_augment,
                    "timm RandAugment string, e.g. rand-m9-mstd0.5-inc1 (\"\" = off)"));
  f.push_back(field("augment.color_jitter", &E::augment, &AugmentOptions::color_jitter,
                    "brightness/contrast/saturation strength when RandAugment is off [0, 1]", within<double>(0, 1)));
  f.push_back(field("augment.random_erasing", &E::augment, &AugmentOptions::random_erasing,
                    "random erasing probability [0, 1] (timm 'pixel' mode)", within<double>(0, 1)));
  f.push_back(field("augment.crop_pct", &E::augment, &AugmentOptions::crop_pct,
                    "evaluation: resize to img_size / crop_pct then centre crop, (0, 1]", within<double>(1e-3, 1)));

  // mixup
  f.push_back(field("mixup.mixup_alpha", &E::mixup, &MixupConfig::mixup_alpha,
                    "Mixup Beta(α, α) (0 = off; DeiT 0.8)", at_least<double>(0)));
  f.push_back(field("mixup.cutmix_alpha", &E::mixup, &MixupConfig::cutmix_alpha,
                    "CutMix Beta(α, α) (0 = off; DeiT 1.0)", at_least<double>(0)));
  f.push_back(field("mixup.prob", &E::mixup, &MixupConfig::prob, "probability of mixing a batch [0, 1]", within<double>(0, 1)));
  f.push_back(field("mixup.switch_prob", &E::mixup, &MixupConfig::switch_prob,
                    "probability of CutMix instead of Mixup when both are on [0, 1]", within<double>(0, 1)));

}

void add_optimizer_fields(std::vector<ConfigField>& f) {
  // optimizer
  f.push_back(field("optimizer.type", &E::optimizer, &OptimizerConfig::type, "adamw | sgd", one_of({"adamw", "sgd"})));
  f.push_back(field("optimizer.lr", &E::optimizer, &OptimizerConfig::lr,
                    "peak learning rate; 0 = base_lr · batch_size / lr_base_batch", at_least<double>(0)));
  f.push_back(field("optimizer.base_lr", &E::optimizer, &OptimizerConfig::base_lr,
                    "learning rate per lr_base_batch images (DeiT: 5e-4 per 512)", positive<double>()));
  f.push_back(field("optimizer.lr_base_batch", &E::optimizer, &OptimizerConfig::lr_base_batch,
                    "batch size base_lr refers to", at_least<int64_t>(1)));
  f.push_back(field("optimizer.beta1", &E::optimizer, &OptimizerConfig::beta1, "AdamW β1 [0, 1)", within<double>(0, 1, true)));
  f.push_back(field("optimizer.beta2", &E::optimizer, &OptimizerConfig::beta2, "AdamW β2 [0, 1)", within<double>(0, 1, true)));
  f.push_back(field("optimizer.eps", &E::optimizer, &OptimizerConfig::eps, "AdamW ε (> 0)", positive<double>()));
  f.push_back(field("optimizer.weight_decay", &E::optimizer, &OptimizerConfig::weight_decay,
                    "weight decay (decoupled for AdamW, L2 for SGD), >= 0", at_least<double>(0)));
  f.push_back(field("optimizer.momentum", &E::optimizer, &OptimizerConfig::momentum, "SGD momentum [0, 1)",
                    within<double>(0, 1, true)));
  f.push_back(field("optimizer.nesterov", &E::optimizer, &OptimizerConfig::nesterov, "SGD Nesterov momentum"));
  f.push_back(field("optimizer.no_weight_decay", &E::optimizer, &OptimizerConfig::no_weight_decay,
                    "parameter names without weight decay (besides every 1-D parameter)"));
  f.push_back(field("optimizer.clip_grad", &E::optimizer, &OptimizerConfig::clip_grad,
                    "clip the global gradient norm to this (0 = off)", at_least<double>(0)));

  // schedule
  f.push_back(field("schedule.type", &E::schedule, &ScheduleConfig::type, "cosine | step | constant (per step)",
                    one_of({"cosine", "step", "constant"})));
  f.push_back(field("schedule.warmup_epochs", &E::schedule, &ScheduleConfig::warmup_epochs,
                    "linear warmup length in epochs (may be fractional)", at_least<double>(0)));
  f.push_back(field("schedule.warmup_lr", &E::schedule, &ScheduleConfig::warmup_lr, "learning rate at step 0 of warmup",
                    at_least<double>(0)));
  f.push_back(field("schedule.min_lr", &E::schedule, &ScheduleConfig::min_lr, "cosine: final learning rate",
                    at_least<double>(0)));
  f.push_back(field("schedule.decay_epochs", &E::schedule, &ScheduleConfig::decay_epochs,
                    "step: epochs between decays (> 0)", positive<double>()));
  f.push_back(field("schedule.decay_rate", &E::schedule, &ScheduleConfig::decay_rate, "step: factor per decay (0, 1]",
                    within<double>(1e-12, 1)));
  f.push_back(field("schedule.weight_decay_end", &E::schedule, &ScheduleConfig::weight_decay_end,
                    "cosine weight-decay schedule from optimizer.weight_decay to this (-1 = constant)", at_least<double>(-1)));

}

void add_train_fields(std::vector<ConfigField>& f) {
  // train
  f.push_back(field("train.epochs", &E::train, &TrainConfig::epochs, "epochs [1, 100000]",
                    within<int64_t>(1, kMaxEpochs)));
  f.push_back(field("train.seed", &E::train, &TrainConfig::seed,
                    "seed of initialisation, data order, augmentation and dropout", at_least<int64_t>(0)));
  f.push_back(field("train.label_smoothing", &E::train, &TrainConfig::label_smoothing,
                    "label smoothing ε [0, 1) (DeiT 0.1)", within<double>(0, 0.999)));
  f.push_back(field("train.ema", &E::train, &TrainConfig::ema, "keep an EMA of the weights (evaluated and saved too)"));
  f.push_back(field("train.ema_decay", &E::train, &TrainConfig::ema_decay, "EMA decay per step [0, 1)",
                    within<double>(0, 0.99999999)));
  f.push_back(field("train.eval_every", &E::train, &TrainConfig::eval_every,
                    "epochs between test evaluations (the last epoch always)", at_least<int64_t>(1)));
  f.push_back(field("train.log_every", &E::train, &TrainConfig::log_every, "steps between step records in metrics.jsonl",
                    at_least<int64_t>(1)));
  f.push_back(field("train.checkpoint_every", &E::train, &TrainConfig::checkpoint_every,
                    "steps between train-state saves for --resume (0 = at epoch ends only)", at_least<int64_t>(0)));
  f.push_back(field("train.max_steps", &E::train, &TrainConfig::max_steps,
                    "stop after this many steps in total (0 = no limit)", at_least<int64_t>(0)));
  f.push_back(field("train.on_nonfinite", &E::train, &TrainConfig::on_nonfinite,
                    "non-finite loss, gradient or updated weight: stop | skip (the step, undone; stop after 10 in a row)",
                    one_of({"stop", "skip"})));
  f.push_back(field("train.precision", &E::train, &TrainConfig::precision,
                    "matrix products of a training step: fp32 | bf16 (bf16 inputs, float32 sums; needs AVX512-BF16 or "
                    "AMX) | fp16 (CUDA float16 autocast emulated, dynamic loss scaling); weights, gradients and "
                    "optimizer state stay float32",
                    one_of({"fp32", "bf16", "fp16"})));
  f.push_back(field("train.allreduce_bucket_mb", &E::train, &TrainConfig::allreduce_bucket_mb,
                    "mpirun: MB of gradients per allreduce bucket, started during backward (0 = one bucket)",
                    at_least<double>(0)));
  f.push_back(field("train.sync_batchnorm", &E::train, &TrainConfig::sync_batchnorm,
                    "mpirun: BatchNorm statistics over the whole global batch (SyncBatchNorm), not each rank's slice"));

}

// dino.*: the head, the crops, the temperatures and the teacher's momentum.
void add_dino_fields(std::vector<ConfigField>& f) {
  const Rule<std::pair<double, double>> unit_range{"within (0, 1]", [](const std::pair<double, double>& r) {
    return r.first > 0 && r.second <= 1 ? std::string() : "must lie in (0, 1], got [" + number_text(r.first) + ", " +
                                                              number_text(r.second) + "]";
  }};
  f.push_back(field("dino.enabled", &E::dino, &DinoConfig::enabled,
                    "train with DINO self-distillation instead of labels (train/objectives/dino_trainer.h)"));
  f.push_back(field("dino.out_dim", &E::dino, &DinoConfig::out_dim, "K, prototypes in the head's last layer (>= 1)",
                    at_least<int64_t>(1)));
  f.push_back(field("dino.hidden_dim", &E::dino, &DinoConfig::hidden_dim, "width of the head's hidden layers (>= 1)",
                    at_least<int64_t>(1)));
  f.push_back(field("dino.bottleneck_dim", &E::dino, &DinoConfig::bottleneck_dim,
                    "width before the weight-normalised last layer (>= 1)", at_least<int64_t>(1)));
  f.push_back(field("dino.norm_last_layer", &E::dino, &DinoConfig::norm_last_layer,
                    "freeze the last layer's weight_g at 1 (unit-norm prototypes)"));
  f.push_back(field("dino.local_crops_number", &E::dino, &DinoConfig::local_crops_number,
                    "local crops per image besides the 2 global ones (0..256)",
                    int_within(0, 256)));
  f.push_back(field("dino.global_crops_scale", &E::dino, &DinoConfig::global_crops_scale,
                    "area share range of the global crops, in (0, 1]", unit_range));
  f.push_back(field("dino.local_crops_scale", &E::dino, &DinoConfig::local_crops_scale,
                    "area share range of the local crops, in (0, 1]", unit_range));
  f.push_back(field("dino.local_crops_size", &E::dino, &DinoConfig::local_crops_size,
                    "side of the local crops in pixels (the global ones are model.img_size)",
                    int_within(1, 4096)));
  f.push_back(field("dino.warmup_teacher_temp", &E::dino, &DinoConfig::warmup_teacher_temp,
                    "teacher temperature at epoch 0 (> 0)", positive<double>()));
  f.push_back(field("dino.teacher_temp", &E::dino, &DinoConfig::teacher_temp,
                    "teacher temperature after the warmup (> 0)", positive<double>()));
  f.push_back(field("dino.warmup_teacher_temp_epochs", &E::dino, &DinoConfig::warmup_teacher_temp_epochs,
                    "epochs of linear teacher-temperature warmup (0 = none)", at_least<int64_t>(0)));
  f.push_back(field("dino.student_temp", &E::dino, &DinoConfig::student_temp, "student temperature (> 0)",
                    positive<double>()));
  f.push_back(field("dino.center_momentum", &E::dino, &DinoConfig::center_momentum,
                    "momentum of the teacher-output center [0, 1]", within<double>(0, 1)));
  f.push_back(field("dino.momentum_teacher", &E::dino, &DinoConfig::momentum_teacher,
                    "teacher EMA momentum at step 0, cosine to 1 [0, 1]", within<double>(0, 1)));
  f.push_back(field("dino.weight_decay_end", &E::dino, &DinoConfig::weight_decay_end,
                    "final weight decay of the cosine schedule from optimizer.weight_decay (>= 0)", at_least<double>(0)));
  f.push_back(field("dino.clip_grad", &E::dino, &DinoConfig::clip_grad,
                    "clip each parameter's gradient norm to this (0 = off)", at_least<double>(0)));
  f.push_back(field("dino.freeze_last_layer", &E::dino, &DinoConfig::freeze_last_layer,
                    "epochs during which the head's last layer gets no update", at_least<int64_t>(0)));
}

// dino.*: the views' augmentations (blur, solarisation, colour jitter).
void add_dino_augment_fields(std::vector<ConfigField>& f) {
  const Rule<std::pair<double, double>> sigma_range{"> 0", [](const std::pair<double, double>& r) {
    return r.first > 0 ? std::string() : "must be > 0, got [" + number_text(r.first) + ", " + number_text(r.second) + "]";
  }};
  f.push_back(field("dino.blur_sigma", &E::dino, &DinoConfig::blur_sigma,
                    "range of the Gaussian blurs' sigma in pixels (DINO's [0.1, 2] is for 224-pixel crops)", sigma_range));
  f.push_back(field("dino.blur_sigma_reference_size", &E::dino, &DinoConfig::blur_sigma_reference_size,
                    "0: blur_sigma is in pixels; N: blur_sigma is for an N-pixel crop and each view's sigma is "
                    "scaled by its side / N (224: DINO's sigma scaled to the image) (0..4096)",
                    int_within(0, 4096)));
  f.push_back(field("dino.global1_blur_p", &E::dino, &DinoConfig::global1_blur_p,
                    "probability of blurring the first global view [0, 1]", within<double>(0, 1)));
  f.push_back(field("dino.global2_blur_p", &E::dino, &DinoConfig::global2_blur_p,
                    "probability of blurring the second global view [0, 1]", within<double>(0, 1)));
  f.push_back(field("dino.local_blur_p", &E::dino, &DinoConfig::local_blur_p,
                    "probability of blurring each local view [0, 1]", within<double>(0, 1)));
  f.push_back(field("dino.solarize_p", &E::dino, &DinoConfig::solarize_p,
                    "probability of solarising the second global view [0, 1]", within<double>(0, 1)));
  f.push_back(field("dino.color_jitter_p", &E::dino, &DinoConfig::color_jitter_p,
                    "probability of the colour jitter on every view [0, 1]", within<double>(0, 1)));
}

// distill.*: DeiT distillation from a teacher checkpoint.
void add_distill_fields(std::vector<ConfigField>& f) {
  f.push_back(field("distill.teacher", &E::distill, &DistillConfig::teacher,
                    "teacher checkpoint for distill.type hard or soft, e.g. runs/quickstart/best.safetensors "
                    "(sima-train --config configs/quickstart.json writes it); same classes, input size and channels "
                    "as the student"));
  f.push_back(field("distill.type", &E::distill, &DistillConfig::type,
                    "DeiT distillation: none, hard (CE to the teacher's argmax) or soft (KL at temperature tau)",
                    one_of({"none", "hard", "soft"})));
  f.push_back(field("distill.alpha", &E::distill, &DistillConfig::alpha,
                    "loss = (1 − alpha)·CE(cls head, labels) + alpha·distillation term, [0, 1]", within<double>(0, 1)));
  f.push_back(field("distill.tau", &E::distill, &DistillConfig::tau, "soft: distillation temperature (> 0)",
                    positive<double>()));
}

std::vector<ConfigField> make_fields() {
  std::vector<ConfigField> f;
  add_name_and_data_fields(f);
  add_augment_fields(f);
  add_optimizer_fields(f);
  add_train_fields(f);
  add_dino_fields(f);
  add_dino_augment_fields(f);
  add_distill_fields(f);
  return f;
}

}  // namespace

const std::vector<ConfigField>& config_fields() {
  static const std::vector<ConfigField> fields = make_fields();
  return fields;
}

}  // namespace sima
