// The documentation table of every config key (sima-train --config-reference; the end of
// docs/training.md): the experiment schema, the model schema with the architectures that
// read each key, and the attention options with the variants that read each.
#include <sstream>

#include "models/registry.h"
#include "nn/attention/variants.h"
#include "train/config/experiment_config.h"

namespace sima {

using json = nlohmann::json;

namespace {

std::string valid_note(const std::string& valid) { return valid.empty() ? "" : " (valid: " + valid + ")"; }

void model_rows(std::ostringstream& s) {
  const ModelConfig defaults;
  s << "| `model` | object | required | the model: `arch` or `name` (a registered model) is required, every other "
       "key is optional (defaults below, or the named model's); a key its architecture does not read is an error |\n";
  for (const auto& f : model_config_fields()) {
    const std::string readers = f.read_by.empty() ? join_words(model_arch_names()) : join_words(f.read_by);
    // (appended, not "`" + string: GCC 12 warns -Wrestrict, wrongly, on that form once inlined)
    const std::string def =
        f.key == "arch" ? "required without name" : std::string("`").append(f.write(defaults).dump()).append("`");
    s << "| `model." << f.key << "` | " << f.type << " | " << def << " | read by " << readers << ": " << f.help
      << valid_note(f.valid) << " |\n";
  }
}

// model.attention: from the variant table (nn/attention/variants.h); a key a variant does
// not read is an error, so each row says which variants read it.
void attention_rows(std::ostringstream& s) {
  const AttentionOptions attention;
  s << "| `model.attention.type` | string | `" << json(attention.variant).dump()
    << "` | read by deit, xcit, cvt: the attention variant (valid: " << join_words(attention_variant_names())
    << ") |\n";
  for (const auto& r : attention_key_reference())
    s << "| `model.attention." << r.spec->key << "` | " << r.spec->type << " | `" << r.spec->write(attention).dump()
      << "` | read by " << join_words(r.read_by) << ": " << r.spec->help << valid_note(r.spec->valid) << " |\n";
}

}  // namespace

std::string config_reference_markdown() {
  const ExperimentConfig defaults;
  std::ostringstream s;
  s << "| key | type | default | meaning |\n|-----|------|---------|---------|\n";
  for (const auto& f : config_fields())
    s << "| `" << f.key << "` | " << f.type << " | `" << f.write(defaults).dump() << "` | " << f.help << " |\n";
  model_rows(s);
  attention_rows(s);
  return s.str();
}

}  // namespace sima
