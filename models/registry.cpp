#include "models/registry.h"

#include <algorithm>
#include <functional>
#include <map>

#include "core/error.h"
#include "models/budget.h"
#include "models/cvt.h"
#include "models/deit.h"
#include "models/xcit.h"
#include "nn/attention/variants.h"

namespace sima {

using json = nlohmann::json;

namespace {

// ---- named configs ----------------------------------------------------------------
ModelConfig deit(int64_t D, int64_t heads, int64_t patch, int64_t img) {
  ModelConfig c;
  c.arch = "deit";
  c.embed_dim = D;
  c.depth = 12;
  c.num_heads = heads;
  c.patch_size = patch;
  c.img_size = img;
  c.drop_path_rate = 0.1f;
  c.attention.variant = "softmax";
  return c;
}

// A timm XCiT preset at another image size (and patch size for small images).
ModelConfig xcit(const std::string& preset, int64_t img, int64_t patch = 0) {
  ModelConfig c = xcit_config(preset);
  c.img_size = img;
  if (patch) c.patch_size = patch;
  return c;
}

// CvT-13's widths, depths and heads with the small-image embedding (kernels 3, strides 2).
ModelConfig cvt13_small(int64_t img) {
  ModelConfig c = cvt_small_config({64, 192, 384}, {1, 2, 10}, {1, 3, 6});
  c.img_size = img;
  return c;
}

// Small inputs: 28×28 grey (Fashion-MNIST) and 32×32 colour (CIFAR-10), 10 classes.
ModelConfig small(ModelConfig c, bool grey) {
  c.img_size = grey ? 28 : 32;
  c.in_chans = grey ? 1 : 3;
  c.num_classes = 10;
  c.mean = grey ? std::vector<float>{0.2860f} : std::vector<float>{0.4914f, 0.4822f, 0.4465f};
  c.std = grey ? std::vector<float>{0.3530f} : std::vector<float>{0.2470f, 0.2435f, 0.2616f};
  return c;
}

const std::map<std::string, std::function<ModelConfig()>>& base_configs() {
  static const std::map<std::string, std::function<ModelConfig()>> m = {
      {"deit_tiny_patch16_224", [] { return deit(192, 3, 16, 224); }},
      {"deit_small_patch16_224", [] { return deit(384, 6, 16, 224); }},
      {"xcit_nano_12_p16_224", [] { return xcit("xcit_nano_12_p16", 224); }},
      {"xcit_tiny_12_p8_224", [] { return xcit("xcit_tiny_12_p8", 224); }},
      {"xcit_tiny_24_p16_224", [] { return xcit("xcit_tiny_24_p16", 224); }},
      {"xcit_small_12_p16_224", [] { return xcit("xcit_small_12_p16", 224); }},
      {"cvt_13_224", [] { return cvt13_config(); }},
      {"deit_tiny_patch4_32", [] { return small(deit(192, 3, 4, 32), false); }},
      {"deit_tiny_patch4_28", [] { return small(deit(192, 3, 4, 28), true); }},
      {"xcit_nano_12_p4_32", [] { return small(xcit("xcit_nano_12_p16", 32, 4), false); }},
      {"xcit_nano_12_p4_28", [] { return small(xcit("xcit_nano_12_p16", 28, 4), true); }},
      {"cvt_13_32", [] { return small(cvt13_small(32), false); }},
      {"cvt_13_28", [] { return small(cvt13_small(28), true); }},
  };
  return m;
}

}  // namespace

std::vector<std::string> model_names() {
  std::vector<std::string> out;
  for (auto& [n, _] : base_configs()) {
    out.push_back(n);
    out.push_back(n + "_sima");
  }
  std::sort(out.begin(), out.end());
  return out;
}

ModelConfig model_config(const std::string& name) {
  const std::string suffix = "_sima";
  bool twin = name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  std::string base = twin ? name.substr(0, name.size() - suffix.size()) : name;
  auto it = base_configs().find(base);
  check(it != base_configs().end(), "model '", name, "' is unknown (known: ", join_words(model_names()), ")");
  ModelConfig c = it->second();
  c.name = name;
  if (twin) c.attention.variant = "sima";
  return c;
}

ModelConfig config_from_json(const json& j, ModelConfig base, const std::string& where, bool require_arch) {
  check(j.is_object(), where, ": expected a JSON object, got ", j.dump());
  const std::vector<std::string> names = model_names();
  check(!require_arch || j.contains("name") || j.contains("arch"), where,
        ": needs \"arch\" (", join_words(model_arch_names()), ") or \"name\" (a registered model: ",
        join_words(names), "); the other keys are optional");
  // "name" starts from that registered config; with "arch" present (a complete config, as
  // checkpoints store it) an unregistered name is only a label.
  if (j.contains("name")) {
    const std::string name = json_value<std::string>(j["name"], where + ".name");
    if (std::find(names.begin(), names.end(), name) != names.end()) base = model_config(name);
    else check(j.contains("arch"), where, ".name: model '", name, "' is unknown (known: ", join_words(names), ")");
    base.name = name;
  }
  // "arch" first: it decides which keys apply.
  if (j.contains("arch")) find_schema_field(model_config_fields(), "arch")->read(base, j["arch"], where + ".arch");
  read_schema_object(model_config_fields(), base, j, where, {"name", "arch", "attention"}, base.arch, "arch");
  // model.attention: its keys, types and values come from the variant table (nn/attention/variants.h).
  if (j.contains("attention")) base.attention = attention_options_from_json(j["attention"], base.attention, where + ".attention");
  return base;
}

json stored_config_json(const json& j) {
  json out = j;
  if (!out.is_object()) return out;
  if (out.contains("attention")) out["attention"] = drop_unread_default_keys(out["attention"]);
  // Every architecture's keys, as config_to_json wrote them before the model schema.
  if (out.contains("arch") && out["arch"].is_string())
    for (const auto& f : model_config_fields())
      if (!f.reads(out["arch"].get<std::string>())) out.erase(f.key);
  return out;
}

ModelConfig stored_config_from_json(const json& j, const std::string& where) {
  return config_from_json(stored_config_json(j), ModelConfig(), where);
}

json config_to_json(const ModelConfig& c) {
  json j = json::object();
  for (const auto& f : model_config_fields())
    if (f.reads(c.arch)) j[f.key] = f.write(c);
  j["attention"] = attention_options_to_json(c.attention);
  return j;
}

std::shared_ptr<Model> create_model(const ModelConfig& cfg) {
  check_model_budget(cfg);  // before any tensor: a config claiming a huge model fails here (models/budget.h)
  if (cfg.arch == "deit") return std::make_shared<DeiT>(cfg);
  if (cfg.arch == "xcit") return std::make_shared<XCiT>(cfg);
  if (cfg.arch == "cvt") return std::make_shared<CvT>(cfg);
  fail("model: arch '", cfg.arch, "' is unknown (allowed: ", join_words(model_arch_names()), ")");
}
std::shared_ptr<Model> create_model(const std::string& name) { return create_model(model_config(name)); }
std::shared_ptr<Model> create_model(const json& j) { return create_model(config_from_json(j)); }

}  // namespace sima
