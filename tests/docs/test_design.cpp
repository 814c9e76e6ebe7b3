// docs/design.md, section 1: each folder includes only the folders below it in the layering,
// and each sub-folder of train/ only the ones before it; section 4: no two source files share
// a file name.
// Every `#include "<folder>/..."` of every .h/.cpp under core/, nn/, data/, models/, train/ and
// apps/ is checked against the table of the page.
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "testing.h"

namespace fs = std::filesystem;

namespace {

// The folders each folder may include (docs/design.md, the table of section 1).
const std::map<std::string, std::set<std::string>> kAllowed = {
    {"core", {"core"}},
    {"nn", {"core", "nn"}},
    {"data", {"core", "data"}},
    {"models", {"core", "nn", "models"}},
    {"train", {"core", "nn", "data", "models", "train"}},
    {"apps", {"core", "nn", "data", "models", "train"}},
};

// The folder a quoted include's path names after `prefix` ("core/tensor.h" -> "core";
// with prefix "train/", "train/loop/loop.h" -> "loop"), or "" for any other include.
std::string included_folder(const std::string& line, const std::string& prefix = "") {
  const std::string key = "#include \"" + prefix;
  const size_t inc = line.find(key);
  if (inc == std::string::npos) return "";
  const size_t start = inc + key.size(), slash = line.find('/', start), quote = line.find('"', start);
  if (slash == std::string::npos || quote == std::string::npos || slash > quote) return "";
  return line.substr(start, slash - start);
}

}  // namespace

TEST_CASE("included_folder reads the folder of a quoted include only") {
  CHECK(included_folder("#include \"core/tensor.h\"") == "core");
  CHECK(included_folder("#include <nlohmann/json.hpp>") == "");
  CHECK(included_folder("#include \"testing.h\"") == "");
}

TEST_CASE("design.md layering: no folder includes a folder above it") {
  const fs::path root(SIMA_SOURCE_DIR);
  int files = 0, includes = 0;
  for (const auto& [folder, allowed] : kAllowed) {
    REQUIRE(fs::is_directory(root / folder));
    for (const auto& e : fs::recursive_directory_iterator(root / folder)) {
      const std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".h" && ext != ".cpp")) continue;
      ++files;
      std::ifstream in(e.path());
      int n = 0;
      for (std::string line; std::getline(in, line);) {
        ++n;
        const std::string inc = included_folder(line);
        if (inc.empty() || !kAllowed.count(inc)) continue;
        ++includes;
        std::string may;
        for (const std::string& a : allowed) may += (may.empty() ? "" : ", ") + a + "/";
        CHECK_MESSAGE(allowed.count(inc), fs::relative(e.path(), root).string()
                                              << ":" << n << " includes " << inc << "/ (" << folder
                                              << "/ may include only " << may << ": docs/design.md §1)");
      }
    }
  }
  MESSAGE(files << " files, " << includes << " project includes checked");
  CHECK(files > 100);
}

namespace {

// train/'s sub-folders in their order (docs/design.md, the table after section 1's): each
// includes train/ headers only from itself and the ones before it.
const std::vector<std::string> kTrainRooms = {"config", "optim", "eval", "distributed",
                                              "viz", "loop", "objectives", "bench"};

int room_index(const std::string& room) {
  for (size_t i = 0; i < kTrainRooms.size(); ++i)
    if (kTrainRooms[i] == room) return static_cast<int>(i);
  return -1;
}

}  // namespace

TEST_CASE("included_folder with a prefix reads the sub-folder of a train/ include only") {
  CHECK(included_folder("#include \"train/loop/loop.h\"", "train/") == "loop");
  CHECK(included_folder("#include \"train/x.h\"", "train/") == "");
  CHECK(included_folder("#include \"models/config.h\"", "train/") == "");
}

TEST_CASE("design.md layering: train/'s sub-folders include only the ones before them") {
  const fs::path root = fs::path(SIMA_SOURCE_DIR) / "train";
  int files = 0, includes = 0;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (!e.is_regular_file()) continue;
    const fs::path rel = fs::relative(e.path(), root);
    const std::string room = rel.begin()->string();
    ++files;
    CHECK_MESSAGE(room_index(room) >= 0, "train/" << rel.string() << " is in no sub-folder of train/ named in "
                                                  << "docs/design.md §1 (config, optim, eval, ...)");
    if (room_index(room) < 0) continue;
    std::ifstream in(e.path());
    int n = 0;
    for (std::string line; std::getline(in, line);) {
      ++n;
      const std::string inc = included_folder(line, "train/");
      if (inc.empty()) continue;
      ++includes;
      CHECK_MESSAGE(room_index(inc) >= 0, "train/" << rel.string() << ":" << n << " includes train/" << inc << "/");
      CHECK_MESSAGE(room_index(inc) <= room_index(room), "train/" << rel.string() << ":" << n << " includes train/"
                                                                  << inc << "/, which comes after train/" << room
                                                                  << "/ (docs/design.md §1)");
    }
  }
  MESSAGE(files << " files, " << includes << " includes between train/'s sub-folders checked");
  CHECK(files > 50);
  CHECK(includes > 20);
}

TEST_CASE("design.md conventions: no two source files share a file name") {
  const fs::path root(SIMA_SOURCE_DIR);
  std::map<std::string, std::vector<std::string>> by_name;
  for (const char* top : {"core", "nn", "data", "models", "train", "apps", "examples", "tests", "results", "cmake"}) {
    if (!fs::is_directory(root / top)) continue;
    for (auto it = fs::recursive_directory_iterator(root / top); it != fs::recursive_directory_iterator(); ++it) {
      const std::string ext = it->path().extension().string();
      if (it->is_directory() && it->path().filename().string().rfind("build", 0) == 0) {
        it.disable_recursion_pending();  // a build folder of an example (not sources)
        continue;
      }
      if (!it->is_regular_file() || (ext != ".h" && ext != ".cpp" && ext != ".py")) continue;
      by_name[it->path().filename().string()].push_back(fs::relative(it->path(), root).string());
    }
  }
  for (const auto& [name, paths] : by_name) {
    std::string all;
    for (const std::string& p : paths) all += (all.empty() ? "" : ", ") + p;
    CHECK_MESSAGE(paths.size() == 1, name << " names " << paths.size() << " files: " << all
                                          << " (docs/design.md §4: one file per name)");
  }
  MESSAGE(by_name.size() << " file names checked");
  CHECK(by_name.size() > 300);
}
