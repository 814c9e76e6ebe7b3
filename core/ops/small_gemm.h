// Products of matrices too small for a GEMM library call (internal header).
//
//   C (m×n) = op(A) · op(B) + beta · C,   the same contract as gemm() (gemm.h)
//
// The iterative inverses of Nyströmformer and SOFT (nn/attention/nystromformer.cpp, soft_gaussian.cpp)
// multiply m×m matrices, m = the landmarks (10 and 9 in the study's configs), dozens of times
// per matrix and step. oneDNN's dnnl_sgemm costs about 0.3 µs per call before any arithmetic,
// while a 10×10×10 product is 1000 multiply-adds, so those calls were most of the step
// (docs/performance.md §4, "Small products").
//
// Here op(B) is copied into a k × n16 block (n16 = n rounded up to 16 lanes, zero beyond n)
// and the rows of C are accumulated 4 at a time (2 when n > 16) in 16-lane vectors:
// acc[j] += op(A)[i][l] · op(B)[l][j] for l = 0 .. k-1 in order. Every element is one sum in a fixed order that depends on
// nothing but the operands, so the result is the same at any thread count; it is not the
// library's rounding (oneDNN orders and blocks its sums its own way), so switching a call
// site from gemm() to small_gemm() changes its last bits.
#pragma once
#include <cstdint>

namespace sima {

// The largest m, n, k small_gemm takes (its scratch lives on the stack).
constexpr int64_t kSmallGemmMax = 64;

// Throws when m, n or k is outside [0, kSmallGemmMax]. Single-threaded; counts its FLOPs in
// gemm_flops() (core/flops.h) but not as a library call.
void small_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* A, const float* B,
                float beta, float* C);

// The same product by small_gemm when m, n and k are all within its limit, by gemm() (the
// library) otherwise: for a call site whose sizes come from a config (landmarks, say).
void small_or_library_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* A,
                           const float* B, float beta, float* C);

}  // namespace sima
