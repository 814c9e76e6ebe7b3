// Writing PyTorch checkpoints without Python: the bytes torch.save(obj, f) writes (PyTorch >= 1.6,
// zip format) for obj a state dict, or a dict {wrap_key: state dict} (the official SimA / DeiT
// releases save {'model': state_dict}). models/io/pth.h reads them back.
//
//   archive/data.pkl      the object, pickle protocol 2 (torch.save's default)
//   archive/byteorder     "little"
//   archive/data/<i>      tensor i's values, row-major little-endian, one storage per tensor, i = 0, 1, ...
//   archive/version       "3\n"
// in a zip written by models/io/zip_writer.h (stored entries, data 64-byte aligned).
//
// The state dict is a collections.OrderedDict() (called with no arguments, then its items set
// in order). Each tensor is pickled as torch.save pickles a contiguous CPU tensor:
//   torch._utils._rebuild_tensor_v2(storage, 0, size, stride, False, collections.OrderedDict())
// with stride the row-major strides of size and storage the persistent id
//   ('storage', torch.FloatStorage, '<i>', 'cpu', numel)      (torch.LongStorage for int64)
// which torch.load resolves to archive/data/<i>. Only the globals the restricted unpickler of
// models/io/torch_pickle.h (and PyTorch's weights_only loader) accept appear.
#pragma once
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/io/torch_pickle.h"

namespace sima {

struct PthTensor {
  std::string name;
  Tensor tensor;  // float32 values; for Int64 each must be a whole number (e.g. num_batches_tracked)
  StorageDtype dtype = StorageDtype::Float32;  // Float32 or Int64
};

// The archive's bytes; `wrap_key` "" for the bare state dict. `label` names it in errors.
std::string pth_bytes(const std::vector<PthTensor>& tensors, const std::string& wrap_key, const std::string& label);

// Writes pth_bytes to `path` atomically (a temporary file beside it, fsync, rename): a failure
// leaves no half-written file and an existing file as it was; a sima::Error names the path.
void save_pth(const std::string& path, const std::vector<PthTensor>& tensors, const std::string& wrap_key = "");

}  // namespace sima
