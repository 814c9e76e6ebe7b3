// Helpers for the attention tests only: options and parameter set-up of Attention modules.
// (The generic ones — check_same, gradcheck_module, leaf_copies, rel_error — are in testing.h.)
#pragma once
#include <string>

#include "core/parallel.h"
#include "nn/attention/attention.h"
#include "nn/init.h"
#include "testing.h"

namespace sima::testing {

// AttentionOptions of `variant` with C = dim and h = heads, everything else default.
inline AttentionOptions attention_options(const std::string& variant, int64_t dim, int64_t heads) {
  AttentionOptions o;
  o.variant = variant;
  o.dim = dim;
  o.num_heads = heads;
  return o;
}

// Sets every Linear weight and bias of an attention module to N(0, std²) from a seeded stream,
// so a gradcheck sees modest, generic values.
inline void randomize_linears(Attention& m, uint64_t seed, float std = 0.4f) {
  Generator g(seed);
  for (const Tensor& t : {m.qkv->weight, m.qkv->bias, m.proj->weight, m.proj->bias})
    if (t.defined()) normal_(t, 0.f, std, g);
}

}  // namespace sima::testing
