// One row-major cblas_sgemm call (internal header for matmul, linear and conv).
//
//   C (m×n) = op(A) · op(B) + beta · C
//
// A is stored m×k (or k×m when ta: op(A) = Aᵀ), B is stored k×n (or n×k when tb),
// all contiguous row-major, so the leading dimensions follow from the shapes.
// The transposes are BLAS flags: no transposed copy is ever made.
#pragma once
#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/flops.h"

namespace sima {

inline void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* A, const float* B,
                 float beta, float* C) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // empty sum: C = beta·C
    if (beta == 0.f) std::memset(C, 0, sizeof(float) * m * n);
    else if (beta != 1.f)
      for (int64_t i = 0; i < m * n; ++i) C[i] *= beta;
    return;
  }
  count_gemm_flops(2 * m * n * k);
  const int64_t lda = ta ? m : k, ldb = tb ? k : n, ldc = n;
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1.0f, A,
              static_cast<int>(std::max<int64_t>(1, lda)), B,
              static_cast<int>(std::max<int64_t>(1, ldb)), beta, C,
              static_cast<int>(std::max<int64_t>(1, ldc)));
}

// Matrices with fewer multiply-adds than this (m·n·k) are too small for OpenBLAS to
// split across threads; a batch of them is split across threads instead (one sgemm
// per matrix, OpenBLAS-OpenMP runs single-threaded inside a parallel region).
constexpr int64_t kGemmBatchParallelWork = int64_t(1) << 24;
// Minimum multiply-adds per thread before a batch loop is split at all.
constexpr int64_t kGemmGrain = int64_t(1) << 16;

}  // namespace sima
