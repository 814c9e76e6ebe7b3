#include "train/loop/run_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/durable_file.h"
#include "core/error.h"

namespace sima {

namespace {

constexpr int kLockTries = 40, kLockRetryMs = 50;  // a held lock is retried for 2 s

// This process's command line, arguments separated by spaces.
std::string own_command_line() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  while (!all.empty() && all.back() == '\0') all.pop_back();
  for (char& ch : all)
    if (ch == '\0') ch = ' ';
  return all.empty() ? "(unknown command line)" : all;
}

// What the holder wrote; it writes right after locking, so an empty file is retried briefly.
std::string read_holder(const std::string& path) {
  for (int attempt = 0; attempt < 20; ++attempt) {
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    std::string s = ss.str();
    while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
    if (!s.empty()) return s;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return "an unknown process (the lock file is empty)";
}

// Whether the process a lock note names ("pid N: ...") still exists; true when the note names none.
bool holder_alive(const std::string& note) {
  long pid = 0;
  if (std::sscanf(note.c_str(), "pid %ld:", &pid) != 1 || pid <= 0) return true;
  return ::kill(pid_t(pid), 0) == 0 || errno == EPERM;
}

}  // namespace

RunLock::RunLock(const std::string& dir) : path_(dir + "/run.lock") {
  // O_CLOEXEC: a child process (gnuplot for curves.png) must not inherit, and so keep, the lock.
  // O_NOFOLLOW (open_no_follow): a run.lock that is a symbolic link is refused by name, never
  // followed, or the note below would overwrite the file it points at.
  fd_ = open_no_follow(path_, O_RDWR | O_CREAT, "run folder's lock file");
  check(fd_ >= 0, path_, ": cannot open the run folder's lock file (", std::strerror(errno), ")");
  // A run killed a moment ago can leave a child that holds the lock a few ms longer: one forked
  // to run gnuplot keeps every descriptor until its exec (which closes this one, opened
  // O_CLOEXEC) or its exit once it sees its parent gone. So while the holder the note names is
  // dead, the lock is retried for a while before it counts as another run's.
  int err = 0;
  for (int tries = 1;; ++tries) {
    err = ::flock(fd_, LOCK_EX | LOCK_NB) == 0 ? 0 : errno;
    if (err != EWOULDBLOCK || tries >= kLockTries || holder_alive(read_holder(path_))) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(kLockRetryMs));
  }
  if (err != 0) {
    ::close(fd_);
    fd_ = -1;
    check(err == EWOULDBLOCK, path_, ": cannot lock the run folder (", std::strerror(err), ")");
    fail(dir, " is in use by another run (", read_holder(path_), "; lock ", path_,
         "); two processes cannot write one run folder. Wait for it to end, stop it, or choose another --out");
  }
  const std::string who = "pid " + std::to_string(::getpid()) + ": " + own_command_line() + "\n";
  // Best effort: the lock holds whether or not the note is written.
  if (::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, who.data(), who.size(), 0) == ssize_t(who.size())) ::fsync(fd_);
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);  // closing drops the flock
}

}  // namespace sima
