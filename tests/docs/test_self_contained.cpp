// The repository stands alone: no tracked file may cite, import or run a path outside it. A
// user's clone has nothing beside it, so a link, a command or a comment that points out of the
// repository is broken for them. The files are the ones `git ls-files` lists (or, without git,
// every file under the source tree outside build folders); binary files are skipped.
//
// Forbidden:
//   - a sibling folder of the team's notes ("..", "shared"), the notes by their file names (the
//     reference sheet and the design note in capitals; the project's own is docs/design.md),
//     and the machine's work tree;
//   - absolute paths into a home folder (Linux users', root's, macOS users');
//   - a relative path that starts with "../" and climbs above the repository root from the
//     folder of the file that mentions it (a Markdown link, an include, a command).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "testing.h"

namespace fs = std::filesystem;

namespace {

// The forbidden strings are assembled so that this file does not contain them itself.
const std::string kUp = std::string("..") + "/";
const std::vector<std::string> kForbidden = {kUp + "shared",           std::string("REFER") + "ENCE.md",
                                             std::string("DES") + "IGN.md", std::string("/wo") + "rk/",
                                             std::string("/ho") + "me/",    std::string("/ro") + "ot/",
                                             std::string("/Use") + "rs/"};

struct Hit {
  std::string file;
  int line = 0;
  std::string what;
};

// The tracked files, relative to the source root.
std::vector<std::string> tracked_files(const fs::path& root) {
  std::vector<std::string> files;
  const std::string cmd = "git -C '" + root.string() + "' ls-files 2>/dev/null";
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    while (std::fgets(buf, sizeof buf, p)) {
      std::string s(buf);
      while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
      if (!s.empty()) files.push_back(s);
    }
    pclose(p);
  }
  if (!files.empty()) return files;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
    const std::string name = it->path().filename().string();
    if (it->is_directory() && (name.rfind("build", 0) == 0 || name == ".git")) {
      it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file()) files.push_back(fs::relative(it->path(), root).generic_string());
  }
  return files;
}

// True when a run of "../" at `pos` starts a path: nothing path-like right before it.
bool starts_path(const std::string& line, size_t pos) {
  if (pos == 0) return true;
  const char c = line[pos - 1];
  return std::string(" \t\"'`(<[=,:").find(c) != std::string::npos;
}

// The hits of one file's text: forbidden strings and "../" runs that climb above the root.
// `depth` is the number of folders between the root and the file.
std::vector<Hit> scan(const std::string& file, const std::string& text, int depth) {
  std::vector<Hit> hits;
  std::istringstream in(text);
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    for (const std::string& f : kForbidden)
      if (line.find(f) != std::string::npos) hits.push_back({file, n, "mentions '" + f + "'"});
    for (size_t pos = line.find(kUp); pos != std::string::npos; pos = line.find(kUp, pos + 1)) {
      if (!starts_path(line, pos)) continue;
      int up = 0;
      size_t end = pos;
      while (line.compare(end, kUp.size(), kUp) == 0) ++up, end += kUp.size();
      if (up > depth)
        hits.push_back({file, n, "'" + line.substr(pos, std::min<size_t>(40, line.size() - pos)) +
                                     "' climbs above the repository root"});
      pos = end - 1;
    }
  }
  return hits;
}

}  // namespace

TEST_CASE("the scanner finds each kind of path that leaves the repository, and passes the ones inside") {
  CHECK(scan("README.md", "See `" + kUp + "shared/notes.md`.", 0).size() == 2);  // named, and climbs
  CHECK(scan("docs/a.md", "[x](" + kUp + kUp + "other/README.md)", 1).size() == 1);
  CHECK(scan("docs/a.md", "[x](" + kUp + "README.md)", 1).empty());
  CHECK(scan("tests/fuzz/run.sh", "root=\"$(cd \"$here/" + kUp + "..\" && pwd)\"", 2).empty());
  CHECK(scan("a.py", "# from /wo" "rk/main/build", 0).size() == 1);
  CHECK(scan("a.py", "open('/ho" "me/someone/x')", 0).size() == 1);
  CHECK(scan("a.cpp", "#include \"" + kUp + "core/x.h\"", 0).size() == 1);
  CHECK(scan("nn/a.h", "// (REFER" "ENCE.md §1.1)", 1).size() == 1);
  CHECK(scan("docs/a.md", "see [design.md](design.md)", 1).empty());
}

TEST_CASE("no tracked file mentions a path outside the repository") {
  const fs::path root(SIMA_SOURCE_DIR);
  const std::vector<std::string> files = tracked_files(root);
  REQUIRE(files.size() > 100);
  std::vector<Hit> hits;
  int scanned = 0;
  for (const std::string& f : files) {
    std::ifstream in(root / f, std::ios::binary);
    if (!in) continue;  // listed but deleted in the work tree
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    if (text.find('\0') != std::string::npos) continue;  // binary (images, safetensors)
    const int depth = static_cast<int>(std::count(f.begin(), f.end(), '/'));
    for (Hit& h : scan(f, text, depth)) hits.push_back(std::move(h));
    ++scanned;
  }
  for (const Hit& h : hits) MESSAGE(h.file << ":" << h.line << ": " << h.what);
  MESSAGE(scanned << " text files scanned");
  CHECK(hits.empty());
}
