// The model registry: a name, a JSON object, or a name plus JSON overrides -> ModelConfig
// -> model. The JSON keys are ModelConfig's field names, with the attention options in an
// "attention" object whose "type" is the variant:
//
//   {"arch": "deit", "embed_dim": 192, "depth": 12, "num_heads": 3,
//    "attention": {"type": "sima", "order": "auto"}}
//
// Every key is read by the architectures that use it (model_config_fields: its type, valid
// values, help and `read_by`); an unknown key, a key the architecture does not read (embed_dim
// on a CvT), a wrong type or a bad value is an error naming the key path and the valid keys.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/json_schema.h"
#include "models/config.h"
#include "models/model.h"

namespace sima {

// The model schema (models/config_fields.cpp): every key but "attention" (its keys come from
// the attention variant table, nn/attention/variants.h), in documentation order.
const std::vector<SchemaField<ModelConfig>>& model_config_fields();
std::vector<std::string> model_arch_names();  // deit, xcit, cvt

// The registered names, sorted (each has a "<name>_sima" twin with SimA attention).
std::vector<std::string> model_names();
ModelConfig model_config(const std::string& name);

// Applies the keys of `j` on top of `base`. A "name" key starts from that registered
// config instead; "arch" (or the name's) decides which keys apply. `where` prefixes key paths
// in errors (e.g. "model"). With require_arch, `j` must give "name" or "arch" (a model
// section of an experiment config: without either it would silently be base's DeiT).
ModelConfig config_from_json(const nlohmann::json& j, ModelConfig base = ModelConfig(),
                             const std::string& where = "model", bool require_arch = false);
// Every key cfg.arch reads, with its value; re-readable by config_from_json.
nlohmann::json config_to_json(const ModelConfig& cfg);
// config_from_json for a config a file stored (checkpoint metadata, a run's state). Written
// before the attention variant table, it may list attention keys its variant does not read,
// at their defaults; those are dropped (nn/attention/variants.h, drop_unread_default_keys).
// Written before the model schema, it lists every model key of every architecture; the keys
// its architecture does not read (whatever their value: they were never used) are dropped.
ModelConfig stored_config_from_json(const nlohmann::json& j, const std::string& where = "config");
// The same on the JSON alone.
nlohmann::json stored_config_json(const nlohmann::json& j);

std::shared_ptr<Model> create_model(const ModelConfig& cfg);
std::shared_ptr<Model> create_model(const std::string& name);
std::shared_ptr<Model> create_model(const nlohmann::json& j);

}  // namespace sima
