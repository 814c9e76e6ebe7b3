// model.safetensors: a model's parameters and buffers under timm names, with the model
// config and the input normalisation as JSON strings in __metadata__, so the model is
// rebuilt from the file alone (docs/design.md §3, "Files on disk").
//
//   __metadata__ = {"format": "sima.cpp/1",
//                   "config": "{...config_to_json(cfg)...}",
//                   "normalization": "{\"mean\": [...], \"std\": [...], \"img_size\": 224}"}
//
// The trainer adds "normalization" with "crop_pct" (the eval crop), "data" (the training
// data spec, e.g. "fashion_mnist") and "classes" (a JSON list of class names).
#pragma once
#include <map>
#include <memory>
#include <string>

#include "models/finite_check.h"
#include "models/model.h"

namespace sima {

// Non-finite values are refused on save and on load, naming the file and the first bad
// tensor, unless set_allow_nonfinite_weights(true) (models/finite_check.h).
//
// Writes to a temporary file and renames it over `path` (an existing file survives a failure).
// `extra_metadata` adds keys (a "normalization" given there replaces the default one).
void save_checkpoint(const std::string& path, const Model& model,
                     const std::map<std::string, std::string>& extra_metadata = {});

// The metadata save_checkpoint writes: extra_metadata plus format, config and normalization.
std::map<std::string, std::string> checkpoint_metadata(const Model& model,
                                                       const std::map<std::string, std::string>& extra_metadata);

// Rebuilds the model from the file's config and loads every tensor (names, shapes checked;
// every mismatch reported in one error naming the file). A quantized checkpoint
// (models/quantized.h) comes back with float32 weights W_q s, running float32 until
// set_inference_precision(Int8) makes its Linears run the stored integers.
std::shared_ptr<Model> load_checkpoint(const std::string& path);

// Checks a model checkpoint's metadata before anything is built from it, naming the file and
// the key: a train state (format sima.cpp/train_state/1) is refused with what to pass instead,
// and the input normalisation (metadata "normalization" and the config's mean / std) must be
// finite numbers with every std > 0 (the input is divided by it).
void validate_checkpoint_metadata(const std::map<std::string, std::string>& meta, const std::string& path);

// Loads the file's tensors into an existing model (same checks).
void load_weights(Model& model, const std::string& path);

}  // namespace sima
