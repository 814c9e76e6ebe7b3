// One row-major GEMM (internal header for matmul, linear and conv).
//
//   C (m×n) = op(A) · op(B) + beta · C
//
// A is stored m×k (or k×m when ta: op(A) = Aᵀ), B is stored k×n (or n×k when tb),
// all contiguous row-major, so the leading dimensions follow from the shapes.
// The transposes are BLAS flags: no transposed copy is ever made.
//
// Library. Each block below is one single-threaded call of oneDNN's dnnl_sgemm, or of
// OpenBLAS's cblas_sgemm with SIMA_GEMM=openblas (gemm_backend.cpp). oneDNN's JIT kernels
// (chosen at run time for the CPU) were 1.1-1.5x faster than OpenBLAS 0.3.21 on every shape
// of the study's models, from 50×50×16 head products to 6400×192×64 projections
// (docs/performance.md, "The GEMM library").
//
// Threads. A library's own split of a product across threads gives different roundings at
// different thread counts, so a team that shrinks while other processes hold cores
// (core/thread_governor.h) would change the results. A product big enough to be worth
// splitting is therefore cut here into num_threads() blocks of C's rows (or columns, when
// C is wider than tall), and each block is one single-threaded GEMM: the blocks,
// hence the bits, depend only on the requested thread count.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/flops.h"
#include "core/ops/autocast.h"
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

enum class GemmBackend { OneDnn, OpenBlas };
// The library every gemm() calls: SIMA_GEMM=onednn (the default) or openblas, read once; any
// other value throws on the first product. gemm_backend_problem() says what is wrong with
// SIMA_GEMM, or "" (the apps check it first thing, core/omp_wait.h).
GemmBackend gemm_backend();
std::string gemm_backend_problem();
const char* gemm_backend_name(GemmBackend b);

namespace detail {
// One single-threaded GEMM of a block (gemm_backend.cpp): the library never threads it itself.
void sgemm_block(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* A, int64_t lda,
                 const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
// The same with a given library (tests and tests/bench/bench_gemm_backends compare the two).
void sgemm_with(GemmBackend backend, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* A,
                int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
// The product at the autocast mode's precision (autocast.h, autocast_gemm.cpp); mode != Off.
void gemm_autocast(AutocastMode mode, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* A,
                   const float* B, float beta, float* C);
// The bf16 product, with A and B rounded already where A16 / B16 are given (not null).
void gemm_bf16_rounded(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* A, const uint16_t* A16,
                       const float* B, const uint16_t* B16, float beta, float* C);
}  // namespace detail

// The float32 product, whatever the autocast mode (autocast_gemm.cpp runs FP16's on rounded copies).
inline void gemm_f32(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* A, const float* B,
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
  if (blocks <= 1) {  // one block, single-threaded like every block
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

// C = op(A)·op(B) + beta·C: float32 (gemm_f32) unless a training step's autocast is on.
inline void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* A, const float* B,
                 float beta, float* C) {
  if (autocast_mode() != AutocastMode::Off && m > 0 && n > 0 && k > 0) {
    detail::gemm_autocast(autocast_mode(), ta, tb, m, n, k, A, B, beta, C);
    return;
  }
  gemm_f32(ta, tb, m, n, k, A, B, beta, C);
}

// One single-threaded product with explicit leading dimensions, at the autocast mode's precision:
// for kernels that run their own parallel loop over small products and read their operands in
// place (the packed attention cores, whose q, k, v are column blocks of the qkv Linear's output).
// Off: detail::sgemm_block, the float32 product, bit for bit. BF16 / FP16: op(A) and op(B) rounded
// into contiguous copies and the product run as gemm() runs it (FP16 rounds C too, ±inf past
// 65504); C is written in place with its ldc. The caller counts the flops. Only the attention cores
// call it, so FP16's roundings here count as theirs (fp16_attention_peak_take, autocast.h).
void gemm_block(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* A, int64_t lda,
                const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// Under bf16 autocast, an operand rounded to bfloat16 once and used by several products: a
// layer's input and weights, kept by its forward for its backward, and the dy that both of the
// backward's products read. Without it each product rounds both of its operands again (a
// linear layer's step rounded x, W and dy twice each). The bits are the ones gemm() rounds to
// itself (floats_to_bf16_bits), so every result is the same, bit for bit. Made while the mode
// is not BF16 it holds nothing and costs nothing.
class Bf16Operand {
 public:
  Bf16Operand() = default;
  Bf16Operand(const float* x, int64_t n);  // rounds x[0..n) when autocast_mode() is BF16
  const uint16_t* bits() const {  // null when it holds nothing
    return bits_.defined() ? reinterpret_cast<const uint16_t*>(bits_.data()) : nullptr;
  }

 private:
  Tensor bits_;  // the n bfloat16 values, in a float tensor's storage (the caching allocator)
};

// gemm() with A's and B's rounded copies: used when the product runs in bf16 and they hold
// them, else ignored (float32 and float16 products round, or not, as gemm() does).
inline void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* A, const Bf16Operand& A16,
                 const float* B, const Bf16Operand& B16, float beta, float* C) {
  if (autocast_mode() == AutocastMode::BF16 && m > 0 && n > 0 && k > 0) {
    detail::gemm_bf16_rounded(ta, tb, m, n, k, A, A16.bits(), B, B16.bits(), beta, C);
    return;
  }
  gemm(ta, tb, m, n, k, A, B, beta, C);
}

}  // namespace sima
