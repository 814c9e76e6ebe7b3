// A restricted unpickler for the data.pkl of torch.save archives (models/io/pth.h).
//
// Pickle is a program for a stack machine whose GLOBAL and REDUCE opcodes import and call any
// Python function, so a .pth file from elsewhere can run code when PyTorch loads it without
// weights_only=True. This reader executes nothing: it knows the opcodes a state dict is made of
// (protocols 2 to 4) and an ALLOW-LIST of globals, the ones PyTorch's own weights_only
// unpickler accepts for tensors (torch/_weights_only_unpickler.py):
//
//   collections.OrderedDict                 called with () -> an empty dict (BUILD state ignored)
//   torch._utils._rebuild_tensor_v2         (storage, offset, size, stride, requires_grad, hooks[, meta])
//   torch._utils._rebuild_parameter         (tensor, requires_grad, hooks)
//   torch.<Type>Storage                     as the type of a persistent id
//                                           ('storage', type, key, location, numel)
//   argparse.Namespace                      NEWOBJ with () -> an empty dict, its attributes
//                                           (BUILD) dropped: not in PyTorch's list, but the
//                                           official DeiT / XCiT / SimA training scripts save
//                                           their command-line args next to the weights
//
// Everything else (another global such as os.system or builtins.eval, any other callable, an
// opcode outside the list) is a sima::Error naming it; it is never imported or run. The result
// is a tree of PyValue. Limits against hostile input: nesting depth at most kMaxPickleDepth
// (checked as containers are built; a container cannot be changed once it is inside another, so
// no cycles), memo and stack bounded by the input length, tensor sizes checked against their
// storage with overflow-checked arithmetic.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace sima {

constexpr int kMaxPickleDepth = 64;

// The element types of torch storages, as their legacy storage class names say.
enum class StorageDtype { Float32, Float16, BFloat16, Float64, Int64, Int32, Int16, Int8, UInt8, Bool };
const char* storage_dtype_name(StorageDtype d);
size_t storage_dtype_size(StorageDtype d);
// The storage class torch.save names for `d`, e.g. "torch.FloatStorage" (models/io/pth_writer.h).
const std::string& storage_type_global(StorageDtype d);

// A tensor as data.pkl describes it: a strided view of the storage archive/data/<key>.
struct TensorRef {
  std::string key;           // the storage's entry name under data/
  StorageDtype dtype = StorageDtype::Float32;
  int64_t storage_numel = 0; // elements in the storage
  int64_t offset = 0;        // in elements
  std::vector<int64_t> size, stride;
};

struct PyValue;
using PyRef = std::shared_ptr<PyValue>;

struct PyValue {
  enum Kind { None, Bool, Int, Float, Str, Bytes, Tuple, List, Dict, Global, Storage, Tensor } kind = None;
  int64_t i = 0;                  // Bool, Int
  double f = 0;                   // Float
  std::string s;                  // Str, Bytes, Global ("module.name")
  std::vector<PyRef> items;       // Tuple, List
  std::vector<std::pair<PyRef, PyRef>> dict;  // Dict, in insertion order
  TensorRef tensor;               // Storage (key, dtype, numel), Tensor
  int depth = 1;                  // 1 + the deepest child
  bool frozen = false;            // inside another container: no longer mutable

  const char* kind_name() const;
};

// Runs the pickle `bytes` (`label` names it in errors) and returns the object it builds.
PyRef unpickle_restricted(const std::string& bytes, const std::string& label);

}  // namespace sima
