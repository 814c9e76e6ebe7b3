// Caching allocator for tensor storage.
//
// Training allocates the same sizes step after step. Instead of returning
// freed blocks to the system we keep them in per-size-class free lists and hand
// them out again, so a steady-state training step never calls the system
// allocator. Blocks are 64-byte aligned (one cache line, full AVX-512 vector).
//
// Size classes: requests are rounded up to a multiple of 64 bytes below 4 KiB,
// and above that to the next of four steps per power of two (2^k, 1.25·2^k,
// 1.5·2^k, 1.75·2^k), so at most 25% of a block is wasted.
#pragma once
#include <cstddef>
#include <cstdint>

namespace sima {

struct AllocatorStats {
  int64_t system_allocs = 0;  // blocks obtained from the system (the "real" allocations)
  int64_t cache_hits = 0;     // requests served from a free list
  int64_t bytes_in_use = 0;   // bytes of blocks currently handed out
  int64_t bytes_cached = 0;   // bytes of blocks sitting in free lists
  int64_t peak_bytes_in_use = 0;
};

// Returns a 64-byte aligned block of at least `bytes` bytes (never null; throws on failure).
void* storage_alloc(size_t bytes, size_t* block_bytes);
// Gives a block obtained from storage_alloc back to the cache.
void storage_free(void* p, size_t block_bytes);

size_t size_class(size_t bytes);
AllocatorStats allocator_stats();
// Frees every cached block back to the system.
void empty_cache();

}  // namespace sima
