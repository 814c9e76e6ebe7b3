// The caching allocator: blocks are reused, and a steady-state training step of
// a small MLP obtains no new memory from the system.
#include "testing.h"

#include "core/allocator.h"

using namespace sima;
using namespace sima::testing;

TEST_CASE("a freed block is handed out again for the same size class") {
  Tensor a = empty({1000});
  float* p = a.data();
  a = Tensor();
  int64_t before = allocator_stats().system_allocs;
  Tensor b = empty({999});  // same size class (4000 vs 3996 bytes -> 4032)
  CHECK(b.data() == p);
  CHECK(allocator_stats().system_allocs == before);
}

TEST_CASE("empty_cache gives cached blocks back") {
  { Tensor t = empty({1 << 16}); }
  CHECK(allocator_stats().bytes_cached > 0);
  empty_cache();
  CHECK(allocator_stats().bytes_cached == 0);
}

TEST_CASE("MLP training steps: no real allocation after the first two iterations") {
  manual_seed(0);
  const int64_t B = 32, D = 24, H = 64, C = 5;
  Tensor w1 = mul(randn({H, D}), 0.2f).detach().requires_grad_();
  Tensor b1 = zeros({H}).requires_grad_();
  Tensor w2 = mul(randn({C, H}), 0.2f).detach().requires_grad_();
  Tensor b2 = zeros({C}).requires_grad_();
  std::vector<Tensor> params{w1, b1, w2, b2};
  Tensor x = randn({B, D});
  std::vector<int64_t> y(B);
  for (int64_t i = 0; i < B; ++i) y[i] = i % C;

  std::vector<int64_t> allocs;
  float first_loss = 0.f, last_loss = 0.f;
  for (int it = 0; it < 12; ++it) {
    for (Tensor& p : params) p.zero_grad();
    Tensor h = gelu(layer_norm(linear(x, w1, b1), Tensor(), Tensor(), 1e-5f));
    Tensor loss = cross_entropy(linear(h, w2, b2), y, 0.1f);
    loss.backward();
    {  // SGD step
      NoGradGuard ng;
      for (Tensor& p : params) {
        float* pd = p.data();
        const float* g = p.grad().data();
        for (int64_t i = 0; i < p.numel(); ++i) pd[i] -= 0.5f * g[i];
      }
    }
    if (it == 0) first_loss = loss.item();
    last_loss = loss.item();
    allocs.push_back(allocator_stats().system_allocs);
  }
  INFO("system allocations after each iteration: " << allocs[0] << " " << allocs[1] << " " << allocs[2]
                                                    << " ... " << allocs.back());
  CHECK(allocs.back() == allocs[1]);
  CHECK(last_loss < first_loss);  // the steps really train
}

// ---- under AddressSanitizer (tests/sanitize/run.sh) --------------------------------------
// A cached block is not freed to the system, so ASan would see a use-after-free of a tensor's
// storage as a valid read unless the allocator poisons the blocks in its free lists.
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sys/resource.h>
#include <cstdio>
#include <sys/wait.h>
#include <unistd.h>

TEST_CASE("ASan: a cached block is poisoned until handed out, the size-class slack always") {
  Tensor a = empty({1000});  // 4000 bytes in a 4032-byte block
  float* p = a.data();
  CHECK_FALSE(__asan_address_is_poisoned(p));
  CHECK_FALSE(__asan_address_is_poisoned(p + 999));
  CHECK(__asan_address_is_poisoned(p + 1000));  // past numel, inside the block
  a = Tensor();
  CHECK(__asan_address_is_poisoned(p));  // in the free list
  CHECK(__asan_address_is_poisoned(p + 500));
  Tensor b = empty({999});  // same size class: the same block again
  REQUIRE(b.data() == p);
  CHECK_FALSE(__asan_address_is_poisoned(p));
  CHECK_FALSE(__asan_address_is_poisoned(p + 998));
  CHECK(__asan_address_is_poisoned(p + 999));
}

TEST_CASE("ASan: reading a tensor's storage after it is freed kills the process") {
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {  // child: commit a use-after-free of a cached block
    rlimit no_core{0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    std::freopen("/dev/null", "w", stderr);  // the expected ASan report
    Tensor t = empty({256});
    volatile float* p = t.data();
    p[7] = 1.f;
    t = Tensor();
    float v = p[7];  // ASan aborts here
    (void)v;
    _exit(0);  // reached only if the read went unnoticed
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  INFO("child status " << status);
  CHECK_FALSE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
}
#endif
