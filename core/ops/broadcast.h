// Broadcasting machinery shared by the elementwise ops and their backwards.
//
// A BroadcastPlan walks an output shape with two inputs broadcast to it. Dims
// are first coalesced (adjacent dims merged when both inputs step through them
// the same way), then the walk is "rows" of the innermost dim, along which each
// input has stride 1 (varies) or 0 (broadcast). So (B, N, C) + (C) becomes
// B·N rows of C with strides (1, 1), and (B, N, C) + (B, N, C) one flat row.
#pragma once
#include <array>
#include <cstdint>

#include "core/shape.h"
#include "core/tensor.h"

namespace sima {

struct BroadcastPlan {
  int ndim = 0;                        // after coalescing; >= 1
  std::array<int64_t, kMaxDims> size{};
  std::array<int64_t, kMaxDims> stride_a{}, stride_b{};  // 0 on broadcast dims
  int64_t inner = 1;                   // size of the innermost (row) dim
  int64_t rows = 1;                    // numel / inner
  // Offsets into a and b of the first element of row r.
  void row_offsets(int64_t r, int64_t& off_a, int64_t& off_b) const;
};

// Plan for out = f(a, b) where out = broadcast(a, b) (pass b = out for one input).
BroadcastPlan make_broadcast_plan(const Shape& out, const Shape& a, const Shape& b);

// Sums g (of a broadcast shape) down to `shape`: the backward of broadcasting.
// Returns g itself when the shapes already agree.
Tensor sum_to(const Tensor& g, const Shape& shape);

// Broadcast x to `shape` (materialised copy): the forward of expand.
Tensor broadcast_to(const Tensor& x, const Shape& shape, const char* op);

}  // namespace sima
