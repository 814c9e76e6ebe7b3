// Helpers for the attention tests only: options and parameter set-up of Attention modules.
// (The generic ones — check_same, gradcheck_module, leaf_copies, rel_error — are in testing.h.)
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "nn/attention/attention.h"
#include "nn/attention/variants.h"
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

// Sets option `key` of o's variant without the row's check (AttentionOptions::with refuses a bad
// value), so that a test can give a constructor the bad values it checks itself; a value equal
// to the row's default is left out of o.own, as with() leaves it.
inline void set_unchecked(AttentionOptions& o, const std::string& key, const nlohmann::json& value) {
  const AttentionOptionSpec* s = attention_variant(o.variant).option(key);
  if (s && s->write(AttentionOptions{}) == value) o.own.erase(key);
  else o.own[key] = value;
}

// Sets every Linear weight and bias of an attention module to N(0, std²) from a seeded stream,
// so a gradcheck sees modest, generic values.
inline void randomize_linears(Attention& m, uint64_t seed, float std = 0.4f) {
  Generator g(seed);
  for (const Tensor& t : {m.qkv->weight, m.qkv->bias, m.proj->weight, m.proj->bias})
    if (t.defined()) normal_(t, 0.f, std, g);
}

// A packed attention core (qkv (B, N, 3C) -> (B, N, C)) run forward and backward (gradient of
// ones) at 1 and at 2 threads: the output and qkv's gradient must be the same bits.
inline void check_packed_same_bits_across_threads(const Tensor& qkv, const std::function<Tensor(const Tensor&)>& core) {
  auto run = [&](int threads) {
    const int before = num_threads();
    set_num_threads(threads);
    Tensor x = qkv.detach().clone().requires_grad_();
    Tensor o = core(x);
    o.backward(ones(o.shape()));
    set_num_threads(before);
    return std::vector<Tensor>{o, x.grad()};
  };
  const auto a = run(1), b = run(2);
  CHECK(max_abs_diff(a[0], b[0]) == 0.f);
  CHECK(max_abs_diff(a[1], b[1]) == 0.f);
}

}  // namespace sima::testing
