// A vectorisable exp for softmax-like loops (internal header).
//
// std::exp is a library call the compiler cannot vectorise without -ffast-math; this one is
// plain float arithmetic, so a loop of it becomes AVX code (about 5x faster). Cephes' expf:
// e^x = 2^k · e^r with k = round(x / ln 2), r = x − k·ln 2 ∈ [−ln2/2, ln2/2] (ln 2 split in
// two for an exact product), e^r by a degree-6 polynomial, 2^k built in the exponent bits.
// Accurate to about 1 ulp. Meant for x ≤ 0 (x − max in softmax, exp of a log-probability):
// below −87.3 (where e^x < FLT_MIN) it returns 0, above +88.3 it overflows to inf early.
#pragma once
#include <bit>
#include <cstdint>

namespace sima {

inline float exp_nonpositive(float x) {
  const float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  const float kMagic = 12582912.f;  // 1.5·2^23: adding it rounds to an integer
  float xc = x < -87.33654f ? -87.33654f : x;
  float k = (xc * kLog2e + kMagic) - kMagic;
  float r = xc - k * kLn2Hi - k * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float er = p * r * r + r + 1.f;
  float two_k = std::bit_cast<float>((static_cast<int32_t>(k) + 127) << 23);
  float y = er * two_k;
  y = x < -87.33654f ? 0.f : y;
  return x != x ? x : y;  // NaN stays NaN
}

}  // namespace sima
