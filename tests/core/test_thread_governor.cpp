// The thread governor (core/thread_governor.h) and the split that makes it safe (core/
// parallel.h, core/ops/gemm.h): the team rule, the /proc/stat reader, results that are the
// same bits whatever team runs them, and a live run where busy processes shrink the team.
#include "testing.h"

#include <omp.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "core/parallel.h"
#include "core/thread_governor.h"

using namespace sima;
using namespace sima::testing;

TEST_CASE("choose_team: floor(free + 0.5), between 1 and the requested count") {
  CHECK(choose_team(2.0, 2) == 2);
  CHECK(choose_team(1.6, 2) == 2);   // another process uses 0.4 of a core: keep both
  CHECK(choose_team(1.5, 2) == 2);
  CHECK(choose_team(1.33, 2) == 1);  // a busy loop sharing the cores with 2 spinning threads
  CHECK(choose_team(1.0, 2) == 1);
  CHECK(choose_team(0.0, 2) == 1);   // never below one thread
  CHECK(choose_team(-3.0, 4) == 1);
  CHECK(choose_team(3.7, 4) == 4);
  CHECK(choose_team(2.4, 4) == 2);
  CHECK(choose_team(8.0, 4) == 4);   // never above the requested count
  CHECK(choose_team(2.0, 1) == 1);
}

TEST_CASE("parse_proc_stat: sums the allowed CPUs' lines, busy without idle and iowait") {
  const std::string text =
      "cpu  100 0 50 1000 10 0 5 0 0 0\n"
      "cpu0 10 1 20 300 4 2 3 7 0 0\n"
      "cpu1 40 0 10 200 1 0 0 0 0 0\n"
      "cpu2 5 5 5 100 0 0 0 0\n"  // an old kernel: fewer fields
      "intr 12345 0 0\n"
      "ctxt 999\n"
      "cpu10 1000 0 0 0 0 0 0 0 0 0\n";
  CpuTicks t = parse_proc_stat(text, {0, 2});
  CHECK(t.found == 2);
  CHECK(t.busy == doctest::Approx((10 + 1 + 20 + 2 + 3 + 7) + (5 + 5 + 5)));
  CHECK(t.total == doctest::Approx(t.busy + 300 + 4 + 100));
  CHECK(parse_proc_stat(text, {1}).busy == doctest::Approx(50));
  CHECK(parse_proc_stat(text, {10}).busy == doctest::Approx(1000));  // cpu10 is not cpu1
  CHECK(parse_proc_stat(text, {5}).found == 0);
  CHECK(parse_proc_stat("", {0}).found == 0);
}

namespace {

// Forward and backward of a small network whose GEMMs are large enough to be split
// (x·Wᵀ is 512·256·256 multiply-adds), with a LayerNorm, GELU, softmax and a convolution:
// every output and gradient, as bytes.
std::vector<float> network_bits() {
  Tensor x = randn_leaf({512, 256}, 1), w1 = randn_leaf({256, 256}, 2), b1 = randn_leaf({256}, 3);
  Tensor lw = randn_leaf({256}, 4), lb = randn_leaf({256}, 5), w2 = randn_leaf({64, 256}, 6);
  Tensor img = randn_leaf({8, 4, 16, 16}, 7), cw = randn_leaf({8, 4, 3, 3}, 8);
  Tensor h = gelu(layer_norm(linear(x, w1, b1), lw, lb));
  Tensor a = softmax(matmul(linear(h, w2), linear(h, w2), true, false), -1);  // (64, 64)
  Tensor c = conv2d(img, cw, Tensor(), 1, 1);
  Tensor loss = add(sum(mul(a, a)), sum(mul(c, c)));
  loss.backward();
  std::vector<float> bits;
  for (const Tensor& t : {h, a, c, x.grad(), w1.grad(), b1.grad(), lw.grad(), lb.grad(), w2.grad(), img.grad(),
                          cw.grad()})
    bits.insert(bits.end(), t.data(), t.data() + t.numel());
  return bits;
}

struct RequestedThreads {
  int saved = num_threads();
  explicit RequestedThreads(int n) { set_num_threads(n); }
  ~RequestedThreads() { set_num_threads(saved); }
};

}  // namespace

TEST_CASE("the requested count alone fixes the results: a team of 1 gives the bits of a team of 2") {
  RequestedThreads two(2);
  REQUIRE(team_threads() == 2);
  const std::vector<float> full = network_bits();
  omp_set_num_threads(1);  // what the governor does when one core is taken
  REQUIRE(num_threads() == 2);
  REQUIRE(team_threads() == 1);
  const std::vector<float> shrunk = network_bits();
  REQUIRE(full.size() == shrunk.size());
  CHECK(std::memcmp(full.data(), shrunk.data(), full.size() * sizeof(float)) == 0);
}

TEST_CASE("parallel_for runs every chunk once, nested loops serially, whatever the team") {
  RequestedThreads two(2);
  for (int team : {2, 1}) {
    CAPTURE(team);
    omp_set_num_threads(team);
    std::vector<int> seen(100000, 0), nested_chunks(2, 0);
    parallel_for(100000, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) ++seen[i];
      int calls = 0;
      parallel_for(100000, 1, [&](int64_t, int64_t) { ++calls; });  // nested: one call
      nested_chunks[b == 0 ? 0 : 1] = calls;
    });
    CHECK(std::count(seen.begin(), seen.end(), 1) == 100000);
    CHECK(nested_chunks[0] == 1);
    CHECK(nested_chunks[1] == 1);
  }
}

namespace {

pid_t spawn_busy_loop(int cpu) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    ::sched_setaffinity(0, sizeof one, &one);
    volatile unsigned long spin = 0;
    for (;;) spin = spin + 1;
  }
  return pid;
}

}  // namespace

TEST_CASE("live: two busy loops on this process's two cores shrink its team to 1") {
  cpu_set_t saved, two;
  REQUIRE(::sched_getaffinity(0, sizeof saved, &saved) == 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; ++c)
    if (CPU_ISSET(c, &saved)) cpus.push_back(c);
  if (cpus.size() < 2) {
    MESSAGE("one CPU allowed: nothing to adapt");
    return;
  }
  CPU_ZERO(&two);
  for (int c : cpus) CPU_SET(c, &two);
  REQUIRE(::sched_setaffinity(0, sizeof two, &two) == 0);
  RequestedThreads req(2);
  REQUIRE(enable_thread_governor());
  CHECK(thread_governor_stats().enabled);
  const pid_t hogs[2] = {spawn_busy_loop(cpus[0]), spawn_busy_loop(cpus[1])};
  REQUIRE(hogs[0] > 0);
  REQUIRE(hogs[1] > 0);
  Tensor a = randn_leaf({256, 256}, 9, false);
  const auto t0 = std::chrono::steady_clock::now();
  while (thread_governor_stats().team != 1 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10))
    (void)matmul(a, a);  // each product starts parallel loops: the governor looks every 0.3 s
  const GovernorStats s = thread_governor_stats();
  for (pid_t p : hogs) {
    ::kill(p, SIGKILL);
    ::waitpid(p, nullptr, 0);
  }
  CAPTURE(s.others);
  CHECK(s.samples >= 1);
  CHECK(s.team == 1);
  CHECK(s.changes >= 1);
  CHECK(team_threads() == 1);
  disable_thread_governor();
  CHECK_FALSE(thread_governor_stats().enabled);
  CHECK(team_threads() == 2);  // the requested team back
  ::sched_setaffinity(0, sizeof saved, &saved);
}
