// One writer per run folder: an advisory lock (flock, exclusive, non-blocking) on
// <dir>/run.lock, held for as long as the RunLock lives. The kernel drops it when the
// process ends in any way (SIGKILL included), so a lock is never stale; the file itself
// stays behind and only says who held it last.
//
//   RunLock lock(dir);   // throws sima::Error naming the holder's pid and command line
//
// The holder writes "pid <pid>: <command line>" into the file after locking, for the
// error a second writer prints. Under mpirun only rank 0 writes the run folder, so only
// rank 0 takes the lock (train/loop/loop.cpp).
#pragma once
#include <string>

namespace sima {

class RunLock {
 public:
  // Locks <dir>/run.lock (creating the file; `dir` must exist).
  explicit RunLock(const std::string& dir);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace sima
