// One mechanism for every JSON a user writes (experiment configs, model configs, --set
// values, sima-convert --model): strict parsing, checked values, and schema tables.
//
//   parse_json_strict(text, "run.json")   a key repeated in one object is an error naming
//                                         the key and both lines (nlohmann keeps the last)
//   json_value<int64_t>(v, "train.seed")  an integer: 3.0 is 3; 3.5, 1e30, 2^64 - 1 and
//                                         "3" are errors naming the key and what is valid
//   SchemaField<S>                        one key bound to a field of S: type, valid values,
//                                         help, which kinds (architectures, variants) read
//                                         it, and read / write / validate
//   read_schema_object(fields, s, j, ...) every key of j read by its field; an unknown key,
//                                         or one the kind does not read, is an error naming
//                                         the path and listing the keys valid at that level
//
// The experiment config (train/config/experiment_fields.cpp), the model config (models/registry.cpp)
// and the attention options (nn/attention/variants.h) are tables of SchemaField; the
// documentation table (sima-train --config-reference) is generated from them.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.h"

namespace sima {

// ---- parsing ----------------------------------------------------------------------------

// Parses `text`; a syntax error names `source` with nlohmann's message (line and column), a
// repeated key "<source>: key 'k' appears twice in one object (lines 3 and 7)".
nlohmann::json parse_json_strict(const std::string& text, const std::string& source);
// "" when no object of `text` (valid JSON) repeats a key, else the message above without source.
std::string json_duplicate_key(const std::string& text);

// ---- values -----------------------------------------------------------------------------

// The word for T in the docs ("integer") and what an error expects ("an integer").
template <class T>
struct JsonType;
template <>
struct JsonType<bool> {
  static constexpr const char* word = "bool";
  static constexpr const char* expected = "true or false";
};
template <>
struct JsonType<int64_t> {
  static constexpr const char* word = "integer";
  static constexpr const char* expected = "an integer";
};
template <>
struct JsonType<float> {
  static constexpr const char* word = "number";
  static constexpr const char* expected = "a number";
};
template <>
struct JsonType<double> {
  static constexpr const char* word = "number";
  static constexpr const char* expected = "a number";
};
template <>
struct JsonType<std::string> {
  static constexpr const char* word = "string";
  static constexpr const char* expected = "a string";
};
template <class E>
struct JsonType<std::vector<E>> {
  static inline const std::string word = std::string("list of ") + JsonType<E>::word + "s";
  static inline const std::string expected = std::string("a list of ") + JsonType<E>::word + "s";
};
template <>
struct JsonType<std::pair<double, double>> {
  static constexpr const char* word = "[number, number]";
  static constexpr const char* expected = "a list of two numbers [low, high]";
};

// The value of v as T, or a sima::Error "<path>: expected <T>, got <v>". Integers accept
// integral floats (3.0) and reject values beyond int64 naming the largest; float and double
// must be finite (float: within float's range); strings are UTF-8 (nlohmann's parser checks).
template <class T>
T json_value(const nlohmann::json& v, const std::string& path);
template <>
bool json_value<bool>(const nlohmann::json& v, const std::string& path);
template <>
int64_t json_value<int64_t>(const nlohmann::json& v, const std::string& path);
template <>
double json_value<double>(const nlohmann::json& v, const std::string& path);
template <>
float json_value<float>(const nlohmann::json& v, const std::string& path);
template <>
std::string json_value<std::string>(const nlohmann::json& v, const std::string& path);
template <>
std::pair<double, double> json_value<std::pair<double, double>>(const nlohmann::json& v, const std::string& path);

template <class V>
struct JsonList {
  static V read(const nlohmann::json& v, const std::string& path) {
    check(v.is_array(), path, ": expected ", JsonType<V>::expected, ", got ", v.dump());
    V out;
    for (size_t i = 0; i < v.size(); ++i)
      out.push_back(json_value<typename V::value_type>(v[i], path + "[" + std::to_string(i) + "]"));
    return out;
  }
};
template <class T>
T json_value(const nlohmann::json& v, const std::string& path) {
  return JsonList<T>::read(v, path);  // the vectors
}

// A value as JSON; a float as the shortest decimal that reads back to it (1e-06, not the
// double 9.999999974752427e-07), so written configs and the docs show what was meant.
nlohmann::json json_of_float(float x);
template <class T>
nlohmann::json json_of(const T& x) {
  if constexpr (std::is_same_v<T, float>) {
    return json_of_float(x);
  } else if constexpr (std::is_same_v<T, std::vector<float>>) {
    nlohmann::json j = nlohmann::json::array();
    for (float v : x) j.push_back(json_of_float(v));
    return j;
  } else {
    return nlohmann::json(x);
  }
}

// ---- rules: what values a key accepts ---------------------------------------------------

// `valid` in words for the docs ("> 0", "l1, l2, none"); why_not(x) "" or the reason.
template <class T>
struct Rule {
  std::string valid;
  std::function<std::string(const T&)> why_not;
};

std::string join_words(const std::vector<std::string>& words, const std::string& sep = ", ");
std::string number_text(double x);  // 1e-05, 0.5, 3: as a reader would write it
template <class T>
std::string value_text(const T& x) {
  if constexpr (std::is_integral_v<T>) return std::to_string(x);
  else return number_text(double(x));
}

template <class T>
Rule<T> any_value() {
  return {"", nullptr};
}
template <class T>
Rule<T> at_least(T lo) {
  return {">= " + value_text(lo), [=](const T& x) {
            return x >= lo ? std::string() : "must be >= " + value_text(lo) + ", got " + value_text(x);
          }};
}
template <class T>
Rule<T> above(T lo) {
  return {"> " + value_text(lo), [=](const T& x) {
            return x > lo ? std::string() : "must be > " + value_text(lo) + ", got " + value_text(x);
          }};
}
template <class T>
Rule<T> positive() {
  return {"> 0", [](const T& x) { return x > 0 ? std::string() : "must be positive, got " + value_text(x); }};
}
// [lo, hi], or [lo, hi) with open_hi.
template <class T>
Rule<T> within(T lo, T hi, bool open_hi = false) {
  const std::string range = "[" + value_text(lo) + ", " + value_text(hi) + (open_hi ? ")" : "]");
  return {range, [=](const T& x) {
            return x >= lo && (open_hi ? x < hi : x <= hi) ? std::string()
                                                            : "must be in " + range + ", got " + value_text(x);
          }};
}
Rule<std::string> one_of(std::vector<std::string> allowed);
// Every element of a list by `each` ("[2]: must be > 0, got 0").
template <class E>
Rule<std::vector<E>> each(Rule<E> r) {
  return {r.valid.empty() ? "" : "each " + r.valid, [=](const std::vector<E>& v) {
            if (r.why_not)
              for (size_t i = 0; i < v.size(); ++i) {
                const std::string why = r.why_not(v[i]);
                if (!why.empty()) return "[" + std::to_string(i) + "]: " + why;
              }
            return std::string();
          }};
}

// ---- the schema -------------------------------------------------------------------------

// One JSON key bound to a field of S.
template <class S>
struct SchemaField {
  std::string key;    // as written in its object ("epochs"), or the full path ("train.epochs")
  std::string type;   // bool | integer | number | string | list of ... | [number, number]
  std::string valid;  // the valid values in words ("> 0", "l1, l2, none"); "" = any of the type
  std::string help;
  std::vector<std::string> read_by;  // the kinds that read it (architectures, variants); empty: all
  // The JSON value -> the field; a sima::Error naming `path` and the valid values otherwise.
  std::function<void(S&, const nlohmann::json& value, const std::string& path)> read;
  std::function<nlohmann::json(const S&)> write;  // the field as JSON
  // "" when the field holds a valid value, else why not (names the key and the valid values).
  std::function<std::string(const S&)> validate;

  bool reads(const std::string& kind) const {
    if (read_by.empty() || kind.empty()) return true;  // no kind: every key applies
    for (const auto& k : read_by)
      if (k == kind) return true;
    return false;
  }
};

// The field `ref(s)` (a T&) of S under `key`, with its rule.
template <class T, class S, class Ref>
SchemaField<S> schema_field(std::string key, Ref ref, Rule<T> rule, std::string help,
                            std::vector<std::string> read_by = {}) {
  SchemaField<S> f;
  f.key = std::move(key);
  f.type = JsonType<T>::word;
  f.valid = rule.valid;
  f.help = std::move(help);
  f.read_by = std::move(read_by);
  auto why_not = rule.why_not;
  f.read = [=](S& s, const nlohmann::json& v, const std::string& path) {
    T x = json_value<T>(v, path);
    const std::string why = why_not ? why_not(x) : "";
    check(why.empty(), path, why.rfind("[", 0) == 0 ? "" : ": ", why);  // each(): "path[1]: ..."
    ref(s) = std::move(x);
  };
  f.write = [=](const S& s) { return json_of(ref(const_cast<S&>(s))); };
  const std::string k = f.key;
  f.validate = [=](const S& s) {
    const std::string why = why_not ? why_not(ref(const_cast<S&>(s))) : "";
    return why.empty() ? why : k + (why.rfind("[", 0) == 0 ? "" : ": ") + why;
  };
  return f;
}

// A member of S: schema_member("depth", &ModelConfig::depth, above<int64_t>(0), "blocks").
template <class S, class T>
SchemaField<S> schema_member(std::string key, T S::*member, Rule<T> rule, std::string help,
                             std::vector<std::string> read_by = {}) {
  return schema_field<T, S>(std::move(key), [member](S& s) -> T& { return s.*member; }, std::move(rule),
                            std::move(help), std::move(read_by));
}

template <class S>
const SchemaField<S>* find_schema_field(const std::vector<SchemaField<S>>& fields, const std::string& key) {
  for (const auto& f : fields)
    if (f.key == key) return &f;
  return nullptr;
}

// The keys of `fields` that `kind` reads ("" = every key), plus `extra`, in table order.
template <class S>
std::vector<std::string> schema_keys(const std::vector<SchemaField<S>>& fields, const std::string& kind = "",
                                     const std::vector<std::string>& extra = {}) {
  std::vector<std::string> keys;
  for (const auto& f : fields)
    if (kind.empty() || f.reads(kind)) keys.push_back(f.key);
  for (const auto& e : extra)
    if (std::find(keys.begin(), keys.end(), e) == keys.end()) keys.push_back(e);
  return keys;
}

// Reads every key of the object `j` into s except `skip`. `kind` (e.g. the architecture)
// selects the fields that apply; `kind_name` says what it is ("arch"). Errors:
//   "model.foo: unknown key (valid keys for arch cvt: arch, name, ...)"
//   "model.embed_dim: arch 'cvt' does not read it (read by: deit, xcit; valid keys for arch cvt: ...)"
template <class S>
void read_schema_object(const std::vector<SchemaField<S>>& fields, S& s, const nlohmann::json& j,
                        const std::string& where, const std::vector<std::string>& skip = {},
                        const std::string& kind = "", const std::string& kind_name = "") {
  check(j.is_object(), where, ": expected a JSON object, got ", j.dump());
  const std::string for_kind = kind.empty() ? "" : " for " + kind_name + " " + kind;
  for (const auto& [key, value] : j.items()) {
    bool skipped = false;
    for (const auto& k : skip) skipped = skipped || k == key;
    if (skipped) continue;
    const SchemaField<S>* f = find_schema_field(fields, key);
    const std::string valid = join_words(schema_keys(fields, kind, skip));
    check(f != nullptr, where, ".", key, ": unknown key (valid keys", for_kind, ": ", valid, ")");
    check(f->reads(kind), where, ".", key, ": ", kind_name, " '", kind, "' does not read it (read by: ",
          join_words(f->read_by), "; valid keys", for_kind, ": ", valid, ")");
    f->read(s, value, where + "." + key);
  }
}

}  // namespace sima
