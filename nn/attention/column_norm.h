// Normalising the channel columns of q or k over the tokens, shared by SimA and XCA
// (internal header: only the attention .cpp files include it).
//
// One (batch, head) slice x is N×d row-major (tokens × channels). Every channel column c
// is divided by its norm over the N tokens, clamped below at eps (F.normalize(x, p, dim=-2)):
//
//   n_c = ‖x[:, c]‖_p,   y[i, c] = x[i, c] / max(n_c, eps)
//
// Backward (REFERENCE.md §1.2), with g = dL/dy and s_c = Σ_i g[i, c] · y[i, c]:
//   ℓ1, n_c ≥ eps:  dx[i, c] = (g[i, c] − sign(y[i, c]) · s_c) / n_c
//   ℓ2, n_c ≥ eps:  dx[i, c] = (g[i, c] − y[i, c] · s_c) / n_c
//   n_c < eps:      dx[i, c] = g[i, c] / eps        (the clamp blocks the path through n_c)
// Derivation for one column (drop c): y_k = x_k / n, so
//   ∂y_k/∂x_j = δ_kj / n − x_k · (∂n/∂x_j) / n²
//   dx_j = Σ_k g_k ∂y_k/∂x_j = (g_j − (∂n/∂x_j) · Σ_k g_k y_k) / n = (g_j − (∂n/∂x_j) · s) / n
// with ∂n/∂x_j = sign(x_j) for ℓ1 and x_j / n = y_j for ℓ2; sign(0) = 0, as in PyTorch.
// The backward takes x, not y: callers save the input (usually a view of the qkv output,
// kept alive anyway) and the d norms, rather than a second N×d tensor y.
// Precision: the two sums over the N tokens (n_c, and Σ g·x) accumulate in double, and the
// backward's g − sign(x)·s is formed in double. When the tokens are alike, g ≈ sign(x)·s and
// the difference is far smaller than g: any rounding in n_c or s reappears magnified there
// (docs/derivations.md §6, "Precision").
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace sima {

enum class ColumnNorm { None, L1, L2 };

// y = x / max(norm, eps) column-wise (a copy for None). x, y: N×d, norm: d. y may alias x.
inline void column_scale(const float* x, const float* norm, float* y, int64_t N, int64_t d,
                         ColumnNorm p, float eps) {
  if (p == ColumnNorm::None) {
    if (y != x) std::memcpy(y, x, sizeof(float) * N * d);
    return;
  }
  for (int64_t i = 0; i < N; ++i) {
    const float* xi = x + i * d;
    float* yi = y + i * d;
    for (int64_t c = 0; c < d; ++c) yi[c] = xi[c] / std::max(norm[c], eps);
  }
}

// x, y: N×d; norm: d, receives n_c (before the clamp; untouched for None); acc: d doubles of
// scratch. y may not alias x.
inline void column_normalize(const float* x, float* y, float* norm, double* acc, int64_t N, int64_t d,
                             ColumnNorm p, float eps) {
  if (p != ColumnNorm::None) {
    // Column sums, a row at a time so the inner loop runs along memory (and vectorises).
    std::fill(acc, acc + d, 0.0);
    for (int64_t i = 0; i < N; ++i) {
      const float* xi = x + i * d;
      if (p == ColumnNorm::L1)
        for (int64_t c = 0; c < d; ++c) acc[c] += std::fabs(xi[c]);
      else
        for (int64_t c = 0; c < d; ++c) acc[c] += static_cast<double>(xi[c]) * xi[c];
    }
    for (int64_t c = 0; c < d; ++c)
      norm[c] = static_cast<float>(p == ColumnNorm::L2 ? std::sqrt(acc[c]) : acc[c]);
  }
  column_scale(x, norm, y, N, d, p, eps);
}

// g, x: N×d (x the forward's input: y is recomputed from it, not saved); norm: d from the
// forward; dx: N×d (may alias g); s: d doubles of scratch.
inline void column_normalize_backward(const float* g, const float* x, const float* norm, float* dx,
                                      double* s, int64_t N, int64_t d, ColumnNorm p, float eps) {
  if (p == ColumnNorm::None) {
    if (dx != g) std::memcpy(dx, g, sizeof(float) * N * d);
    return;
  }
  std::fill(s, s + d, 0.0);
  for (int64_t i = 0; i < N; ++i) {
    const float *gi = g + i * d, *xi = x + i * d;
    for (int64_t c = 0; c < d; ++c) s[c] += static_cast<double>(gi[c]) * xi[c];
  }
  // s_c = Σ g·y = (Σ g·x) / n_c. Clamped columns (n_c < eps) get s_c = 0, so one loop
  // covers both branches: dx = (g − ∂n·s) / max(n, eps), in double until the store.
  for (int64_t c = 0; c < d; ++c) s[c] = norm[c] >= eps ? s[c] / norm[c] : 0.0;
  for (int64_t i = 0; i < N; ++i) {
    const float *gi = g + i * d, *xi = x + i * d;
    float* di = dx + i * d;
    if (p == ColumnNorm::L1)
      for (int64_t c = 0; c < d; ++c) {
        const double sgn = xi[c] > 0.f ? 1.0 : (xi[c] < 0.f ? -1.0 : 0.0);
        di[c] = static_cast<float>((gi[c] - sgn * s[c]) / std::max(norm[c], eps));
      }
    else
      for (int64_t c = 0; c < d; ++c) {
        const double r = std::max(norm[c], eps);
        di[c] = static_cast<float>((gi[c] - xi[c] / r * s[c]) / r);
      }
  }
}

}  // namespace sima
