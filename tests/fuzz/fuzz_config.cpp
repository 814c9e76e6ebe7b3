// The experiment config as sima-train reads it (train/config/experiment_config.h): the JSON
// document, then each --set key=value override, then experiment_from_json (every key read and
// validated), then the resolved config written back and read again (what the run folder's
// config.json holds).
//
//   input = [config JSON] ( "\n--set " [key=value] )*
// The document goes through a file, as sima-train reads it: read_json_file.
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "fuzz_common.h"
#include "train/config/experiment_config.h"

using namespace sima;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::string_view sep = "\n--set ";
  std::vector<std::string> parts;
  for (size_t start = 0;;) {
    const size_t at = text.find(sep, start);
    parts.emplace_back(text.substr(start, at == std::string_view::npos ? std::string_view::npos : at - start));
    if (at == std::string_view::npos) break;
    start = at + sep.size();
  }
  const std::string path =
      fuzz::write_scratch("config.json", reinterpret_cast<const uint8_t*>(parts[0].data()), parts[0].size());
  try {
    nlohmann::json doc = read_json_file(path);
    for (size_t i = 1; i < parts.size(); ++i) apply_override(doc, parts[i]);
    ExperimentConfig cfg = experiment_from_json(doc, "fuzz.json");
    nlohmann::json resolved = experiment_to_json(cfg);
    // The resolved config must read back to itself.
    if (experiment_to_json(experiment_from_json(resolved, "resolved.json")) != resolved) __builtin_trap();
    (void)resolved.dump();
  } catch (const Error&) {
  }
  return 0;
}
