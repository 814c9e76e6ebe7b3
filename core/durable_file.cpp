// Temporary names, folder syncs and the cleanup of a killed writer's leftovers (see durable_file.h).
#include "core/durable_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace sima {

namespace fs = std::filesystem;

std::string temp_path_for(const std::string& path) { return path + ".tmp." + std::to_string(::getpid()); }

void refuse_symlink(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return;
  std::error_code ec;
  const std::string target = fs::read_symlink(path, ec).string();
  fail(path, ": the ", what, " is a symbolic link", ec ? std::string() : " (to " + target + ")",
       "; sima.cpp does not write through a symbolic link: remove the link or choose another path");
}

int create_temp_file(const std::string& path) {
  const std::string tmp = temp_path_for(path);
  ::unlink(tmp.c_str());  // a leftover (a file or a link) is removed, never followed
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  check(fd >= 0, path, ": cannot open for writing (cannot create the temporary file ", tmp, ": ",
        std::strerror(errno), ")");
  return fd;
}

int open_no_follow(const std::string& path, int flags, const std::string& what) {
  const int fd = ::open(path.c_str(), flags | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0 && errno == ELOOP) {
    refuse_symlink(path, what);
    errno = ELOOP;  // too many levels of links among the folders: the caller reports it
  }
  return fd;
}

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
