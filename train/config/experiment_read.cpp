// Reading an experiment config: the strict JSON file reader, the sections through their
// schema (train/config/experiment_fields.cpp), the model through the registry, and the checks
// between keys.
#include <algorithm>
#include <fstream>
#include <sstream>

#include "core/checked.h"
#include "core/error.h"
#include "core/file_io.h"
#include "models/registry.h"
#include "train/config/experiment_config.h"

namespace sima {

using json = nlohmann::json;

double ExperimentConfig::effective_lr() const {
  if (optimizer.lr > 0.0) return optimizer.lr;
  return optimizer.base_lr * double(data.batch_size) / double(optimizer.lr_base_batch);
}

// ---- keys and sections ------------------------------------------------------------------

const ConfigField* find_config_field(const std::string& path) { return find_schema_field(config_fields(), path); }

std::vector<std::string> config_sections() {
  std::vector<std::string> s = {"model"};
  for (const auto& f : config_fields()) {
    const auto dot = f.key.find('.');
    if (dot == std::string::npos) continue;
    const std::string sec = f.key.substr(0, dot);
    if (std::find(s.begin(), s.end(), sec) == s.end()) s.push_back(sec);
  }
  return s;
}

std::string config_section_keys(const std::string& section) {
  if (section == "model") return "arch, name and the model keys of its architecture (sima-train --config-reference)";
  std::vector<std::string> keys;
  for (const auto& f : config_fields())
    if (f.key.rfind(section + ".", 0) == 0) keys.push_back(f.key.substr(section.size() + 1));
  return join_words(keys);
}

std::string config_unknown_key(const std::string& path) {
  const size_t dot = path.find('.');
  const std::string section = path.substr(0, dot);
  const std::vector<std::string> sections = config_sections();
  if (std::find(sections.begin(), sections.end(), section) == sections.end()) {
    std::vector<std::string> known = {"name"};
    known.insert(known.end(), sections.begin(), sections.end());
    return "unknown key '" + section + "' (known: " + join_words(known) + ")";
  }
  return "unknown key '" + path + "' (known in " + section + ": " + config_section_keys(section) + ")";
}

namespace {

// Consistency checks between keys, each error naming the key at fault.
// The model keys that depend on each other, each error naming the key at fault.
void validate_model(const ModelConfig& m, const std::string& src) {
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
}

// The counts derived from config values alone, checked for 64-bit overflow (core/checked.h):
// the bytes of one input batch, DINO's views per batch and head sizes. (The step counts need
// the steps per epoch: schedule_steps, train/config/experiment_steps.cpp.)
void validate_counts(const ExperimentConfig& c, const std::string& src) {
  try {
    const ModelConfig& m = c.model;
    const int64_t pixels = checked_mul(m.img_size, m.img_size, "model.img_size", "(its square)");
    const int64_t image = checked_mul(pixels, m.in_chans, "model.in_chans", "pixels per channel");
    const int64_t image_bytes = checked_mul(image, int64_t(sizeof(float)), "model.img_size", "bytes per value");
    checked_mul(c.data.batch_size, image_bytes, "data.batch_size", "bytes per image");
    checked_mul(c.data.eval_batch_size, image_bytes, "data.eval_batch_size", "bytes per image");
    if (c.dino.enabled) {
      const int64_t views = checked_add(c.dino.local_crops_number, 2, "dino.local_crops_number", "global crops");
      checked_mul(c.data.batch_size, views, "data.batch_size", "views per image");
      // The head's weights: hidden_dim² and out_dim × bottleneck_dim floats.
      checked_mul(c.dino.hidden_dim, checked_mul(c.dino.hidden_dim, 4, "dino.hidden_dim", "bytes per value"),
                  "dino.hidden_dim", "bytes per row of the hidden layer");
      checked_mul(c.dino.out_dim, checked_mul(c.dino.bottleneck_dim, 4, "dino.bottleneck_dim", "bytes per value"),
                  "dino.out_dim", "bytes per prototype");
    }
  } catch (const Error& e) {
    fail(src, ": ", e.what());
  }
}

void validate(const ExperimentConfig& c, const std::string& src) {
  const ModelConfig& m = c.model;
  validate_model(m, src);
  validate_counts(c, src);
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

ExperimentConfig experiment_from_json(const json& j, const std::string& source) {
  check(j.is_object(), source, ": expected a JSON object at the top level, got ", j.type_name());
  ExperimentConfig c;
  const std::vector<std::string> sections = config_sections();
  try {
    for (const auto& [key, value] : j.items()) {
      if (key == "model") {
        c.model_json = value;
        continue;
      }
      if (const ConfigField* f = find_config_field(key)) {
        f->read(c, value, key);
        continue;
      }
      check(std::find(sections.begin(), sections.end(), key) != sections.end(), config_unknown_key(key));
      check(value.is_object(), key, ": expected an object (the section's keys: ", config_section_keys(key),
            "), got ", value.dump());
      for (const auto& [sub, v] : value.items()) {
        const ConfigField* f = find_config_field(key + "." + sub);
        check(f != nullptr, config_unknown_key(key + "." + sub));
        f->read(c, v, f->key);
      }
    }
    // Required: the model, by "name" or "arch" (without both, a 224-pixel 1000-class DeiT).
    check(j.contains("model"), "model: missing; every config needs a model section with \"name\" (a registered "
          "model) or \"arch\" (", join_words(model_arch_names()), ")");
    c.model = config_from_json(c.model_json, ModelConfig(), "model", /*require_arch=*/true);
  } catch (const Error& e) {
    fail(source, ": ", e.what());
  }
  validate(c, source);
  return c;
}

json read_json_file(const std::string& path) {
  check_regular_file(path, "JSON config file");  // a directory or a FIFO: named, never opened (core/file_io.h)
  std::ifstream in(path, std::ios::binary);
  check(in.good(), path, ": cannot open the config file");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_json_strict(ss.str(), path);
}

json experiment_to_json(const ExperimentConfig& c) {
  json j = json::object();
  for (const auto& f : config_fields()) {
    const auto dot = f.key.find('.');
    if (dot == std::string::npos) j[f.key] = f.write(c);
    else j[f.key.substr(0, dot)][f.key.substr(dot + 1)] = f.write(c);
  }
  j["model"] = config_to_json(c.model);
  return j;
}

}  // namespace sima
