// make_attention: AttentionOptions.variant -> its row of the variant table (variants.h) ->
// the module. The row's option specs check the values first; each variant's constructor
// still checks its own options too (for code that builds it directly).
#include "core/error.h"
#include "nn/attention/attention.h"
#include "nn/attention/variants.h"

namespace sima {

std::shared_ptr<Attention> make_attention(const AttentionOptions& opt) {
  const AttentionVariant& row = attention_variant(opt.variant);
  for (const auto& s : row.options) {
    const std::string why = s.validate(opt);
    check(why.empty(), "attention variant '", row.name, "': option ", why, " (valid: ", s.valid, ")");
  }
  // An option the row does not read (another variant's) would be silently ignored.
  for (const auto& [key, value] : opt.own.items())
    check(row.option(key) != nullptr, "attention variant '", row.name, "' does not read option ", key, " (set to ",
          value.dump(), "; it reads: ", row.reads(), ")");
  return row.make(opt);
}

}  // namespace sima
