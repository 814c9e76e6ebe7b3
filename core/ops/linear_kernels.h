// The two halves of a linear layer besides its GEMMs (internal header for linear and
// fused_mlp): y = a Wᵀ + b row by row, and the gradient of b.
#pragma once
#include <algorithm>
#include <cstdint>

#include "core/ops/gemm.h"
#include "core/parallel.h"
#include "core/tensor.h"

namespace sima {

// y (R×n) = a (R×k) · Wᵀ + b, W (n×k): the bias is written into every row of y first,
// then one sgemm adds a · Wᵀ to it (beta = 1). a16, w16: a's and W's bf16 copies, if made
// (gemm.h Bf16Operand).
inline void linear_rows(const float* a, const float* w, const float* b, float* y, int64_t R, int64_t n, int64_t k,
                        const Bf16Operand& a16 = {}, const Bf16Operand& w16 = {}) {
  parallel_for(R, std::max<int64_t>(1, kGrainElementwise / std::max<int64_t>(1, n)),
               [&](int64_t r0, int64_t r1) {
                 for (int64_t r = r0; r < r1; ++r) std::copy(b, b + n, y + r * n);
               });
  gemm(false, true, R, n, k, a, a16, w, w16, 1.f, y);
}

// db (n) = column sums of dy (R×n): columns split across threads, rows summed in order,
// so the result is the same for any thread count.
inline Tensor bias_grad(const float* dy, int64_t R, int64_t n) {
  Tensor db = zeros(Shape{n});
  float* pb = db.data();
  parallel_for(n, std::max<int64_t>(1, kGrainElementwise / std::max<int64_t>(1, R)),
               [&](int64_t j0, int64_t j1) {
                 for (int64_t r = 0; r < R; ++r) {
                   const float* row = dy + r * n;
                   for (int64_t j = j0; j < j1; ++j) pb[j] += row[j];
                 }
               });
  return db;
}

}  // namespace sima
