// Running the built apps (sima-train, sima-eval, sima-bench) from a test: exit status,
// stdout and stderr. SIMA_BIN_DIR is set by CMake for the tests labelled "train".
#pragma once
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "data/temp_dir.h"

namespace sima::testing {

struct Run {
  int status = -1;
  std::string out, err;
};

// Runs SIMA_BIN_DIR/<command line> with stdout and stderr captured.
inline Run run_app(const std::string& args) {
  TempDir dir;
  const std::string out = dir.file("out.txt"), err = dir.file("err.txt");
  const std::string cmd = std::string(SIMA_BIN_DIR) + "/" + args + " >" + out + " 2>" + err;
  const int raw = std::system(cmd.c_str());
  Run r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  auto slurp = [](const std::string& path) {
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

}  // namespace sima::testing
