// Reading PyTorch checkpoints (.pth / .pt files written by torch.save, PyTorch >= 1.6).
//
//   file (zip, models/io/zip_archive.h)
//     <name>/data.pkl     the saved object, run by the restricted unpickler (models/io/torch_pickle.h)
//     <name>/data/<key>   the storages its tensors view
//
// load_pth_state_dict finds the state dict in the saved object: the object itself when it is a
// dict of tensors, else the dict under the first of the keys "model", "state_dict",
// "model_state_dict", "module", "net" that holds one (nested wrappers such as
// {"state_dict": {"model": {...}}} too). Tensors may be any strided view of their storage
// (torch._utils._rebuild_tensor_v2: offset, size, stride); float32, float16, bfloat16 and
// float64 values are converted to float32, integer and bool ones (BatchNorm's
// num_batches_tracked) too. Every fault is a sima::Error naming the file.
#pragma once
#include <string>

#include "models/io/safetensors.h"

namespace sima {

struct PthStateDict {
  NamedTensors tensors;  // in the order of the saved dict
  std::string where;     // where it was found, e.g. "['model']" ("" for the top level)
};

PthStateDict load_pth_state_dict(const std::string& path);
// The same on the file's bytes; `label` names them in errors.
PthStateDict load_pth_state_dict_bytes(std::string bytes, const std::string& label);

// True when `path` ends in .pth, .pt or .bin, or its bytes start like a zip archive.
bool is_pth_path(const std::string& path);

}  // namespace sima
