// What the SimA cores share (internal header: sima.cpp, sima_packed.cpp, sima_int8.cpp and
// sima_inference.cpp include it): the normalisation option as the column-norm kernels name it,
// and the checks of their inputs.
#pragma once
#include <cmath>

#include "core/error.h"
#include "nn/attention/column_norm.h"
#include "nn/attention/sima.h"

namespace sima {

inline ColumnNorm column_norm(SimaNorm n) {
  return n == SimaNorm::L1 ? ColumnNorm::L1 : n == SimaNorm::L2 ? ColumnNorm::L2 : ColumnNorm::None;
}

// q (B, h, N, d), k and v (B, h, N_kv, d), eps > 0 and finite; errors name `who`.
inline void check_sima_inputs(const char* who, const Tensor& q, const Tensor& k, const Tensor& v, float eps) {
  check(q.dim() == 4 && k.dim() == 4 && v.shape() == k.shape() && k.size(0) == q.size(0) &&
            k.size(1) == q.size(1) && k.size(3) == q.size(3),
        who, ": q ", q.shape(), ", k ", k.shape(), ", v ", v.shape(),
        " must be (B, h, N, d), (B, h, N_kv, d), (B, h, N_kv, d)");
  check(eps > 0.f && std::isfinite(eps), who, ": eps must be positive and finite, got ", eps);
}

// qkv (B, N, 3C) with C divisible by heads, eps > 0 and finite; errors name `who`.
inline void check_sima_packed_inputs(const char* who, const Tensor& qkv, int64_t heads, float eps) {
  check(qkv.dim() == 3 && heads > 0 && qkv.size(2) % (3 * heads) == 0, who, ": qkv ", qkv.shape(),
        " must be (B, N, 3C) with C divisible by ", heads, " heads");
  check(eps > 0.f && std::isfinite(eps), who, ": eps must be positive and finite, got ", eps);
}

}  // namespace sima
