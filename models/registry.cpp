#include "models/registry.h"

#include <algorithm>
#include <functional>
#include <map>
#include <sstream>

#include "core/error.h"
#include "models/budget.h"
#include "models/cvt.h"
#include "models/deit.h"
#include "models/xcit.h"
#include "nn/attention/variants.h"

namespace sima {

using json = nlohmann::json;

// ---- JSON <-> ModelConfig ---------------------------------------------------------
// One table of fields, each knowing how to read (with validation) and write itself.
namespace {

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s;
}

template <class T>
T read_as(const json& v, const std::string& path);

template <>
int64_t read_as<int64_t>(const json& v, const std::string& path) {
  check(v.is_number_integer(), path, ": expected an integer, got ", v.dump());
  return v.get<int64_t>();
}
template <>
float read_as<float>(const json& v, const std::string& path) {
  check(v.is_number(), path, ": expected a number, got ", v.dump());
  return v.get<float>();
}
template <>
bool read_as<bool>(const json& v, const std::string& path) {
  check(v.is_boolean(), path, ": expected true or false, got ", v.dump());
  return v.get<bool>();
}
template <>
std::string read_as<std::string>(const json& v, const std::string& path) {
  check(v.is_string(), path, ": expected a string, got ", v.dump());
  return v.get<std::string>();
}
template <class E>
std::vector<E> read_list(const json& v, const std::string& path) {
  check(v.is_array(), path, ": expected a list, got ", v.dump());
  std::vector<E> out;
  for (size_t i = 0; i < v.size(); ++i) out.push_back(read_as<E>(v[i], path + "[" + std::to_string(i) + "]"));
  return out;
}

struct Field {
  std::function<void(ModelConfig&, const json&, const std::string&)> read;
  std::function<json(const ModelConfig&)> write;
};

// A scalar field; `ok` validates the value (returns "" or the reason it is wrong).
template <class T, class Owner>
Field scalar(T Owner::*member, std::function<Owner&(ModelConfig&)> owner,
             std::function<const Owner&(const ModelConfig&)> cowner,
             std::function<std::string(const T&)> ok = nullptr) {
  return {[=](ModelConfig& c, const json& v, const std::string& path) {
            T x = read_as<T>(v, path);
            if (ok) {
              std::string why = ok(x);
              check(why.empty(), path, ": ", why);
            }
            owner(c).*member = x;
          },
          [=](const ModelConfig& c) { return json(cowner(c).*member); }};
}

template <class T>
std::function<std::string(const T&)> positive() {
  return [](const T& x) { return x > 0 ? std::string() : "must be positive, got " + std::to_string(x); };
}
template <class T>
std::function<std::string(const T&)> non_negative() {
  return [](const T& x) { return x >= 0 ? std::string() : "must be >= 0, got " + std::to_string(x); };
}
std::function<std::string(const float&)> in_unit(bool include_one) {
  return [=](const float& x) {
    return x >= 0.f && (include_one ? x <= 1.f : x < 1.f)
               ? std::string()
               : "must be in [0, 1" + std::string(include_one ? "]" : ")") + ", got " + std::to_string(x);
  };
}
std::function<std::string(const std::string&)> one_of(std::vector<std::string> allowed) {
  return [=](const std::string& s) {
    return std::find(allowed.begin(), allowed.end(), s) != allowed.end()
               ? std::string()
               : "'" + s + "' is not one of: " + join(allowed);
  };
}

template <class E>
Field list(std::vector<E> ModelConfig::*member, bool require_positive) {
  return {[=](ModelConfig& c, const json& v, const std::string& path) {
            std::vector<E> x = read_list<E>(v, path);
            for (size_t i = 0; i < x.size(); ++i)
              check(!require_positive || x[i] > 0, path, "[", i, "]: must be positive");
            c.*member = x;
          },
          [=](const ModelConfig& c) { return json(c.*member); }};
}

ModelConfig& self(ModelConfig& c) { return c; }
const ModelConfig& cself(const ModelConfig& c) { return c; }

template <class T>
Field top(T ModelConfig::*m, std::function<std::string(const T&)> ok = nullptr) {
  return scalar<T, ModelConfig>(m, self, cself, ok);
}

const std::map<std::string, Field>& model_fields() {
  static const std::map<std::string, Field> f = {
      {"arch", top(&ModelConfig::arch, one_of({"deit", "xcit", "cvt"}))},
      {"name", top(&ModelConfig::name)},
      {"img_size", top(&ModelConfig::img_size, positive<int64_t>())},
      {"in_chans", top(&ModelConfig::in_chans, positive<int64_t>())},
      {"num_classes", top(&ModelConfig::num_classes, positive<int64_t>())},
      {"mean", list(&ModelConfig::mean, false)},
      {"std", list(&ModelConfig::std, true)},
      {"patch_size", top(&ModelConfig::patch_size, positive<int64_t>())},
      {"embed_dim", top(&ModelConfig::embed_dim, positive<int64_t>())},
      {"depth", top(&ModelConfig::depth, positive<int64_t>())},
      {"num_heads", top(&ModelConfig::num_heads, positive<int64_t>())},
      {"mlp_ratio", top(&ModelConfig::mlp_ratio, positive<float>())},
      {"act", top(&ModelConfig::act, one_of({"gelu", "relu", "quick_gelu"}))},
      {"qkv_bias", top(&ModelConfig::qkv_bias)},
      {"drop_rate", top(&ModelConfig::drop_rate, in_unit(false))},
      {"attn_drop_rate", top(&ModelConfig::attn_drop_rate, in_unit(false))},
      {"drop_path_rate", top(&ModelConfig::drop_path_rate, in_unit(false))},
      {"norm_eps", top(&ModelConfig::norm_eps, positive<float>())},
      {"distilled", top(&ModelConfig::distilled)},
      {"patch_embed", top(&ModelConfig::patch_embed, one_of({"conv", "conv_stem"}))},
      {"layer_scale_init", top(&ModelConfig::layer_scale_init)},
      {"eta", top(&ModelConfig::eta, positive<float>())},
      {"tokens_norm", top(&ModelConfig::tokens_norm)},
      {"cls_attn_variant", top(&ModelConfig::cls_attn_variant, one_of({"", "softmax", "sima"}))},
      {"cls_attn_layers", top(&ModelConfig::cls_attn_layers)},
      {"stage_dims", list(&ModelConfig::stage_dims, true)},
      {"stage_depths", list(&ModelConfig::stage_depths, true)},
      {"stage_heads", list(&ModelConfig::stage_heads, true)},
      {"stage_embed_kernel", list(&ModelConfig::stage_embed_kernel, true)},
      {"stage_embed_stride", list(&ModelConfig::stage_embed_stride, true)},
      {"stage_embed_padding", list(&ModelConfig::stage_embed_padding, false)},
      {"stage_drop_path", list(&ModelConfig::stage_drop_path, false)},
      {"stage_stride_kv", list(&ModelConfig::stage_stride_kv, true)},
  };
  return f;
}

void apply(const std::map<std::string, Field>& fields, ModelConfig& c, const json& j, const std::string& where,
           const std::vector<std::string>& skip) {
  check(j.is_object(), where, ": expected a JSON object, got ", j.dump());
  for (auto& [key, value] : j.items()) {
    if (std::find(skip.begin(), skip.end(), key) != skip.end()) continue;
    auto it = fields.find(key);
    if (it == fields.end()) {
      std::vector<std::string> known;
      for (auto& [k, _] : fields) known.push_back(k);
      for (auto& k : skip) known.push_back(k);
      std::sort(known.begin(), known.end());
      known.erase(std::unique(known.begin(), known.end()), known.end());
      fail(where, ".", key, ": unknown key (known keys: ", join(known), ")");
    }
    it->second.read(c, value, where + "." + key);
  }
}

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
  check(it != base_configs().end(), "model '", name, "' is unknown (known: ", join(model_names()), ")");
  ModelConfig c = it->second();
  c.name = name;
  if (twin) c.attention.variant = "sima";
  return c;
}

ModelConfig config_from_json(const json& j, ModelConfig base, const std::string& where) {
  check(j.is_object(), where, ": expected a JSON object, got ", j.dump());
  // "name" starts from that registered config; with "arch" present (a complete config, as
  // checkpoints store it) an unregistered name is only a label.
  if (j.contains("name")) {
    std::string name = read_as<std::string>(j["name"], where + ".name");
    auto names = model_names();
    if (std::find(names.begin(), names.end(), name) != names.end()) base = model_config(name);
    else check(j.contains("arch") , where, ".name: model '", name, "' is unknown (known: ", join(names), ")");
    base.name = name;
  }
  apply(model_fields(), base, j, where, {"attention", "name"});
  // model.attention: its keys, types and values come from the variant table (nn/attention/variants.h).
  if (j.contains("attention")) base.attention = attention_options_from_json(j["attention"], base.attention, where + ".attention");
  return base;
}

json stored_config_json(const json& j) {
  json out = j;
  if (out.is_object() && out.contains("attention")) out["attention"] = drop_unread_default_keys(out["attention"]);
  return out;
}

ModelConfig stored_config_from_json(const json& j, const std::string& where) {
  return config_from_json(stored_config_json(j), ModelConfig(), where);
}

json config_to_json(const ModelConfig& c) {
  json j = json::object();
  for (auto& [k, f] : model_fields()) j[k] = f.write(c);
  j["attention"] = attention_options_to_json(c.attention);
  return j;
}

std::shared_ptr<Model> create_model(const ModelConfig& cfg) {
  check_model_budget(cfg);  // before any tensor: a config claiming a huge model fails here (models/budget.h)
  if (cfg.arch == "deit") return std::make_shared<DeiT>(cfg);
  if (cfg.arch == "xcit") return std::make_shared<XCiT>(cfg);
  if (cfg.arch == "cvt") return std::make_shared<CvT>(cfg);
  fail("model: arch '", cfg.arch, "' is unknown (allowed: deit, xcit, cvt)");
}
std::shared_ptr<Model> create_model(const std::string& name) { return create_model(model_config(name)); }
std::shared_ptr<Model> create_model(const json& j) { return create_model(config_from_json(j)); }

}  // namespace sima
