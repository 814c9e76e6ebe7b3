#include "train/config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/utf8.h"
#include "data/file_io.h"
#include "models/registry.h"
#include "nn/attention/variants.h"
#include "train/data_spec.h"

namespace sima {

using json = nlohmann::json;

double ExperimentConfig::effective_lr() const {
  if (optimizer.lr > 0.0) return optimizer.lr;
  return optimizer.base_lr * double(data.batch_size) / double(optimizer.lr_base_batch);
}

namespace {

// ---- reading one value of a given C++ type, errors naming the key path ----------------
template <class T>
T read_value(const json& v, const std::string& path);
template <>
double read_value<double>(const json& v, const std::string& path) {
  check(v.is_number(), path, ": expected a number, got ", v.dump());
  double x = v.get<double>();
  check(std::isfinite(x), path, ": must be finite, got ", v.dump());
  return x;
}
template <>
int64_t read_value<int64_t>(const json& v, const std::string& path) {
  // 3.0 is accepted as 3 (JSON writers often emit integral doubles); 3.5 is not.
  check(v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() &&
                                   std::abs(v.get<double>()) < 9e15),
        path, ": expected an integer, got ", v.dump());
  return v.is_number_integer() ? v.get<int64_t>() : int64_t(v.get<double>());
}
template <>
bool read_value<bool>(const json& v, const std::string& path) {
  check(v.is_boolean(), path, ": expected true or false, got ", v.dump());
  return v.get<bool>();
}
template <>
std::string read_value<std::string>(const json& v, const std::string& path) {
  check(v.is_string(), path, ": expected a string, got ", v.dump());
  return v.get<std::string>();
}
template <>
std::vector<std::string> read_value<std::vector<std::string>>(const json& v, const std::string& path) {
  check(v.is_array(), path, ": expected a list of strings, got ", v.dump());
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) out.push_back(read_value<std::string>(v[i], path + "[" + std::to_string(i) + "]"));
  return out;
}
template <>
std::pair<double, double> read_value<std::pair<double, double>>(const json& v, const std::string& path) {
  check(v.is_array() && v.size() == 2, path, ": expected a list of two numbers [low, high], got ", v.dump());
  std::pair<double, double> p{read_value<double>(v[0], path + "[0]"), read_value<double>(v[1], path + "[1]")};
  check(p.first <= p.second, path, ": low must not exceed high, got ", v.dump());
  return p;
}

template <class T>
std::string type_name() {
  if constexpr (std::is_same_v<T, double>) return "number";
  else if constexpr (std::is_same_v<T, int64_t>) return "integer";
  else if constexpr (std::is_same_v<T, bool>) return "bool";
  else if constexpr (std::is_same_v<T, std::string>) return "string";
  else if constexpr (std::is_same_v<T, std::vector<std::string>>) return "list of strings";
  else return "[number, number]";
}

// A check returns "" when the value is fine, else the reason.
template <class T>
using Check = std::function<std::string(const T&)>;

std::string fmt(double x) {
  std::ostringstream s;
  s << x;
  return s.str();
}
Check<double> at_least(double lo) {
  return [=](const double& x) { return x >= lo ? "" : "must be >= " + fmt(lo) + ", got " + fmt(x); };
}
Check<double> positive() {
  return [](const double& x) { return x > 0 ? "" : "must be positive, got " + fmt(x); };
}
Check<double> within(double lo, double hi) {
  return [=](const double& x) {
    return x >= lo && x <= hi ? "" : "must be in [" + fmt(lo) + ", " + fmt(hi) + "], got " + fmt(x);
  };
}
Check<int64_t> int_at_least(int64_t lo) {
  return [=](const int64_t& x) {
    return x >= lo ? "" : "must be >= " + std::to_string(lo) + ", got " + std::to_string(x);
  };
}
Check<std::string> one_of(std::vector<std::string> allowed) {
  return [=](const std::string& s) {
    if (std::find(allowed.begin(), allowed.end(), s) != allowed.end()) return std::string();
    std::string list;
    for (auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
    return "'" + s + "' is not one of: " + list;
  };
}

// A field `member` of the section `section` of ExperimentConfig.
template <class S, class T>
ConfigField field(std::string path, S ExperimentConfig::*section, T S::*member, std::string help,
                  Check<T> ok = nullptr) {
  ConfigField f;
  f.path = path;
  f.type = type_name<T>();
  f.help = std::move(help);
  f.read = [=](ExperimentConfig& c, const json& v, const std::string& where) {
    T x = read_value<T>(v, where);
    if (ok) {
      std::string why = ok(x);
      check(why.empty(), where, ": ", why);
    }
    (c.*section).*member = x;
  };
  f.write = [=](const ExperimentConfig& c) { return json((c.*section).*member); };
  return f;
}

std::vector<ConfigField> make_fields() {
  using E = ExperimentConfig;
  std::vector<ConfigField> f;
  ConfigField name;
  name.path = "name";
  name.type = "string";
  name.help = "run name (the default run folder is runs/<name>)";
  name.read = [](E& c, const json& v, const std::string& where) {
    c.name = read_value<std::string>(v, where);
    check(!c.name.empty() && c.name.find('/') == std::string::npos, where, ": must be non-empty without '/', got '",
          c.name, "'");
  };
  name.write = [](const E& c) { return json(c.name); };
  f.push_back(name);

  // data
  f.push_back(field("data.dataset", &E::data, &DataConfig::dataset,
                    "data spec: fashion_mnist[:ROOT], mnist:ROOT, cifar10:ROOT, cifar100:ROOT, folder:ROOT",
                    Check<std::string>([](const std::string& s) {
                      try {
                        parse_data_spec(s);
                      } catch (const Error& e) {
                        return std::string(e.what());
                      }
                      return std::string();
                    })));
  f.push_back(field("data.train_subset", &E::data, &DataConfig::train_subset,
                    "train on a seeded random subset of this many images (0 = all)", int_at_least(0)));
  f.push_back(field("data.test_subset", &E::data, &DataConfig::test_subset,
                    "evaluate on a seeded random subset of this many images (0 = all)", int_at_least(0)));
  f.push_back(field("data.batch_size", &E::data, &DataConfig::batch_size, "training batch size (>= 1)", int_at_least(1)));
  f.push_back(field("data.eval_batch_size", &E::data, &DataConfig::eval_batch_size, "evaluation batch size (>= 1)",
                    int_at_least(1)));
  f.push_back(field("data.num_workers", &E::data, &DataConfig::num_workers,
                    "loader threads decoding and augmenting ahead (0 = in the training thread)", int_at_least(0)));

  // augment
  f.push_back(field("augment.crop", &E::augment, &AugmentOptions::crop,
                    "random_crop (with padding) | random_resized_crop (scale, ratio) | none",
                    one_of({"random_crop", "random_resized_crop", "none"})));
  f.push_back(field("augment.scale", &E::augment, &AugmentOptions::scale,
                    "random_resized_crop: range of the crop's share of the image area"));
  f.push_back(field("augment.ratio", &E::augment, &AugmentOptions::ratio,
                    "random_resized_crop: range of the crop's aspect ratio"));
  f.push_back(field("augment.padding", &E::augment, &AugmentOptions::padding,
                    "random_crop: zero padding on each side in pixels", int_at_least(0)));
  f.push_back(field("augment.hflip", &E::augment, &AugmentOptions::hflip, "horizontal flip probability [0, 1]",
                    within(0, 1)));
  f.push_back(field("augment.rand_augment", &E::augment, &AugmentOptions::rand_augment,
                    "timm RandAugment string, e.g. rand-m9-mstd0.5-inc1 (\"\" = off)"));
  f.push_back(field("augment.color_jitter", &E::augment, &AugmentOptions::color_jitter,
                    "brightness/contrast/saturation strength when RandAugment is off [0, 1]", within(0, 1)));
  f.push_back(field("augment.random_erasing", &E::augment, &AugmentOptions::random_erasing,
                    "random erasing probability [0, 1] (timm 'pixel' mode)", within(0, 1)));
  f.push_back(field("augment.crop_pct", &E::augment, &AugmentOptions::crop_pct,
                    "evaluation: resize to img_size / crop_pct then centre crop, (0, 1]", within(1e-3, 1)));

  // mixup
  f.push_back(field("mixup.mixup_alpha", &E::mixup, &MixupConfig::mixup_alpha,
                    "Mixup Beta(α, α) (0 = off; DeiT 0.8)", at_least(0)));
  f.push_back(field("mixup.cutmix_alpha", &E::mixup, &MixupConfig::cutmix_alpha,
                    "CutMix Beta(α, α) (0 = off; DeiT 1.0)", at_least(0)));
  f.push_back(field("mixup.prob", &E::mixup, &MixupConfig::prob, "probability of mixing a batch [0, 1]", within(0, 1)));
  f.push_back(field("mixup.switch_prob", &E::mixup, &MixupConfig::switch_prob,
                    "probability of CutMix instead of Mixup when both are on [0, 1]", within(0, 1)));

  // optimizer
  f.push_back(field("optimizer.type", &E::optimizer, &OptimizerConfig::type, "adamw | sgd", one_of({"adamw", "sgd"})));
  f.push_back(field("optimizer.lr", &E::optimizer, &OptimizerConfig::lr,
                    "peak learning rate; 0 = base_lr · batch_size / lr_base_batch", at_least(0)));
  f.push_back(field("optimizer.base_lr", &E::optimizer, &OptimizerConfig::base_lr,
                    "learning rate per lr_base_batch images (DeiT: 5e-4 per 512)", positive()));
  f.push_back(field("optimizer.lr_base_batch", &E::optimizer, &OptimizerConfig::lr_base_batch,
                    "batch size base_lr refers to", int_at_least(1)));
  f.push_back(field("optimizer.beta1", &E::optimizer, &OptimizerConfig::beta1, "AdamW β1 [0, 1)", within(0, 0.999999)));
  f.push_back(field("optimizer.beta2", &E::optimizer, &OptimizerConfig::beta2, "AdamW β2 [0, 1)", within(0, 0.999999)));
  f.push_back(field("optimizer.eps", &E::optimizer, &OptimizerConfig::eps, "AdamW ε (> 0)", positive()));
  f.push_back(field("optimizer.weight_decay", &E::optimizer, &OptimizerConfig::weight_decay,
                    "weight decay (decoupled for AdamW, L2 for SGD), >= 0", at_least(0)));
  f.push_back(field("optimizer.momentum", &E::optimizer, &OptimizerConfig::momentum, "SGD momentum [0, 1)",
                    within(0, 0.999999)));
  f.push_back(field("optimizer.nesterov", &E::optimizer, &OptimizerConfig::nesterov, "SGD Nesterov momentum"));
  f.push_back(field("optimizer.no_weight_decay", &E::optimizer, &OptimizerConfig::no_weight_decay,
                    "parameter names without weight decay (besides every 1-D parameter)"));
  f.push_back(field("optimizer.clip_grad", &E::optimizer, &OptimizerConfig::clip_grad,
                    "clip the global gradient norm to this (0 = off)", at_least(0)));

  // schedule
  f.push_back(field("schedule.type", &E::schedule, &ScheduleConfig::type, "cosine | step | constant (per step)",
                    one_of({"cosine", "step", "constant"})));
  f.push_back(field("schedule.warmup_epochs", &E::schedule, &ScheduleConfig::warmup_epochs,
                    "linear warmup length in epochs (may be fractional)", at_least(0)));
  f.push_back(field("schedule.warmup_lr", &E::schedule, &ScheduleConfig::warmup_lr, "learning rate at step 0 of warmup",
                    at_least(0)));
  f.push_back(field("schedule.min_lr", &E::schedule, &ScheduleConfig::min_lr, "cosine: final learning rate",
                    at_least(0)));
  f.push_back(field("schedule.decay_epochs", &E::schedule, &ScheduleConfig::decay_epochs,
                    "step: epochs between decays (> 0)", positive()));
  f.push_back(field("schedule.decay_rate", &E::schedule, &ScheduleConfig::decay_rate, "step: factor per decay (0, 1]",
                    within(1e-12, 1)));
  f.push_back(field("schedule.weight_decay_end", &E::schedule, &ScheduleConfig::weight_decay_end,
                    "cosine weight-decay schedule from optimizer.weight_decay to this (-1 = constant)", at_least(-1)));

  // train
  f.push_back(field("train.epochs", &E::train, &TrainConfig::epochs, "epochs (>= 1)", int_at_least(1)));
  f.push_back(field("train.seed", &E::train, &TrainConfig::seed,
                    "seed of initialisation, data order, augmentation and dropout", int_at_least(0)));
  f.push_back(field("train.label_smoothing", &E::train, &TrainConfig::label_smoothing,
                    "label smoothing ε [0, 1) (DeiT 0.1)", within(0, 0.999)));
  f.push_back(field("train.ema", &E::train, &TrainConfig::ema, "keep an EMA of the weights (evaluated and saved too)"));
  f.push_back(field("train.ema_decay", &E::train, &TrainConfig::ema_decay, "EMA decay per step [0, 1)",
                    within(0, 0.99999999)));
  f.push_back(field("train.eval_every", &E::train, &TrainConfig::eval_every,
                    "epochs between test evaluations (the last epoch always)", int_at_least(1)));
  f.push_back(field("train.log_every", &E::train, &TrainConfig::log_every, "steps between step records in metrics.jsonl",
                    int_at_least(1)));
  f.push_back(field("train.checkpoint_every", &E::train, &TrainConfig::checkpoint_every,
                    "steps between train-state saves for --resume (0 = at epoch ends only)", int_at_least(0)));
  f.push_back(field("train.max_steps", &E::train, &TrainConfig::max_steps,
                    "stop after this many steps in total (0 = no limit)", int_at_least(0)));
  f.push_back(field("train.on_nonfinite", &E::train, &TrainConfig::on_nonfinite,
                    "non-finite loss or gradient: stop | skip (the step; stop after 10 in a row)",
                    one_of({"stop", "skip"})));
  f.push_back(field("train.allreduce_bucket_mb", &E::train, &TrainConfig::allreduce_bucket_mb,
                    "mpirun: MB of gradients per allreduce bucket, started during backward (0 = one bucket)",
                    at_least(0)));
  f.push_back(field("train.sync_batchnorm", &E::train, &TrainConfig::sync_batchnorm,
                    "mpirun: BatchNorm statistics over the whole global batch (SyncBatchNorm), not each rank's slice"));

  // dino
  auto unit_range = Check<std::pair<double, double>>([](const std::pair<double, double>& r) {
    return r.first > 0 && r.second <= 1 ? std::string() : "must lie in (0, 1], got [" + fmt(r.first) + ", " +
                                                              fmt(r.second) + "]";
  });
  f.push_back(field("dino.enabled", &E::dino, &DinoConfig::enabled,
                    "train with DINO self-distillation instead of labels (train/dino_trainer.h)"));
  f.push_back(field("dino.out_dim", &E::dino, &DinoConfig::out_dim, "K, prototypes in the head's last layer (>= 1)",
                    int_at_least(1)));
  f.push_back(field("dino.hidden_dim", &E::dino, &DinoConfig::hidden_dim, "width of the head's hidden layers (>= 1)",
                    int_at_least(1)));
  f.push_back(field("dino.bottleneck_dim", &E::dino, &DinoConfig::bottleneck_dim,
                    "width before the weight-normalised last layer (>= 1)", int_at_least(1)));
  f.push_back(field("dino.norm_last_layer", &E::dino, &DinoConfig::norm_last_layer,
                    "freeze the last layer's weight_g at 1 (unit-norm prototypes)"));
  f.push_back(field("dino.local_crops_number", &E::dino, &DinoConfig::local_crops_number,
                    "local crops per image besides the 2 global ones (0..256)",
                    Check<int64_t>([](const int64_t& n) {
                      return n >= 0 && n <= 256 ? std::string() : "must be in 0..256, got " + std::to_string(n);
                    })));
  f.push_back(field("dino.global_crops_scale", &E::dino, &DinoConfig::global_crops_scale,
                    "area share range of the global crops, in (0, 1]", unit_range));
  f.push_back(field("dino.local_crops_scale", &E::dino, &DinoConfig::local_crops_scale,
                    "area share range of the local crops, in (0, 1]", unit_range));
  f.push_back(field("dino.local_crops_size", &E::dino, &DinoConfig::local_crops_size,
                    "side of the local crops in pixels (the global ones are model.img_size)",
                    Check<int64_t>([](const int64_t& n) {
                      return n >= 1 && n <= 4096 ? std::string() : "must be in 1..4096, got " + std::to_string(n);
                    })));
  f.push_back(field("dino.warmup_teacher_temp", &E::dino, &DinoConfig::warmup_teacher_temp,
                    "teacher temperature at epoch 0 (> 0)", positive()));
  f.push_back(field("dino.teacher_temp", &E::dino, &DinoConfig::teacher_temp,
                    "teacher temperature after the warmup (> 0)", positive()));
  f.push_back(field("dino.warmup_teacher_temp_epochs", &E::dino, &DinoConfig::warmup_teacher_temp_epochs,
                    "epochs of linear teacher-temperature warmup (0 = none)", int_at_least(0)));
  f.push_back(field("dino.student_temp", &E::dino, &DinoConfig::student_temp, "student temperature (> 0)",
                    positive()));
  f.push_back(field("dino.center_momentum", &E::dino, &DinoConfig::center_momentum,
                    "momentum of the teacher-output center [0, 1]", within(0, 1)));
  f.push_back(field("dino.momentum_teacher", &E::dino, &DinoConfig::momentum_teacher,
                    "teacher EMA momentum at step 0, cosine to 1 [0, 1]", within(0, 1)));
  f.push_back(field("dino.weight_decay_end", &E::dino, &DinoConfig::weight_decay_end,
                    "final weight decay of the cosine schedule from optimizer.weight_decay (>= 0)", at_least(0)));
  f.push_back(field("dino.clip_grad", &E::dino, &DinoConfig::clip_grad,
                    "clip each parameter's gradient norm to this (0 = off)", at_least(0)));
  f.push_back(field("dino.freeze_last_layer", &E::dino, &DinoConfig::freeze_last_layer,
                    "epochs during which the head's last layer gets no update", int_at_least(0)));
  // distill
  f.push_back(field("distill.teacher", &E::distill, &DistillConfig::teacher,
                    "teacher checkpoint for distill.type hard or soft, e.g. runs/quickstart/best.safetensors "
                    "(sima-train --config configs/quickstart.json writes it); same classes, input size and channels "
                    "as the student"));
  f.push_back(field("distill.type", &E::distill, &DistillConfig::type,
                    "DeiT distillation: none, hard (CE to the teacher's argmax) or soft (KL at temperature tau)",
                    one_of({"none", "hard", "soft"})));
  f.push_back(field("distill.alpha", &E::distill, &DistillConfig::alpha,
                    "loss = (1 − alpha)·CE(cls head, labels) + alpha·distillation term, [0, 1]", within(0, 1)));
  f.push_back(field("distill.tau", &E::distill, &DistillConfig::tau, "soft: distillation temperature (> 0)",
                    positive()));
  return f;
}

const ConfigField* find_field(const std::string& path) {
  for (auto& f : config_fields())
    if (f.path == path) return &f;
  return nullptr;
}

std::vector<std::string> section_names() {
  std::vector<std::string> s;
  for (auto& f : config_fields()) {
    auto dot = f.path.find('.');
    if (dot == std::string::npos) continue;
    std::string sec = f.path.substr(0, dot);
    if (std::find(s.begin(), s.end(), sec) == s.end()) s.push_back(sec);
  }
  return s;
}

std::string keys_of(const std::string& section) {
  std::string out;
  for (auto& f : config_fields())
    if (f.path.rfind(section + ".", 0) == 0) out += (out.empty() ? "" : ", ") + f.path.substr(section.size() + 1);
  return out;
}

// What is wrong with an unknown dotted key: its section, or its key within a known section.
std::string unknown_key(const std::string& path) {
  const size_t dot = path.find('.');
  const std::string section = path.substr(0, dot);
  const std::vector<std::string> sections = section_names();
  if (std::find(sections.begin(), sections.end(), section) == sections.end()) {
    std::string known = "name, model";
    for (auto& sec : sections) known += ", " + sec;
    return "unknown key '" + section + "' (known: " + known + ")";
  }
  return "unknown key '" + path + "' (known in " + section + ": " + keys_of(section) + ")";
}

// Consistency checks between keys, each error naming the key at fault.
void validate(const ExperimentConfig& c, const std::string& src) {
  const ModelConfig& m = c.model;
  if (m.arch == "deit" || m.arch == "xcit") {
    check(m.img_size % m.patch_size == 0, src, ": model.img_size ", m.img_size, " is not divisible by model.patch_size ",
          m.patch_size);
    check(m.embed_dim % m.num_heads == 0, src, ": model.num_heads ", m.num_heads, " does not divide model.embed_dim ",
          m.embed_dim);
  } else {
    size_t n = m.stage_dims.size();
    for (auto [key, size] : std::vector<std::pair<const char*, size_t>>{
             {"stage_depths", m.stage_depths.size()}, {"stage_heads", m.stage_heads.size()},
             {"stage_embed_kernel", m.stage_embed_kernel.size()}, {"stage_embed_stride", m.stage_embed_stride.size()},
             {"stage_embed_padding", m.stage_embed_padding.size()}, {"stage_drop_path", m.stage_drop_path.size()},
             {"stage_stride_kv", m.stage_stride_kv.size()}})
      check(size == n, src, ": model.", key, " has ", size, " entries but model.stage_dims has ", n);
    for (size_t i = 0; i < n; ++i)
      check(m.stage_dims[i] % m.stage_heads[i] == 0, src, ": model.stage_heads[", i, "] ", m.stage_heads[i],
            " does not divide model.stage_dims[", i, "] ", m.stage_dims[i]);
  }
  check(m.mean.size() == size_t(m.in_chans) && m.std.size() == size_t(m.in_chans), src, ": model.mean and model.std need ",
        m.in_chans, " values (model.in_chans), got ", m.mean.size(), " and ", m.std.size());
  check(c.schedule.warmup_epochs <= double(c.train.epochs), src, ": schedule.warmup_epochs ", c.schedule.warmup_epochs,
        " exceeds train.epochs ", c.train.epochs);
  if (c.mixup.enabled())
    check(c.data.batch_size % 2 == 0, src, ": data.batch_size must be even with mixup/cutmix (samples are mixed in pairs), got ",
          c.data.batch_size);
  if (c.optimizer.nesterov)
    check(c.optimizer.type == "sgd" && c.optimizer.momentum > 0, src,
          ": optimizer.nesterov needs optimizer.type sgd and optimizer.momentum > 0");
  if (c.train.ema) check(c.train.ema_decay > 0, src, ": train.ema_decay must be positive when train.ema is on");
  if (c.dino.enabled) {
    check(!c.mixup.enabled(), src, ": mixup/cutmix cannot be used with dino.enabled (DINO uses no labels)");
    check(!c.train.ema, src, ": train.ema cannot be used with dino.enabled (the DINO teacher is the EMA)");
    check(c.distill.type == "none", src, ": distill.type must be none with dino.enabled (one teacher at a time)");
    check(c.optimizer.clip_grad == 0, src,
          ": optimizer.clip_grad must be 0 with dino.enabled (DINO clips each parameter: dino.clip_grad)");
    check(c.schedule.weight_decay_end < 0, src,
          ": schedule.weight_decay_end must stay -1 with dino.enabled (the schedule ends at dino.weight_decay_end)");
    check(c.dino.warmup_teacher_temp_epochs <= c.train.epochs, src, ": dino.warmup_teacher_temp_epochs ",
          c.dino.warmup_teacher_temp_epochs, " exceeds train.epochs ", c.train.epochs);
  }
  if (c.distill.type != "none") {
    check(!c.distill.teacher.empty(), src, ": distill.type ", c.distill.type, " needs distill.teacher (a checkpoint)");
    check(m.arch == "deit" && m.distilled, src, ": distill.type ", c.distill.type,
          " needs a student with a distillation token: a DeiT with model.distilled true (model.arch is ", m.arch,
          ", model.distilled ", m.distilled ? "true" : "false", ")");
  }
  try {
    validate_augment(c.augment);
  } catch (const Error& e) {
    fail(src, ": ", e.what());
  }
}

}  // namespace

const std::vector<ConfigField>& config_fields() {
  static const std::vector<ConfigField> fields = make_fields();
  return fields;
}

ExperimentConfig experiment_from_json(const json& j, const std::string& source) {
  check(j.is_object(), source, ": expected a JSON object at the top level, got ", j.type_name());
  ExperimentConfig c;
  const std::vector<std::string> sections = section_names();
  for (auto& [key, value] : j.items()) {
    if (key == "model") {
      c.model_json = value;
      continue;
    }
    if (const ConfigField* f = find_field(key)) {
      try {
        f->read(c, value, key);
      } catch (const Error& e) {
        fail(source, ": ", e.what());
      }
      continue;
    }
    check(std::find(sections.begin(), sections.end(), key) != sections.end(), source, ": ", unknown_key(key));
    check(value.is_object(), source, ": ", key, ": expected an object, got ", value.dump());
    for (auto& [sub, v] : value.items()) {
      const ConfigField* f = find_field(key + "." + sub);
      check(f != nullptr, source, ": ", unknown_key(key + "." + sub));
      try {
        f->read(c, v, f->path);
      } catch (const Error& e) {
        fail(source, ": ", e.what());
      }
    }
  }
  try {
    c.model = config_from_json(c.model_json, ModelConfig(), "model");
  } catch (const Error& e) {
    fail(source, ": ", e.what());
  }
  validate(c, source);
  return c;
}

json read_json_file(const std::string& path) {
  check_regular_file(path, "JSON config file");  // a directory or a FIFO: named, never opened (data/file_io.h)
  std::ifstream in(path, std::ios::binary);
  check(in.good(), path, ": cannot open the config file");
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return json::parse(ss.str());
  } catch (const json::parse_error& e) {
    fail(path, ": not valid JSON (byte ", e.byte, "): ", e.what());
  } catch (const json::exception& e) {  // out_of_range: a number beyond double (1e999; fuzz finding)
    fail(path, ": not valid JSON: ", e.what());
  }
}

json experiment_to_json(const ExperimentConfig& c) {
  json j = json::object();
  for (auto& f : config_fields()) {
    auto dot = f.path.find('.');
    if (dot == std::string::npos) j[f.path] = f.write(c);
    else j[f.path.substr(0, dot)][f.path.substr(dot + 1)] = f.write(c);
  }
  j["model"] = config_to_json(c.model);
  return j;
}

void apply_override(json& j, const std::string& assignment) {
  // A value that is not JSON is kept as a string, and nlohmann cannot print a string that is
  // not UTF-8 (its type_error escaped the app's error path: fuzz finding).
  const int64_t bad = invalid_utf8_at(assignment);
  check(bad < 0, "--set ", assignment.substr(0, std::min<size_t>(size_t(bad), assignment.find('='))),
        ": not valid UTF-8 (byte ", bad, " of the argument)");
  auto eq = assignment.find('=');
  check(eq != std::string::npos && eq > 0, "--set ", assignment, ": expected key.path=value");
  std::string path = assignment.substr(0, eq), text = assignment.substr(eq + 1);
  json value;
  try {
    value = json::parse(text);
  } catch (const json::parse_error&) {
    value = text;  // a bare word: a string
  } catch (const json::exception& e) {  // out_of_range: a number beyond double (1e999; fuzz finding)
    fail("--set ", assignment, ": ", e.what());
  }
  std::vector<std::string> parts;
  for (size_t start = 0;;) {
    size_t dot = path.find('.', start);
    parts.push_back(path.substr(start, dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  for (auto& p : parts) check(!p.empty(), "--set ", assignment, ": empty key in '", path, "'");
  if (parts[0] != "model") {
    check(find_field(path) != nullptr, "--set ", assignment, ": ", unknown_key(path));
  }
  check(j.is_object(), "--set ", assignment, ": the config is not a JSON object");
  json* node = &j;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    json& next = (*node)[parts[i]];
    if (next.is_null()) next = json::object();
    check(next.is_object(), "--set ", assignment, ": '", parts[i], "' is not an object in the config");
    node = &next;
  }
  (*node)[parts.back()] = value;
}

std::string config_reference_markdown() {
  ExperimentConfig defaults;
  std::ostringstream s;
  s << "| key | type | default | meaning |\n|-----|------|---------|---------|\n";
  s << "| `model` | object | `{}` | the model: a registry name and/or model keys (models/registry.h) |\n";
  for (auto& f : config_fields())
    s << "| `" << f.path << "` | " << f.type << " | `" << f.write(defaults).dump() << "` | " << f.help << " |\n";
  // model.attention: from the variant table (nn/attention/variants.h); a key a variant does
  // not read is an error, so each row says which variants read it.
  const AttentionOptions attention;
  std::string variants;
  for (auto& v : attention_variants()) variants += (variants.empty() ? "" : ", ") + v.name;
  s << "| `model.attention.type` | string | `" << json(attention.variant).dump() << "` | the attention variant: "
    << variants << " |\n";
  for (auto& r : attention_key_reference()) {
    std::string readers;
    for (auto& v : r.read_by) readers += (readers.empty() ? "" : ", ") + v;
    s << "| `model.attention." << r.spec->key << "` | " << r.spec->type << " | `" << r.spec->write(attention).dump()
      << "` | read by " << readers << ": " << r.spec->help << " (valid: " << r.spec->valid << ") |\n";
  }
  return s.str();
}

// ---- resuming -------------------------------------------------------------------------

namespace {

// The keys whose values differ between two resolved configs ("train.epochs", ...).
std::vector<std::string> differing_keys(const json& a, const json& b, const std::string& prefix = "") {
  std::vector<std::string> out;
  if (a.is_object() && b.is_object()) {
    for (auto& [k, v] : a.items()) {
      std::string key = prefix.empty() ? k : prefix + "." + k;
      if (!b.contains(k)) out.push_back(key);
      else for (auto& d : differing_keys(v, b[k], key)) out.push_back(d);
    }
    for (auto& [k, v] : b.items())
      if (!a.contains(k)) out.push_back(prefix.empty() ? k : prefix + "." + k);
  } else if (a != b) {
    out.push_back(prefix);
  }
  return out;
}

// Keys that may change between a run and its resumption: they change neither the
// numbers computed nor the schedule.
bool may_change_on_resume(const std::string& key) {
  for (const char* k : {"train.max_steps", "train.log_every", "train.checkpoint_every", "data.num_workers",
                        "data.eval_batch_size", "train.eval_every", "train.allreduce_bucket_mb"})
    if (key == k) return true;
  return false;
}

}  // namespace

void check_resume_config(const json& stored, const json& resolved, const std::string& state_path) {
  // A run saved before a config section existed lacks its keys: resolve the stored config
  // again so they take their defaults (what that run used) before comparing.
  // A run saved before the attention variant table lists every attention key: the ones its
  // variant does not read, at their defaults, are dropped (models/registry.h).
  json then = stored;
  if (then.is_object() && then.contains("model")) then["model"] = stored_config_json(then["model"]);
  try {
    then = experiment_to_json(experiment_from_json(then, state_path));
  } catch (const Error&) {
    // not a valid config today (a key since removed): compare as stored, naming the keys
  }
  std::vector<std::string> changed;
  for (auto& k : differing_keys(then, resolved))
    if (!may_change_on_resume(k)) changed.push_back(k);
  if (changed.empty()) return;
  std::string list;
  for (auto& k : changed) list += (list.empty() ? "" : ", ") + k;
  fail(state_path, ": the config differs from the run's in ", list,
       " (a resumed run must keep them; start a new run instead)");
}

}  // namespace sima
