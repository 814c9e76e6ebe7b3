// Running the built apps (sima-train, sima-eval, sima-bench) from a test: exit status,
// stdout and stderr. SIMA_BIN_DIR is set by CMake for the tests labelled "train".
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

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

// Starts SIMA_BIN_DIR/sima-train with `args` in the background, stdout and stderr in
// <log_prefix>.out/.err and OMP_NUM_THREADS = `threads` (runs comparable); returns its pid, or
// -1 when fork fails. The child exits 127 when it cannot redirect or start the program.
inline pid_t spawn_sima_train(const std::vector<std::string>& args, const std::string& log_prefix, int threads) {
  std::fflush(stdout);  // or the child's freopen would flush our buffered output a second time
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  ::setenv("OMP_NUM_THREADS", std::to_string(threads).c_str(), 1);
  if (!std::freopen((log_prefix + ".out").c_str(), "w", stdout) || !std::freopen((log_prefix + ".err").c_str(), "w", stderr))
    ::_exit(127);
  std::vector<std::string> all{std::string(SIMA_BIN_DIR) + "/sima-train"};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(argv[0], argv.data());
  ::_exit(127);
}

}  // namespace sima::testing
