#include "models/io/checkpoint.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/allocation_budget.h"
#include "core/error.h"
#include "models/budget.h"
#include "models/finite_check.h"
#include "models/quantized.h"
#include "models/registry.h"
#include "models/io/safetensors.h"

namespace sima {

namespace {
constexpr const char* kFormat = "sima.cpp/1";
}

std::map<std::string, std::string> checkpoint_metadata(const Model& model,
                                                       const std::map<std::string, std::string>& extra_metadata) {
  const ModelConfig& cfg = model.config();
  nlohmann::json norm = {{"mean", cfg.mean}, {"std", cfg.std}, {"img_size", cfg.img_size}};
  std::map<std::string, std::string> meta = extra_metadata;
  meta["format"] = kFormat;
  meta["config"] = config_to_json(cfg).dump();
  if (auto it = meta.find("normalization"); it == meta.end()) meta["normalization"] = norm.dump();
  return meta;
}

void save_checkpoint(const std::string& path, const Model& model,
                     const std::map<std::string, std::string>& extra_metadata) {
  const std::map<std::string, std::string> meta = checkpoint_metadata(model, extra_metadata);
  NamedTensors tensors;
  for (auto& [name, t] : model.state_dict()) tensors.emplace_back(name, t);
  check_finite_weights(tensors, path, /*saving=*/true);
  save_safetensors(path, tensors, meta);
}

namespace {

// Every value of `j[key]` (a list of numbers, when present) finite, and > 0 for a std.
void check_normalization(const nlohmann::json& j, const std::string& key, const std::string& where,
                         const std::string& path) {
  if (!j.is_object() || !j.contains(key)) return;
  const nlohmann::json& v = j[key];
  check(v.is_array() && !v.empty(), path, ": metadata ", where, ".", key, " is not a non-empty list of numbers");
  for (size_t i = 0; i < v.size(); ++i) {
    const bool ok = v[i].is_number() && std::isfinite(v[i].get<double>()) && (key != "std" || v[i].get<double>() > 0);
    check(ok, path, ": metadata ", where, ".", key, "[", i, "] = ", v[i].dump(), " is not ",
          key == "std" ? "a positive finite number (the input is divided by it)" : "a finite number");
  }
}

}  // namespace

void validate_checkpoint_metadata(const std::map<std::string, std::string>& meta, const std::string& path) {
  if (auto it = meta.find("format"); it != meta.end() && it->second != kFormat) {
    check(it->second != "sima.cpp/train_state/1", path, ": this is a training state (format ", it->second,
          ": model, optimizer and RNG state for sima-train --resume), not a model checkpoint; pass the "
          "model.safetensors written beside it in the same run folder");
    fail(path, ": format '", it->second, "' is not a sima.cpp model checkpoint (", kFormat, ")");
  }
  for (const char* key : {"normalization", "config"}) {
    auto it = meta.find(key);
    if (it == meta.end()) continue;
    const nlohmann::json j = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) continue;  // the readers report invalid JSON, naming the key
    check_normalization(j, "mean", key, path);
    check_normalization(j, "std", key, path);
  }
}

void load_weights(Model& model, const std::string& path) {
  SafetensorsFile f = load_safetensors(path);
  check_finite_weights(f.tensors, path, /*saving=*/false);
  const QuantizedLinears quantized = take_quantized_weights(f, path);  // dequantized in f; {} for float32
  StateDict sd;
  for (auto& [name, t] : f.tensors) sd[name] = t;
  try {
    model.load_state_dict(sd);
  } catch (const Error& e) {
    fail(path, ": ", e.what());
  }
  install_quantized_weights(model, quantized, path);
}

std::shared_ptr<Model> load_checkpoint(const std::string& path) {
  SafetensorsFile f = load_safetensors(path);
  validate_checkpoint_metadata(f.metadata, path);
  check_finite_weights(f.tensors, path, /*saving=*/false);
  const QuantizedLinears quantized = take_quantized_weights(f, path);  // dequantized in f; {} for float32
  auto it = f.metadata.find("config");
  check(it != f.metadata.end(), path, ": no model config in the metadata (not a sima.cpp model checkpoint?)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(it->second);
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": the model config in the metadata is not valid JSON (", e.what(), ")");
  }
  // The model must end up holding exactly the file's tensors (load_state_dict checks names and
  // shapes), so building it may not take much more memory than they do: a config claiming a
  // huge model (embed_dim 100000, depth 100000, ...) made create_model allocate whatever it
  // said before any check (fuzz finding, tests/fuzz/regressions/checkpoint).
  int64_t file_floats = 0;
  for (auto& [name, t] : f.tensors) file_floats += t.numel();
  std::shared_ptr<Model> model;
  try {
    const ModelConfig cfg = stored_config_from_json(j, "config");
    // The sizes that hold no weights (img_size of a model without a position table) are bounded
    // by what one sample's forward needs: an img_size of 1e9 is refused here, naming it.
    check_model_budget(cfg, 1);
    AllocationBudget budget(2 * file_floats * int64_t(sizeof(float)) + (int64_t(1) << 20),
                            "the model config describes a larger model than the file's " +
                                std::to_string(file_floats) + " values");
    model = create_model(cfg);
  } catch (const Error& e) {
    fail(path, ": ", e.what());
  }
  StateDict sd;
  for (auto& [name, t] : f.tensors) sd[name] = t;
  try {
    model->load_state_dict(sd);
  } catch (const Error& e) {
    fail(path, ": ", e.what());
  }
  install_quantized_weights(*model, quantized, path);
  return model;
}

}  // namespace sima
