// models/budget.h on every experiment config in configs/: the parameter count from the model
// config equals num_parameters() of the model built from it (the registered models and the
// attention variants: tests/models/test_budget.cpp).
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "models/budget.h"
#include "models/registry.h"
#include "train/config/experiment_config.h"

using namespace sima;

TEST_CASE("budget: the parameter count equals num_parameters() for every config in configs/") {
  int seen = 0;
  for (auto& entry : std::filesystem::recursive_directory_iterator(std::string(SIMA_SOURCE_DIR) + "/configs")) {
    if (entry.path().extension() != ".json") continue;
    const std::string path = entry.path().string();
    const ModelConfig cfg = experiment_from_json(read_json_file(path), path).model;
    INFO(path);
    CHECK(count_parameters(cfg) == double(create_model(cfg)->num_parameters()));
    ++seen;
  }
  CHECK(seen >= 20);
}

