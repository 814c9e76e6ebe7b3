// Performer (FAVOR+): the fused core op, the random projection matrix, the module.
//
// Per (batch, head) pair, q, k, v (N, d), W (m, d), s = d^-¼, r = m^-½, F = Q' or K':
//
//   forward                                  backward (G = dL/dO, (N, d))
//   U  = s·x Wᵀ            (N, m)            dnum = G / den                      (N, d)
//   h_i = s²‖x_i‖²/2       (N)               dden_i = −G_i·num_i / den_i²        (N)
//   E  = exp(U − h − c)    (N, m)            dKV = Q'ᵀ dnum (m, d),  dz = Q'ᵀ dden (m)
//   F  = r·(E + eps)       (N, m)            dQ' = dnum KVᵀ + dden zᵀ            (N, m)
//   KV = K'ᵀ v             (m, d)            dK' = v dKVᵀ + 1 dzᵀ                (N, m)
//   z  = K'ᵀ 1             (m)               dv  = K' dKV                        (N, d)
//   num = Q' KV            (N, d)            per feature map, with dF = dQ' or dK':
//   den = Q' z             (N)                 T = dF ⊙ r·E = dF ⊙ (F − r·eps)   (N, m)
//   O  = num / den         (N, d)              dx_i = s·(T W)_i − s²·(Σ_l T_il)·x_i
//
// c is the stabilising maximum of U (per row for q, over the whole pair for k), a constant
// to the backward (upstream detaches it). The linear part is linear_attention's without its
// eps: den >= N·m·r²·eps² > 0. ∂h_i/∂x_i = s²x_i and ∂U_il/∂x_i = s·W_l give dx.
// Only q, k, v and a copy of W are saved; the backward recomputes Q', K', KV, z, num.
#include "nn/attention/performer.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops/gemm.h"
#include "core/ops/vmath.h"
#include "core/parallel.h"
#include "nn/attention/variants.h"

namespace sima {

namespace {

// Pairs per thread chunk, so that a chunk does about kGemmGrain multiply-adds.
int64_t pair_grain(int64_t N, int64_t m, int64_t d) {
  return grain_for(kGemmGrain, 4 * N * m * d);
}

struct FeatureParams {
  int64_t N, m, d;
  float s, r, eps;
};

// max(x[0..n)), or -inf for n = 0, in kLanes running maxima that vectorise (a max is exact, so
// the order does not change the result: for finite x, the value std::max_element finds).
float max_of(const float* x, int64_t n) {
  constexpr int64_t kLanes = 16;
  float lane[kLanes];
  std::fill(lane, lane + kLanes, -std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) lane[l] = std::max(lane[l], x[i + l]);
  for (; i < n; ++i) lane[0] = std::max(lane[0], x[i]);
  return *std::max_element(lane, lane + kLanes);
}

// F = r·(exp(s·x Wᵀ − h − c) + eps) for one pair's x (N, d) into F (N, m); c per row
// (queries) or one for the pair (keys). Returns the exp() evaluations (N·m).
int64_t feature_map(const float* x, const float* W, bool is_query, const FeatureParams& p, float* F) {
  const int64_t N = p.N, m = p.m, d = p.d;
  const float s = p.s, r = p.r, eps = p.eps;  // locals: F's stores cannot alias them
  gemm(false, true, N, m, d, x, W, 0.f, F);  // x Wᵀ   (N, m)
  for (int64_t i = 0; i < N * m; ++i) F[i] *= s;
  const float c_all = is_query ? 0.f : max_of(F, N * m);
  for (int64_t i = 0; i < N; ++i) {
    float* Fi = F + i * m;
    float sq = 0.f;
    for (int64_t c = 0; c < d; ++c) sq += x[i * d + c] * x[i * d + c];
    const float h = 0.5f * s * s * sq;
    const float c = is_query ? max_of(Fi, m) : c_all;
    for (int64_t l = 0; l < m; ++l) Fi[l] = r * (exp_fast(Fi[l] - h - c) + eps);
  }
  return N * m;
}

// dx (N, d) from dF (N, m, overwritten by T) and F: see the table at the top.
void feature_map_backward(const float* x, const float* W, const float* F, float* dF,
                          const FeatureParams& p, float* dx) {
  const int64_t N = p.N, m = p.m, d = p.d;
  const float reps = p.r * p.eps, s2 = p.s * p.s;
  for (int64_t i = 0; i < N * m; ++i) dF[i] *= F[i] - reps;  // T = dF ⊙ r·E
  gemm(false, false, N, d, m, dF, W, 0.f, dx);               // T W   (N, d)
  for (int64_t i = 0; i < N; ++i) {
    float t = 0.f;
    for (int64_t l = 0; l < m; ++l) t += dF[i * m + l];
    for (int64_t c = 0; c < d; ++c) dx[i * d + c] = p.s * dx[i * d + c] - s2 * t * x[i * d + c];
  }
}

// Per-thread scratch for one pair: Q', K' (N, m), KV (m, d), z (m).
struct Scratch {
  Tensor Q, K, KV, z;
  Scratch(int64_t N, int64_t m, int64_t d) : Q(empty({N, m})), K(empty({N, m})), KV(empty({m, d})), z(empty({m})) {}
};

// Q', K', KV = K'ᵀ v, z = K'ᵀ 1 for one pair; returns the exp() evaluations.
int64_t pair_prologue(const float* q, const float* k, const float* v, const float* W, const FeatureParams& p,
                      Scratch& w) {
  const int64_t N = p.N, m = p.m, d = p.d;
  float *Q = w.Q.data(), *K = w.K.data(), *KV = w.KV.data(), *z = w.z.data();
  int64_t exps = feature_map(q, W, true, p, Q) + feature_map(k, W, false, p, K);
  gemm(true, false, m, d, N, K, v, 0.f, KV);  // KV = K'ᵀ v   (m, d)
  std::fill(z, z + m, 0.f);
  for (int64_t j = 0; j < N; ++j)             // z = K'ᵀ 1    (m)
    for (int64_t l = 0; l < m; ++l) z[l] += K[j * m + l];
  return exps;
}

inline float dot(const float* a, const float* b, int64_t n) {
  float s = 0.f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

int64_t forward_kernel(const float* q, const float* k, const float* v, const float* W, float* o, int64_t BH,
                       const FeatureParams& p) {
  const int64_t N = p.N, m = p.m, d = p.d;
  std::atomic<int64_t> exps{0};
  parallel_for(BH, pair_grain(N, m, d), [&](int64_t p0, int64_t p1) {
    Scratch w(N, m, d);
    int64_t count = 0;
    for (int64_t pr = p0; pr < p1; ++pr) {
      const int64_t off = pr * N * d;
      count += pair_prologue(q + off, k + off, v + off, W, p, w);
      const float *Q = w.Q.data(), *z = w.z.data();
      float* O = o + off;
      gemm(false, false, N, d, m, Q, w.KV.data(), 0.f, O);  // num = Q' KV   (N, d)
      for (int64_t i = 0; i < N; ++i) {                     // O = num / den
        const float inv = 1.f / dot(Q + i * m, z, m);
        for (int64_t c = 0; c < d; ++c) O[i * d + c] *= inv;
      }
    }
    exps += count;
  });
  return exps.load();
}

// dq, dk, dv (each may be null) from G = dL/dO; see the table at the top.
void backward_kernel(const float* q, const float* k, const float* v, const float* W, const float* g, float* dq,
                     float* dk, float* dv, int64_t BH, const FeatureParams& p) {
  const int64_t N = p.N, m = p.m, d = p.d;
  parallel_for(BH, pair_grain(N, m, d), [&](int64_t p0, int64_t p1) {
    Scratch w(N, m, d);
    Tensor dnum_t = empty({N, d}), dden_t = empty({N}), dKV_t = empty({m, d}), dz_t = empty({m}),
           dF_t = empty({N, m});
    float *dnum = dnum_t.data(), *dden = dden_t.data(), *dKV = dKV_t.data(), *dz = dz_t.data(), *dF = dF_t.data();
    for (int64_t pr = p0; pr < p1; ++pr) {
      const int64_t off = pr * N * d;
      pair_prologue(q + off, k + off, v + off, W, p, w);
      const float *Q = w.Q.data(), *K = w.K.data(), *KV = w.KV.data(), *z = w.z.data(), *G = g + off;
      gemm(false, false, N, d, m, Q, KV, 0.f, dnum);  // num = Q' KV, overwritten row by row:
      for (int64_t i = 0; i < N; ++i) {
        const float den = dot(Q + i * m, z, m);
        dden[i] = -dot(G + i * d, dnum + i * d, d) / (den * den);
        for (int64_t c = 0; c < d; ++c) dnum[i * d + c] = G[i * d + c] / den;
      }
      gemm(true, false, m, d, N, Q, dnum, 0.f, dKV);  // dKV = Q'ᵀ dnum   (m, d)
      std::fill(dz, dz + m, 0.f);
      for (int64_t i = 0; i < N; ++i)                 // dz = Q'ᵀ dden    (m)
        for (int64_t l = 0; l < m; ++l) dz[l] += dden[i] * Q[i * m + l];
      if (dq) {
        gemm(false, true, N, m, d, dnum, KV, 0.f, dF);  // dQ' = dnum KVᵀ + dden zᵀ
        for (int64_t i = 0; i < N; ++i)
          for (int64_t l = 0; l < m; ++l) dF[i * m + l] += dden[i] * z[l];
        feature_map_backward(q + off, W, Q, dF, p, dq + off);
      }
      if (dk) {
        gemm(false, true, N, m, d, v + off, dKV, 0.f, dF);  // dK' = v dKVᵀ + 1 dzᵀ
        for (int64_t j = 0; j < N; ++j)
          for (int64_t l = 0; l < m; ++l) dF[j * m + l] += dz[l];
        feature_map_backward(k + off, W, K, dF, p, dk + off);
      }
      if (dv) gemm(false, false, N, d, m, K, dKV, 0.f, dv + off);  // dv = K' dKV
    }
  });
}

FeatureParams feature_params(const Tensor& q, const Tensor& W, float eps) {
  const int64_t m = W.size(0), d = q.size(3);
  return {q.size(2), m, d, 1.f / std::sqrt(std::sqrt(static_cast<float>(d))),
          1.f / std::sqrt(static_cast<float>(m)), eps};
}

}  // namespace

// q, k, v (B, h, N, d), W (m, d) -> (B, h, N, d).
Tensor favor_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& W, float eps,
                       int64_t* exp_calls) {
  check(q.defined() && k.defined() && v.defined() && W.defined(), "favor_attention: undefined input");
  check(q.dim() == 4 && k.shape() == q.shape() && v.shape() == q.shape(),
        "favor_attention: q, k, v must be (B, h, N, d) of one shape, got ", q.shape(), ", ", k.shape(), ", ",
        v.shape());
  check(W.dim() == 2 && W.size(0) > 0 && W.size(1) == q.size(3), "favor_attention: projection matrix ", W.shape(),
        " must be (m, d) with m >= 1 and d = ", q.size(3), " (the head dim of q)");
  check(eps > 0.f, "favor_attention: eps must be positive, got ", eps);
  const int64_t BH = q.size(0) * q.size(1);
  const FeatureParams p = feature_params(q, W, eps);
  Tensor Wc = W.detach().clone();  // the draw used, even if W is redrawn before backward
  Tensor out = empty(q.shape());
  int64_t exps = 0;
  if (p.N > 0 && p.d > 0) exps = forward_kernel(q.data(), k.data(), v.data(), Wc.data(), out.data(), BH, p);
  if (exp_calls) *exp_calls += exps;

  if (needs_grad(q, k, v))
    attach_grad_fn(out, "favor_attention", {q, k, v},
                   [qs = q.detach(), ks = k.detach(), vs = v.detach(), Wc, rq = q.requires_grad(),
                    rk = k.requires_grad(), rv = v.requires_grad(), p, BH](const Tensor& g) -> Grads {
      // g (B, h, N, d) -> dq, dk, dv (B, h, N, d)
      Tensor dq = rq ? empty(qs.shape()) : Tensor(), dk = rk ? empty(qs.shape()) : Tensor(),
             dv = rv ? empty(qs.shape()) : Tensor();
      if (p.N > 0 && p.d > 0)
        backward_kernel(qs.data(), ks.data(), vs.data(), Wc.data(), g.data(), rq ? dq.data() : nullptr,
                        rk ? dk.data() : nullptr, rv ? dv.data() : nullptr, BH, p);
      return {dq, dk, dv};
    });
  return out;
}

// ---- the projection matrix ----------------------------------------------------------

Tensor gaussian_orthogonal_random_matrix(int64_t m, int64_t d, int64_t scaling, Generator& gen) {
  check(m >= 1 && d >= 1, "gaussian_orthogonal_random_matrix: m = ", m, " and d = ", d, " must be >= 1");
  check(scaling == 0 || scaling == 1, "gaussian_orthogonal_random_matrix: scaling = ", scaling,
        " is not one of: 0 (Gaussian row lengths), 1 (sqrt(d))");
  Tensor out = empty({m, d});
  std::vector<double> block(d * d);
  for (int64_t row0 = 0; row0 < m; row0 += d) {
    // Modified Gram–Schmidt on the rows of a d×d Gaussian block: a Haar-random orthogonal
    // matrix (upstream takes Qᵀ of torch.qr of the block, the same up to the rows' signs).
    for (auto& x : block) x = gen.normal();
    for (int64_t i = 0; i < d; ++i) {
      double* bi = block.data() + i * d;
      for (int64_t j = 0; j < i; ++j) {
        const double* bj = block.data() + j * d;
        double dp = 0.0;
        for (int64_t c = 0; c < d; ++c) dp += bi[c] * bj[c];
        for (int64_t c = 0; c < d; ++c) bi[c] -= dp * bj[c];
      }
      double n = 0.0;
      for (int64_t c = 0; c < d; ++c) n += bi[c] * bi[c];
      n = std::sqrt(n);
      check(n > 1e-12, "gaussian_orthogonal_random_matrix: degenerate Gaussian block (d = ", d, ")");
      for (int64_t c = 0; c < d; ++c) bi[c] /= n;
    }
    for (int64_t i = 0; i < std::min(d, m - row0); ++i)
      for (int64_t c = 0; c < d; ++c) out.data()[(row0 + i) * d + c] = static_cast<float>(block[i * d + c]);
  }
  for (int64_t i = 0; i < m; ++i) {
    double len = std::sqrt(static_cast<double>(d));
    if (scaling == 0) {  // ‖g_i‖ of a fresh Gaussian row, drawn after all the blocks
      double n = 0.0;
      for (int64_t c = 0; c < d; ++c) {
        const double g = gen.normal();
        n += g * g;
      }
      len = std::sqrt(n);
    }
    for (int64_t c = 0; c < d; ++c) out.data()[i * d + c] *= static_cast<float>(len);
  }
  return out;
}

int64_t performer_default_features(int64_t d) {
  return std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(d) * std::log(static_cast<double>(d))));
}

// ---- PerformerAttention -------------------------------------------------------------

PerformerSettings performer_settings(const AttentionOptions& opt) {
  return {attention_option<int64_t>(opt, "nb_features"), attention_option<int64_t>(opt, "redraw_interval"),
          attention_option<int64_t>(opt, "feature_seed"), attention_option<int64_t>(opt, "ortho_scaling"),
          attention_option<float>(opt, "feature_eps")};
}

PerformerAttention::PerformerAttention(const AttentionOptions& opt)
    : Attention(opt, "PerformerAttention"), settings(performer_settings(opt)) {
  const std::string& name = type_name();
  const PerformerSettings& s = settings;
  check(s.nb_features >= 0, name, ": option nb_features = ", s.nb_features,
        " must be >= 0 (0: int(d·ln d) as upstream)");
  check(s.redraw_interval >= 0, name, ": option redraw_interval = ", s.redraw_interval,
        " must be >= 0 (training forward calls between redraws; 0: never)");
  check(s.ortho_scaling == 0 || s.ortho_scaling == 1, name, ": option ortho_scaling = ", s.ortho_scaling,
        " is not one of: 0 (Gaussian row lengths), 1 (sqrt(d))");
  check(s.feature_eps > 0.f, name, ": option feature_eps = ", s.feature_eps, " must be positive");
  check(opt.attn_drop == 0.f, name, ": attn_drop ", opt.attn_drop,
        " is not supported (FAVOR+ forms no attention matrix); use 0");
  const int64_t d = head_dim(), m = s.nb_features > 0 ? s.nb_features : performer_default_features(d);
  projection_matrix = register_buffer("projection_matrix", zeros({m, d}));
  calls_since_last_redraw = register_buffer("calls_since_last_redraw", zeros({1}));
  redraw_count = register_buffer("redraw_count", zeros({1}));
  module_seed = register_buffer("module_seed", zeros({1}));
  module_seed.data()[0] = static_cast<float>(rng(RngStream::Init).randint(uint64_t(1) << 24));
  draw_projection();
}

void PerformerAttention::draw_projection() {
  const auto mseed = static_cast<uint64_t>(module_seed.data()[0]);
  const auto count = static_cast<uint64_t>(redraw_count.data()[0]);
  Generator gen((static_cast<uint64_t>(settings.feature_seed) * 0x9E3779B97F4A7C15ull) ^ (mseed << 24) ^ count);
  Tensor Wn = gaussian_orthogonal_random_matrix(projection_matrix.size(0), projection_matrix.size(1),
                                                settings.ortho_scaling, gen);
  std::copy(Wn.data(), Wn.data() + Wn.numel(), projection_matrix.data());
}

// Training only: the call that finds redraw_interval calls made since the last draw draws
// the next matrix first, so draw n serves calls n·interval + 1 .. (n + 1)·interval.
void PerformerAttention::redraw_if_due() {
  if (!is_training() || settings.redraw_interval == 0) return;
  float& calls = calls_since_last_redraw.data()[0];
  if (calls >= static_cast<float>(settings.redraw_interval)) {
    redraw_count.data()[0] += 1.f;
    draw_projection();
    calls = 0.f;
  }
  calls += 1.f;
}

Tensor PerformerAttention::core(const Tensor& q, const Tensor& k, const Tensor& v, int64_t, int64_t) {
  check(q.defined() && q.dim() == 4 && q.size(3) == projection_matrix.size(1), type_name(), ": q ",
        q.defined() ? q.shape().str() : "undefined", " must be (B, h, N, ", projection_matrix.size(1), ")");
  redraw_if_due();
  if (qk_hook) qk_hook(q, k);
  return favor_attention(q, k, v, projection_matrix, settings.feature_eps, &exp_calls_);
}

}  // namespace sima
