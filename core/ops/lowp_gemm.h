// Low-precision GEMMs through oneDNN (Debian libdnnl 2.6), which picks its kernels for the
// CPU at run time (AVX2, AVX-512, VNNI, AVX512-BF16, AMX). docs/precision.md has the scheme,
// the library choice and the measurements. Inference only: nothing here records a graph.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/ops/fused_mlp.h"
#include "core/ops/quantize.h"
#include "core/tensor.h"

namespace sima {

// True when oneDNN runs bf16 matmuls natively on this CPU (it needs AVX-512 at least;
// oneDNN 2.6 has no bf16 matmul for AVX2). Elsewhere bf16 is emulated (see LowpLinear).
bool bf16_native();

// y = x Wᵀ + b with W prepared once for the library and kept:
//   Int8  W quantized per output channel (quantize.h), packed by oneDNN; x quantized per row
//         at every call; int32 sums; dequantized and biased in float32.
//   BF16  W and x rounded to bfloat16, float32 sums (oneDNN bf16 matmul with W packed), or,
//         without native bf16, the same rounding through the float32 sgemm (same numerics
//         up to the order of the sums, no speed-up).
//   F32   W and x as they are, float32 sums, W packed by oneDNN once (the ordinary Linear's
//         sgemm packs W again at every call): float32 results up to the order of the sums.
class LowpLinear {
 public:
  // weight (out, in), bias (out) or undefined. A copy of the weight is kept: later changes
  // to the Tensor do not reach it.
  LowpLinear(Precision p, const Tensor& weight, const Tensor& bias);
  // Int8 from stored weights: q (out·in values in [-127, 127]) and scale (out, each > 0).
  LowpLinear(std::vector<int8_t> q, std::vector<float> scale, int64_t out, int64_t in, const Tensor& bias);

  Tensor forward(const Tensor& x) const;  // (..., in) -> (..., out)
  // act(x Wᵀ + b) with the activation applied as the product is stored (an MLP's fc1:
  // nn/mlp.cpp): at int8 our float32 activation in the dequantisation pass; at fp32 and native bf16
  // oneDNN's own as a post-op of the primitive (gelu_erf, swish with α = 1.702, relu), within
  // 1e-5 of ours.
  Tensor forward(const Tensor& x, MlpActivation act) const;
  // residual + x Wᵀ + b, residual shaped as the output: a block's residual stream, added as the
  // product is stored (oneDNN's binary post-op) at fp32 and native bf16, in a pass after at int8.
  // The same float32 additions as forward() then add() (the bias first, then the residual).
  Tensor forward_add(const Tensor& x, const Tensor& residual) const;
  Precision precision() const;
  int64_t in_features() const;
  int64_t out_features() const;
  const std::vector<int8_t>& int8_weight() const;  // (out, in), Int8 only
  const std::vector<float>& weight_scale() const;  // (out), Int8 only

 private:
  Tensor forward_impl(const Tensor& x, const MlpActivation* act, const Tensor* residual) const;
  struct Impl;
  friend Tensor lowp_mlp(const LowpLinear& fc1, const LowpLinear& fc2, const Tensor& x, MlpActivation act,
                         const Tensor& residual);
  std::shared_ptr<Impl> impl_;
};

// An MLP's fc2(act(fc1(x))), x (..., fc1.in) -> (..., fc2.out). When both run bf16 natively, fc1
// stores its hidden layer in bf16 and fc2 reads it: no float32 hidden layer and no separate rounding
// pass over it (at the quickstart CvT's first stage that pass was a tenth of the bf16 forward:
// docs/precision.md). The values are those of fc2.forward(fc1.forward(x, act)) up to the order of
// the sums and hidden values below bf16's normal range (oneDNN flushes those to zero). Any other
// precision: exactly fc2.forward(fc1.forward(x, act)). With a residual (shaped as the output),
// residual + the MLP's output, added by fc2 as forward_add does.
Tensor lowp_mlp(const LowpLinear& fc1, const LowpLinear& fc2, const Tensor& x, MlpActivation act,
                const Tensor& residual = Tensor());

// Dynamic int8 batched product, for activations times activations (the SimA core):
//   C[p] (m×n) = op(A[p]) (m×k) · op(B[p]) (k×n) for p < P, all float32 row-major,
//   A[p] stored m×k (k×m when ta), B[p] stored k×n (n×k when tb).
// op(A) is quantized per row, op(B) per column (each symmetric, scales from the data).
void int8_bmm(int64_t P, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* A, const float* B,
              float* C);

}  // namespace sima
