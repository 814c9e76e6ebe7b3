// Matrix products (each one gemm(): oneDNN or OpenBLAS, core/ops/gemm.h).
#pragma once
#include "core/tensor.h"

namespace sima {

// a (..., M, K) @ b (..., K, N) -> (..., M, N), leading batch dims broadcast.
// trans_a / trans_b use aᵀ / bᵀ of the last two dims, folded into the BLAS call (no copy).
// 1-d operands are not supported (reshape them); both must be at least 2-d.
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);

// y = x Wᵀ + b, fused: x (..., in), weight (out, in), bias (out) or undefined -> (..., out).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace sima
