// OpenMP waiting and the apps' threads: what the apps (sima-train, sima-eval, sima-heatmap,
// sima-bench, sima-convert) call first in main(), and what they report.
//
// libgomp's threads spin-wait (about 300000 rounds) for the next parallel region before
// sleeping: the fastest on an idle machine, and a cliff on a shared one, where a spinning
// thread holds its core while the thread the team waits for queues behind another process.
// The apps keep libgomp's waiting and start the thread governor instead (core/
// thread_governor.h): the team shrinks to the cores other processes leave free, so no
// thread has to queue. docs/performance.md §1 has the measurements behind this choice.
// SIMA_THREAD_GOVERNOR=0 keeps the team fixed; OMP_WAIT_POLICY and GOMP_SPINCOUNT are the
// user's, as libgomp reads them.
#pragma once
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/ops/gemm.h"
#include "core/thread_governor.h"

namespace sima {

// How this process's OpenMP threads wait between parallel regions, from the variables libgomp
// read at start-up: "passive", "active", "spin N" (GOMP_SPINCOUNT=N), or "default" (libgomp's
// own, a spin of about 300000 rounds). sima-bench and sima-train print it.
inline std::string omp_wait_policy() {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  return spin ? "spin " + std::string(spin) : policy ? std::string(policy) : "default";
}

// The apps' threading, first thing in main(): the governor on unless SIMA_THREAD_GOVERNOR=0.
// A SIMA_GEMM that names neither GEMM library stops the app here, with the message, before any
// product could throw it from inside a parallel loop.
inline void setup_app_threads() {
  if (const std::string why = gemm_backend_problem(); !why.empty()) {
    std::fprintf(stderr, "%s: error: %s\n", program_invocation_short_name, why.c_str());
    std::exit(2);
  }
  const char* g = std::getenv("SIMA_THREAD_GOVERNOR");
  if (g && std::strcmp(g, "0") == 0) return;
  enable_thread_governor();
}

// "OpenMP waiting default, threads adapt to free cores": the apps' one-line report.
inline std::string app_threading() { return "OpenMP waiting " + omp_wait_policy() + ", " + thread_governor_description(); }

}  // namespace sima
