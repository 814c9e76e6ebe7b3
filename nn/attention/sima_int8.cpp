// SimA's attention core at int8, for inference (sima.h, docs/precision.md "SimA core").
//
// q̂ and k̂ are normalised exactly as in float32 (column_norm.h); then both products run as
// dynamic int8 batched GEMMs (int8_bmm: the left factor quantized per row, the right one per
// column, int32 sums) over all P = B·h (batch, head) pairs at once:
//   kv_first: M = k̂ᵀ v  (P, d, d),   out = q̂ M   (P, N, d)
//   qk_first: A = q̂ k̂ᵀ (P, N, Nk),  out = A v   (P, N, d)
// ℓ1 normalisation bounds every entry of q̂ and k̂ by 1 (a column's absolute values sum to
// 1), so |A| ≤ 1 and |M[c, :]| ≤ max|v|: nothing the int8 products take in or give out can
// grow with N, and the per-row scales only sharpen the resolution of small rows.
#include <cmath>

#include "core/error.h"
#include "core/ops/lowp_gemm.h"
#include "core/parallel.h"
#include "nn/attention/sima_column_norm.h"
#include "nn/attention/sima.h"

namespace sima {

// q (B, h, N, d), k, v (B, h, Nk, d) -> (B, h, N, d); no graph is recorded.
Tensor sima_attention_int8(const Tensor& q, const Tensor& k, const Tensor& v, SimaNorm norm, SimaOrder order,
                           float eps) {
  check_sima_inputs("sima_attention_int8", q, k, v, eps);
  const int64_t B = q.size(0), h = q.size(1), N = q.size(2), Nk = k.size(2), d = q.size(3), P = B * h;
  const ColumnNorm cn = column_norm(norm);
  Tensor qh = empty(q.shape()), kh = empty(k.shape()), norms = empty({P, 2 * d}), out = empty(q.shape());
  parallel_for(P, grain_for(kGrainElementwise, (N + Nk) * d), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      column_normalize(q.data() + p * N * d, qh.data() + p * N * d, norms.data() + p * 2 * d, N, d, cn, eps);
      column_normalize(k.data() + p * Nk * d, kh.data() + p * Nk * d, norms.data() + p * 2 * d + d, Nk, d, cn, eps);
    }
  });
  if (resolve_sima_order(order, N, d) == SimaOrder::QkFirst) {
    Tensor A = empty({P, N, Nk});
    int8_bmm(P, false, true, N, Nk, d, qh.data(), kh.data(), A.data());   // A = q̂ k̂ᵀ  (P, N, Nk)
    int8_bmm(P, false, false, N, d, Nk, A.data(), v.data(), out.data());  // out = A v   (P, N, d)
  } else {
    Tensor M = empty({P, d, d});
    int8_bmm(P, true, false, d, d, Nk, kh.data(), v.data(), M.data());    // M = k̂ᵀ v    (P, d, d)
    int8_bmm(P, false, false, N, d, d, qh.data(), M.data(), out.data());  // out = q̂ M   (P, N, d)
  }
  return out;
}

}  // namespace sima
