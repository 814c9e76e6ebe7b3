// Walking a contiguous tensor along one dim (internal header for softmax, normalize).
//
// Seen along `dim`, a contiguous tensor is (outer, n, inner): element (o, k, i) sits at
// (o·n + k)·inner + i. A "lane" (o, i) is the n values reduced over. When dim is the last
// one, inner = 1 and each lane is a contiguous row, the fast path every op has. Otherwise
// the lanes of one slab o are interleaved, and an op handles a block of neighbouring lanes
// [i0, i1) at once: for each k, the inner loop over i runs over contiguous memory and
// vectorises, with per-lane accumulators in small stack arrays of kLaneBlock.
#pragma once
#include <algorithm>
#include <cstdint>

#include "core/parallel.h"
#include "core/shape.h"

namespace sima {

constexpr int64_t kLaneBlock = 64;    // lanes handled together (stack arrays of this size)
constexpr int64_t kGrainRows = 8192;  // elements per thread for row-wise ops (norm, softmax)

struct DimLayout {
  int64_t outer = 1, n = 1, inner = 1;
  int64_t lanes() const { return outer * inner; }
  // Offset of element (o, 0, i).
  int64_t base(int64_t o, int64_t i) const { return o * n * inner + i; }
};

// `dim` must already be wrapped. A 0-d tensor is one lane of one element.
inline DimLayout dim_layout(const Shape& s, int dim) {
  if (s.ndim() == 0) return {};
  return {prod(s, 0, dim), s[dim], prod(s, dim + 1, s.ndim())};
}

// Calls f(o, i0, i1) on blocks of at most kLaneBlock lanes of one slab o, covering every
// lane once, in parallel over lanes (each lane costs about n elements of work).
template <class F>
void parallel_lanes(const DimLayout& L, int64_t grain, F&& f) {
  int64_t lane_grain = std::max<int64_t>(1, grain / std::max<int64_t>(1, L.n));
  parallel_for(L.lanes(), lane_grain, [&](int64_t l0, int64_t l1) {
    for (int64_t l = l0; l < l1;) {
      int64_t o = l / L.inner, i0 = l % L.inner;
      int64_t i1 = std::min({L.inner, i0 + (l1 - l), i0 + kLaneBlock});
      f(o, i0, i1);
      l += i1 - i0;
    }
  });
}

// Calls f(j, i) for every element j of the block of lanes [i0, i0 + w) of one slab starting
// at `base` = L.base(o, i0), with i the lane within the block. The inner loop runs over
// contiguous memory either way (k along a row, i across interleaved lanes), so it vectorises.
template <class F>
inline void for_each_in_block(const DimLayout& L, int64_t base, int64_t w, F&& f) {
  if (L.inner == 1) {
    for (int64_t k = 0; k < L.n; ++k) f(base + k, int64_t(0));
  } else {
    for (int64_t k = 0; k < L.n; ++k)
      for (int64_t i = 0; i < w; ++i) f(base + k * L.inner + i, i);
  }
}

}  // namespace sima
