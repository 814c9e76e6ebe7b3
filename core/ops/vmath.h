// Vectorisable exp and erf for elementwise loops (internal header).
//
// std::exp / std::erf are library calls the compiler cannot vectorise without
// -ffast-math; these are plain float arithmetic, so a loop of them becomes AVX
// code (5-30x faster than the libm calls here).
//
// exp_fast: Cephes' expf scheme. e^x = 2^k · e^r with k = round(x / ln 2),
//   r = x − k·ln 2 ∈ [−ln2/2, ln2/2] (ln 2 split in two so k·ln2 is exact),
//   e^r by a degree-6 polynomial, 2^k built directly in the exponent bits (as
//   two factors 2^(k/2)·2^(k−k/2) so that k = 128 near the top of the range
//   does not overflow the exponent field). About 1 ulp. Below −87.34 (where
//   e^x < FLT_MIN) it returns 0, above 88.72 +inf, NaN stays NaN.
// erf_fast: Abramowitz & Stegun 7.1.26, erf(x) = 1 − t(a1 + t(a2 + ... a5)) e^(−x²),
//   t = 1/(1 + p|x|), odd in x; absolute error 1.5e-7 in exact arithmetic, below
//   5.3e-7 evaluated in float (tests/core/test_vmath.cpp). Its exp is exp_nonpos_fast.
//   SLEEF's Sleef_erff8_u10 (1 ulp, 5e-8) measured 3x slower on AVX2: docs/performance.md.
#pragma once
#include <bit>
#include <cstdint>
#include <limits>

namespace sima {

inline float exp_fast(float x) {
  const float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  const float kMagic = 12582912.f;  // 1.5·2^23: adding it rounds to an integer
  const float kLo = -87.33654f, kHi = 88.72283f;
  // NaN fails both comparisons and takes kLo here: converting NaN to int32 below would be
  // undefined behaviour (UBSan float-cast-overflow); the result is NaN by the last line.
  float xc = x > kLo ? (x < kHi ? x : kHi) : kLo;
  float k = (xc * kLog2e + kMagic) - kMagic;
  float r = xc - k * kLn2Hi - k * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float er = p * r * r + r + 1.f;
  int32_t ki = static_cast<int32_t>(k), k1 = ki / 2, k2 = ki - k1;
  float y = er * std::bit_cast<float>((k1 + 127) << 23) * std::bit_cast<float>((k2 + 127) << 23);
  y = x < kLo ? 0.f : y;
  y = x > kHi ? std::numeric_limits<float>::infinity() : y;
  return x != x ? x : y;  // NaN stays NaN
}

// e^x for x <= 0 only (the exp inside erf and the Gaussian): with k <= 0 the scale 2^k is
// one factor and needs no overflow guard, k comes out of the rounding constant's bits, and
// the one clamp (below −87.34, where e^x < FLT_MIN, the result is FLT_MIN·e^r instead of 0)
// is a max. A third fewer instructions than exp_fast. NaN gives a tiny number, not NaN:
// callers let NaN reach the result through their other terms.
inline float exp_nonpos_fast(float x) {
  const float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  const float kMagic = 12582912.f;  // 1.5·2^23: adding it rounds to an integer
  float xc = x > -87.33654f ? x : -87.33654f;
  float km = xc * kLog2e + kMagic;  // its low mantissa bits hold k = round(x / ln 2)
  float k = km - kMagic;
  float r = xc - k * kLn2Hi - k * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float er = p * r * r + r + 1.f;
  int32_t ki = std::bit_cast<int32_t>(km) - std::bit_cast<int32_t>(kMagic);
  return er * std::bit_cast<float>((ki + 127) << 23);
}

// erf(x), and in `gauss` the e^(−x²) it is built from (GELU's derivative needs the same
// Gaussian: computing both at once saves an exp). Odd: the sign of x flips e bitwise.
inline float erf_fast(float x, float& gauss) {
  const float p = 0.3275911f, a1 = 0.254829592f, a2 = -0.284496736f, a3 = 1.421413741f,
              a4 = -1.453152027f, a5 = 1.061405429f;
  float ax = x < 0.f ? -x : x;
  float t = 1.f / (1.f + p * ax);
  float poly = t * (a1 + t * (a2 + t * (a3 + t * (a4 + t * a5))));
  gauss = exp_nonpos_fast(-ax * ax);
  float e = 1.f - poly * gauss;  // NaN x: t and so e are NaN
  return std::bit_cast<float>(std::bit_cast<uint32_t>(e) ^ (std::bit_cast<uint32_t>(x) & 0x80000000u));
}

inline float erf_fast(float x) {
  float gauss;
  return erf_fast(x, gauss);
}

inline float sigmoid_fast(float x) { return 1.f / (1.f + exp_fast(-x)); }

}  // namespace sima
