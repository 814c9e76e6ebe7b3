// The thread governor: on a machine shared with other processes, the OpenMP team runs on
// the cores they leave free.
//
// Why. libgomp's threads spin-wait between parallel regions. On an idle machine that is the
// fastest way to wait (sleeping at once, OMP_WAIT_POLICY=passive, cost 19 % of training
// throughput and 2.2x batch-1 latency here: docs/performance.md §1). But when another process
// takes one of the two cores, the team's threads queue behind it at every barrier and a
// 2-thread run becomes 3-4x slower than 1 thread on its own core.
//
// What it does. kFirstLook seconds after it starts, then every kSamplePeriod seconds (checked
// when a parallel loop or a GEMM starts, on the thread that enabled it), it reads how busy
// the cores this process may run on were since the last look (/proc/stat, all processes)
// and subtracts this process's own CPU time:
//   others = (Δ busy time of the allowed cores − Δ own CPU time) / Δ wall time   (in cores)
//   free   = allowed cores − others
//   team   = clamp(floor(free + 0.5), 1, requested)
// and sets OpenMP's thread count (which OpenBLAS follows) to `team`. The requested count
// still fixes how work is cut (core/parallel.h, core/ops/gemm.h), so the results are the
// same bits whatever the team.
//
// The apps enable it (SIMA_THREAD_GOVERNOR=0 turns it off); a program linking the library
// calls enable_thread_governor() from the thread that runs its model (docs/library.md).
#pragma once
#include <atomic>
#include <string>
#include <vector>

namespace sima {

constexpr double kSamplePeriod = 0.3;  // seconds between two looks at the machine
constexpr double kFirstLook = 0.05;    // the first look, soon after start: short runs matter too

// The team for `free_cores` free cores (may be fractional): floor(free + 0.5), in [1, requested].
int choose_team(double free_cores, int requested);

// Busy and total time (in clock ticks) summed over the CPUs `cpus` (their indices) from the
// text of /proc/stat; busy = user + nice + system + irq + softirq + steal (guest time is
// inside user). `found` counts the CPUs whose line was there.
struct CpuTicks {
  double busy = 0, total = 0;
  int found = 0;
};
CpuTicks parse_proc_stat(const std::string& text, const std::vector<int>& cpus);

struct GovernorStats {
  bool enabled = false;
  int requested = 0, team = 0;  // threads asked for; threads running now
  long samples = 0, changes = 0;  // looks at the machine; times the team changed
  double others = 0;  // cores the other processes used at the last look
};

// Starts adapting the calling thread's team. Returns false and changes nothing where the
// machine cannot be read (no /proc/stat) or only one thread was requested.
bool enable_thread_governor();
// Stops adapting and gives the enabling thread back its requested team.
void disable_thread_governor();
GovernorStats thread_governor_stats();
// "threads adapt to free cores" or "fixed threads": for the apps' reports.
std::string thread_governor_description();

namespace detail {
extern std::atomic<bool> governor_on;
void govern_threads_slow();
}  // namespace detail

// Called where a parallel loop starts: almost free unless the governor is on.
inline void govern_threads() {
  if (detail::governor_on.load(std::memory_order_relaxed)) detail::govern_threads_slow();
}

}  // namespace sima
