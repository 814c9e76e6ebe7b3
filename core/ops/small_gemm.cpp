// small_gemm: C = op(A)·op(B) + beta·C for m, n, k <= 64, without a library call (small_gemm.h).
#include "core/ops/small_gemm.h"

#include <cstring>

#include "core/error.h"
#include "core/flops.h"
#include "core/ops/gemm.h"

// GCC turns the short copy loops below (a row of 10 floats) into calls of libc's memcpy and
// memset, which cost more than the copies at these sizes (perf put libc's memmove at 7 % of a
// Nyströmformer training step, beside 8 % in the products themselves); keep them loops.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-tree-loop-distribute-patterns")
#endif

namespace sima {

namespace {

constexpr int64_t kLanes = 16;  // floats per F16

// 16 floats as one value (a GCC/Clang vector extension): one AVX-512 register, or two AVX2
// ones, whatever -march gives; a·v multiplies every lane by the scalar a.
typedef float F16 __attribute__((vector_size(64)));

inline F16 load16(const float* p) {
  F16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Rows i0 .. i0+Rows-1 of C: c = op(A)·b + beta·c, b the padded k × (16·Blocks) copy of op(B),
// A stored m×k (k×m when TA). Each row's lanes sum over l in order 0..k-1, one product at a
// time; the Rows rows are independent chains of sums, which is what lets the core overlap them.
template <int64_t Blocks, int64_t Rows, bool TA>
void row_group(int64_t i0, int64_t m, int64_t n, int64_t k, const float* A, const float* b, float beta,
               float* C) {
  F16 acc[Rows][Blocks] = {};
  for (int64_t l = 0; l < k; ++l) {
    const float* bl = b + l * Blocks * kLanes;
    F16 bq[Blocks];
    for (int64_t q = 0; q < Blocks; ++q) bq[q] = load16(bl + q * kLanes);
    for (int64_t r = 0; r < Rows; ++r) {
      const float a = TA ? A[l * m + i0 + r] : A[(i0 + r) * k + l];  // op(A)[i0 + r][l]
      for (int64_t q = 0; q < Blocks; ++q) acc[r][q] += a * bq[q];
    }
  }
  for (int64_t r = 0; r < Rows; ++r) {
    alignas(64) float out[Blocks * kLanes];
    std::memcpy(out, acc[r], sizeof out);
    float* c = C + (i0 + r) * n;
    if (beta == 0.f)
      for (int64_t j = 0; j < n; ++j) c[j] = out[j];
    else
      for (int64_t j = 0; j < n; ++j) c[j] = out[j] + beta * c[j];
  }
}

// Every row of C: groups of 4 rows (2 when a row is more than one F16, so that the
// accumulators stay in registers with AVX2's 16), then the rest one by one.
template <int64_t Blocks, bool TA>
void rows(int64_t m, int64_t n, int64_t k, const float* A, const float* b, float beta, float* C) {
  constexpr int64_t kRows = Blocks == 1 ? 4 : 2;
  int64_t i = 0;
  for (; i + kRows <= m; i += kRows) row_group<Blocks, kRows, TA>(i, m, n, k, A, b, beta, C);
  for (; i < m; ++i) row_group<Blocks, 1, TA>(i, m, n, k, A, b, beta, C);
}

template <int64_t Blocks>
void rows(bool ta, int64_t m, int64_t n, int64_t k, const float* A, const float* b, float beta, float* C) {
  if (ta)
    rows<Blocks, true>(m, n, k, A, b, beta, C);
  else
    rows<Blocks, false>(m, n, k, A, b, beta, C);
}

}  // namespace

void small_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* A, const float* B,
                float beta, float* C) {
  check(m >= 0 && n >= 0 && k >= 0 && m <= kSmallGemmMax && n <= kSmallGemmMax && k <= kSmallGemmMax,
        "small_gemm: ", m, "x", n, "x", k, " is outside the sizes it takes (each of m, n, k in 0..",
        kSmallGemmMax, "); use gemm()");
  if (m == 0 || n == 0) return;
  count_gemm_flops(2 * m * n * k);
  // b: op(B) as k rows of n16 floats, zero beyond n (B is k×n, or n×k when tb).
  const int64_t n16 = (n + kLanes - 1) / kLanes * kLanes;
  alignas(64) float b[kSmallGemmMax * kSmallGemmMax];
  for (int64_t l = 0; l < k; ++l) {
    float* bl = b + l * n16;
    if (tb)
      for (int64_t j = 0; j < n; ++j) bl[j] = B[j * k + l];
    else
      for (int64_t j = 0; j < n; ++j) bl[j] = B[l * n + j];
    for (int64_t j = n; j < n16; ++j) bl[j] = 0.f;
  }
  switch (n16) {
    case 16: return rows<1>(ta, m, n, k, A, b, beta, C);
    case 32: return rows<2>(ta, m, n, k, A, b, beta, C);
    case 48: return rows<3>(ta, m, n, k, A, b, beta, C);
    default: return rows<4>(ta, m, n, k, A, b, beta, C);
  }
}

void small_or_library_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* A,
                           const float* B, float beta, float* C) {
  if (m <= kSmallGemmMax && n <= kSmallGemmMax && k <= kSmallGemmMax)
    small_gemm(ta, tb, m, n, k, A, B, beta, C);
  else
    gemm(ta, tb, m, n, k, A, B, beta, C);
}

}  // namespace sima
