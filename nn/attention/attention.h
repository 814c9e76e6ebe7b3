// The attention interface shared by every variant, and its factory.
//
// Every variant starts from qkv = Linear(C, 3C)(x) split into q, k, v of shape
// (B, h, N, d) with d = C/h, runs its core (one fused op with a hand-derived
// backward, in the variant's own file), and ends with proj = Linear(C, C) on the
// heads concatenated back to (B, N, C) (docs/attention.md §1):
//
//   x (B, N, C) --qkv--> q, k, v (B, h, N, d) --core--> o (B, h, N, d) --merge, proj--> (B, N, C)
//
// A variant overrides core(); the few that differ before the core (SOFT shares
// q = k; linformer with compress = input projects x along the tokens first) override
// forward() too, and one with a gate (relu) overrides gate_heads().
// Every variant is one row of the table in variants.h (name, factory, the option keys it
// reads, its traits); docs/adding_a_variant.md.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "nn/linear.h"
#include "nn/module.h"

namespace sima {

// What every attention shares, what the model (not the user) decides, and the options of the
// variant's own (`own`). A field is here only when the attention base class or the models read
// it for every variant: the row (variants.h) holds every fact of its variant.
struct AttentionOptions {
  std::string variant = "softmax";  // a row of the table in variants.h (attention_variant_names())
  int64_t dim = 0;                  // C
  int64_t num_heads = 8;            // h (d = C / h)
  bool qkv_bias = true;
  float attn_drop = 0.f;
  float proj_drop = 0.f;
  // N the module is built for: the models set it from their image and patch size (not a JSON
  // key). Linformer's E, F are (k, N), and another N is an error; SOFT's softmax_max_tokens
  // compares a layer's N with it (layer_attention_options, variants.h).
  int64_t num_tokens = 0;
  // false: no qkv / proj Linear layers; only core() is usable. For models that make q, k, v
  // their own way (CvT's convolutional projections) and reuse a variant's core.
  bool projections = true;
  // The scale inside the softmax of the variants that form softmax rows (traits.softmax_row);
  // 0: d^-½ (timm). CvT sets C^-½, its official quirk (models/cvt_attention.h). Not a JSON key.
  float softmax_scale = 0.f;
  // Every option of the variant's own (SimA's norm, SOFT's sr, linformer's proj_len, ...): the
  // keys its row declares with own_option (variants.h), key -> value, only those set away from
  // the row's default. The row holds each key's type, default, valid values and help; a module
  // reads a key once, in its constructor, with attention_option<T>(opt, key), which gives the
  // default when the key is absent. Set keys with with() (or a config's JSON, which the row reads).
  nlohmann::json own = nlohmann::json::object();

  // Sets option `key` of this variant's row (set `variant` first) to `value`, checked by the
  // row's spec: a key the row does not read, or a value of the wrong type or out of range, is a
  // sima::Error naming the key, the variant and the keys it reads. Returns *this, so that calls
  // chain: o.with("sr", 1).with("bottleneck", "avgpool"). Defined in variants.cpp.
  AttentionOptions& with(const std::string& key, const nlohmann::json& value);
};

class Attention : public Module {
 public:
  // qkv_outputs: 3 for Linear(C, 3C) -> q, k, v; 2 for variants that share q = k (SOFT),
  // whose qkv is Linear(C, 2C) -> q, v.
  Attention(const AttentionOptions& opt, const std::string& type_name, int qkv_outputs = 3);

  // x (B, N, C) -> (B, N, C). H, W: the token grid, for variants that need it (SOFT);
  // 0 when unknown.
  virtual Tensor forward(const Tensor& x, int64_t H, int64_t W);
  Tensor forward(const Tensor& x) override { return forward(x, 0, 0); }
  // residual + forward(x, H, W) (a block's residual stream, shaped as x): proj adds it as its
  // product is stored (Linear::forward_add) when project() returns forward()'s result and
  // proj_drop is off; a variant whose forward() does not end in project() gets the plain add.
  // The same values either way.
  Tensor forward_add(const Tensor& x, const Tensor& residual, int64_t H, int64_t W);

  // The variant's fused core: q, k, v (B, h, N, d) -> (B, h, N, d).
  virtual Tensor core(const Tensor& q, const Tensor& k, const Tensor& v, int64_t H, int64_t W) = 0;

  // exp() evaluations made by the core's forward since the last reset (#exp; attention_exp_calls).
  int64_t exp_calls() const { return exp_calls_; }
  void reset_exp_calls() { exp_calls_ = 0; }

  // Optional hook, called by the core with the q̂ and k̂ (B, h, N, d) that feed the
  // attention (after ℓ1 normalisation for SimA; plain q, k for the others). For heatmaps.
  std::function<void(const Tensor& q_hat, const Tensor& k_hat)> qk_hook;

  // The merged heads o (B, N, C) on their way to proj, given the block input x (B, N, C): o
  // itself, or the variant's gate applied to it (relu's gate(x) ⊙ o). Models that run core()
  // themselves (CvT) call it between merging the heads and their proj.
  virtual Tensor gate_heads(const Tensor& o, const Tensor& /*x*/) { return o; }

  // The core run on the qkv Linear's output (B, N, 3C) as it is, q, k and v read in place and
  // the heads written merged (B, N, C): forward() takes it instead of split_heads, core() and
  // merge_heads, saving the two head copies (and in training their two copies back). Undefined
  // (the default) where a variant has none or cannot use it this call (dropout, a hook, a
  // gradient through a packed core that is inference only).
  virtual Tensor packed_core(const Tensor& /*qkv_out*/) { return Tensor(); }

  const AttentionOptions& options() const { return opt_; }
  int64_t head_dim() const { return opt_.dim / opt_.num_heads; }
  // options().softmax_scale, or d^-½ when it is 0.
  float softmax_scale() const;

  std::shared_ptr<Linear> qkv, proj;  // null when options().projections is false

 protected:
  // qkv output (B, N, 3C) -> q, k, v each (B, h, N, d).
  void split_heads(const Tensor& qkv_out, Tensor& q, Tensor& k, Tensor& v) const;
  // o (B, h, N, d) -> (B, N, C).
  static Tensor merge_heads(const Tensor& o);
  // Throws unless the module was built with its qkv / proj layers (options().projections).
  void check_projections() const;
  // proj and proj_drop on (B, N, C).
  Tensor project(const Tensor& o_merged);

  AttentionOptions opt_;
  int64_t exp_calls_ = 0;

 private:
  Tensor pending_residual_;      // forward_add's residual while its forward() runs
  bool residual_added_ = false;  // project() added it
};

// Builds the variant named by opt.variant through its table row (variants.h). A clear error
// lists the valid names, names an invalid option value and its valid values, and rejects a
// non-default value of an option the variant does not read (it would be silently ignored).
std::shared_ptr<Attention> make_attention(const AttentionOptions& opt);

}  // namespace sima
