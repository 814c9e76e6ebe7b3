// The autocast mode, its names, what the CPU needs for it, and float16 rounding (autocast.h).
#include "core/ops/autocast.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops/lowp_gemm.h"
#include "core/ops/quantize.h"
#include "core/parallel.h"

namespace sima {

std::atomic<int>& detail::autocast_state() {
  static std::atomic<int> mode{0};
  return mode;
}

AutocastGuard::AutocastGuard(AutocastMode m)
    : saved_(detail::autocast_state().exchange(static_cast<int>(m), std::memory_order_relaxed)) {}

AutocastGuard::~AutocastGuard() { detail::autocast_state().store(saved_, std::memory_order_relaxed); }

AutocastMode parse_autocast_mode(const std::string& s, const std::string& who) {
  if (s == "fp32") return AutocastMode::Off;
  if (s == "bf16") return AutocastMode::BF16;
  if (s == "fp16") return AutocastMode::FP16;
  fail(who, ": precision must be one of fp32, bf16, fp16 (got '", s, "')");
}

const char* autocast_mode_name(AutocastMode m) {
  return m == AutocastMode::Off ? "fp32" : m == AutocastMode::BF16 ? "bf16" : "fp16";
}

std::string autocast_unsupported(AutocastMode m) {
  if (m != AutocastMode::BF16) return "";
  const CpuFeatures& f = cpu_features();
  if (!f.avx512_bf16 && !f.amx_bf16)
    return "bf16 training needs a CPU with AVX512-BF16 (vdpbf16ps) or AMX-BF16; this one has neither "
           "(cpuid leaf 7: avx512_bf16 and amx_bf16 absent); use fp32";
  if (!bf16_native())
    return "bf16 training: oneDNN makes no bf16 matmul on this CPU although cpuid reports AVX512-BF16 "
           "(ONEDNN_MAX_CPU_ISA below AVX512_CORE_BF16?); use fp32";
  return "";
}

namespace {

// The same rounding without F16C: exact integer arithmetic on the bits (the tests' reference).
float round_to_fp16_exact(float x) {
  if (x != x) return x;
  const float a = std::fabs(x);
  float r;
  if (a >= 65520.f) {  // halfway between 65504 (the largest float16) and 2^16: ties to even overflow
    r = INFINITY;
  } else if (a < 0x1p-14f) {  // subnormal: a multiple of 2^-24; a + 0.5 has exactly that spacing
    volatile float s = a + 0.5f;
    r = s - 0.5f;
  } else {  // normal: keep 10 of float's 23 mantissa bits, to nearest even
    const uint32_t u = std::bit_cast<uint32_t>(a);
    r = std::bit_cast<float>((u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu);
  }
  return std::copysign(r, x);
}

}  // namespace

float round_to_fp16(float x) {
#if defined(__F16C__)
  return _cvtsh_ss(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT));
#else
  return round_to_fp16_exact(x);
#endif
}

namespace {

// [0]: every rounding; [1]: those inside an Fp16AttentionSite (the attention cores' products).
std::atomic<float>& fp16_peak(int site) {
  static std::atomic<float> peak[2] = {0.f, 0.f};
  return peak[site];
}

thread_local int fp16_site = 0;  // 1 while this thread runs an attention core's product

void raise_to(std::atomic<float>& peak, float m) {  // peak = max(peak, m), from any thread
  float seen = peak.load(std::memory_order_relaxed);
  while (m > seen && !peak.compare_exchange_weak(seen, m, std::memory_order_relaxed)) {
  }
}

void raise_fp16_peak(float m) {
  raise_to(fp16_peak(0), m);
  if (fp16_site) raise_to(fp16_peak(1), m);
}

}  // namespace

Fp16AttentionSite::Fp16AttentionSite() : saved_(fp16_site) { fp16_site = 1; }
Fp16AttentionSite::~Fp16AttentionSite() { fp16_site = saved_; }

float fp16_attention_peak_take() { return fp16_peak(1).exchange(0.f, std::memory_order_relaxed); }

float fp16_peak_take() { return fp16_peak(0).exchange(0.f, std::memory_order_relaxed); }

void round_to_fp16(const float* x, float* y, int64_t n) {
  parallel_for(n, kGrainElementwise, [&](int64_t i0, int64_t i1) {
    int64_t i = i0;
    float m = 0.f;  // the chunk's largest |x|
#if defined(__F16C__)
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 m8 = _mm256_setzero_ps();
    for (; i + 8 <= i1; i += 8) {
      const __m256 v = _mm256_loadu_ps(x + i);
      m8 = _mm256_max_ps(_mm256_and_ps(v, abs_mask), m8);  // a NaN lane keeps m8 (maxps returns its 2nd operand)
      const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
      _mm256_storeu_ps(y + i, _mm256_cvtph_ps(h));
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, m8);
    for (float l : lanes) m = std::max(m, l);
#endif
    for (; i < i1; ++i) {
      m = std::max(m, std::fabs(x[i]));  // std::max(m, NaN) keeps m
      y[i] = round_to_fp16(x[i]);
    }
    raise_fp16_peak(m);
  });
}

Tensor fp16_round(const Tensor& x) {
  if (!x.defined()) return x;
  Tensor y = empty(x.shape());
  round_to_fp16(x.data(), y.data(), x.numel());
  if (needs_grad(x))
    attach_grad_fn(y, "fp16_round", {x}, [](const Tensor& gy) -> Grads {
      Tensor gx = empty(gy.shape());
      round_to_fp16(gy.data(), gx.data(), gy.numel());
      return {gx};
    });
  return y;
}

namespace detail {
float round_to_fp16_reference(float x) { return round_to_fp16_exact(x); }
}  // namespace detail

}  // namespace sima
