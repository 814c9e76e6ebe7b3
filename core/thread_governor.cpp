// The thread governor (core/thread_governor.h): samples /proc/stat and this process's CPU
// clock, and sets the OpenMP team of the thread that enabled it to the cores left free.
#include "core/thread_governor.h"

#include <fcntl.h>
#include <omp.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <thread>

#include "core/parallel.h"

namespace sima {

namespace detail {
std::atomic<bool> governor_on{false};
}  // namespace detail

int choose_team(double free_cores, int requested) {
  const double team = std::floor(free_cores + 0.5);
  return static_cast<int>(std::clamp(team, 1.0, double(std::max(1, requested))));
}

CpuTicks parse_proc_stat(const std::string& text, const std::vector<int>& cpus) {
  CpuTicks t;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    // "cpuN user nice system idle iowait irq softirq steal guest guest_nice"; the first line
    // ("cpu " without a number) is the machine's total and is skipped.
    if (line.compare(0, 3, "cpu") != 0 || line.size() < 4 || line[3] < '0' || line[3] > '9') continue;
    std::istringstream fields(line.substr(3));
    int cpu = -1;
    double v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    fields >> cpu;
    for (double& x : v) fields >> x;  // fields missing on old kernels stay 0
    if (std::find(cpus.begin(), cpus.end(), cpu) == cpus.end()) continue;
    const double busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
    t.busy += busy;
    t.total += busy + v[3] + v[4];
    ++t.found;
  }
  return t;
}

namespace {

struct Sample {
  double wall = 0, own = 0, busy = 0;  // seconds: steady clock, this process's CPU, allowed cores' busy time
};

struct Governor {
  std::atomic<std::thread::id> owner{};
  std::vector<int> cpus;  // the CPUs this process may run on
  double tick_seconds = 0.01;
  Sample last;
  double next_look = 0;
  std::mutex mu;  // guards stats (read from any thread)
  GovernorStats stats;
};

Governor& governor() {
  static Governor g;
  return g;
}

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string read_proc_stat() {
  std::string text;
  const int fd = ::open("/proc/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return text;
  char buf[8192];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) text.append(buf, size_t(n));
  ::close(fd);
  return text;
}

bool take_sample(const Governor& g, Sample& s) {
  const CpuTicks t = parse_proc_stat(read_proc_stat(), g.cpus);
  if (t.found == 0) return false;
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  s.wall = steady_seconds();
  s.own = double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
  s.busy = t.busy * g.tick_seconds;
  return true;
}

std::vector<int> allowed_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

}  // namespace

bool enable_thread_governor() {
  Governor& g = governor();
  disable_thread_governor();
  g.cpus = allowed_cpus();
  const long hz = ::sysconf(_SC_CLK_TCK);
  g.tick_seconds = hz > 0 ? 1.0 / double(hz) : 0.01;
  if (g.cpus.empty() || !take_sample(g, g.last)) return false;
  g.next_look = g.last.wall + kFirstLook;
  {
    std::lock_guard<std::mutex> lock(g.mu);
    g.stats = GovernorStats{true, num_threads(), team_threads(), 0, 0, 0.0};
  }
  g.owner.store(std::this_thread::get_id());
  detail::governor_on.store(true);
  return true;
}

void disable_thread_governor() {
  Governor& g = governor();
  if (!detail::governor_on.exchange(false)) return;
  if (g.owner.load() == std::this_thread::get_id()) set_num_threads(num_threads());  // the full team again
  g.owner.store(std::thread::id());
  std::lock_guard<std::mutex> lock(g.mu);
  g.stats.enabled = false;
}

void detail::govern_threads_slow() {
  Governor& g = governor();
  if (g.owner.load(std::memory_order_relaxed) != std::this_thread::get_id()) return;
  if (steady_seconds() < g.next_look) return;
  Sample s;
  if (!take_sample(g, s)) return;
  g.next_look = s.wall + kSamplePeriod;
  const double dt = s.wall - g.last.wall;
  const double others = std::max(0.0, (s.busy - g.last.busy - (s.own - g.last.own)) / std::max(dt, 1e-6));
  g.last = s;
  const int requested = num_threads(), current = omp_get_max_threads();
  const int team = choose_team(double(g.cpus.size()) - others, requested);
  if (team != current) omp_set_num_threads(team);
  std::lock_guard<std::mutex> lock(g.mu);
  g.stats.requested = requested;
  g.stats.team = team;
  g.stats.others = others;
  ++g.stats.samples;
  if (team != current) ++g.stats.changes;
}

GovernorStats thread_governor_stats() {
  Governor& g = governor();
  std::lock_guard<std::mutex> lock(g.mu);
  return g.stats;
}

std::string thread_governor_description() {
  return detail::governor_on.load() ? "threads adapt to free cores" : "fixed threads";
}

}  // namespace sima
