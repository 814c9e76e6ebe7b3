// safetensors: the checkpoint format of Hugging Face (and of timm on the Hub).
//
//   bytes [0, 8)        N, the header length, u64 little-endian
//   bytes [8, 8 + N)    the header: a UTF-8 JSON object
//                         {"__metadata__": {"key": "value", ...},        (optional, strings only)
//                          "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]},
//                          ...}
//                       padded with spaces so the data starts 8-byte aligned
//   bytes [8 + N, end)  the data buffer: each tensor's raw little-endian values, row-major,
//                       at [begin, end) relative to the buffer; the tensors tile the buffer
//                       exactly (no overlaps, no holes, nothing after the last one)
//
// The writer follows huggingface/safetensors (safetensors/src/tensor.rs, `prepare`):
// tensors sorted by descending dtype alignment, then by name (byte-wise); all of ours
// are F32, so the order is by name. The header is compact JSON with "__metadata__" first
// (omitted when empty; keys sorted), then the tensors in data order, each as
// {"dtype", "shape", "data_offsets"} in that key order, padded with spaces to a multiple
// of 8 bytes. The same tensors and metadata therefore give the same bytes.
//
// The reader checks the whole header before it allocates any tensor, so a hostile or
// truncated file ends in a sima::Error naming the file and the fault, never a crash or
// a huge allocation. It reads F32, and F16/BF16/I8 converted to float32. Like the reference,
// it ignores keys of a tensor entry other than dtype/shape/data_offsets.
#pragma once
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace sima {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

struct SafetensorsFile {
  NamedTensors tensors;                         // in the order of their data in the file
  std::map<std::string, std::string> metadata;  // "__metadata__"
  std::map<std::string, std::string> dtypes;    // tensor name -> its dtype in the file ("F32", "I8", ...)
  // The tensor called `name`, or an undefined Tensor.
  Tensor get(const std::string& name) const;
};

// Writes `tensors` (float32, any shapes, distinct non-empty names) and `metadata` to `path`;
// the tensors named in `int8_names` are written as I8 (their values must be integers in
// [-127, 127]; quantized checkpoints, models/quantized.h). Atomically: into `path + ".tmp.<pid>"`, fsync, then rename over `path`. On any failure
// the temporary file is removed, an existing file at `path` is left as it was, and a
// sima::Error names the path and the OS error.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {},
                      const std::set<std::string>& int8_names = {});

// Reads every tensor (as float32) and the metadata; throws sima::Error on any fault.
SafetensorsFile load_safetensors(const std::string& path);

// Reads and checks only the header (the whole header, as load does) and returns the metadata.
std::map<std::string, std::string> read_safetensors_metadata(const std::string& path);

// Largest header the reader accepts (the reference's MAX_HEADER_SIZE).
constexpr uint64_t kSafetensorsMaxHeader = 100'000'000;

}  // namespace sima
