// One row-major GEMM through OpenBLAS (internal header for matmul, linear and conv).
//
//   C (m×n) = op(A) · op(B) + beta · C
//
// A is stored m×k (or k×m when ta: op(A) = Aᵀ), B is stored k×n (or n×k when tb),
// all contiguous row-major, so the leading dimensions follow from the shapes.
// The transposes are BLAS flags: no transposed copy is ever made.
//
// Threads. OpenBLAS's own split of a product across threads gives different roundings at
// different thread counts, so a team that shrinks while other processes hold cores
// (core/thread_governor.h) would change the results. A product big enough to be worth
// splitting is therefore cut here into num_threads() blocks of C's rows (or columns, when
// C is wider than tall), and each block is one single-threaded cblas_sgemm: the blocks,
// hence the bits, depend only on the requested thread count.
#pragma once
#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/flops.h"
#include "core/parallel.h"

namespace sima {

// Matrices with fewer multiply-adds than this (m·n·k) are too small for OpenBLAS to
// split across threads; a batch of them is split across threads instead (one sgemm
// per matrix, OpenBLAS-OpenMP runs single-threaded inside a parallel region).
constexpr int64_t kGemmBatchParallelWork = int64_t(1) << 24;
// Minimum multiply-adds per thread before a batch loop is split at all.
constexpr int64_t kGemmGrain = int64_t(1) << 16;
// One product is cut into blocks from this many multiply-adds (OpenBLAS 0.3's own
// threshold for threading sgemm: 65536 · 4), with at least kGemmMinBlock rows or columns each.
constexpr int64_t kGemmSplitWork = int64_t(1) << 18;
constexpr int64_t kGemmMinBlock = 16;

namespace detail {
inline void sgemm_block(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* A, int64_t lda,
                        const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1.0f, A,
              static_cast<int>(std::max<int64_t>(1, lda)), B,
              static_cast<int>(std::max<int64_t>(1, ldb)), beta, C,
              static_cast<int>(std::max<int64_t>(1, ldc)));
}
}  // namespace detail

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
  const bool by_rows = m >= n;
  const int64_t cut = by_rows ? m : n;  // the dimension of C that is cut into blocks
  const int64_t blocks = in_parallel() || m * n * k < kGemmSplitWork
                             ? 1
                             : std::min<int64_t>(num_threads(), cut / kGemmMinBlock);
  if (blocks <= 1) {  // inside a chunk OpenBLAS runs single-threaded; else on the whole team
    if (!in_parallel()) govern_threads();
    detail::sgemm_block(ta, tb, m, n, k, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  run_chunks(blocks, [&](int64_t b) {
    const int64_t i0 = cut * b / blocks, len = cut * (b + 1) / blocks - i0;
    if (by_rows)  // rows i0.. of C and of op(A)
      detail::sgemm_block(ta, tb, len, n, k, ta ? A + i0 : A + i0 * k, lda, B, ldb, beta, C + i0 * ldc, ldc);
    else  // columns i0.. of C and of op(B)
      detail::sgemm_block(ta, tb, m, len, k, A, lda, tb ? B + i0 * k : B + i0, ldb, beta, C + i0, ldc);
  });
}

}  // namespace sima
