// The variant table (variants.h): one row per attention variant, and what derives from it.
#include "nn/attention/variants.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/error.h"
#include "nn/attention/efficient.h"
#include "nn/attention/linear_attention.h"
#include "nn/attention/linformer.h"
#include "nn/attention/nystromformer.h"
#include "nn/attention/performer.h"
#include "nn/attention/relu_attention.h"
#include "nn/attention/sima.h"
#include "nn/attention/soft.h"
#include "nn/attention/softmax_attention.h"
#include "nn/attention/xca.h"

namespace sima {

using json = nlohmann::json;

namespace {

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// ---- option specs: a JSON key bound to one AttentionOptions field ---------------------

// why_not(value): "" when valid, else the reason ("must be > 0, got -1").
template <class T>
AttentionOptionSpec field(const char* key, T AttentionOptions::*member, std::string valid,
                          std::function<std::string(const T&)> why_not, const char* help) {
  AttentionOptionSpec s;
  s.key = key;
  s.type = JsonType<T>::word;
  s.valid = valid;
  s.help = help;
  s.read = [=](AttentionOptions& o, const json& v, const std::string& path) {
    T x = json_value<T>(v, path);
    const std::string why = why_not ? why_not(x) : "";
    check(why.empty(), path, ": ", why);
    o.*member = x;
  };
  s.write = [=](const AttentionOptions& o) { return json(o.*member); };
  s.validate = [=](const AttentionOptions& o) {
    const std::string why = why_not ? why_not(o.*member) : "";
    return why.empty() ? why : std::string(key) + ": " + why;
  };
  return s;
}

AttentionOptionSpec choice(const char* key, std::string AttentionOptions::*member,
                           std::vector<std::string> allowed, const char* help) {
  return field<std::string>(key, member, join(allowed), [=](const std::string& x) {
    return std::find(allowed.begin(), allowed.end(), x) != allowed.end()
               ? std::string()
               : "'" + x + "' is not one of: " + join(allowed);
  }, help);
}

AttentionOptionSpec flag(const char* key, bool AttentionOptions::*member, const char* help) {
  return field<bool>(key, member, "true, false", nullptr, help);
}

template <class T>
AttentionOptionSpec at_least(const char* key, T AttentionOptions::*member, T lo, bool open, const char* help) {
  std::ostringstream bound;  // "0", not json's "0.0"
  bound << lo;
  const std::string valid = (open ? "> " : ">= ") + bound.str();
  return field<T>(key, member, valid, [=](const T& x) {
    const bool ok = std::isfinite(double(x)) && (open ? x > lo : x >= lo);
    return ok ? std::string() : "must be " + valid + ", got " + json(x).dump();
  }, help);
}

AttentionOptionSpec finite(const char* key, float AttentionOptions::*member, const char* help) {
  return field<float>(key, member, "finite", [](const float& x) {
    return std::isfinite(x) ? std::string() : "must be finite, got " + json(x).dump();
  }, help);
}

// A kernel size: 0 (none) or an odd positive integer.
AttentionOptionSpec odd_or_zero(const char* key, int64_t AttentionOptions::*member, const char* help) {
  return field<int64_t>(key, member, "0 or odd > 0", [](const int64_t& x) {
    return x == 0 || (x > 0 && x % 2 == 1) ? std::string() : "must be 0 or an odd number > 0, got " + std::to_string(x);
  }, help);
}

template <class T>
std::function<std::shared_ptr<Attention>(const AttentionOptions&)> make() {
  return [](const AttentionOptions& o) { return std::make_shared<T>(o); };
}

// ---- the rows: each holds every fact of its variant ------------------------------------
// Options, traits and the parameters the module adds to qkv / proj (its constructor's), with
// D = C, h heads of width d; Linear(a, b) with bias is a·b + b, a LayerNorm(d) 2d.

double heads(const AttentionOptions& o) { return o.num_heads > 0 ? double(o.num_heads) : 0.0; }
// A row with its name, help and factory; the row functions below add the rest.
template <class T>
AttentionVariant row_of(const char* name, const char* help) {
  AttentionVariant row;
  row.name = name;
  row.help = help;
  row.make = make<T>();
  return row;
}

double positive(int64_t v) { return v > 0 ? double(v) : 0.0; }
double head_width(const AttentionOptions& o) { return o.num_heads > 0 ? positive(o.dim / o.num_heads) : 0.0; }

AttentionVariant softmax_row() {
  AttentionVariant row = row_of<SoftmaxAttention>("softmax",
      "softmax(q k^T / sqrt(d)) v (ViT, DeiT; timm's Attention)");
  row.traits.strided_kv = row.traits.softmax_row = row.traits.token_maps = true;
  return row;
}

AttentionVariant xca_row() {
  AttentionVariant row = row_of<XCAttention>("xca", "cross-covariance attention over channels (XCiT; timm's XCA)");
  row.extra_parameters = [](const AttentionOptions& o) { return heads(o); };  // temperature (h, 1, 1)
  return row;
}

AttentionVariant sima_row() {
  AttentionVariant row = row_of<SimaAttention>("sima", "SimA: l1-normalised q, k, no softmax (UCDvision/sima)");
  row.options = {
      choice("norm", &AttentionOptions::norm, sima_norm_names(),
             "how q and k are normalised over the tokens per channel (l1: the paper)"),
      choice("order", &AttentionOptions::order, sima_order_names(),
             "product order; auto = (q k^T) v iff N < d, as the official code"),
      at_least<float>("eps", &AttentionOptions::eps, 0.f, true, "floor of the q, k channel norms (F.normalize's eps)")};
  row.traits.strided_kv = true;
  row.traits.class_attention = "sima";
  return row;
}

AttentionVariant relu_row() {
  AttentionVariant row = row_of<ReluAttention>("relu",
      "h(q k^T / sqrt(d)) v / N^alpha, h elementwise (ReLU attention)");
  row.options = {
      finite("alpha", &AttentionOptions::alpha, "the output is scaled by N^-alpha"),
      choice("fn", &AttentionOptions::fn, {"relu", "relu2", "gelu", "softplus", "identity", "relu6", "sigmoid"},
             "the function applied to the scores q k^T / sqrt(d)"),
      flag("qk_norm", &AttentionOptions::qk_norm, "LayerNorm over d on q and k"),
      flag("qk_norm_bias", &AttentionOptions::qk_norm_bias,
           "relu: the qk LayerNorm has a bias (timm); false: scale only (Flax normalize_qk)"),
      flag("gate", &AttentionOptions::gate, "multiply the merged heads by Linear(C, C)(x) before proj")};
  row.traits.token_maps = true;
  row.extra_parameters = [](const AttentionOptions& o) {
    const double d = head_width(o), D = positive(o.dim);
    return (o.qk_norm ? 2 * (d + (o.qk_norm_bias ? d : 0.0)) : 0.0) + (o.gate ? D * D + D : 0.0);
  };
  return row;
}

AttentionVariant soft_row() {
  AttentionVariant row = row_of<SoftAttention>("soft",
      "SOFT: Gaussian kernel with Nystrom bottleneck tokens, q = k (fudan-zvg/SOFT)");
  row.options = {
      at_least<int64_t>("sr", &AttentionOptions::sr, 1, false, "bottleneck kernel = stride on the token grid"),
      choice("bottleneck", &AttentionOptions::bottleneck, {"conv", "avgpool"},
             "how the bottleneck tokens are made from q"),
      at_least<int64_t>("nr_iters", &AttentionOptions::nr_iters, 0, false,
                        "Newton-Raphson iterations of the pseudo-inverse"),
      at_least<float>("ridge", &AttentionOptions::ridge, 0.f, false,
                      "soft: iterate on A + ridge I (the official 0.01; 0: none)"),
      odd_or_zero("v_conv", &AttentionOptions::v_conv,
                  "soft: kernel of the depthwise conv on v added to the output (0: none)"),
      choice("nr_backward", &AttentionOptions::nr_backward, {"inverse", "unrolled"},
             "soft: inverse = the official -V^T G V^T; unrolled = through the iterations")};
  row.options.push_back(own_option<int64_t>(
      "softmax_max_tokens", 0, sima::at_least<int64_t>(0),
      "soft: a layer built for at most this many tokens (class token included) runs softmax attention "
      "instead, as the official SOFT vision model's last stage (7x7 + class token = 50 at 224 px); 0: never"));
  row.layer_variant = [](const AttentionOptions& o) {
    const int64_t most = attention_option<int64_t>(o, "softmax_max_tokens");
    return most > 0 && o.num_tokens > 0 && o.num_tokens <= most ? "softmax" : "soft";
  };
  row.traits.shares_qk = row.traits.needs_grid = true;
  row.traits.min_grid_side = [](const AttentionOptions& o) { return o.sr; };
  row.extra_parameters = [](const AttentionOptions& o) {
    const double d = head_width(o), k = positive(o.v_conv), sr = positive(o.sr);
    return (o.v_conv > 0 ? heads(o) * k * k : 0.0) +                   // depthwise Conv2d(h, h, k), no bias
           (o.bottleneck == "conv" ? d * d * sr * sr + 2 * d : 0.0);  // Conv2d(d, d, sr) + LayerNorm(d)
  };
  return row;
}

AttentionVariant performer_row() {
  AttentionVariant row = row_of<PerformerAttention>("performer",
      "FAVOR+: positive orthogonal random features (Performer)");  // its features are buffers, not parameters
  row.options = {
      at_least<int64_t>("nb_features", &AttentionOptions::nb_features, 0, false,
                        "performer: random features m (0: int(d ln d))"),
      at_least<int64_t>("redraw_interval", &AttentionOptions::redraw_interval, 0, false,
                        "performer: training forward calls between redraws (0: never)"),
      at_least<int64_t>("feature_seed", &AttentionOptions::feature_seed, 0, false,
                        "performer: seed of every feature draw"),
      field<int64_t>("ortho_scaling", &AttentionOptions::ortho_scaling, "0, 1",
                     [](const int64_t& x) {
                       return x == 0 || x == 1 ? std::string() : "must be 0 or 1, got " + std::to_string(x);
                     },
                     "performer: row lengths of the features (0: Gaussian, 1: sqrt(d))"),
      at_least<float>("feature_eps", &AttentionOptions::feature_eps, 0.f, true,
                      "performer: added to every random feature")};
  return row;
}

AttentionVariant nystromformer_row() {
  AttentionVariant row = row_of<NystromAttention>("nystromformer",
      "Nystrom approximation with segment-mean landmarks (Nystromformer)");
  row.options = {
      at_least<int64_t>("num_landmarks", &AttentionOptions::num_landmarks, 1, false,
                        "nystromformer: segment-mean landmarks m (<= N)"),
      at_least<int64_t>("pinv_iters", &AttentionOptions::pinv_iters, 0, false,
                        "nystromformer: iterations of the pseudo-inverse"),
      choice("pinv_init", &AttentionOptions::pinv_init, {"original", "exact"},
             "nystromformer: original = one scale per batch (official); exact = per matrix"),
      odd_or_zero("conv_kernel_size", &AttentionOptions::conv_kernel_size,
                  "nystromformer: depthwise conv of v over the tokens (0: none)")};
  row.extra_parameters = [](const AttentionOptions& o) {
    return o.conv_kernel_size > 0 ? heads(o) * positive(o.conv_kernel_size) : 0.0;  // Conv2d(h, h, (k, 1)), no bias
  };
  return row;
}

AttentionVariant linformer_row() {
  AttentionVariant row = row_of<LinformerAttention>("linformer",
      "softmax(q (E k)^T / sqrt(d)) (F v), E, F learned along the tokens (Linformer)");
  row.options = {
      at_least<int64_t>("proj_len", &AttentionOptions::proj_len, 0, false,
                        "linformer: tokens k that K, V are projected to (0: N / 4)"),
      choice("sharing", &AttentionOptions::sharing, {"headwise", "kv", "none"},
             "linformer: one E, F for all heads (fairseq), E = F too, or per head"),
      choice("compress", &AttentionOptions::compress, {"kv", "input"},
             "linformer: E, F act on k, v (the paper) or on x before the projection (fairseq)")};
  row.extra_parameters = [](const AttentionOptions& o) {  // E, F (k, N): one pair, one shared, or h pairs
    const double k = o.proj_len > 0 ? positive(o.proj_len) : std::max(1.0, double(o.num_tokens / 4));
    const double one = (o.sharing == "none" ? heads(o) : 1.0) * k * positive(o.num_tokens);
    return o.sharing == "kv" ? one : 2 * one;
  };
  return row;
}

AttentionVariant cosformer_row() {
  AttentionVariant row = row_of<CosformerAttention>(
      "cosformer", "linear attention with phi = relu, optional cos re-weighting (cosFormer)");
  row.options = {choice("reweight", &AttentionOptions::reweight, {"none", "cos1d", "cos2d"},
                        "cosformer: none (SimA Table 2), cos1d (cosFormer Eq. 10), cos2d (SimA A.4)")};
  return row;
}

std::deque<AttentionVariant> build_table() {
  return {
      softmax_row(),
      xca_row(),
      sima_row(),
      relu_row(),
      soft_row(),
      row_of<LinearEluAttention>("linear_elu", "linear attention with phi = elu + 1 (Katharopoulos et al.)"),
      cosformer_row(),
      performer_row(),
      nystromformer_row(),
      row_of<EfficientAttention>("efficient",
                                 "softmax of q over channels, of k over tokens, q (k^T v) (Efficient Attention)"),
      linformer_row(),
  };
}

}  // namespace

const AttentionOptionSpec* AttentionVariant::option(const std::string& key) const {
  for (const auto& s : options)
    if (s.key == key) return &s;
  return nullptr;
}

std::vector<std::string> AttentionVariant::option_keys() const {
  std::vector<std::string> keys;
  for (const auto& s : options) keys.push_back(s.key);
  return keys;
}

std::string AttentionVariant::reads() const {
  std::vector<std::string> keys = option_keys();
  keys.insert(keys.begin(), "type");
  return join(keys);
}

namespace {

std::deque<AttentionVariant>& table() {
  static std::deque<AttentionVariant> rows = build_table();
  return rows;
}

// Whether the JSON value has the spec type word (bool, integer, number, string).
bool json_has_type(const json& v, const std::string& type) {
  if (type == "bool") return v.is_boolean();
  if (type == "integer") return v.is_number_integer();
  if (type == "number") return v.is_number();
  return v.is_string();
}

void check_option_spec(const AttentionVariant& row, const AttentionOptionSpec& s, const std::string& who) {
  check(!s.key.empty() && s.key != "type", who, "an option key must be a non-empty name other than 'type', got '",
        s.key, "'");
  const std::vector<std::string> types = {"bool", "integer", "number", "string"};
  check(std::find(types.begin(), types.end(), s.type) != types.end(), who, "option ", s.key, ": type '", s.type,
        "' is not one of: ", join(types));
  check(s.read && s.write && s.validate, who, "option ", s.key, ": read, write and validate must all be set");
  check(!s.help.empty() && !s.valid.empty(), who, "option ", s.key,
        ": help and valid must not be empty (--config-reference lists them)");
  int count = 0;
  for (const auto& o : row.options) count += o.key == s.key;
  check(count == 1, who, "option ", s.key, " is listed ", count, " times");
  const AttentionOptions defaults;
  const json value = s.write(defaults);
  check(json_has_type(value, s.type), who, "option ", s.key, ": write() of the defaults gives ", value.dump(),
        ", not a JSON ", s.type);
  for (const auto& other : table()) {
    const AttentionOptionSpec* o = other.option(s.key);
    if (!o) continue;
    check(o->type == s.type && o->write(defaults) == value, who, "option ", s.key, " (", s.type, ", default ",
          value.dump(), ") is read by variant '", other.name, "' as ", o->type, " with default ",
          o->write(defaults).dump(), "; one key is one AttentionOptions field");
  }
}

}  // namespace

const std::deque<AttentionVariant>& attention_variants() { return table(); }

void register_attention_variant(AttentionVariant row) {
  const std::string who = "register_attention_variant: variant '" + row.name + "': ";
  const bool word = !row.name.empty() && std::all_of(row.name.begin(), row.name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
  check(word, who, "the name must be non-empty and use only a-z, 0-9 and _");
  for (const auto& v : table())
    check(v.name != row.name, who, "the name is taken (variants: ", join(attention_variant_names()), ")");
  check(!row.help.empty(), who, "help must not be empty (--config-reference lists it)");
  check(static_cast<bool>(row.make), who, "make must be set");
  const std::string& cls = row.traits.class_attention;
  check(cls == "softmax" || cls == "sima", who, "traits.class_attention must be softmax or sima, got '", cls, "'");
  for (const auto& s : row.options) check_option_spec(row, s, who);
  table().push_back(std::move(row));
}

std::vector<std::string> attention_variant_names() {
  std::vector<std::string> names;
  for (const auto& v : attention_variants()) names.push_back(v.name);
  return names;
}

const AttentionVariant& attention_variant(const std::string& name, const std::string& who) {
  for (const auto& v : attention_variants())
    if (v.name == name) return v;
  fail(who, who.empty() ? "" : ": ", "attention variant '", name, "' is unknown (allowed: ",
       join(attention_variant_names()), ")");
}

double attention_extra_parameters(const AttentionOptions& opt) {
  const AttentionVariant& row = attention_variant(opt.variant, "model");
  return row.extra_parameters ? row.extra_parameters(opt) : 0.0;
}

AttentionOptions layer_attention_options(const AttentionOptions& opt) {
  const AttentionVariant& row = attention_variant(opt.variant, "model");
  const std::string name = row.layer_variant ? row.layer_variant(opt) : row.name;
  if (name == row.name) return opt;
  return attention_options_from_json(json{{"type", name}}, opt, "attention (a " + row.name + " layer run as " + name + ")");
}

int64_t attention_min_grid_side(const AttentionOptions& opt) {
  const AttentionTraits& t = attention_variant(opt.variant).traits;
  return t.min_grid_side ? std::max<int64_t>(1, t.min_grid_side(opt)) : 1;
}

AttentionOptions attention_options_from_json(const json& j, AttentionOptions o, const std::string& where) {
  check(j.is_object(), where, ": expected a JSON object, got ", j.dump());
  if (j.contains("type")) {
    const std::string type = json_value<std::string>(j["type"], where + ".type");
    const AttentionVariant& row = attention_variant(type, where + ".type");
    // A new variant starts from the defaults of every key it does not read.
    const AttentionOptions defaults;
    for (const auto& other : attention_variants())
      for (const auto& s : other.options)
        if (!row.option(s.key)) s.read(o, s.write(defaults), where + "." + s.key);
    o.variant = type;
  }
  const AttentionVariant& row = attention_variant(o.variant, where + ".type");
  for (const auto& [key, value] : j.items()) {
    if (key == "type") continue;
    const AttentionOptionSpec* s = row.option(key);
    if (!s) {
      std::vector<std::string> readers;
      for (const auto& other : attention_variants())
        if (other.option(key)) readers.push_back(other.name);
      fail(where, ".", key, ": attention variant '", row.name, "' does not read '", key, "' (it reads: ",
           row.reads(), readers.empty() ? "; no variant reads it" : "; read by: " + join(readers), ")");
    }
    s->read(o, value, where + "." + key);
  }
  return o;
}

json drop_unread_default_keys(const json& j) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) return j;
  const std::string type = j["type"].get<std::string>();
  const auto& names = attention_variant_names();
  if (std::find(names.begin(), names.end(), type) == names.end()) return j;
  const AttentionVariant& row = attention_variant(type);
  const AttentionOptions defaults;
  json out = j;
  for (const auto& other : attention_variants())
    for (const auto& s : other.options)
      if (!row.option(s.key) && out.contains(s.key) && out[s.key] == s.write(defaults)) out.erase(s.key);
  return out;
}

json attention_options_to_json(const AttentionOptions& opt) {
  json j = {{"type", opt.variant}};
  for (const auto& s : attention_variant(opt.variant).options) j[s.key] = s.write(opt);
  return j;
}

std::vector<AttentionKeyReference> attention_key_reference() {
  std::vector<AttentionKeyReference> out;
  for (const auto& v : attention_variants())
    for (const auto& s : v.options) {
      auto it = std::find_if(out.begin(), out.end(), [&](const auto& r) { return r.spec->key == s.key; });
      if (it == out.end()) out.push_back({&s, {v.name}});
      else it->read_by.push_back(v.name);
    }
  return out;
}

}  // namespace sima
