// The model registry: a name, a JSON object, or a name plus JSON overrides -> ModelConfig
// -> model. The JSON keys are ModelConfig's field names, with the attention options in an
// "attention" object whose "type" is the variant:
//
//   {"arch": "deit", "embed_dim": 192, "depth": 12, "num_heads": 3,
//    "attention": {"type": "sima", "order": "auto"}}
//
// Unknown keys, wrong types and bad values are errors naming the key path.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/config.h"
#include "models/model.h"

namespace sima {

// The registered names, sorted (each has a "<name>_sima" twin with SimA attention).
std::vector<std::string> model_names();
ModelConfig model_config(const std::string& name);

// Applies the keys of `j` on top of `base`. A "name" key starts from that registered
// config instead. `where` prefixes key paths in errors (e.g. "model").
ModelConfig config_from_json(const nlohmann::json& j, ModelConfig base = ModelConfig(),
                             const std::string& where = "model");
nlohmann::json config_to_json(const ModelConfig& cfg);
// config_from_json for a config a file stored (checkpoint metadata, a run's state): written
// before the attention variant table, it may list attention keys its variant does not read,
// at their defaults; those are dropped (nn/attention/variants.h, drop_unread_default_keys).
ModelConfig stored_config_from_json(const nlohmann::json& j, const std::string& where = "config");
// The same on the JSON alone.
nlohmann::json stored_config_json(const nlohmann::json& j);

std::shared_ptr<Model> create_model(const ModelConfig& cfg);
std::shared_ptr<Model> create_model(const std::string& name);
std::shared_ptr<Model> create_model(const nlohmann::json& j);

}  // namespace sima
