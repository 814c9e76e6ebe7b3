// OpenMP waiting: which policy this process runs with, and the re-exec that the apps
// (sima-train, sima-eval, sima-heatmap, sima-bench, sima-convert) call first in main().
//
// libgomp's default is to spin-wait (about 300000 rounds) for the next parallel region
// before sleeping. When another process takes one of the cores, a spinning thread holds
// its core while the thread the team is waiting for queues behind the other process, and a
// 2-thread run slows down by up to 10x (docs/performance.md, "A shared machine").
// OMP_WAIT_POLICY=passive makes waiting threads sleep at once. libgomp reads the variable
// when it is loaded, before main() runs, so setting it in main() is too late: the app
// re-executes itself (same pid, same arguments) with it set. It does so only when neither
// OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set: a user's explicit choice (e.g.
// OMP_WAIT_POLICY=active on a machine of their own) is kept.
//
// The library never calls the re-exec itself: a program linking it chooses its own policy,
// by its environment or by calling reexec_with_passive_omp_wait first (docs/library.md).
#pragma once
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace sima {

constexpr const char* kOmpWaitByApp = "SIMA_OMP_WAIT_BY_APP";  // marks a policy the app set

// How this process's OpenMP threads wait between parallel regions, from the variables libgomp
// read at start-up: "passive", "active", "spin N" (GOMP_SPINCOUNT=N), or "default" (libgomp's
// own, a spin of about 300000 rounds); " (set by the app)" when reexec_with_passive_omp_wait
// chose it. sima-bench and sima-train print it: it decides their speed on a shared machine.
inline std::string omp_wait_policy() {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  std::string s = spin ? "spin " + std::string(spin) : policy ? std::string(policy) : "default";
  return std::getenv(kOmpWaitByApp) ? s + " (set by the app)" : s;
}

// Returns when the policy is the user's or already set by the re-exec; otherwise does not
// return, unless the exec fails (then the run goes on with libgomp's default and a note).
inline void reexec_with_passive_omp_wait(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  ::setenv("OMP_WAIT_POLICY", "passive", 1);
  ::setenv(kOmpWaitByApp, "1", 1);
  ::execv("/proc/self/exe", argv);
  const int err = errno;  // still here: the exec failed, libgomp keeps its default
  ::unsetenv("OMP_WAIT_POLICY");
  ::unsetenv(kOmpWaitByApp);
  std::fprintf(stderr, "note: could not re-execute with OMP_WAIT_POLICY=passive (%s); on a shared machine set it "
                       "yourself\n", std::strerror(err));
}

}  // namespace sima
