// Temporary names, folder syncs and the cleanup of a killed writer's leftovers (see durable_file.h).
#include "core/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>

namespace sima {

namespace fs = std::filesystem;

std::string temp_path_for(const std::string& path) { return path + ".tmp." + std::to_string(::getpid()); }

void sync_parent_directory(const std::string& path) {
  // Best effort: some file systems refuse to sync a directory.
  const std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/') + 1);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

int remove_stale_temp_files(const std::string& dir) {
  std::error_code ec;
  int removed = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const size_t at = name.rfind(".tmp.");
    if (at == std::string::npos || at + 5 == name.size()) continue;
    if (name.find_first_not_of("0123456789", at + 5) != std::string::npos) continue;
    std::error_code rm;
    if (e.is_regular_file(rm) && fs::remove(e.path(), rm)) ++removed;
  }
  return removed;
}

}  // namespace sima
