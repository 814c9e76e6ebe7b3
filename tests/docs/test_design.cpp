// docs/design.md, section 1: each folder includes only the folders below it in the layering.
// Every `#include "<folder>/..."` of every .h/.cpp under core/, nn/, data/, models/, train/ and
// apps/ is checked against the table of the page.
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

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

// The folder of a quoted include ("core/tensor.h" -> "core"), or "" for any other include.
std::string included_folder(const std::string& line) {
  const size_t inc = line.find("#include \"");
  if (inc == std::string::npos) return "";
  const size_t start = inc + 10, slash = line.find('/', start), quote = line.find('"', start);
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
