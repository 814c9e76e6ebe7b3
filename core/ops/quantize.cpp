#include "core/ops/quantize.h"

#include <cpuid.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <bit>
#include <cmath>

#include "core/error.h"
#include "core/parallel.h"

namespace sima {

Precision parse_precision(const std::string& s, const std::string& who) {
  if (s == "fp32") return Precision::F32;
  if (s == "bf16") return Precision::BF16;
  if (s == "int8") return Precision::Int8;
  fail(who, ": precision must be one of fp32, bf16, int8 (got '", s, "')");
}

const char* precision_name(Precision p) {
  return p == Precision::F32 ? "fp32" : p == Precision::BF16 ? "bf16" : "int8";
}

namespace {
CpuFeatures read_cpu_features() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  f.avx2 = b & (1u << 5);
  f.avx512_core = (b & (1u << 16)) && (b & (1u << 30)) && (b & (1u << 31));  // F, BW, VL
  f.avx512_vnni = c & (1u << 11);
  f.amx_bf16 = d & (1u << 22);
  f.amx_int8 = d & (1u << 25);
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) {
    f.avx_vnni = a & (1u << 4);
    f.avx512_bf16 = a & (1u << 5);
  }
  return f;
}
}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = read_cpu_features();
  return f;
}

// oneDNN picks its int8 kernels from the ISA it may use: cpuid's, capped by ONEDNN_MAX_CPU_ISA (or
// DNNL_MAX_CPU_ISA). Capped below VNNI it runs the saturating vpmaddubsw kernels even on a VNNI CPU,
// so Q = 127 needs both: the CPU's VNNI or AMX, and an effective ISA that contains the VNNI level.
int int8_input_range() {
  static const int q = [] {
    const CpuFeatures& f = cpu_features();
    const unsigned isa = unsigned(dnnl_get_effective_cpu_isa());
    auto allows = [isa](dnnl_cpu_isa_t level) { return (isa & unsigned(level)) == unsigned(level); };
    const bool avx512_vnni = (f.avx512_vnni || f.amx_int8) && allows(dnnl_cpu_isa_avx512_core_vnni);
    const bool avx2_vnni = f.avx_vnni && allows(dnnl_cpu_isa_avx2_vnni);
    return avx512_vnni || avx2_vnni ? 127 : 63;
  }();
  return q;
}

namespace {
// Rounds |x| ≤ 2^22 to the nearest integer, ties to even (the FPU's default mode): adding and
// subtracting 1.5·2^23 leaves no fraction bits. A plain add and subtract, so the loop vectorises
// (std::nearbyint does not always); the compiler may not fold it (no -ffast-math).
inline float round_even(float x) {
  constexpr float kMagic = 12582912.f;  // 1.5 · 2^23
  return (x + kMagic) - kMagic;
}

// max_k |x[k]|: with the sign bit cleared, non-negative floats order as their bits do, so the
// maximum is an integer one, which vectorises (a float max reduction does not without -ffast-math).
// A NaN orders above inf and comes out as the maximum.
float abs_max(const float* x, int64_t n) {
  uint32_t m = 0;
  for (int64_t k = 0; k < n; ++k) m = std::max(m, std::bit_cast<uint32_t>(x[k]) & 0x7fffffffu);
  return std::bit_cast<float>(m);
}

// q[k] = round_even(clamp(x[k] · inv, -Q, Q)) + zero for k < n, written as T (the clamp as two
// selects and the conversion through int32, so the loop vectorises).
template <class T>
void quantize_row(const float* x, int64_t n, float inv, float Q, int32_t zero, T* q) {
  for (int64_t k = 0; k < n; ++k) {
    float v = x[k] * inv;
    v = v < -Q ? -Q : v;
    v = v > Q ? Q : v;
    q[k] = static_cast<T>(static_cast<int32_t>(round_even(v)) + zero);
  }
}
}  // namespace

void quantize_rows_u8(const float* x, int64_t rows, int64_t cols, int64_t ld, int Q, uint8_t* q, float* scale) {
  parallel_for(rows, grain_for(kGrainElementwise, cols), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float amax = abs_max(x + r * ld, cols);
      const float s = amax > 0.f ? amax / static_cast<float>(Q) : 1.f;
      // rounded half to even, then shifted into [1, 2Q + 1]
      quantize_row(x + r * ld, cols, 1.f / s, static_cast<float>(Q), Q + 1, q + r * cols);
      scale[r] = s;
    }
  });
}

void quantize_rows_s8(const float* w, int64_t rows, int64_t cols, int8_t* q, float* scale) {
  parallel_for(rows, grain_for(kGrainElementwise, cols), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float amax = abs_max(w + r * cols, cols);
      const float s = amax > 0.f ? amax / 127.f : 1.f;
      quantize_row(w + r * cols, cols, 1.f / s, 127.f, 0, q + r * cols);
      scale[r] = s;
    }
  });
}

uint16_t float_to_bf16_bits(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  if (std::isnan(x)) return static_cast<uint16_t>((u >> 16) | 0x40);  // a quiet NaN
  const uint32_t rounding = 0x7fff + ((u >> 16) & 1);                  // to nearest, ties to even
  return static_cast<uint16_t>((u + rounding) >> 16);
}

void floats_to_bf16_bits(const float* x, uint16_t* y, int64_t n) {
  parallel_for(n, kGrainElementwise, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const uint32_t u = std::bit_cast<uint32_t>(x[i]);
      const uint32_t rounded = (u + 0x7fff + ((u >> 16) & 1)) >> 16;
      const uint32_t quiet = (u >> 16) | 0x40;
      y[i] = static_cast<uint16_t>(x[i] != x[i] ? quiet : rounded);  // NaN: a quiet NaN, as above
    }
  });
}

float round_to_bf16(float x) {
  return std::bit_cast<float>(static_cast<uint32_t>(float_to_bf16_bits(x)) << 16);
}

}  // namespace sima
