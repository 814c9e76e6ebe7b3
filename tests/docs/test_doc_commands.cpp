// Every command in docs/*.md runs as written. The commands are the lines of the ```sh fenced
// blocks; a line ending in "# long" (minutes of training) is skipped. Each document's commands
// run in order, in one scratch folder where build/, configs/ and docs/ link to the repository's,
// so a document can train a model in one line and evaluate it in the next, and nothing is
// written into the source tree. Each command must exit 0 within its time limit.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "data/temp_dir.h"
#include "testing.h"

using namespace sima::testing;
namespace fs = std::filesystem;

namespace {

struct Command {
  std::string doc;
  int line = 0;
  std::string text;
};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t\r");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

// The runnable lines of the ```sh blocks of one Markdown file, and how many were skipped as long.
std::vector<Command> sh_commands(const fs::path& path, int& skipped) {
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), path.string());
  std::vector<Command> out;
  bool in_sh = false, in_other = false;
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    const std::string t = trim(line);
    if (t.rfind("```", 0) == 0) {
      if (in_sh || in_other) {
        in_sh = in_other = false;
      } else {
        (t == "```sh" ? in_sh : in_other) = true;
      }
      continue;
    }
    if (!in_sh || t.empty() || t[0] == '#') continue;
    CHECK_MESSAGE(!ends_with(t, "\\"), path.filename().string() << ":" << n << ": no continuation lines in ```sh blocks");
    if (ends_with(t, "# long") || t.find("# long:") != std::string::npos) {
      ++skipped;
      continue;
    }
    out.push_back({path.filename().string(), n, t});
  }
  return out;
}

}  // namespace

TEST_CASE("docs: every short command in docs/*.md runs as written, in order, and exits 0") {
  const fs::path src(SIMA_SOURCE_DIR), docs = src / "docs";
  REQUIRE(fs::is_directory(docs));
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(docs))
    if (e.path().extension() == ".md") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  REQUIRE_FALSE(files.empty());
  const fs::path build = fs::path(SIMA_BIN_DIR).parent_path();

  int ran = 0, skipped = 0;
  for (const fs::path& md : files) {
    const std::vector<Command> commands = sh_commands(md, skipped);
    if (commands.empty()) continue;
    TempDir scratch;  // one per document: its commands build on each other
    fs::create_directory_symlink(build, scratch.str() + "/build");
    fs::create_directory_symlink(src / "configs", scratch.str() + "/configs");
    fs::create_directory_symlink(docs, scratch.str() + "/docs");
    for (const Command& c : commands) {
      CAPTURE(c.doc);
      CAPTURE(c.line);
      CAPTURE(c.text);
      // The command goes into a script file, as a user would paste it: any quoting works.
      const std::string log = scratch.file("last.log"), script = scratch.file("command.sh");
      std::ofstream(script) << c.text << "\n";
      const std::string cmd = "cd '" + scratch.str() + "' && timeout 120 bash '" + script + "' >'" + log + "' 2>&1";
      const int status = std::system(cmd.c_str());
      std::ifstream lf(log);
      std::stringstream out;
      out << lf.rdbuf();
      CHECK_MESSAGE(status == 0, c.doc << ":" << c.line << " failed:\n" << out.str().substr(0, 2000));
      ++ran;
    }
  }
  MESSAGE(ran << " commands run, " << skipped << " skipped as long");
  CHECK(ran >= 10);
}
