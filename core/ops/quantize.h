// Reduced-precision inference: the precision names, what the CPU can do, and the
// quantization arithmetic shared by the int8 GEMMs (docs/precision.md).
//
// int8, symmetric, as in PyTorch's dynamic quantization (per-channel weights, per-row inputs):
//   weight row n (out, in):  s_w[n] = max_k |W[n,k]| / 127,  W_q = round(W / s_w) in [-127, 127]
//   input row m (M, in):     s_x[m] = max_k |x[m,k]| / Q,    x_q = round(x / s_x) in [-Q, Q]
//   y[m,n] = s_x[m] s_w[n] Σ_k x_q[m,k] W_q[n,k]       (int32 sum, exact)
// The input goes to the library as unsigned bytes x_q + Z (zero point Z = Q + 1 > 0, so
// x_q + Z is in [1, 2Q+1]) and Z Σ_k W_q[n,k] is subtracted from the int32 sum.
// Q = 127, Z = 128 with VNNI/AMX; Q = 63, Z = 64 without: AVX2 and AVX-512 without VNNI
// multiply u8·s8 pairs into a saturating int16 (vpmaddubsw), and only x_q + Z ≤ 127 keeps
// 2·127·127 below 32767, so the sum stays exact (checked in tests/nn/test_lowp_linear.cpp).
#pragma once
#include <cstdint>
#include <string>

namespace sima {

enum class Precision { F32, BF16, Int8 };

// "fp32" | "bf16" | "int8"; anything else is a sima::Error naming `who` and the allowed values.
Precision parse_precision(const std::string& s, const std::string& who);
const char* precision_name(Precision p);

// What this CPU has, from cpuid (read once).
struct CpuFeatures {
  bool avx2 = false, avx512_core = false, avx512_vnni = false, avx_vnni = false;
  bool avx512_bf16 = false, amx_int8 = false, amx_bf16 = false;
};
const CpuFeatures& cpu_features();
// The activation range Q of the int8 GEMMs on this CPU (127 where oneDNN may use VNNI or AMX, else 63).
int int8_input_range();

// Per-row symmetric quantization of x (rows × cols, row stride ld) to bytes x_q + (Q + 1),
// written densely to q (rows × cols); scale[r] = max|x[r,:]| / Q (1 for an all-zero row).
void quantize_rows_u8(const float* x, int64_t rows, int64_t cols, int64_t ld, int Q, uint8_t* q, float* scale);

// Per-row symmetric int8 of a weight-like matrix w (rows × cols): scale[r] = max|w[r,:]| / 127
// (1 for an all-zero row), q = round(w / scale) in [-127, 127].
void quantize_rows_s8(const float* w, int64_t rows, int64_t cols, int8_t* q, float* scale);

// float32 -> bfloat16 -> float32, rounding to nearest even (NaN stays NaN).
float round_to_bf16(float x);
uint16_t float_to_bf16_bits(float x);
// y[i] = float_to_bf16_bits(x[i]) for i < n: the same rounding, branch-free so it vectorises,
// split across the threads (the bf16 GEMMs convert every input with it).
void floats_to_bf16_bits(const float* x, uint16_t* y, int64_t n);

}  // namespace sima
