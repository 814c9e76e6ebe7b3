#include "core/ops/broadcast.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"

namespace sima {

BroadcastPlan make_broadcast_plan(const Shape& out, const Shape& a, const Shape& b) {
  int n = out.ndim();
  // Per-input strides aligned to the output's dims (0 where the input broadcasts).
  auto aligned = [&](const Shape& s) {
    std::array<int64_t, kMaxDims> st{};
    auto cs = contiguous_strides(s);
    for (int i = 0; i < n; ++i) {
      int j = s.ndim() - n + i;
      st[i] = (j >= 0 && s[j] != 1) ? cs[j] : 0;
    }
    return st;
  };
  auto sa = aligned(a), sb = aligned(b);

  BroadcastPlan p;
  // Coalesce from the innermost dim outwards, dropping size-1 dims.
  std::array<int64_t, kMaxDims> size{}, ca{}, cb{};
  int m = 0;
  for (int i = n - 1; i >= 0; --i) {
    if (out[i] == 1) continue;
    if (m > 0 && sa[i] == ca[m - 1] * size[m - 1] && sb[i] == cb[m - 1] * size[m - 1]) {
      size[m - 1] *= out[i];  // dim i continues the previous (inner) one for both inputs
    } else {
      size[m] = out[i];
      ca[m] = sa[i];
      cb[m] = sb[i];
      ++m;
    }
  }
  if (m == 0) {  // all dims size 1 (or 0-d)
    size[0] = 1;
    ca[0] = cb[0] = 0;
    m = 1;
  }
  p.ndim = m;
  for (int i = 0; i < m; ++i) {  // back to outer-to-inner order
    p.size[i] = size[m - 1 - i];
    p.stride_a[i] = ca[m - 1 - i];
    p.stride_b[i] = cb[m - 1 - i];
  }
  // A coalesced inner dim of stride 0 that has size 1 is fine; strides along the inner dim
  // are 0 or 1 by construction (innermost non-broadcast stride of a contiguous tensor is 1,
  // merged dims keep it 1).
  p.inner = p.size[m - 1];
  p.rows = out.numel() / std::max<int64_t>(1, p.inner);
  if (out.numel() == 0) p.rows = 0;
  return p;
}

void BroadcastPlan::row_offsets(int64_t r, int64_t& off_a, int64_t& off_b) const {
  off_a = off_b = 0;
  for (int i = ndim - 2; i >= 0; --i) {
    int64_t idx = r % size[i];
    r /= size[i];
    off_a += idx * stride_a[i];
    off_b += idx * stride_b[i];
  }
}

Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  check(broadcast_shapes(g.shape(), shape, "sum_to") == g.shape(), "sum_to: shape ", g.shape(),
        " cannot be summed to ", shape);
  Tensor out = zeros(shape);
  // Walk g as the output of a broadcast with `shape` as input a: row r of g adds into
  // the target at offset oa (along the row with stride sa = 1, or all into one
  // element when sa = 0). Several rows may share a target, so threads never split
  // rows against each other; the sum over rows always runs in row order, so the
  // result does not depend on the thread count.
  BroadcastPlan p = make_broadcast_plan(g.shape(), shape, g.shape());
  const float* pg = g.data();
  float* po = out.data();
  const int64_t inner = p.inner, sa = p.stride_a[p.ndim - 1];
  if (sa == 1) {  // threads take disjoint column ranges of the row, each over all rows
    parallel_for(inner, grain_for(kGrainElementwise, p.rows),
                 [&](int64_t j0, int64_t j1) {
                   for (int64_t r = 0; r < p.rows; ++r) {
                     int64_t oa, og;
                     p.row_offsets(r, oa, og);
                     const float* src = pg + og;
                     float* dst = po + oa;
                     for (int64_t j = j0; j < j1; ++j) dst[j] += src[j];
                   }
                 });
  } else {  // each row sums to one value (in parallel), then rows add into targets in order
    std::vector<float> row_sum(p.rows);
    parallel_for(p.rows, grain_for(kGrainElementwise, inner),
                 [&](int64_t r0, int64_t r1) {
                   for (int64_t r = r0; r < r1; ++r) {
                     const float* src = pg + r * inner;
                     float acc = 0.f;
                     for (int64_t j = 0; j < inner; ++j) acc += src[j];
                     row_sum[r] = acc;
                   }
                 });
    for (int64_t r = 0; r < p.rows; ++r) {
      int64_t oa, og;
      p.row_offsets(r, oa, og);
      po[oa] += row_sum[r];
    }
  }
  return out;
}

Tensor broadcast_to(const Tensor& x, const Shape& shape, const char* op) {
  check(broadcast_shapes(x.shape(), shape, op) == shape, op, ": shape ", x.shape(),
        " cannot be expanded to ", shape);
  Tensor out = empty(shape);
  BroadcastPlan p = make_broadcast_plan(shape, x.shape(), shape);
  const float* px = x.data();
  float* po = out.data();
  int64_t inner = p.inner, sa = p.stride_a[p.ndim - 1];
  parallel_for(p.rows, grain_for(kGrainElementwise, inner),
               [&](int64_t r0, int64_t r1) {
                 for (int64_t r = r0; r < r1; ++r) {
                   int64_t oa, oo;
                   p.row_offsets(r, oa, oo);
                   float* dst = po + r * inner;
                   if (sa == 1) std::memcpy(dst, px + oa, sizeof(float) * inner);
                   else std::fill(dst, dst + inner, px[oa]);
                 }
               });
  return out;
}

}  // namespace sima
