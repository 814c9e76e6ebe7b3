// Autocast: the precision the matrix products of a training step run in (train.precision,
// docs/precision.md "Training precisions"). Internal to core/ops and the training loop.
//
// Every product of the library (matmul, linear, the fused MLP, convolution's im2col GEMM, every
// attention core's products, forward and backward) is one call of gemm() (gemm.h). While the
// mode is not Off, gemm() runs it as the mode says (autocast_gemm.cpp):
//   Off   float32 inputs, float32 sums: the float32 code path, bit for bit as without autocast.
//   BF16  A and B rounded to bfloat16 (to nearest even), products summed in float32 (oneDNN's
//         bf16 matmul with a float32 destination: AVX512-BF16 or AMX kernels). C stays float32.
//         As PyTorch's CPU autocast, whose matmul / linear / conv take bf16 inputs and, with a
//         float32 accumulator, return bf16: we keep C in float32 (one rounding fewer).
//   FP16  an emulation of CUDA float16 autocast for fidelity, not speed: A and B (and the
//         C that beta adds, e.g. a bias) rounded to float16, the product summed in float32,
//         C rounded to float16, overflowing to ±inf as the hardware's would (|x| ≥ 65520).
// Everything that is not a product (norms, softmax, the ℓ1 column sums, losses, reductions,
// the optimizer) stays float32 in every mode.
//
// The mode is process-wide, not per thread: the products run on OpenMP's worker threads too.
// The training loop sets it around a step's forward and backward (AutocastGuard) and never
// around evaluation.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace sima {

enum class AutocastMode : int { Off = 0, BF16 = 1, FP16 = 2 };

namespace detail {
std::atomic<int>& autocast_state();
}  // namespace detail

inline AutocastMode autocast_mode() {
  return static_cast<AutocastMode>(detail::autocast_state().load(std::memory_order_relaxed));
}

// Sets the mode for its lifetime, restores the previous one after (also when unwinding).
class AutocastGuard {
 public:
  explicit AutocastGuard(AutocastMode m);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  int saved_;
};

// "fp32" | "bf16" | "fp16" (train.precision); anything else is an Error naming `who`.
AutocastMode parse_autocast_mode(const std::string& s, const std::string& who);
const char* autocast_mode_name(AutocastMode m);

// "" when this CPU can run the mode, else why not, naming the missing CPU feature: BF16 needs
// AVX512-BF16 or AMX-BF16 (cpuid) and oneDNN's bf16 matmul; FP16 runs anywhere (F16C where
// present, exact integer rounding elsewhere). Off always runs.
std::string autocast_unsupported(AutocastMode m);

// float -> float16 -> float, to nearest even; |x| ≥ 65520 (and ±inf) gives ±inf, NaN stays NaN,
// values below 2^-14 become float16 subnormals (multiples of 2^-24).
float round_to_fp16(float x);
// y[i] = round_to_fp16(x[i]) for i < n (y may be x), split across threads.
void round_to_fp16(const float* x, float* y, int64_t n);

// The largest |x| that round_to_fp16(x, y, n) has been given since the last call, and a restart:
// in FP16 mode every product's inputs and output pass through it, so between two calls around a
// forward pass it is the largest magnitude any float16 value of that forward had (≥ 65520: it
// overflowed to inf). NaN inputs are not counted. The training loop logs it per step window and
// per epoch (fp16_forward_peak, docs/precision.md).
float fp16_peak_take();

// The same over the roundings made inside an Fp16AttentionSite only: the products of the attention
// cores, which open one on the thread that runs each product (gemm_block, core/ops/gemm.h, the
// packed cores' product of one image and head). Taken and restarted on its own.
float fp16_attention_peak_take();
class Fp16AttentionSite {
 public:
  Fp16AttentionSite();
  ~Fp16AttentionSite();
  Fp16AttentionSite(const Fp16AttentionSite&) = delete;
  Fp16AttentionSite& operator=(const Fp16AttentionSite&) = delete;

 private:
  int saved_;
};

// The float16 cast of CUDA autocast as an op, for products that do not go through gemm() (the
// depthwise convolutions): forward y = round_to_fp16(x); backward dx = round_to_fp16(dy), the
// gradient a float16 tensor receives. Undefined in, undefined out.
Tensor fp16_round(const Tensor& x);

namespace detail {
// round_to_fp16 by integer arithmetic on the bits, without F16C (the tests' reference).
float round_to_fp16_reference(float x);
}  // namespace detail

}  // namespace sima
