// The variant table (variants.h): what derives from its rows (the built-in rows: variant_rows.cpp).
#include "nn/attention/variants.h"

#include <algorithm>

#include "core/error.h"

namespace sima {

using json = nlohmann::json;

namespace {

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
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
  static std::deque<AttentionVariant> rows = builtin_attention_variants();
  return rows;
}

// Whether the JSON value has the spec type word (bool, integer, number, string).
bool json_has_type(const json& v, const std::string& type) {
  if (type == "bool") return v.is_boolean();
  if (type == "integer") return v.is_number_integer();
  if (type == "number") return v.is_number();
  return v.is_string();
}

// Two defaults of one key: the same JSON, or numbers that are the same float (a built-in float
// key writes 1e-12f as 9.999999960041972e-13, own_option<float> as 1e-12).
bool same_value(const json& a, const json& b) {
  if (a.is_number_float() || b.is_number_float())
    return a.is_number() && b.is_number() && float(a.get<double>()) == float(b.get<double>());
  return a == b;
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
    check(o->type == s.type && same_value(o->write(defaults), value), who, "option ", s.key, " (", s.type, ", default ",
          value.dump(), ") is read by variant '", other.name, "' as ", o->type, " with default ",
          o->write(defaults).dump(), "; one key is one option of every row that reads it");
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

int64_t attention_exp_calls(const AttentionOptions& opt, int64_t B, int64_t N, int64_t H, int64_t W) {
  const AttentionVariant& row = attention_variant(opt.variant, "model");
  return row.exp_calls ? row.exp_calls(opt, B, N, H, W) : 0;
}

AttentionOptions& AttentionOptions::with(const std::string& key, const json& value) {
  *this = attention_options_from_json(json{{key, value}}, *this, "attention");
  return *this;
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
    std::vector<std::string> unread;
    for (const auto& [key, value] : o.own.items())
      if (!row.option(key)) unread.push_back(key);
    for (const auto& key : unread) o.own.erase(key);
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
