// The command-line flag parser of the apps (see cli.h).
#include "train/config/cli.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "core/error.h"

namespace sima {

namespace {

bool starts_with_dashes(const std::string& s) { return s.size() >= 2 && s[0] == '-' && s[1] == '-'; }

// The value of a flag that takes one: "--name=v" (eq at the '='), else the next argument (i moves
// past it); appended to vals, the values seen so far. Returns the error, or "".
std::string take_value(const std::string& name, const std::string& metavar, const std::string& arg, size_t eq,
                       int argc, const char* const* argv, int& i, std::vector<std::string>& vals) {
  std::string v;
  if (eq != std::string::npos) {
    v = arg.substr(eq + 1);
  } else {
    if (i + 1 >= argc || starts_with_dashes(argv[i + 1])) return "--" + name + " needs a value " + metavar;
    v = argv[++i];
  }
  // An empty value ("--out ''") would fall back to the default unseen; a second one would
  // silently replace the first: both are refused.
  if (v.empty()) return "--" + name + " is empty; give a " + metavar;
  if (!vals.empty()) return "--" + name + " is given twice ('" + vals.back() + "' and '" + v + "'); give it once";
  vals.push_back(v);
  return "";
}

// The values of a repeated flag: "--name=v" and every argument after it up to the next flag
// (i moves past them), appended to vals. Returns the error, or "".
std::string take_values(const std::string& name, const std::string& metavar, const std::string& arg, size_t eq,
                        int argc, const char* const* argv, int& i, std::vector<std::string>& vals) {
  const size_t before = vals.size();
  if (eq != std::string::npos) vals.push_back(arg.substr(eq + 1));
  while (i + 1 < argc && !starts_with_dashes(argv[i + 1])) vals.push_back(argv[++i]);
  if (vals.size() == before) return "--" + name + " needs at least one value " + metavar;
  return "";
}

}  // namespace

Cli::Cli(std::string program, std::string description)
    : program_(std::move(program)), description_(std::move(description)) {}

void Cli::flag(const std::string& name, const std::string& metavar, const std::string& help, bool required,
               const std::string& default_value) {
  check(find(name) == nullptr && name != "help", "Cli: flag --", name, " is declared twice");
  specs_.push_back({name, metavar, help, default_value, Spec::Value, required});
}

void Cli::repeated(const std::string& name, const std::string& metavar, const std::string& help) {
  check(find(name) == nullptr && name != "help", "Cli: flag --", name, " is declared twice");
  specs_.push_back({name, metavar, help, "", Spec::Repeated, false});
}

void Cli::option(const std::string& name, const std::string& help) {
  check(find(name) == nullptr && name != "help", "Cli: flag --", name, " is declared twice");
  specs_.push_back({name, "", help, "", Spec::Switch, false});
}

const Cli::Spec* Cli::find(const std::string& name) const {
  for (const Spec& s : specs_)
    if (s.name == name) return &s;
  return nullptr;
}

// Walks argv once. A malformed command line prints one error line and returns false with
// exit code 2; --help prints the usage and returns false with exit code 0.
bool Cli::parse(int argc, const char* const* argv) {
  values_.clear();
  exit_code_ = 0;
  auto error = [&](const std::string& msg) {
    std::fprintf(stderr, "%s: error: %s (try --help)\n", program_.c_str(), msg.c_str());
    exit_code_ = 2;
    return false;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << usage();
      std::cout.flush();
      exit_code_ = 0;
      return false;
    }
    if (arg == "--version" && !version_.empty()) {
      std::cout << program_ << " " << version_ << "\n";
      std::cout.flush();
      exit_code_ = 0;
      return false;
    }
    if (!starts_with_dashes(arg) || arg == "--") return error("unexpected argument '" + arg + "'");
    // --name or --name=value
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const Spec* spec = find(name);
    if (spec == nullptr) return error("unknown flag --" + name);
    std::vector<std::string>& vals = values_[name];
    std::string err;
    if (spec->kind == Spec::Switch) {
      if (eq != std::string::npos) err = "--" + name + " is a switch and takes no value";
      else vals.push_back("");
    } else if (spec->kind == Spec::Value) {
      err = take_value(name, spec->metavar, arg, eq, argc, argv, i, vals);
    } else {
      err = take_values(name, spec->metavar, arg, eq, argc, argv, i, vals);
    }
    if (!err.empty()) return error(err);
  }
  for (const Spec& s : specs_)
    if (s.required && !values_.count(s.name)) return error("--" + s.name + " " + s.metavar + " is required");
  return true;
}

// usage: <program> --required X [--flag X] ... [--switch]
//
// <description>
//
// flags:
//   --name METAVAR     help (required | default: value)
std::string Cli::usage() const {
  auto synopsis = [](const Spec& s) {
    std::string t = "--" + s.name;
    if (s.kind != Spec::Switch) t += " " + s.metavar;
    if (s.kind == Spec::Repeated) t += "...";
    return t;
  };
  // The synopsis, wrapped at 100 columns under the program name.
  const std::string head = "usage: " + program_;
  std::string out = head;
  size_t column = head.size();
  for (const Spec& s : specs_) {
    std::string item = synopsis(s);
    if (!s.required) item.insert(0, 1, '[').push_back(']');
    if (column + 1 + item.size() > 100) {
      out.push_back('\n');
      out.append(head.size(), ' ');
      column = head.size();
    }
    out.push_back(' ');
    out += item;
    column += 1 + item.size();
  }
  out += "\n\n" + description_ + "\n\nflags:\n";
  size_t width = std::string(version_.empty() ? "--help" : "--version").size();
  for (const Spec& s : specs_) width = std::max(width, synopsis(s).size());
  auto line = [&](const std::string& left, const std::string& help) {
    return "  " + left + std::string(width - left.size() + 3, ' ') + help + "\n";
  };
  for (const Spec& s : specs_) {
    std::string help = s.help;
    if (s.required) help += " (required)";
    else if (!s.default_value.empty()) help += " (default: " + s.default_value + ")";
    out += line(synopsis(s), help);
  }
  out += line("--help", "print this help and exit");
  if (!version_.empty()) out += line("--version", "print the version and the commit built from, and exit");
  return out;
}

bool Cli::has(const std::string& name) const {
  const Spec* s = find(name);
  check(s != nullptr, "Cli: flag --", name, " is not declared");
  return values_.count(name) > 0 || !s->default_value.empty();
}

std::string Cli::get(const std::string& name) const {
  const Spec* s = find(name);
  check(s != nullptr, "Cli: flag --", name, " is not declared");
  auto it = values_.find(name);
  if (it != values_.end() && !it->second.empty()) return it->second.back();  // given once (parse refuses a second)
  return s->default_value;
}

const std::vector<std::string>& Cli::get_all(const std::string& name) const {
  static const std::vector<std::string> none;
  check(find(name) != nullptr, "Cli: flag --", name, " is not declared");
  auto it = values_.find(name);
  return it == values_.end() ? none : it->second;
}

bool Cli::is_set(const std::string& name) const {
  check(find(name) != nullptr, "Cli: flag --", name, " is not declared");
  return values_.count(name) > 0;
}

long long Cli::get_int(const std::string& name) const {
  const std::string v = get(name);
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  check(!v.empty() && !std::isspace(static_cast<unsigned char>(v[0])) && end == v.c_str() + v.size() && errno != ERANGE,
        "--", name, ": '", v,
        "' is not an integer");
  return x;
}

double Cli::get_double(const std::string& name) const {
  const std::string v = get(name);
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  check(!v.empty() && !std::isspace(static_cast<unsigned char>(v[0])) && end == v.c_str() + v.size() &&
            std::isfinite(x),
        "--", name, ": '", v, "' is not a number");
  return x;
}

}  // namespace sima
