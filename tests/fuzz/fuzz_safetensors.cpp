// load_safetensors and read_safetensors_metadata (models/io/safetensors.h) on arbitrary bytes.
// Whatever loads must agree with its header: a tensor per entry, metadata identical.
#include "core/error.h"
#include "fuzz_common.h"
#include "models/io/safetensors.h"

using namespace sima;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_scratch("model.safetensors", data, size);
  try {
    std::map<std::string, std::string> meta = read_safetensors_metadata(path);
    SafetensorsFile f = load_safetensors(path);
    if (f.metadata != meta) __builtin_trap();
    for (const auto& [name, t] : f.tensors)
      if (!t.defined() || f.get(name).data() != t.data()) __builtin_trap();
  } catch (const Error&) {
  }
  return 0;
}
