// --set key.path=value: one override applied to a config document before it is read.
#include <algorithm>

#include "core/error.h"
#include "core/json_schema.h"
#include "core/utf8.h"
#include "train/config/experiment_config.h"

namespace sima {

using json = nlohmann::json;

namespace {

// The value: JSON when it parses as JSON (numbers, true/false, lists, quoted strings; a
// repeated key in an object is an error), else the text as a string.
json override_value(const std::string& assignment, const std::string& text) {
  json value;
  try {
    value = json::parse(text);
  } catch (const json::parse_error&) {
    return text;  // a bare word: a string
  } catch (const json::exception& e) {  // out_of_range: a number beyond double (1e999; fuzz finding)
    fail("--set ", assignment, ": ", e.what());
  }
  const std::string dup = json_duplicate_key(text);
  check(dup.empty(), "--set ", assignment, ": ", dup);
  return value;
}

std::vector<std::string> split_path(const std::string& assignment, const std::string& path) {
  std::vector<std::string> parts;
  for (size_t start = 0;;) {
    const size_t dot = path.find('.', start);
    parts.push_back(path.substr(start, dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  for (const auto& p : parts) check(!p.empty(), "--set ", assignment, ": empty key in '", path, "'");
  return parts;
}

// A key outside "model" must be in the schema; a section alone ("train=5") is not a key.
void check_key(const std::string& assignment, const std::vector<std::string>& parts, const std::string& path) {
  const std::vector<std::string> sections = config_sections();
  const bool section = std::find(sections.begin(), sections.end(), parts[0]) != sections.end();
  if (parts.size() == 1 && section) {
    const std::string keys = config_section_keys(parts[0]);
    const std::string example = parts[0] == "model"   ? "model.name=deit_tiny_patch4_28"
                                : parts[0] == "train" ? "train.epochs=5"
                                                      : parts[0] + "." + keys.substr(0, keys.find(',')) + "=...";
    fail("--set ", assignment, ": '", parts[0], "' is a section, not a key; set one of its keys: --set ", example,
         " (keys in ", parts[0], ": ", keys, ")");
  }
  if (parts[0] != "model") check(find_config_field(path) != nullptr, "--set ", assignment, ": ", config_unknown_key(path));
}

}  // namespace

void apply_override(json& j, const std::string& assignment) {
  // A value that is not JSON is kept as a string, and nlohmann cannot print a string that is
  // not UTF-8 (its type_error escaped the app's error path: fuzz finding).
  const int64_t bad = invalid_utf8_at(assignment);
  check(bad < 0, "--set ", assignment.substr(0, std::min<size_t>(size_t(bad), assignment.find('='))),
        ": not valid UTF-8 (byte ", bad, " of the argument)");
  const auto eq = assignment.find('=');
  check(eq != std::string::npos && eq > 0, "--set ", assignment, ": expected key.path=value");
  const std::string path = assignment.substr(0, eq), text = assignment.substr(eq + 1);
  const json value = override_value(assignment, text);
  const std::vector<std::string> parts = split_path(assignment, path);
  check_key(assignment, parts, path);
  check(j.is_object(), "--set ", assignment, ": the config is not a JSON object");
  json* node = &j;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    json& next = (*node)[parts[i]];
    if (next.is_null()) next = json::object();
    check(next.is_object(), "--set ", assignment, ": '", parts[i], "' is not an object in the config");
    node = &next;
  }
  (*node)[parts.back()] = value;
}

}  // namespace sima
