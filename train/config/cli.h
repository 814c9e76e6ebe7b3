// A small command-line flag parser shared by the apps (sima-train, sima-eval, ...).
//
//   Cli cli("sima-eval", "Evaluates a checkpoint on a dataset or on images.");
//   cli.flag("checkpoint", "PATH", "model.safetensors to evaluate", /*required=*/true);
//   cli.flag("data", "SPEC", "dataset spec (default: the config's)");
//   cli.repeated("image", "PATH", "images to classify (repeatable; also takes several paths)");
//   cli.option("json", "print one JSON object");            // a boolean switch
//   if (!cli.parse(argc, argv)) return cli.exit_code();     // --help, or an error printed
//   std::string ckpt = cli.get("checkpoint");
//
// Accepts --name VALUE and --name=VALUE. A repeated flag collects every value, and values
// following it that do not start with "--" (so `--image a.png b.png`). Errors (unknown
// flag, missing value, missing required flag, a value given to a switch) print one line
// "<program>: error: ..." plus "try --help" to stderr; parse returns false, exit_code() 2.
// --help prints the usage with every flag to stdout; parse returns false, exit_code() 0.
// --version, when the program set one (the apps: the version and the commit they were built
// from), prints "<program> <version>" to stdout; parse returns false, exit_code() 0.
#pragma once
#include <map>
#include <string>
#include <vector>

namespace sima {

class Cli {
 public:
  Cli(std::string program, std::string description);

  void flag(const std::string& name, const std::string& metavar, const std::string& help,
            bool required = false, const std::string& default_value = "");
  void repeated(const std::string& name, const std::string& metavar, const std::string& help);
  void option(const std::string& name, const std::string& help);  // a switch: present or not
  void version(const std::string& text) { version_ = text; }      // enables --version

  bool parse(int argc, const char* const* argv);
  int exit_code() const { return exit_code_; }
  std::string usage() const;

  bool has(const std::string& name) const;  // given on the command line (or has a default)
  std::string get(const std::string& name) const;  // value, or default, or "" (flag declared)
  const std::vector<std::string>& get_all(const std::string& name) const;  // repeated
  bool is_set(const std::string& name) const;  // switch given
  // Parses get(name) as a number; a malformed value throws sima::Error naming the flag.
  long long get_int(const std::string& name) const;
  double get_double(const std::string& name) const;

 private:
  struct Spec {
    std::string name, metavar, help, default_value;
    enum Kind { Value, Repeated, Switch } kind = Value;
    bool required = false;
  };
  const Spec* find(const std::string& name) const;
  std::string program_, description_, version_;
  std::vector<Spec> specs_;
  std::map<std::string, std::vector<std::string>> values_;
  int exit_code_ = 0;
};

}  // namespace sima
