// ExperimentConfig: everything one training run needs, read from a JSON file.
//
//   {
//     "name": "quickstart",
//     "model":    {"name": "deit_tiny_patch4_28_sima", "depth": 6},      (models/registry.h)
//     "data":     {"dataset": "fashion_mnist", "batch_size": 128},
//     "augment":  {"crop": "random_crop", "padding": 2, "hflip": 0.5},
//     "mixup":    {"mixup_alpha": 0.0},
//     "optimizer":{"type": "adamw", "base_lr": 5e-4, "weight_decay": 0.05},
//     "schedule": {"type": "cosine", "warmup_epochs": 1, "min_lr": 1e-5},
//     "train":    {"epochs": 10, "seed": 0, "label_smoothing": 0.1},
//     "distill":  {"teacher": "runs/quickstart/best.safetensors", "type": "hard"}
//   }
//
// Required: "model" with "arch" or "name" (models/registry.h). Every other key is optional
// (the defaults are the DeiT recipe where it has one) and every key is checked: an unknown
// key, a key the model's architecture or attention variant does not read, a key given twice,
// a wrong type, a value out of range (integers beyond int64 included) or an inconsistent
// combination is a sima::Error naming the key path ("optimizer.lr: must be >= 0, got -1")
// before any work starts. The schema (config_fields, train/config/experiment_fields.cpp; the model's:
// models/config_fields.cpp; one mechanism, core/json_schema.h) lists each key with its type,
// default and meaning; the documentation table is generated from it (config_reference_markdown).
//
// Files: experiment_fields.cpp (the schema), experiment_read.cpp (reading and checks between
// keys), experiment_override.cpp (--set), experiment_reference.cpp (the docs table),
// experiment_resume.cpp, experiment_steps.cpp (step counts, overflow-checked).
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/json_schema.h"
#include "models/config.h"
#include "train/config/transforms_factory.h"

namespace sima {

struct DataConfig {
  std::string dataset = "fashion_mnist";  // a data spec (train/config/data_spec.h)
  int64_t train_subset = 0;  // train on a seeded random subset of this many images (0 = all)
  int64_t test_subset = 0;   // evaluate on a seeded random subset (0 = all)
  // Hold out this many training images (a split fixed by validation_seed) and evaluate on them
  // instead of the test set, which the run then never reads; 0 = train on every training image.
  int64_t validation = 0;
  int64_t validation_seed = 0;
  int64_t batch_size = 128;
  int64_t eval_batch_size = 256;
  int64_t num_workers = 2;
};

struct MixupConfig {
  double mixup_alpha = 0.0;   // DeiT recipe: 0.8
  double cutmix_alpha = 0.0;  // DeiT recipe: 1.0
  double prob = 1.0;
  double switch_prob = 0.5;
  bool enabled() const { return mixup_alpha > 0.0 || cutmix_alpha > 0.0; }
};

struct OptimizerConfig {
  std::string type = "adamw";  // adamw | sgd
  double lr = 0.0;             // > 0: used as is; 0: base_lr · batch_size / lr_base_batch
  double base_lr = 5e-4;
  int64_t lr_base_batch = 512;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weight_decay = 0.05;
  double momentum = 0.9;  // sgd
  bool nesterov = false;  // sgd
  std::vector<std::string> no_weight_decay = {"pos_embed", "cls_token", "dist_token", "temperature"};
  double clip_grad = 0.0;  // global gradient-norm clipping (0 = off)
};

struct ScheduleConfig {
  std::string type = "cosine";  // cosine | step | constant
  double warmup_epochs = 5.0;
  double warmup_lr = 1e-6;
  double min_lr = 1e-5;
  double decay_epochs = 30.0;  // step
  double decay_rate = 0.1;     // step
  double weight_decay_end = -1.0;  // >= 0: cosine weight-decay schedule to this value
};

struct TrainConfig {
  int64_t epochs = 10;
  int64_t seed = 0;
  double label_smoothing = 0.1;
  bool ema = false;
  double ema_decay = 0.99996;
  int64_t eval_every = 1;        // epochs between evaluations (the last epoch always)
  int64_t log_every = 50;        // steps between metric records / plain progress lines
  int64_t checkpoint_every = 0;  // steps between train-state saves (0: at epoch ends only)
  int64_t max_steps = 0;         // stop after this many steps in total (0 = no limit)
  std::string on_nonfinite = "stop";  // stop | skip (skip the step, stop after 10 in a row)
  // The matrix products of a training step (core/ops/autocast.h, docs/precision.md): fp32 | bf16
  // (bf16 inputs, float32 sums) | fp16 (CUDA float16 autocast emulated, with a dynamic loss scaler).
  std::string precision = "fp32";
  // Data-parallel runs (mpirun, train/distributed/distributed.h); no effect in one process.
  double allreduce_bucket_mb = 25.0;  // gradient bucket size (PyTorch DDP's default)
  bool sync_batchnorm = false;        // BatchNorm statistics over all ranks' slices
};

// DINO self-supervised training (train/objectives/dino_trainer.h), off by default. The defaults are
// main_dino.py's (ViT-S/16 on ImageNet); small data wants a smaller head and local crops
// (configs/fmnist_dino_cvt_sima.json). With DINO on, optimizer.weight_decay is the start of
// the cosine weight-decay schedule and schedule.* the learning-rate schedule.
struct DinoConfig {
  bool enabled = false;
  int64_t out_dim = 65536;        // K, prototypes of the head's last layer
  int64_t hidden_dim = 2048;
  int64_t bottleneck_dim = 256;
  bool norm_last_layer = true;    // weight_g frozen at 1
  int64_t local_crops_number = 8;
  std::pair<double, double> global_crops_scale{0.4, 1.0};
  std::pair<double, double> local_crops_scale{0.05, 0.4};
  int64_t local_crops_size = 96;  // pixels (the global crops are model.img_size)
  double warmup_teacher_temp = 0.04;
  double teacher_temp = 0.04;
  int64_t warmup_teacher_temp_epochs = 0;
  double student_temp = 0.1;
  double center_momentum = 0.9;
  double momentum_teacher = 0.996;  // cosine to 1 per step
  double weight_decay_end = 0.4;    // cosine from optimizer.weight_decay per step
  double clip_grad = 3.0;           // per-parameter gradient norm (0 = off)
  int64_t freeze_last_layer = 1;    // epochs with the last layer's gradient dropped
  // The views' photometric augmentations (data/multicrop.h), DINO's values by default. They were
  // made for 224-pixel photographs: small grey images may want less (blur_sigma is in pixels).
  std::pair<double, double> blur_sigma{0.1, 2.0};
  int64_t blur_sigma_reference_size = 0;  // 0: blur_sigma in pixels; N: for N-pixel crops, scaled per view
  double global1_blur_p = 1.0, global2_blur_p = 0.1, local_blur_p = 0.5;
  double solarize_p = 0.2;      // global view 2 only
  double color_jitter_p = 0.8;
};

// DeiT distillation (train/objectives/distill.h): a frozen teacher checkpoint supervises the student's
// distillation head; the class head keeps learning the labels.
struct DistillConfig {
  std::string teacher;        // a model checkpoint (models/io/checkpoint.h); "" = none
  std::string type = "none";  // none | hard | soft
  double alpha = 0.5;         // weight of the distillation term (DeiT: 0.5)
  double tau = 1.0;           // soft: temperature
};

struct ExperimentConfig {
  std::string name = "run";
  nlohmann::json model_json = nlohmann::json::object();  // as written (registry JSON)
  ModelConfig model;                                     // resolved from model_json
  DataConfig data;
  AugmentOptions augment;
  MixupConfig mixup;
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  TrainConfig train;
  DinoConfig dino;
  DistillConfig distill;

  // The lr the optimizer uses after warmup (optimizer.lr or the scaled base_lr).
  double effective_lr() const;
};

// Parses and validates a config document; `source` (a file name) prefixes errors.
ExperimentConfig experiment_from_json(const nlohmann::json& j, const std::string& source = "config");
// Reads a JSON file (errors name the file and, for bad JSON, the byte, line and column; a
// key repeated within one object is an error naming it and its lines).
nlohmann::json read_json_file(const std::string& path);
// The resolved config: every key with its value (model as config_to_json), re-readable.
nlohmann::json experiment_to_json(const ExperimentConfig& cfg);

// Applies "key.path=value" to a config document. The value is parsed as JSON when it is
// valid JSON (numbers, true/false, lists, quoted strings), else taken as a string.
// Keys under "model." may be any model key (checked when the config is read); others must
// exist in the schema; a section alone ("train=5") is an error showing "train.epochs=5".
void apply_override(nlohmann::json& j, const std::string& assignment);

// ---- the schema -----------------------------------------------------------------------
// One key; `key` is its full path ("optimizer.lr").
using ConfigField = SchemaField<ExperimentConfig>;
const std::vector<ConfigField>& config_fields();
const ConfigField* find_config_field(const std::string& path);  // null when unknown
// "model" and the sections of config_fields, in table order.
std::vector<std::string> config_sections();
// The keys of a section, for errors ("epochs, seed, ...").
std::string config_section_keys(const std::string& section);
// Why a dotted path is unknown: "unknown key 'trian' (known: name, model, data, ...)" or
// "unknown key 'train.epoch' (known in train: epochs, ...)".
std::string config_unknown_key(const std::string& path);
// A Markdown table of every key: path, type, default, meaning (model.* with the
// architectures that read each key, model.attention.* with the variants).
std::string config_reference_markdown();

// The counts a run derives from its config and its steps per epoch (the trainers call it
// once the loader knows the steps per epoch). Every product is overflow-checked: an error
// names the key and its largest allowed value ("train.epochs: ... the largest allowed is N").
struct ScheduleSteps {
  int64_t total = 0;    // train.epochs × steps per epoch
  int64_t warmup = 0;   // round(schedule.warmup_epochs × steps per epoch)
  int64_t decay = 1;    // max(1, round(schedule.decay_epochs × steps per epoch))
  int64_t samples = 0;  // train.epochs × steps per epoch × data.batch_size (images seen)
};
ScheduleSteps schedule_steps(const ExperimentConfig& c, int64_t steps_per_epoch);

// What a run checks at its start without the data (sima-train --check runs it too, so a config
// --check passes does not fail at start on these): the model's memory budget at the run's batch
// (models/budget.h) and the step counts at one step per epoch (the least a dataset gives).
void check_startable(const ExperimentConfig& c);

// Resuming a run: fails, naming them, when `resolved` differs from the run's `stored`
// config in keys other than those that change neither the numbers nor the schedule
// (train.max_steps, log_every, checkpoint_every, eval_every, data.num_workers, eval_batch_size).
void check_resume_config(const nlohmann::json& stored, const nlohmann::json& resolved,
                         const std::string& state_path);

}  // namespace sima
