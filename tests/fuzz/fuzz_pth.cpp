// The torch.save reader (models/io/pth.h, models/io/torch_pickle.h, models/io/zip_archive.h) and the
// upstream conversion (models/io/upstream.h) on arbitrary bytes. The first byte picks the entry:
//   0 mod 3   the rest is a data.pkl for the restricted unpickler alone (a zip's CRC-32 would
//             stop most mutations of a pickle inside an archive before the unpickler sees them)
//   1 mod 3   the rest is a .pth file: state dict, layout detection, config inference, model
//   2 mod 3   the same with --model '{"num_heads": 1, "stage_heads": [1, 1]}' (the seeds are
//             tiny models whose head counts the shapes do not give)
// sima::Error is the expected refusal; what loads must be a dict of float32 tensors.
#include "core/error.h"
#include "fuzz_common.h"
#include "models/io/pth.h"
#include "models/io/torch_pickle.h"
#include "models/io/upstream.h"

using namespace sima;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int mode = data[0] % 3;
  std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    if (mode == 0) {
      PyRef v = unpickle_restricted(bytes, "data.pkl");
      if (!v || v->depth > kMaxPickleDepth) __builtin_trap();
      return 0;
    }
    PthStateDict sd = load_pth_state_dict_bytes(std::move(bytes), "fuzz.pth");
    for (const auto& [name, t] : sd.tensors)
      if (!t.defined() || name.empty()) __builtin_trap();
    UpstreamModel m = build_upstream_model(sd.tensors, "", mode == 2 ? R"({"num_heads": 1, "stage_heads": [1, 1]})" : "",
                                           "fuzz.pth");
    if (!m.model) __builtin_trap();
  } catch (const Error&) {
  }
  return 0;
}
