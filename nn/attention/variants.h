// The attention variants, one row each: its name, help text, factory, the model.attention
// keys it reads (each with type, default, valid values and help) and its traits. Everything
// that lists variants, validates their options or asks what a variant can do derives from
// this table: the factory (make_attention), the config reader (models/registry.cpp),
// `sima-train --config-reference`, `sima-bench attention`, CvT, XCiT, heatmaps and the tests
// (docs/adding_a_variant.md walks through adding a row).
//
// A row's options are keys it owns (own_option below): each with its type, default, valid
// values and help in the row, its value in AttentionOptions::own. A module reads them once, in
// its constructor (attention_option<T>); code that builds options sets them with
// AttentionOptions::with, checked by the row. The built-in rows (variant_rows.cpp) and a
// variant from outside the library declare their options the same way.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/json_schema.h"
#include "nn/attention/attention.h"

namespace sima {

// One key of the JSON model.attention object, read into and written from AttentionOptions::own:
// the schema mechanism every config shares (core/json_schema.h).
using AttentionOptionSpec = SchemaField<AttentionOptions>;

// What models and tools may ask about a variant instead of comparing its name.
struct AttentionTraits {
  bool strided_kv = false;   // its core takes k, v with fewer tokens than q (CvT's stride_kv applies)
  bool shares_qk = false;    // q = k from one projection: qkv is Linear(C, 2C) -> q, v; CvT has no k projection
  bool needs_grid = false;   // forward needs the (H, W) token grid
  bool softmax_row = false;  // forms softmax(q kᵀ · scale) rows over the tokens (the heatmap's class row)
  // The class-attention form XCiT pairs with it (cls_attn_variant ""): softmax | sima.
  std::string class_attention = "softmax";
  // The smallest token-grid side the options allow (SOFT: its bottleneck kernel sr); null: 1.
  std::function<int64_t(const AttentionOptions&)> min_grid_side;
  // Its core keeps N × N maps per head for the backward (softmax, relu): the memory budget
  // (models/budget.cpp) counts 2·h·N² floats a block for them.
  bool token_maps = false;
};

struct AttentionVariant {
  std::string name;  // model.attention.type
  std::string help;
  std::function<std::shared_ptr<Attention>(const AttentionOptions&)> make;
  std::vector<AttentionOptionSpec> options;  // the model.attention keys it reads besides "type"
  AttentionTraits traits;
  // The parameters the module adds to qkv and proj (XCA's temperature, linformer's E and F,
  // ...), counted from the options as its constructor makes them: the memory budget counts a
  // model's parameters with it before building the model (count_parameters, models/budget.h).
  // Null: none.
  std::function<double(const AttentionOptions&)> extra_parameters;
  // The variant a layer built with these options runs, when the row hands some layers to
  // another row (SOFT's softmax_max_tokens: the official SOFT vision model runs softmax in its
  // last stage). Null, or its own name: the row itself. Applied by layer_attention_options.
  std::function<std::string(const AttentionOptions&)> layer_variant;
  // The exp() evaluations of one core forward (the paper's #exp, what the module counts in
  // Attention::exp_calls()) on B images of N tokens each, the last H·W of them a token grid
  // (0, 0 when none): softmax B·h·N², sima 0, ... Null: none counted (0).
  std::function<int64_t(const AttentionOptions&, int64_t B, int64_t N, int64_t H, int64_t W)> exp_calls;

  const AttentionOptionSpec* option(const std::string& key) const;  // null when it does not read `key`
  std::vector<std::string> option_keys() const;
  std::string reads() const;  // every key it reads, for errors: "type, norm, order, eps"
};

// The built-in rows, in the order tools list them (variant_rows.cpp).
std::deque<AttentionVariant> builtin_attention_variants();
// Every variant, in the order tools list them: the built-in rows, then the registered ones.
// A deque, so that the rows (and references to them) stay where they are when a row is added.
const std::deque<AttentionVariant>& attention_variants();
std::vector<std::string> attention_variant_names();
// The row named `name`, or a sima::Error "<who>: attention variant '<name>' is unknown
// (allowed: ...)".
const AttentionVariant& attention_variant(const std::string& name, const std::string& who = "");

// Adds a variant defined outside the library (examples/custom_attention): the row is checked,
// then appended, and from then on make_attention, the model config reader (model.attention.type),
// `--config-reference` and everything else that reads the table see it. Checked, each failure a
// sima::Error "register_attention_variant: variant '<name>': ...":
//   - name: not empty, only a-z, 0-9, _; not the name of a row already in the table;
//   - help not empty, make set; traits.class_attention "softmax" or "sima";
//   - options: each key not empty, not "type", once in the row; type one of bool, integer,
//     number, string; help, valid, read, write, validate set; write() of the default
//     AttentionOptions a JSON value of that type. A key another row reads is the same option,
//     so it must have that row's type and default.
// A variant from outside reads keys of the built-in rows (their specs) and keys of its own
// (own_option), counts its parameters with extra_parameters and its exp() with exp_calls.
// Not thread-safe: register at the start of main(), before any thread reads the table.
void register_attention_variant(AttentionVariant row);

// An option key the row owns, of type T (bool, int64_t, float, double, std::string): read into
// AttentionOptions::own, checked by `rule` (core/json_schema.h: at_least, above, within,
// one_of, ...), absent = `fallback`, the default --config-reference lists. A module reads it with
// attention_option<T>.
template <class T>
AttentionOptionSpec own_option(const std::string& key, T fallback, Rule<T> rule, const std::string& help) {
  AttentionOptionSpec s;
  s.key = key;
  s.type = JsonType<T>::word;
  s.valid = rule.valid.empty() ? std::string("any ") + JsonType<T>::word : rule.valid;
  s.help = help;
  const nlohmann::json def = json_of(fallback);
  auto why_not = rule.why_not;
  s.write = [key, def](const AttentionOptions& o) { return o.own.contains(key) ? o.own.at(key) : def; };
  s.read = [key, def, why_not](AttentionOptions& o, const nlohmann::json& v, const std::string& path) {
    const T x = json_value<T>(v, path);
    const std::string why = why_not ? why_not(x) : "";
    check(why.empty(), path, ": ", why);
    const nlohmann::json value = json_of(x);
    if (value == def) o.own.erase(key);
    else o.own[key] = value;
  };
  s.validate = [key, why_not](const AttentionOptions& o) {
    if (!o.own.contains(key)) return std::string();
    const std::string why = why_not ? why_not(json_value<T>(o.own.at(key), key)) : "";
    return why.empty() ? why : key + ": " + why;
  };
  return s;
}

// The value of option `key` of opt's variant (its default when unset), or a sima::Error naming
// the variant and the keys it reads. A lookup in the table: modules call it in their
// constructors, never per forward.
template <class T>
T attention_option(const AttentionOptions& opt, const std::string& key) {
  const AttentionVariant& row = attention_variant(opt.variant);
  const AttentionOptionSpec* s = row.option(key);
  check(s != nullptr, "attention variant '", row.name, "' does not read option ", key, " (it reads: ", row.reads(),
        ")");
  return json_value<T>(s->write(opt), "attention." + key);
}

// The exp() evaluations of one core forward of opt's variant (its row's exp_calls, else 0).
int64_t attention_exp_calls(const AttentionOptions& opt, int64_t B, int64_t N, int64_t H = 0, int64_t W = 0);

// The parameters opt's variant adds to qkv and proj (its row's extra_parameters, else 0).
double attention_extra_parameters(const AttentionOptions& opt);

// The options one layer is built with: `opt` itself, or, when its row's layer_variant names
// another row for this layer (opt.num_tokens set by the model), that row's options with every
// key the new row does not read back at its default (dim, heads, bias, dropouts and num_tokens
// kept). The models and the memory budget build each layer from these.
AttentionOptions layer_attention_options(const AttentionOptions& opt);

// The smallest token-grid side opt's variant can run on (traits.min_grid_side, else 1).
int64_t attention_min_grid_side(const AttentionOptions& opt);

// The JSON model.attention object on top of `base`: "type" picks the row (absent: base's
// variant); every other key must be one that row reads, else an error naming the key, the
// variant and the keys it reads; values are checked by their spec. `where` prefixes key
// paths in errors ("model.attention").
AttentionOptions attention_options_from_json(const nlohmann::json& j, AttentionOptions base,
                                             const std::string& where = "attention");
// Configs stored before this table (checkpoint metadata, run states) list every attention
// key; returns `j` without the keys its variant does not read whose value is the default
// (any other unread key stays, and reading it fails as it should).
nlohmann::json drop_unread_default_keys(const nlohmann::json& j);

// {"type": variant, every key the variant reads: its value}; re-readable.
nlohmann::json attention_options_to_json(const AttentionOptions& opt);

// Every attention key once, in table order, with the variants that read it (for the docs).
struct AttentionKeyReference {
  const AttentionOptionSpec* spec;      // the first row's spec (type, valid values, help)
  std::vector<std::string> read_by;     // variant names
};
std::vector<AttentionKeyReference> attention_key_reference();

}  // namespace sima
