// core/ops/vmath.h against SLEEF (Debian libsleef-dev), at equal footing: accuracy against
// double precision over a dense range, and speed on 4096 floats in L1 (one thread; the
// minimum of 201 runs, which time-sharing on a busy machine cannot inflate).
// Not part of the build (SLEEF is not a dependency: it lost, docs/performance.md). Run by hand:
//
//   apt-get install -y libsleef-dev
//   g++ -std=c++20 -O3 -march=native -fno-trapping-math -I. -I/usr/include/x86_64-linux-gnu \
//       tests/bench/vmath_vs_sleef.cpp -o /tmp/vmath_vs_sleef -lsleef && /tmp/vmath_vs_sleef
//
// The flags are the Release build's (CMakeLists.txt). SLEEF is called as its AVX2 variant
// (Sleef_*f8_u10avx2) and through its dispatcher (Sleef_*f8_u10), 8 floats per call.
#include <immintrin.h>
#include <sleef.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include "core/ops/activation_fns.h"

#ifndef __AVX2__
#error "needs AVX2 (-march=native on an AVX2 machine)"
#endif

using namespace sima;
using Kernel = void (*)(const float*, float*, long);

namespace {

constexpr float kInvSqrt2 = 0.70710678118654752f;

// y = F(x) 8 floats at a time through a SLEEF function (n is a multiple of 8 here), and
// gelu with SLEEF's erf: the same loop PyTorch's vectorised GELU runs.
#define SLEEF_MAP(name, F)                                                             \
  void name(const float* x, float* y, long n) {                                        \
    for (long i = 0; i < n; i += 8) _mm256_storeu_ps(y + i, F(_mm256_loadu_ps(x + i))); \
  }
#define SLEEF_GELU(name, ERF)                                                                             \
  void name(const float* x, float* y, long n) {                                                           \
    const __m256 half = _mm256_set1_ps(0.5f), s = _mm256_set1_ps(kInvSqrt2), one = _mm256_set1_ps(1.f); \
    for (long i = 0; i < n; i += 8) {                                                                     \
      const __m256 v = _mm256_loadu_ps(x + i), e = ERF(_mm256_mul_ps(v, s));                              \
      _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(half, v), _mm256_add_ps(one, e)));             \
    }                                                                                                     \
  }
SLEEF_MAP(sl_erf, Sleef_erff8_u10avx2)
SLEEF_MAP(sl_erf_dispatch, Sleef_erff8_u10)
SLEEF_MAP(sl_exp, Sleef_expf8_u10avx2)
SLEEF_GELU(sl_gelu, Sleef_erff8_u10avx2)

__attribute__((noinline)) void vm_erf(const float* x, float* y, long n) {
  for (long i = 0; i < n; ++i) y[i] = erf_fast(x[i]);
}
__attribute__((noinline)) void vm_gelu(const float* x, float* y, long n) {
  for (long i = 0; i < n; ++i) y[i] = GeluFn::f(x[i]);
}
__attribute__((noinline)) void vm_gelu_df(const float* x, float* y, long n) {
  for (long i = 0; i < n; ++i) y[i] = GeluFn::df(x[i]);
}
__attribute__((noinline)) void vm_exp(const float* x, float* y, long n) {
  for (long i = 0; i < n; ++i) y[i] = exp_fast(x[i]);
}
__attribute__((noinline)) void vm_exp_nonpos(const float* x, float* y, long n) {
  for (long i = 0; i < n; ++i) y[i] = exp_nonpos_fast(-std::fabs(x[i]));
}
__attribute__((noinline)) void copy(const float* x, float* y, long n) {
  for (long i = 0; i < n; ++i) y[i] = x[i];
}

double gelu_ref(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double erf_ref(double x) { return std::erf(x); }

// Largest |f(x) − ref(x)| for x every 12/2^22 over [−6, 6).
double max_abs_error(Kernel f, double (*ref)(double)) {
  const long n = 1 << 22;
  std::vector<float> x(n), y(n);
  for (long i = 0; i < n; ++i) x[i] = -6.f + 12.f * float(i) / float(n);
  f(x.data(), y.data(), n);
  double worst = 0;
  for (long i = 0; i < n; ++i) worst = std::max(worst, std::fabs(y[i] - ref(x[i])));
  return worst;
}

double ns_per_float(Kernel f) {
  const long n = 4096;
  std::vector<float> x(n), y(n);
  for (long i = 0; i < n; ++i) x[i] = 3.f * std::sin(0.37f * float(i));
  double best = 1e30;
  for (int r = 0; r < 201; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f(x.data(), y.data(), n);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best / n * 1e9;
}

}  // namespace

int main() {
  std::printf("max |error| against double over [-6, 6), every 2.9e-6\n");
  std::printf("  erf   vmath erf_fast      %.3g\n", max_abs_error(vm_erf, erf_ref));
  std::printf("  erf   SLEEF erff8_u10     %.3g\n", max_abs_error(sl_erf, erf_ref));
  std::printf("  gelu  vmath               %.3g\n", max_abs_error(vm_gelu, gelu_ref));
  std::printf("  gelu  with SLEEF's erf    %.3g\n", max_abs_error(sl_gelu, gelu_ref));
  struct Row {
    const char* name;
    Kernel f;
  } rows[] = {{"copy", copy},
              {"erf    vmath erf_fast", vm_erf},
              {"erf    SLEEF erff8_u10avx2", sl_erf},
              {"erf    SLEEF erff8_u10 (dispatch)", sl_erf_dispatch},
              {"gelu   vmath GeluFn::f", vm_gelu},
              {"gelu   SLEEF erf", sl_gelu},
              {"gelu'  vmath GeluFn::df", vm_gelu_df},
              {"exp    vmath exp_fast", vm_exp},
              {"exp    vmath exp_nonpos_fast (x <= 0)", vm_exp_nonpos},
              {"exp    SLEEF expf8_u10avx2", sl_exp}};
  std::printf("ns per float, 4096 floats in L1, min of 201 runs\n");
  for (const Row& r : rows) std::printf("  %-40s %.3f\n", r.name, ns_per_float(r.f));
  return 0;
}
