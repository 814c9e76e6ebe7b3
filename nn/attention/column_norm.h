// Normalising the channel columns of q or k over the tokens, shared by SimA and XCA
// (internal header: only the attention .cpp files include it).
//
// One (batch, head) slice x is N×d row-major (tokens × channels). Every channel column c
// is divided by its norm over the N tokens, clamped below at eps (F.normalize(x, p, dim=-2)):
//
//   n_c = ‖x[:, c]‖_p,   y[i, c] = x[i, c] / max(n_c, eps)
//
// Backward (docs/derivations.md §6), with g = dL/dy and s_c = Σ_i g[i, c] · y[i, c]:
//   ℓ1, n_c ≥ eps:  dx[i, c] = (g[i, c] − sign(y[i, c]) · s_c) / n_c
//   ℓ2, n_c ≥ eps:  dx[i, c] = (g[i, c] − y[i, c] · s_c) / n_c
//   n_c < eps:      dx[i, c] = g[i, c] / eps        (the clamp blocks the path through n_c)
// Derivation for one column (drop c): y_k = x_k / n, so
//   ∂y_k/∂x_j = δ_kj / n − x_k · (∂n/∂x_j) / n²
//   dx_j = Σ_k g_k ∂y_k/∂x_j = (g_j − (∂n/∂x_j) · Σ_k g_k y_k) / n = (g_j − (∂n/∂x_j) · s) / n
// with ∂n/∂x_j = sign(x_j) for ℓ1 and x_j / n = y_j for ℓ2; sign(0) = 0, as in PyTorch.
// The backward takes x, not y: callers save the input (usually a view of the qkv output,
// kept alive anyway) and the d norms, rather than a second N×d tensor y.
// Precision: the two sums over the N tokens (n_c, and Σ g·x) accumulate in double (float
// partial sums of kRowBlock = 8 rows, so the loop keeps full float SIMD width), and the
// backward's g − sign(x)·s keeps s's double precision. When the tokens are alike,
// g ≈ sign(x)·s and the difference is far smaller than g: any rounding in n_c or s reappears
// magnified there (docs/derivations.md §6, "Precision").
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace sima {

enum class ColumnNorm { None, L1, L2 };

// y = x / max(norm, eps) column-wise (a copy for None). x: N×d with row stride ldx (d when 0),
// y: N×d dense, norm: d. y may alias x (then ldx must be d).
inline void column_scale(const float* x, const float* norm, float* y, int64_t N, int64_t d,
                         ColumnNorm p, float eps, int64_t ldx = 0) {
  if (ldx == 0) ldx = d;
  if (p == ColumnNorm::None) {
    if (y == x) return;
    for (int64_t i = 0; i < N; ++i) std::memcpy(y + i * d, x + i * ldx, sizeof(float) * d);
    return;
  }
  for (int64_t i = 0; i < N; ++i) {
    const float* xi = x + i * ldx;
    float* yi = y + i * d;
    for (int64_t c = 0; c < d; ++c) yi[c] = xi[c] / std::max(norm[c], eps);
  }
}

// The sums over the tokens run a block of columns at a time, their accumulators on the stack.
constexpr int64_t kColumnBlock = 64;
constexpr int64_t kRowBlock = 8;  // rows summed in float before the double accumulator

// n_c for every column c of x (N×d, row stride ldx; d when 0: a dense slice, 3C when read in
// place from a qkv output) into norm (d), before the clamp; norm is untouched for None.
inline void column_norms(const float* x, float* norm, int64_t N, int64_t d, ColumnNorm p, int64_t ldx = 0) {
  if (ldx == 0) ldx = d;
  if (p == ColumnNorm::None) return;
  for (int64_t c0 = 0; c0 < d; c0 += kColumnBlock) {
    const int64_t w = std::min(kColumnBlock, d - c0);
    double acc[kColumnBlock] = {};
    // Column sums, a row at a time so the inner loop runs along memory (and vectorises):
    // float partial sums over kRowBlock rows at full SIMD width, each added into double.
    for (int64_t i0 = 0; i0 < N; i0 += kRowBlock) {
      float part[kColumnBlock] = {};
      for (int64_t i = i0; i < std::min(N, i0 + kRowBlock); ++i) {
        const float* xi = x + i * ldx + c0;
        if (p == ColumnNorm::L1)
          for (int64_t c = 0; c < w; ++c) part[c] += std::fabs(xi[c]);
        else
          for (int64_t c = 0; c < w; ++c) part[c] += xi[c] * xi[c];
      }
      for (int64_t c = 0; c < w; ++c) acc[c] += part[c];
    }
    for (int64_t c = 0; c < w; ++c)
      norm[c0 + c] = static_cast<float>(p == ColumnNorm::L2 ? std::sqrt(acc[c]) : acc[c]);
  }
}

// y = x / max(n, eps) column-wise: x N×d with row stride ldx (d when 0), y N×d dense; norm (d)
// receives n_c (before the clamp; untouched for None). y may not alias x.
inline void column_normalize(const float* x, float* y, float* norm, int64_t N, int64_t d,
                             ColumnNorm p, float eps, int64_t ldx = 0) {
  column_norms(x, norm, N, d, p, ldx);
  column_scale(x, norm, y, N, d, p, eps, ldx);
}

// g, x: N×d (x the forward's input: y is recomputed from it, not saved); norm: d from the
// forward; dx: N×d (may alias g). All three share the row stride ld (d when 0; 3C when they
// are read and written in place in a packed qkv tensor and its gradient).
// With r = max(n, eps) and t = sign(x) (ℓ1) or y = x/r (ℓ2), both branches read
//   dx = (g − t·s) / r = (g − u·c) / r,   u = sign(x), c = s (ℓ1);  u = x, c = s/r (ℓ2)
// (clamped columns: s = 0). c comes from a double sum and is split into two floats,
// c = c_hi + c_lo; fma(−u, c_hi, g) rounds once (for ℓ1 not at all when g ≈ u·c_hi, the
// cancelling case), so g − u·c keeps c's double precision at float speed.
inline void column_normalize_backward(const float* g, const float* x, const float* norm, float* dx,
                                      int64_t N, int64_t d, ColumnNorm p, float eps, int64_t ld = 0) {
  if (ld == 0) ld = d;
  if (p == ColumnNorm::None) {
    if (dx != g)
      for (int64_t i = 0; i < N; ++i) std::memcpy(dx + i * ld, g + i * ld, sizeof(float) * d);
    return;
  }
  const bool l1 = p == ColumnNorm::L1;
  for (int64_t c0 = 0; c0 < d; c0 += kColumnBlock) {
    const int64_t w = std::min(kColumnBlock, d - c0);
    double acc[kColumnBlock] = {};  // Σ_i g·x, float partial sums over kRowBlock rows
    for (int64_t i0 = 0; i0 < N; i0 += kRowBlock) {
      float part[kColumnBlock] = {};
      for (int64_t i = i0; i < std::min(N, i0 + kRowBlock); ++i) {
        const float *gi = g + i * ld + c0, *xi = x + i * ld + c0;
        for (int64_t c = 0; c < w; ++c) part[c] += gi[c] * xi[c];
      }
      for (int64_t c = 0; c < w; ++c) acc[c] += part[c];
    }
    float hi[kColumnBlock], lo[kColumnBlock], r[kColumnBlock];
    for (int64_t c = 0; c < w; ++c) {
      const float n = norm[c0 + c];
      r[c] = std::max(n, eps);
      const double s = n >= eps ? acc[c] / n : 0.0;  // s = Σ g·y
      const double cc = l1 ? s : s / r[c];
      hi[c] = static_cast<float>(cc);
      lo[c] = static_cast<float>(cc - hi[c]);
    }
    for (int64_t i = 0; i < N; ++i) {
      const float *gi = g + i * ld + c0, *xi = x + i * ld + c0;
      float* di = dx + i * ld + c0;
      if (l1)
        for (int64_t c = 0; c < w; ++c) {
          const float u = xi[c] > 0.f ? 1.f : (xi[c] < 0.f ? -1.f : 0.f);
          di[c] = (std::fma(-u, hi[c], gi[c]) - u * lo[c]) / r[c];
        }
      else
        for (int64_t c = 0; c < w; ++c) di[c] = (std::fma(-xi[c], hi[c], gi[c]) - xi[c] * lo[c]) / r[c];
    }
  }
}

}  // namespace sima
