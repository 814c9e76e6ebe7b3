// The apps choose passive OpenMP waiting themselves (core/omp_wait.h): with neither
// OMP_WAIT_POLICY nor GOMP_SPINCOUNT set they re-execute with OMP_WAIT_POLICY=passive, the
// arguments intact; a user's explicit setting is kept. What the process ends up with is read
// back from the apps' own reports (sima-bench --json "omp_wait", sima-train's run line).
#include "testing.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "app_testing.h"
#include "data/temp_dir.h"

using namespace sima;
using namespace sima::testing;

namespace {

// Sets (value non-null) or unsets the wait variables for the apps run in its scope; restores
// the test's own environment (CTest sets OMP_WAIT_POLICY=passive) afterwards.
struct WaitEnv {
  const char* names[2] = {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"};
  std::string saved[2];
  bool had[2] = {false, false};
  WaitEnv(const char* policy, const char* spin) {
    const char* values[2] = {policy, spin};
    for (int i = 0; i < 2; ++i) {
      if (const char* v = std::getenv(names[i])) had[i] = true, saved[i] = v;
      values[i] ? ::setenv(names[i], values[i], 1) : ::unsetenv(names[i]);
    }
  }
  ~WaitEnv() {
    for (int i = 0; i < 2; ++i) had[i] ? ::setenv(names[i], saved[i].c_str(), 1) : ::unsetenv(names[i]);
  }
};

const char* kTinyModel = R"('{"name":"cvt_13_28_sima","stage_dims":[16,32,64],"stage_depths":[1,1,1],"stage_heads":[1,1,1]}')";

nlohmann::json bench_json() {
  Run r = run_app(std::string("sima-bench model --batch 4 --reps 1 --json --model ") + kTinyModel);
  INFO("stderr: " << r.err);
  REQUIRE(r.status == 0);
  return nlohmann::json::parse(r.out);
}

}  // namespace

TEST_CASE("sima-bench: passive waiting set by the app only when the user set neither variable") {
  struct Case {
    const char *policy, *spin, *expected;
  };
  const Case cases[] = {{nullptr, nullptr, "passive (set by the app)"},
                        {"active", nullptr, "active"},
                        {"passive", nullptr, "passive"},
                        {nullptr, "1000", "spin 1000"},
                        {"active", "50000", "spin 50000"}};
  for (const Case& c : cases) {
    CAPTURE(c.expected);
    WaitEnv env(c.policy, c.spin);
    nlohmann::json j = bench_json();
    CHECK(j["omp_wait"].get<std::string>() == std::string(c.expected));
    CHECK(j["batch"] == 4);  // the arguments survive the re-exec
  }
}

TEST_CASE("sima-train: its run line names the wait policy, the app's or the user's") {
  TempDir d;
  const std::string cfg = d.file("tiny.json");
  std::ofstream(cfg) << R"({"name": "tiny",
    "model": {"name": "deit_tiny_patch4_28_sima", "embed_dim": 16, "depth": 1, "num_heads": 2},
    "data": {"train_subset": 32, "test_subset": 32, "batch_size": 32, "num_workers": 0},
    "schedule": {"warmup_epochs": 0}, "train": {"epochs": 1}})";
  auto run_line = [&](const std::string& out) {
    Run r = run_app("sima-train --config " + cfg + " --out " + d.str() + "/" + out);
    INFO("stderr: " << r.err);
    REQUIRE(r.status == 0);
    return r.out.substr(0, r.out.find('\n'));
  };
  {
    WaitEnv env(nullptr, nullptr);
    CHECK(run_line("a").find(", OpenMP waiting passive (set by the app)") != std::string::npos);
  }
  {
    WaitEnv env("active", nullptr);
    const std::string line = run_line("b");
    CHECK(line.find(", OpenMP waiting active") != std::string::npos);
    CHECK(line.find("set by the app") == std::string::npos);
  }
}
