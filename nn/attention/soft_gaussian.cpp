// SOFT attention: the Gaussian kernel op, the Newton–Raphson inverse op, the module.
//
// Both ops work on a batch of matrices (every (batch, head) pair is one "pair" p),
// run the pairs in parallel and do each pair's products with one single-threaded call
// each: gemm() for the kernel's a bᵀ, small_gemm (core/ops/small_gemm.h, no library call)
// for the inverse's m×m products. Scratch space comes from the caching allocator, one
// block per parallel chunk.
#include "nn/attention/soft_gaussian.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops/activation.h"
#include "core/ops/conv.h"
#include "core/ops/elementwise.h"
#include "core/ops/gemm.h"
#include "core/ops/matmul.h"
#include "core/ops/norm.h"
#include "core/ops/shape_ops.h"
#include "core/ops/small_gemm.h"
#include "core/ops/vmath.h"
#include "core/parallel.h"
#include "nn/attention/variants.h"
#include "nn/init.h"

namespace sima {

namespace {

// Flushes denormal floats to zero (FTZ + DAZ) on this thread while alive. The Gaussian
// kernels of far-apart tokens are tiny (e^-50 is common at d = 64), their products in the
// gemms fall below 1e-38, and the CPU's slow path for those made SOFT's forward and
// backward 2x (its Newton–Raphson backward 10x) slower. Values that small are 0 here.
// (A candidate for core/: every thread of the pool could run this way.)
class FlushDenormals {
 public:
#if defined(__SSE__)
  FlushDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | 0x8040); }  // FTZ | DAZ
  ~FlushDenormals() { _mm_setcsr(saved_); }

 private:
  unsigned saved_;
#endif
};

// The leading (batch) dims of t, all but the last two.
Shape batch_dims(const Tensor& t) {
  Shape s;
  for (int i = 0; i < t.dim() - 2; ++i) s.push_back(t.size(i));
  return s;
}

// out[i] = ‖x_i‖² for the n rows of x (n×d).
void row_sq_norms(const float* x, int64_t n, int64_t d, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    float s = 0.f;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < d; ++c) s += x[i * d + c] * x[i * d + c];
    out[i] = s;
  }
}

// The sizes of a gaussian_kernel call: P pairs of a (M×d), b (N×d).
struct KernelDims {
  int64_t P, M, N, d;
  int64_t grain() const { return grain_for(kGemmGrain, M * N * (d + 4)); }
};

// K = exp(−s·max(‖a_i‖² + ‖b_j‖² − 2(a bᵀ)_ij, 0)) for every pair; returns the exp() calls.
int64_t gaussian_forward_kernel(const KernelDims& D, const float* pa, const float* pb, float* pk, float scale) {
  const int64_t M = D.M, N = D.N, d = D.d;
  int64_t exps = 0;
  parallel_for(D.P, D.grain(), [&](int64_t p0, int64_t p1) {
    FlushDenormals ftz;
    Tensor norms = empty({M + N});  // ‖a_i‖², then ‖b_j‖²
    float *na = norms.data(), *nb = na + M;
    int64_t count = 0;
    for (int64_t p = p0; p < p1; ++p) {
      const float *ap = pa + p * M * d, *bp = pb + p * N * d;
      float* kp = pk + p * M * N;
      gemm(false, true, M, N, d, ap, bp, 0.f, kp);  // a bᵀ (M×N)
      row_sq_norms(ap, M, d, na);
      row_sq_norms(bp, N, d, nb);
      for (int64_t i = 0; i < M; ++i) {
        float* kr = kp + i * N;
        const float ni = na[i];
#pragma omp simd
        for (int64_t j = 0; j < N; ++j) {
          const float dist = std::max(ni + nb[j] - 2.f * kr[j], 0.f);
          kr[j] = exp_fast(-scale * dist);
        }
        count += N;
      }
    }
#pragma omp atomic
    exps += count;
  });
  return exps;
}

// da, db (null: not wanted) from gK for every pair, the table above (derivation:
// docs/derivations/soft.md).
void gaussian_backward_kernel(const KernelDims& D, const float* pa, const float* pb, const float* pk,
                              const float* pg, float* pda, float* pdb, float scale) {
  const int64_t M = D.M, N = D.N, d = D.d;
  const float s2 = 2.f * scale;
  parallel_for(D.P, D.grain(), [&](int64_t p0, int64_t p1) {
    FlushDenormals ftz;
    Tensor work = empty({M * N + M + N});
    float *w = work.data(), *r = w + M * N, *c = r + M;
    for (int64_t p = p0; p < p1; ++p) {
      const float *ap = pa + p * M * d, *bp = pb + p * N * d;
      const float *kp = pk + p * M * N, *gp = pg + p * M * N;
      std::fill(c, c + N, 0.f);
      for (int64_t i = 0; i < M; ++i) {  // W = dK ⊙ K, its row sums r and column sums c
        float ri = 0.f;
        for (int64_t j = 0; j < N; ++j) {
          const float wij = gp[i * N + j] * kp[i * N + j];
          w[i * N + j] = wij;
          ri += wij;
          c[j] += wij;
        }
        r[i] = ri;
      }
      if (pda) {
        float* dap = pda + p * M * d;
        gemm(false, false, M, d, N, w, bp, 0.f, dap);  // W b (M×d)
        for (int64_t i = 0; i < M; ++i)
          for (int64_t k = 0; k < d; ++k) dap[i * d + k] = s2 * (dap[i * d + k] - r[i] * ap[i * d + k]);
      }
      if (pdb) {
        float* dbp = pdb + p * N * d;
        gemm(true, false, N, d, M, w, ap, 0.f, dbp);  // Wᵀ a (N×d)
        for (int64_t j = 0; j < N; ++j)
          for (int64_t k = 0; k < d; ++k) dbp[j * d + k] = s2 * (dbp[j * d + k] - c[j] * bp[j * d + k]);
      }
    }
  });
}

}  // namespace

// ---- gaussian_kernel --------------------------------------------------------------
// a (.., M, d), b (.., N, d) -> K (.., M, N),  K_ij = exp(−s·D_ij),  D_ij = ‖a_i − b_j‖²
//
// Forward per pair: D = ‖a_i‖² + ‖b_j‖² − 2·(a bᵀ)_ij, the cross term one gemm (as the
// official subtraction_gaussian_kernel_torch). Rounding can leave D a hair below 0 where
// a_i = b_j; it is clamped to 0 so that K ≤ 1 (the clamp is ignored by the backward).
//
// Backward, with W = dK ⊙ K (M×N), r_i = Σ_j W_ij, c_j = Σ_i W_ij:
//   dL/dD_ij = −s·W_ij,  ∂D_ij/∂a_i = 2(a_i − b_j),  ∂D_ij/∂b_j = −2(a_i − b_j)
//   da_i = Σ_j −2s W_ij (a_i − b_j) = 2s((W b)_i − r_i a_i)      (M×N · N×d)
//   db_j = Σ_i  2s W_ij (a_i − b_j) = 2s((Wᵀ a)_j − c_j b_j)     (N×M · M×d)
// When a and b are one tensor the engine adds the two gradients.
Tensor gaussian_kernel(const Tensor& a, const Tensor& b, float scale, int64_t* exp_calls) {
  check(a.defined() && b.defined(), "gaussian_kernel: undefined input");
  check(a.dim() >= 2 && a.dim() == b.dim() && batch_dims(a) == batch_dims(b) &&
            a.size(-1) == b.size(-1),
        "gaussian_kernel: a ", a.shape(), " and b ", b.shape(),
        " must be (..., M, d) and (..., N, d) with the same leading dims and d");
  const KernelDims D{prod(a.shape(), 0, a.dim() - 2), a.size(-2), b.size(-2), a.size(-1)};
  Shape ks = batch_dims(a);
  ks.push_back(D.M);
  ks.push_back(D.N);
  Tensor K = empty(ks);
  const int64_t exps = gaussian_forward_kernel(D, a.data(), b.data(), K.data(), scale);
  if (exp_calls) *exp_calls += exps;

  if (needs_grad(a, b))
    attach_grad_fn(K, "gaussian_kernel", {a, b},
                   [as = a.detach(), bs = b.detach(), Ks = K.detach(), ra = a.requires_grad(),
                    rb = b.requires_grad(), scale, D](const Tensor& gK) -> Grads {
                     // gK (.., M, N) -> da (.., M, d), db (.., N, d)
                     Tensor da = ra ? empty(as.shape()) : Tensor();
                     Tensor db = rb ? empty(bs.shape()) : Tensor();
                     gaussian_backward_kernel(D, as.data(), bs.data(), Ks.data(), gK.data(),
                                              ra ? da.data() : nullptr, rb ? db.data() : nullptr, scale);
                     return {da, db};
                   });
  return K;
}

// ---- newton_inverse ---------------------------------------------------------------
namespace {

struct NewtonStart {
  float alpha = 0.f;  // V₀ = α·P
  float norm = 0.f;   // n = max_i Σ_j |A_ij|
  int64_t row = 0;    // the (first) row attaining it
};

// n = max row sum of |A| (the official max row sum of A: the same for A ≥ 0) and
// α = kNewtonAlpha / n² (0 for A = 0: V stays 0).
NewtonStart newton_start(const float* A, int64_t m) {
  NewtonStart s;
  for (int64_t i = 0; i < m; ++i) {
    float r = 0.f;
    for (int64_t j = 0; j < m; ++j) r += std::fabs(A[i * m + j]);
    if (r > s.norm) s.norm = r, s.row = i;
  }
  s.alpha = s.norm > 0.f ? kNewtonAlpha / (s.norm * s.norm) : 0.f;
  return s;
}

// P = A + ridge·I into P (m×m).
void add_ridge(const float* A, int64_t m, float ridge, float* P) {
  std::memcpy(P, A, sizeof(float) * m * m);
  for (int64_t i = 0; i < m; ++i) P[i * m + i] += ridge;
}

// Runs the iterations on P = A + ridge·I (given in P) with α from A. The iterates
// V_0..V_iters go to hist ((iters+1)·m²) when given, and V_iters to out when given.
// work: 3·m² floats.
NewtonStart newton_iterate(const float* A, const float* P, int64_t m, int64_t iters, float* hist,
                           float* out, float* work) {
  const int64_t mm = m * m;
  NewtonStart s = newton_start(A, m);
  float *T = work, *U = work + mm, *spare = work + 2 * mm;
  // Without history, ping-pong between out and spare so that V_iters lands in out.
  auto V = [&](int64_t k) { return hist ? hist + k * mm : ((iters - k) % 2 == 0 ? out : spare); };
  float* v0 = V(0);
  for (int64_t i = 0; i < mm; ++i) v0[i] = s.alpha * P[i];
  for (int64_t k = 0; k < iters; ++k) {
    const float* vk = V(k);
    float* vn = V(k + 1);
    small_or_library_gemm(false, false, m, m, m, vk, P, 0.f, T);  // T = V_k P
    small_or_library_gemm(false, false, m, m, m, T, vk, 0.f, U);  // U = V_k P V_k
    for (int64_t i = 0; i < mm; ++i) vn[i] = 2.f * vk[i] - U[i];
  }
  if (hist && out) std::memcpy(out, hist + iters * mm, sizeof(float) * mm);
  return s;
}

float max_abs(const float* x, int64_t n) {
  float mx = 0.f;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, std::fabs(x[i]));
  return mx;
}

// The reverse of a step that had converged (V P = I) passes 2G − G − G = 0 back to the
// step before: the NR map has zero derivative at its fixed point. So the gradient dies
// out, super-exponentially, along the converged steps; once it is below this fraction of
// dL/dV it is dropped (each earlier step can grow it at most 2x, so what is dropped is
// < 2^iters·1e-20 of the gradient) rather than carried on through steps that add nothing.
constexpr float kNewtonGradCutoff = 1e-20f;

// Unrolled backward of one matrix: dA (m×m) from G = dL/dV_iters (m×m, overwritten).
// For one step V' = 2V − V P V:
//   dL/dV  = 2G − G (PV)ᵀ − (VP)ᵀ G = 2G − (G Vᵀ) Pᵀ − Pᵀ (Vᵀ G)
//   dL/dP += −Vᵀ G Vᵀ
// and at the start V₀ = α·P, α = c/n², n = Σ_j |A_i*j| (row i* attains the max):
//   dL/dP += α·G₀,  dL/dα = Σ G₀ ⊙ P,  dα/dn = −2α/n,  ∂n/∂A_i*j = sign(A_i*j)
// dA = dL/dP + the α term (the ridge is a constant). work: 5·m² floats.
void newton_unrolled_backward(const float* a, const float* P, int64_t m, int64_t iters, float* G,
                              float* da, float* hist, float* work) {
  const int64_t mm = m * m;
  float *Gn = work, *X = work + mm, *Y = work + 2 * mm, *Z = work + 3 * mm;
  const NewtonStart s = newton_iterate(a, P, m, iters, hist, nullptr, X);  // X..: scratch
  std::fill(da, da + mm, 0.f);
  const float g_cut = kNewtonGradCutoff * max_abs(G, mm);
  for (int64_t k = iters - 1; k >= 0; --k) {
    const float* v = hist + k * mm;
    small_or_library_gemm(false, true, m, m, m, G, v, 0.f, X);  // X = G Vᵀ
    small_or_library_gemm(true, false, m, m, m, v, G, 0.f, Y);  // Y = Vᵀ G
    small_or_library_gemm(false, true, m, m, m, Y, v, 0.f, Z);  // Z = Vᵀ G Vᵀ
    for (int64_t i = 0; i < mm; ++i) da[i] -= Z[i];
    small_or_library_gemm(false, true, m, m, m, X, P, 0.f, Gn);  // Gn = G Vᵀ Pᵀ
    small_or_library_gemm(true, false, m, m, m, P, Y, 1.f, Gn);  // Gn += Pᵀ Vᵀ G
    for (int64_t i = 0; i < mm; ++i) Gn[i] = 2.f * G[i] - Gn[i];
    std::memcpy(G, Gn, sizeof(float) * mm);
    if (max_abs(G, mm) <= g_cut) {  // converged steps passed nothing back: stop
      std::fill(G, G + mm, 0.f);
      break;
    }
  }
  float dalpha = 0.f;  // V₀ = α·P with α = c/n²
  for (int64_t i = 0; i < mm; ++i) {
    da[i] += s.alpha * G[i];
    dalpha += G[i] * P[i];
  }
  if (s.norm > 0.f) {
    const float dn = dalpha * (-2.f * s.alpha / s.norm);
    for (int64_t j = 0; j < m; ++j) {
      const float x = a[s.row * m + j];
      da[s.row * m + j] += dn * static_cast<float>((x > 0.f) - (x < 0.f));
    }
  }
}

}  // namespace

NewtonBackward parse_newton_backward(const std::string& name) {
  if (name == "inverse") return NewtonBackward::Inverse;
  if (name == "unrolled") return NewtonBackward::Unrolled;
  fail("SoftAttention: option nr_backward = '", name, "' is not one of: inverse, unrolled");
}

// A (.., m, m) -> V (.., m, m), V ≈ (A + ridge·I)⁻¹ (a pseudo-inverse for a singular one).
//
// Inverse backward (the official _NewtonInverseKernel.backward): for V = P⁻¹,
// dV = −V dP V, so dL/dP = −Vᵀ G Vᵀ, and dA = dP. Two gemms per matrix.
// Unrolled backward: the iterations run again from the saved A (they cost O(T·m³), less
// than keeping T matrices alive until backward), then are reversed
// (newton_unrolled_backward). It is the gradient of exactly what the forward computed;
// once the iterations have converged the two agree (tests/nn/test_attention_soft.cpp).
Tensor newton_inverse(const Tensor& A, int64_t iters, float ridge, NewtonBackward backward) {
  check(A.defined() && A.dim() >= 2 && A.size(-1) == A.size(-2), "newton_inverse: A ",
        A.defined() ? A.shape().str() : "undefined", " must be (..., m, m)");
  check(iters >= 0, "newton_inverse: iters = ", iters, " must be >= 0");
  check(ridge >= 0.f && std::isfinite(ridge), "newton_inverse: ridge = ", ridge, " must be >= 0");
  const int64_t m = A.size(-1), mm = m * m, P = prod(A.shape(), 0, A.dim() - 2);
  Tensor V = empty(A.shape());
  const int64_t grain = grain_for(kGemmGrain, 2 * std::max<int64_t>(1, iters) * mm * m);
  parallel_for(P, grain, [&](int64_t p0, int64_t p1) {
    FlushDenormals ftz;
    Tensor work = empty({4 * mm});
    for (int64_t p = p0; p < p1; ++p) {
      add_ridge(A.data() + p * mm, m, ridge, work.data() + 3 * mm);
      newton_iterate(A.data() + p * mm, work.data() + 3 * mm, m, iters, nullptr, V.data() + p * mm,
                     work.data());
    }
  });

  if (needs_grad(A))
    attach_grad_fn(V, "newton_inverse", {A}, [As = A.detach(), Vs = V.detach(), iters, ridge, backward,
                                              m, mm, P, grain](const Tensor& gV) -> Grads {
      // gV (.., m, m) -> dA (.., m, m)
      Tensor dA = empty(As.shape());
      parallel_for(P, grain, [&](int64_t p0, int64_t p1) {
        FlushDenormals ftz;
        if (backward == NewtonBackward::Inverse) {
          Tensor work_t = empty({mm});
          for (int64_t p = p0; p < p1; ++p) {  // dA = −Vᵀ G Vᵀ
            const float *v = Vs.data() + p * mm, *g = gV.data() + p * mm;
            float* w = work_t.data();
            small_or_library_gemm(true, false, m, m, m, v, g, 0.f, w);                   // Vᵀ G
            small_or_library_gemm(false, true, m, m, m, w, v, 0.f, dA.data() + p * mm);  // (Vᵀ G) Vᵀ
            float* da = dA.data() + p * mm;
            for (int64_t i = 0; i < mm; ++i) da[i] = -da[i];
          }
          return;
        }
        Tensor hist_t = empty({(iters + 1) * mm}), work_t = empty({7 * mm});
        float *G = work_t.data() + 5 * mm, *Pm = G + mm;
        for (int64_t p = p0; p < p1; ++p) {
          add_ridge(As.data() + p * mm, m, ridge, Pm);
          std::memcpy(G, gV.data() + p * mm, sizeof(float) * mm);
          newton_unrolled_backward(As.data() + p * mm, Pm, m, iters, G, dA.data() + p * mm, hist_t.data(),
                                   work_t.data());
        }
      });
      return {dA};
    });
  return V;
}

// ---- SoftAttention ----------------------------------------------------------------
SoftSettings soft_settings(const AttentionOptions& opt) {
  return {attention_option<int64_t>(opt, "sr"),
          attention_option<std::string>(opt, "bottleneck"),
          attention_option<int64_t>(opt, "nr_iters"),
          attention_option<float>(opt, "ridge"),
          attention_option<int64_t>(opt, "v_conv"),
          parse_newton_backward(attention_option<std::string>(opt, "nr_backward"))};
}

SoftAttention::SoftAttention(const AttentionOptions& opt)
    : Attention(opt, "SoftAttention", 2), settings(soft_settings(opt)) {
  const SoftSettings& s = settings;
  check(s.sr >= 1, "SoftAttention: option sr = ", s.sr,
        " must be >= 1 (kernel = stride of the bottleneck on the token grid)");
  check(s.bottleneck == "conv" || s.bottleneck == "avgpool", "SoftAttention: option bottleneck = '",
        s.bottleneck, "' is not one of: conv, avgpool");
  check(s.nr_iters >= 0, "SoftAttention: option nr_iters = ", s.nr_iters,
        " must be >= 0 (Newton–Raphson iterations, default 20)");
  check(s.ridge >= 0.f && std::isfinite(s.ridge), "SoftAttention: option ridge = ", s.ridge,
        " must be >= 0 (0 = no ridge; the official code uses 0.01)");
  check(s.v_conv >= 0 && (s.v_conv == 0 || s.v_conv % 2 == 1), "SoftAttention: option v_conv = ",
        s.v_conv, " must be 0 (none) or an odd kernel size (the official models use 9, 5, 3)");
  if (s.v_conv > 0) {
    // The official use_conv: Conv2d(h, h, k, padding k/2, groups h, no bias), PyTorch's init.
    const int k = static_cast<int>(s.v_conv), h = static_cast<int>(opt.num_heads);
    v_conv = register_module("v_conv", std::make_shared<Conv2d>(h, h, k, 1, k / 2, h, /*bias=*/false));
  }
  if (s.bottleneck == "conv") {
    const int64_t d = head_dim();
    // The official Qlandmark_op (Conv2d(d, d, sr, stride sr, bias=False), shared by the
    // heads) and Qnorm_act (LayerNorm(d), then GELU), with PyTorch's default init.
    q_conv = register_module("q_conv", std::make_shared<Conv2d>(d, d, static_cast<int>(s.sr),
                                                                 static_cast<int>(s.sr), 0, 1, /*bias=*/false));
    norm = register_module("norm", std::make_shared<LayerNorm>(d, 1e-5f));
  }
}

Tensor SoftAttention::landmarks(const Tensor& qs, int64_t H, int64_t W) const {
  const int64_t B = qs.size(0), h = qs.size(1), d = qs.size(3), sr = settings.sr;
  // (B, h, N, d) -> (B·h, d, H, W): every head's q as a d-channel image
  Tensor grid = permute(reshape(qs, {B * h, H, W, d}), {0, 3, 1, 2});
  Tensor y = settings.bottleneck == "conv"
                 ? q_conv->forward(grid)
                 : avg_pool2d(grid, static_cast<int>(sr));  // (B·h, d, H/sr, W/sr)
  const int64_t m = y.size(2) * y.size(3);
  y = permute(reshape(y, {B * h, d, m}), {0, 2, 1});  // (B·h, m, d)
  if (settings.bottleneck == "conv") y = gelu(norm->forward(y));
  return reshape(y, {B, h, m, d});
}

Tensor SoftAttention::conv_v(const Tensor& v, int64_t H, int64_t W) const {
  const int64_t B = v.size(0), h = v.size(1), N = v.size(2), d = v.size(3), n_extra = N - H * W;
  Tensor grid = n_extra == 0 ? v : narrow(v, 2, n_extra, H * W);
  Tensor y;
  if (v_conv->lowp && !needs_grad(grid, v_conv->weight)) {  // oneDNN's conv (--precision): NCHW
    // (B, h, H·W, d) -> (B, d, h, H·W) -> (B·d, h, H, W): the heads are the conv's channels
    Tensor img = reshape(permute(grid, {0, 3, 1, 2}), {B * d, h, H, W});
    y = permute(reshape(v_conv->forward(img), {B, d, h, H * W}), {0, 2, 3, 1});  // (B, h, H·W, d)
  } else {  // the same conv with the d features innermost, no permutes (core/ops/conv_depthwise_heads.cpp)
    y = conv2d_depthwise_heads(grid, v_conv->weight, H, W, v_conv->padding);
  }
  return n_extra == 0 ? y : cat({narrow(v, 2, 0, n_extra), y}, 2);
}

// q, v (B, h, N, d) -> (B, h, N, d)
Tensor SoftAttention::core(const Tensor& q, const Tensor& k, const Tensor& v, int64_t H, int64_t W) {
  const std::string& name = type_name();
  check(q.defined() && v.defined() && q.dim() == 4 && q.shape() == v.shape(), name, ": q ",
        q.defined() ? q.shape().str() : "undefined", " and v ", v.defined() ? v.shape().str() : "undefined",
        " must both be (B, h, N, d)");
  check(!k.defined() || k.impl() == q.impl(), name,
        ": SOFT shares one projection for q and k; pass k = q (the same tensor) or no k");
  const int64_t N = q.size(2), d = q.size(3), sr = settings.sr;
  check(H > 0 && W > 0, name, ": SOFT needs the token grid to build its bottleneck tokens: call ",
        "forward(x, H, W) with the grid of the last H·W of the N = ", N, " tokens (got H = ", H,
        ", W = ", W, ")");
  // Tokens before the grid (a class or distillation token) are queries and keys like the
  // others; only the bottleneck (landmark) tokens come from the grid.
  const int64_t n_extra = N - H * W;
  check(n_extra >= 0, name, ": token grid H = ", H, ", W = ", W, " has ", H * W, " tokens, more than N = ", N);
  check(H >= sr && W >= sr, name, ": token grid ", H, "x", W, " is smaller than the bottleneck kernel sr = ", sr);
  check(!v_conv || q.size(1) == opt_.num_heads, name, ": q ", q.shape(), " has not the module's ",
        opt_.num_heads, " heads that the v conv (v_conv = ", settings.v_conv, ") has channels for");
  check(settings.bottleneck != "conv" || d == head_dim(), name, ": head dim ", d, " of q ", q.shape(),
        " is not the module's ", head_dim());

  // The official scaling: q / d^¼, so ‖q_i − q_j‖²/2 below is ‖·‖²/(2√d) of the unscaled q.
  Tensor qs = mul(q, 1.f / std::sqrt(std::sqrt(static_cast<float>(d))));
  if (qk_hook) qk_hook(qs, qs);
  Tensor grid = n_extra == 0 ? qs : narrow(qs, 2, n_extra, H * W);
  Tensor qt = landmarks(grid, H, W);                        // q̃ (B, h, m, d)
  Tensor P = gaussian_kernel(qt, qs, 0.5f, &exp_calls_);    // (B, h, m, N)
  Tensor A = gaussian_kernel(qt, qt, 0.5f, &exp_calls_);    // (B, h, m, m)
  Tensor A_inv = newton_inverse(A, settings.nr_iters, settings.ridge, settings.nr_backward);  // (B, h, m, m)
  Tensor Pv = matmul(P, v);                                 // (B, h, m, d)
  Tensor out = matmul(P, matmul(A_inv, Pv), /*trans_a=*/true);  // Pᵀ (A⁺ P v): (B, h, N, d)
  return v_conv ? add(out, conv_v(v, H, W)) : out;
}

Tensor SoftAttention::forward(const Tensor& x, int64_t H, int64_t W) {
  check(x.defined() && x.dim() == 3 && x.size(2) == opt_.dim, type_name(), ": input ",
        x.defined() ? x.shape().str() : "undefined", " must be (B, N, ", opt_.dim, ")");
  const int64_t B = x.size(0), N = x.size(1), h = opt_.num_heads, d = head_dim();
  // (B, N, 2C) -> (B, N, 2, h, d) -> (2, B, h, N, d): q and v, views of one copy
  check_projections();
  Tensor t = permute(reshape(qkv->forward(x), {B, N, 2, h, d}), {2, 0, 3, 1, 4});
  Tensor q = squeeze(narrow(t, 0, 0, 1), 0), v = squeeze(narrow(t, 0, 1, 1), 0);
  return project(merge_heads(core(q, q, v, H, W)));
}

}  // namespace sima
