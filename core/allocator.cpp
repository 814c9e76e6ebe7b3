#include "core/allocator.h"

#include <bit>
#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "core/allocation_budget.h"
#include "core/error.h"

// Under AddressSanitizer (tests/sanitize/run.sh) a cached block must look freed to ASan, or a
// use-after-free of a tensor's storage would read a live-looking block and go unnoticed. So a
// block is poisoned while it sits in a free list, and only its first `bytes` (what was asked
// for) are unpoisoned when it is handed out: the rounding slack up to the size class is
// poisoned too, so an overrun past numel is caught even inside the block.
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define SIMA_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define SIMA_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define SIMA_POISON(p, n) ((void)(p), (void)(n))
#define SIMA_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace sima {
namespace {

constexpr size_t kAlign = 64;

// Makes exactly [p, p + bytes) of a block of `block_bytes` addressable (no-op without ASan).
void expose(void* p, size_t bytes, size_t block_bytes) {
  SIMA_POISON(p, block_bytes);
  SIMA_UNPOISON(p, bytes);
}

struct Cache {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> free_lists;  // block size -> free blocks
  AllocatorStats stats;
};

Cache& cache() {
  static Cache* c = new Cache();  // leaked on purpose: tensors may die after static destructors run
  return *c;
}

}  // namespace

size_t size_class(size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (bytes <= 4096) return (bytes + kAlign - 1) / kAlign * kAlign;
  // bytes > 4096: 2^k <= bytes-1 < 2^(k+1); step = 2^(k-2).
  size_t top = std::bit_floor(bytes - 1);
  size_t step = top / 4;
  return (bytes + step - 1) / step * step;
}

// ---- AllocationBudget (core/allocation_budget.h) ----------------------------------------
namespace {
thread_local AllocationBudget* tl_budget = nullptr;
}

AllocationBudget::AllocationBudget(int64_t bytes, std::string what) : limit_(bytes), what_(std::move(what)) {
  check(tl_budget == nullptr, "AllocationBudget: budgets do not nest");
  tl_budget = this;
}

AllocationBudget::~AllocationBudget() { tl_budget = nullptr; }

void AllocationBudget::charge(int64_t bytes) {
  AllocationBudget* b = tl_budget;
  if (b == nullptr) return;
  b->used_ += bytes;
  if (b->used_ > b->limit_) fail(b->what_, " (its tensors need more than ", b->limit_, " bytes)");
}

void* storage_alloc(size_t bytes, size_t* block_bytes) {
  size_t sz = size_class(bytes);
  *block_bytes = sz;
  AllocationBudget::charge(static_cast<int64_t>(sz));
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.free_lists.find(sz);
    if (it != c.free_lists.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      c.stats.cache_hits++;
      c.stats.bytes_cached -= sz;
      c.stats.bytes_in_use += sz;
      if (c.stats.bytes_in_use > c.stats.peak_bytes_in_use)
        c.stats.peak_bytes_in_use = c.stats.bytes_in_use;
      expose(p, bytes, sz);
      return p;
    }
  }
  void* p = std::aligned_alloc(kAlign, sz);
  if (!p) {
    // Give the cache back to the system and try once more before giving up.
    empty_cache();
    p = std::aligned_alloc(kAlign, sz);
  }
  if (!p) fail("out of memory: cannot allocate a tensor of ", bytes, " bytes");
  expose(p, bytes, sz);
  std::lock_guard<std::mutex> lock(c.mu);
  c.stats.system_allocs++;
  c.stats.bytes_in_use += sz;
  if (c.stats.bytes_in_use > c.stats.peak_bytes_in_use)
    c.stats.peak_bytes_in_use = c.stats.bytes_in_use;
  return p;
}

void storage_free(void* p, size_t block_bytes) {
  if (!p) return;
  SIMA_POISON(p, block_bytes);  // cached: any access until it is handed out again is a bug
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.free_lists[block_bytes].push_back(p);
  c.stats.bytes_in_use -= block_bytes;
  c.stats.bytes_cached += block_bytes;
}

AllocatorStats allocator_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.stats;
}

void empty_cache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  for (auto& [sz, list] : c.free_lists) {
    for (void* p : list) {
      SIMA_UNPOISON(p, sz);  // the system allocator owns it again
      std::free(p);
    }
    c.stats.bytes_cached -= static_cast<int64_t>(sz * list.size());
    list.clear();
  }
}

}  // namespace sima
