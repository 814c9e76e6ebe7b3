// results/sima_rng.py, the Python twin of sima.cpp's seeded streams that results/torch_twin.py
// trains with, against the C++ it re-implements: core/rng.cpp's Generator (next_u64, uniform,
// randint), data/loader_pipeline.cpp's epoch order and per-sample seeds, and
// train/config/data_spec.cpp's seeded subsets and validation split. The Python side runs in a
// child python3 (no torch needed) and prints its draws as JSON; every draw must be equal.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/rng.h"
#include "data/loader_pipeline.h"
#include "data/temp_dir.h"
#include "testing.h"
#include "train/config/data_spec.h"

using namespace sima;
using json = nlohmann::json;

namespace {

// The JSON that `code` prints, run by python3 with results/ on its path and sima_rng imported as r.
json python_draws(const std::string& code) {
  const std::string script = std::string("import json, sys\nsys.path.insert(0, '") + SIMA_SOURCE_DIR +
                             "/results')\nimport sima_rng as r\n" + code;
  testing::TempDir dir;
  const std::string path = dir.file("draws.py");
  std::FILE* f = std::fopen(path.c_str(), "w");
  REQUIRE(f != nullptr);
  std::fputs(script.c_str(), f);
  std::fclose(f);
  std::FILE* p = popen(("python3 '" + path + "'").c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  REQUIRE_MESSAGE(pclose(p) == 0, "python3 failed on:\n" << script);
  return json::parse(out);
}

// A dataset of n samples that are their own index (only its size and indices are read here).
class CountDataset : public Dataset {
 public:
  explicit CountDataset(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  Sample get(int64_t i, Generator&) const override { return {Image(1, 1, 1, float(i)), 0}; }

 private:
  int64_t n_;
};

std::vector<int64_t> indices_of(const std::shared_ptr<const Dataset>& d) {
  return std::dynamic_pointer_cast<const SubsetDataset>(d)->indices();
}

const std::vector<uint64_t> kSeeds = {0, 1, 12345, 9223372036854775815ull};

}  // namespace

TEST_CASE("sima_rng.Xoshiro draws what core/rng.cpp's Generator draws: next_u64, uniform, randint") {
  const json py = python_draws(R"(
seeds = [0, 1, 12345, 9223372036854775815]
out = {"u64": [], "uniform": [], "randint": []}
for s in seeds:
    g = r.Xoshiro(s); out["u64"].append([g.next_u64() for _ in range(6)])
    g = r.Xoshiro(s); out["uniform"].append([g.uniform() for _ in range(6)])
    g = r.Xoshiro(s); out["randint"].append([g.randint(n) for n in (1, 2, 3, 10, 1000003, 2**40 + 1, 2**63 + 5)])
print(json.dumps(out))
)");
  for (size_t i = 0; i < kSeeds.size(); ++i) {
    CAPTURE(kSeeds[i]);
    Generator g(kSeeds[i]);
    for (int k = 0; k < 6; ++k) CHECK(g.next_u64() == py["u64"][i][k].get<uint64_t>());
    g.manual_seed(kSeeds[i]);
    for (int k = 0; k < 6; ++k) CHECK(double(g.uniform()) == py["uniform"][i][k].get<double>());
    g.manual_seed(kSeeds[i]);
    const std::vector<uint64_t> ns = {1, 2, 3, 10, 1000003, (1ull << 40) + 1, (1ull << 63) + 5};
    for (size_t k = 0; k < ns.size(); ++k) CHECK(g.randint(ns[k]) == py["randint"][i][k].get<uint64_t>());
  }
}

TEST_CASE("sima_rng's epoch order, subsets and validation split are the loader's and data_spec's") {
  const json py = python_draws(R"(
out = {"order": [r.epoch_order(23, s, e) for s in (0, 7) for e in (0, 1, 5)],
       "subset": [r.random_subset(list(range(50)), 9, s) for s in (0, 3)],
       "holdout": [r.holdout_split(40, 10, s) for s in (0, 11)],
       "sample_seed": [r.hash_seed(s, r.SAMPLE_TAG, e, i) for s in (0, 7) for e in (0, 3) for i in (0, 41)]}
print(json.dumps(out))
)");
  int k = 0;
  for (uint64_t s : {0, 7})
    for (int64_t e : {0, 1, 5}) CHECK(epoch_order(23, s, e, true) == py["order"][k++].get<std::vector<int64_t>>());
  k = 0;
  for (uint64_t s : {0, 3})
    CHECK(indices_of(random_subset(std::make_shared<CountDataset>(50), 9, s)) ==
          py["subset"][k++].get<std::vector<int64_t>>());
  k = 0;
  for (uint64_t s : {0, 11}) {
    const HoldoutSplit split = holdout_split(std::make_shared<CountDataset>(40), 10, s);
    CHECK(indices_of(split.train) == py["holdout"][k][0].get<std::vector<int64_t>>());
    CHECK(indices_of(split.validation) == py["holdout"][k][1].get<std::vector<int64_t>>());
    ++k;
  }
  k = 0;
  for (uint64_t s : {0, 7})
    for (int64_t e : {0, 3})
      for (int64_t i : {0, 41}) CHECK(sample_seed(s, e, i) == py["sample_seed"][k++].get<uint64_t>());
}
