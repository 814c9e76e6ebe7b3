// Strict JSON parsing and checked values (json_schema.h).
#include "core/json_schema.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>

namespace sima {

using json = nlohmann::json;

namespace {

// The line (1-based) of every object key of `text` in document order: a string followed by
// ':' is a key. `text` is valid JSON, so strings and escapes are well formed.
std::vector<int64_t> key_lines(const std::string& text) {
  std::vector<int64_t> lines;
  int64_t line = 1;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\n') ++line;
    if (text[i] != '"') continue;
    const int64_t start_line = line;
    for (++i; i < text.size() && text[i] != '"'; ++i)
      if (text[i] == '\\') ++i;  // JSON strings hold no raw newline
    size_t k = i + 1;
    while (k < text.size() && (text[k] == ' ' || text[k] == '\t' || text[k] == '\r' || text[k] == '\n')) ++k;
    if (k < text.size() && text[k] == ':') lines.push_back(start_line);
  }
  return lines;
}

}  // namespace

std::string json_duplicate_key(const std::string& text) {
  // The parser callback sees keys in document order; per open object, its keys so far and
  // their indices in that order.
  int64_t index = 0, dup_index = -1, dup_first = -1;
  std::string dup;
  std::vector<std::vector<std::pair<std::string, int64_t>>> seen;
  json::parser_callback_t cb = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      seen.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      if (!seen.empty()) seen.pop_back();
    } else if (event == json::parse_event_t::key) {
      const std::string key = parsed.get<std::string>();
      if (dup_index < 0 && !seen.empty()) {
        for (const auto& [k, at] : seen.back())
          if (k == key) dup = key, dup_index = index, dup_first = at;
        seen.back().push_back({key, index});
      }
      ++index;
    }
    return true;
  };
  const json parsed = json::parse(text, cb);
  (void)parsed;
  if (dup_index < 0) return "";
  const std::vector<int64_t> lines = key_lines(text);
  std::ostringstream s;
  s << "key '" << dup << "' appears twice in one object";
  if (size_t(dup_index) < lines.size())
    s << " (lines " << lines[size_t(dup_first)] << " and " << lines[size_t(dup_index)] << ")";
  s << "; a key may be given once";
  return s.str();
}

json parse_json_strict(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    fail(source, ": not valid JSON (byte ", e.byte, "): ", e.what());
  } catch (const json::exception& e) {  // out_of_range: a number beyond double (1e999; fuzz finding)
    fail(source, ": not valid JSON: ", e.what());
  }
  const std::string dup = json_duplicate_key(text);
  check(dup.empty(), source, ": ", dup);
  return j;
}

// ---- values -----------------------------------------------------------------------------

template <>
bool json_value<bool>(const json& v, const std::string& path) {
  check(v.is_boolean(), path, ": expected true or false, got ", v.dump());
  return v.get<bool>();
}

template <>
int64_t json_value<int64_t>(const json& v, const std::string& path) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  check(v.is_number(), path, ": expected an integer, got ", v.dump());
  if (v.is_number_unsigned()) {
    check(v.get<uint64_t>() <= uint64_t(kMax), path, ": ", v.dump(), " is too large (the largest allowed is ", kMax,
          ")");
    return int64_t(v.get<uint64_t>());
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  // A float: 3.0 is 3 (JSON writers often emit integral doubles); 3.5 and 1e30 are not.
  const double x = v.get<double>();
  check(std::floor(x) == x, path, ": expected an integer, got ", v.dump());
  check(x >= -9223372036854775808.0 && x < 9223372036854775808.0, path, ": ", v.dump(),
        " is too large (the largest allowed is ", kMax, ")");
  return int64_t(x);
}

template <>
double json_value<double>(const json& v, const std::string& path) {
  check(v.is_number(), path, ": expected a number, got ", v.dump());
  const double x = v.get<double>();
  check(std::isfinite(x), path, ": must be finite, got ", v.dump());
  return x;
}

template <>
float json_value<float>(const json& v, const std::string& path) {
  const double x = json_value<double>(v, path);
  check(std::abs(x) <= double(std::numeric_limits<float>::max()), path, ": ", v.dump(),
        " is beyond a float (the largest allowed is ", std::numeric_limits<float>::max(), ")");
  return float(x);
}

template <>
std::string json_value<std::string>(const json& v, const std::string& path) {
  check(v.is_string(), path, ": expected a string, got ", v.dump());
  return v.get<std::string>();
}

template <>
std::pair<double, double> json_value<std::pair<double, double>>(const json& v, const std::string& path) {
  check(v.is_array() && v.size() == 2, path, ": expected a list of two numbers [low, high], got ", v.dump());
  std::pair<double, double> p{json_value<double>(v[0], path + "[0]"), json_value<double>(v[1], path + "[1]")};
  check(p.first <= p.second, path, ": low must not exceed high, got ", v.dump());
  return p;
}

json json_of_float(float x) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);  // shortest round-trip form
  return json(std::strtod(std::string(buf, r.ptr).c_str(), nullptr));
}

// ---- rules ------------------------------------------------------------------------------

std::string join_words(const std::vector<std::string>& words, const std::string& sep) {
  std::string s;
  for (const auto& w : words) s += (s.empty() ? "" : sep) + w;
  return s;
}

std::string number_text(double x) {
  std::ostringstream s;
  s.precision(std::abs(x) >= 1e15 ? 19 : 6);
  s << x;
  return s.str();
}

Rule<std::string> one_of(std::vector<std::string> allowed) {
  std::vector<std::string> shown;  // "" as a visible word
  for (const auto& a : allowed) shown.push_back(a.empty() ? "\"\"" : a);
  const std::string words = join_words(shown);
  return {words, [=](const std::string& x) {
            return std::find(allowed.begin(), allowed.end(), x) != allowed.end()
                       ? std::string()
                       : "'" + x + "' is not one of: " + words;
          }};
}

}  // namespace sima
