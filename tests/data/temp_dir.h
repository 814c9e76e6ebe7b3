// A fresh temporary directory for tests that write files, removed with its contents when
// the TempDir goes out of scope.
#pragma once
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace sima::testing {

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("sima_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;  // a test may have made the folder read-only
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all, std::filesystem::perm_options::add, ec);
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // path / name, creating the parent directories of `name`.
  std::string file(const std::string& name) const {
    std::filesystem::path p = path_ / name;
    std::filesystem::create_directories(p.parent_path());
    return p.string();
  }
  std::string dir(const std::string& name) const {
    std::filesystem::create_directories(path_ / name);
    return (path_ / name).string();
  }
  std::string str() const { return path_.string(); }
  // The names in the folder, sorted.
  std::vector<std::string> listing() const { return folder_listing(path_.string()); }

  static std::vector<std::string> folder_listing(const std::string& dir) {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  std::filesystem::path path_;
};

// The temporaries of interrupted atomic writes ("<name>.tmp.<pid>", core/durable_file.h) in `dir`.
inline std::vector<std::string> temp_files_in(const std::string& dir) {
  std::vector<std::string> found;
  for (const std::string& n : TempDir::folder_listing(dir))
    if (n.find(".tmp.") != std::string::npos) found.push_back(n);
  return found;
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  if (!bytes.empty()) REQUIRE(std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size());
  std::fclose(f);
}

}  // namespace sima::testing
