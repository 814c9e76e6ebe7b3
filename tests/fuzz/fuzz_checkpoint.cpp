// load_checkpoint (models/io/checkpoint.h) on arbitrary bytes: the safetensors reader, then the
// model config from __metadata__ (registry JSON), the model built from it, and the tensors
// loaded into it — what sima-eval, sima-heatmap and distillation do with a checkpoint file.
#include "core/error.h"
#include "fuzz_common.h"
#include "models/io/checkpoint.h"

using namespace sima;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_scratch("model.safetensors", data, size);
  try {
    std::shared_ptr<Model> model = load_checkpoint(path);
    if (!model) __builtin_trap();
  } catch (const Error&) {
  }
  return 0;
}
