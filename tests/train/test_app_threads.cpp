// The apps' threading (core/omp_wait.h): they keep libgomp's waiting as the user set it and
// start the thread governor unless SIMA_THREAD_GOVERNOR=0. What the process ends up with is
// read back from the apps' own reports (sima-bench --json "omp_wait" and "thread_governor",
// sima-train's run line).
#include "testing.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "app_testing.h"
#include "data/temp_dir.h"

using namespace sima;
using namespace sima::testing;

namespace {

// Sets (value non-null) or unsets the variables for the apps run in its scope; restores the
// test's own environment (CTest sets OMP_WAIT_POLICY=passive) afterwards.
struct ThreadEnv {
  static constexpr int kVars = 3;
  const char* names[kVars] = {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "SIMA_THREAD_GOVERNOR"};
  std::string saved[kVars];
  bool had[kVars] = {false, false, false};
  ThreadEnv(const char* policy, const char* spin, const char* governor) {
    const char* values[kVars] = {policy, spin, governor};
    for (int i = 0; i < kVars; ++i) {
      if (const char* v = std::getenv(names[i])) had[i] = true, saved[i] = v;
      values[i] ? ::setenv(names[i], values[i], 1) : ::unsetenv(names[i]);
    }
  }
  ~ThreadEnv() {
    for (int i = 0; i < kVars; ++i) had[i] ? ::setenv(names[i], saved[i].c_str(), 1) : ::unsetenv(names[i]);
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

TEST_CASE("sima-bench: the user's wait policy as set, the governor on unless SIMA_THREAD_GOVERNOR=0") {
  struct Case {
    const char *policy, *spin, *governor, *expected;
    bool governed;
  };
  const Case cases[] = {{nullptr, nullptr, nullptr, "default", true},
                        {"active", nullptr, nullptr, "active", true},
                        {"passive", nullptr, "0", "passive", false},
                        {nullptr, "1000", nullptr, "spin 1000", true},
                        {"active", "50000", "1", "spin 50000", true},
                        {nullptr, nullptr, "0", "default", false}};
  for (const Case& c : cases) {
    CAPTURE(c.expected);
    CAPTURE(c.governed);
    ThreadEnv env(c.policy, c.spin, c.governor);
    nlohmann::json j = bench_json();
    CHECK(j["omp_wait"].get<std::string>() == std::string(c.expected));
    CHECK(j["thread_governor"].get<bool>() == c.governed);
    CHECK(j["team_changes"].get<long>() >= 0);
    CHECK(j["batch"] == 4);
  }
}

// SIMA_GEMM picks the library every product runs on (core/ops/gemm.h); sima-bench --json names it,
// and a value that is neither library is refused with both names, not ignored.
TEST_CASE("sima-bench: SIMA_GEMM chooses oneDNN (the default) or OpenBLAS, and refuses anything else") {
  struct GemmEnv {
    std::string saved;
    bool had = false;
    explicit GemmEnv(const char* v) {
      if (const char* old = std::getenv("SIMA_GEMM")) had = true, saved = old;
      v ? ::setenv("SIMA_GEMM", v, 1) : ::unsetenv("SIMA_GEMM");
    }
    ~GemmEnv() { had ? ::setenv("SIMA_GEMM", saved.c_str(), 1) : ::unsetenv("SIMA_GEMM"); }
  };
  for (const char* v : {static_cast<const char*>(nullptr), "onednn", "openblas"}) {
    CAPTURE((v ? v : "(unset)"));
    GemmEnv env(v);
    CHECK(bench_json()["gemm"].get<std::string>() == std::string(v ? v : "onednn"));
  }
  GemmEnv env("mkl");
  Run r = run_app(std::string("sima-bench model --batch 4 --reps 1 --json --model ") + kTinyModel);
  CHECK(r.status != 0);
  CHECK(r.err.find("SIMA_GEMM='mkl'") != std::string::npos);
  CHECK(r.err.find("onednn (the default) or openblas") != std::string::npos);
}

TEST_CASE("sima-train: its run line names the wait policy and whether threads adapt") {
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
    ThreadEnv env(nullptr, nullptr, nullptr);
    CHECK(run_line("a").find(", OpenMP waiting default, threads adapt to free cores") != std::string::npos);
  }
  {
    ThreadEnv env("active", nullptr, "0");
    CHECK(run_line("b").find(", OpenMP waiting active, fixed threads") != std::string::npos);
  }
}
