// Performer: softmax attention approximated in linear cost by positive orthogonal random
// features, FAVOR+ (Choromanski et al., "Rethinking Attention with Performers", ICLR 2021,
// §2.3–2.4 and Lemma 1). Official code: google-research/google-research
// performer/fast_attention/jax/fast_attention.py; its PyTorch transcription
// lucidrains/performer-pytorch performer_pytorch/performer_pytorch.py, whose defaults are
// used here (docs/derivations/performer.md lists every choice and its source).
//
// Per (batch, head), q, k, v (N, d), W the (m, d) projection matrix, s = d^-¼, r = m^-½:
//
//   U  = s·q Wᵀ  (N, m),   h_i = s²‖q_i‖²/2         (the same for k: Uᵏ, hᵏ)
//   Q'_ij = r·(exp(U_ij − h_i − max_l U_il) + eps)              max per query row
//   K'_jl = r·(exp(Uᵏ_jl − hᵏ_j − max_{j',l'} Uᵏ_j'l') + eps)   one max per (batch, head)
//   out = D⁻¹ Q'(K'ᵀ v),   D = diag(Q'(K'ᵀ 1))               (N, d), linear in N
//
// E[φ(q)ᵀφ(k)] = exp(q·k/√d) for φ(x) = exp(s·Wx − s²‖x‖²/2)/√m with Gaussian rows of W
// (Lemma 1); the maxima (treated as constants, as upstream detaches them) and r cancel
// between numerator and D up to the eps terms. #exp = 2·N·m per head per image.
//
// W is a buffer, saved with the model. It is redrawn in training every redraw_interval
// forward calls (never in eval, never for redraw_interval = 0), each draw seeded by
// (feature_seed, the module's own seed, the draw's number), all three saved as buffers or
// options, so a run resumed from a checkpoint draws the same matrices.
#pragma once
#include <cstdint>

#include "core/rng.h"
#include "nn/attention/attention.h"

namespace sima {

constexpr float kPerformerEps = 1e-4f;  // lucidrains softmax_kernel(eps = 1e-4)

// The fused core, one autograd node: q, k, v (B, h, N, d), W (m, d) -> (B, h, N, d).
// W is a constant (no gradient). If exp_calls is given it grows by 2·B·h·N·m.
Tensor favor_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& W,
                       float eps = kPerformerEps, int64_t* exp_calls = nullptr);

// m rows of length d: blocks of d orthonormal rows (the rows of a Haar-random orthogonal
// matrix, by Gram–Schmidt on Gaussian rows), the last block cut to the m − ⌊m/d⌋·d rows
// left, then row i scaled by ‖g_i‖ for Gaussian g_i ∈ R^d (scaling 0: the lengths of
// Gaussian rows, as upstream's default) or by √d (scaling 1).
Tensor gaussian_orthogonal_random_matrix(int64_t m, int64_t d, int64_t scaling, Generator& gen);

// The default number of features of upstream: int(d·ln d) (at least 1).
int64_t performer_default_features(int64_t d);

// The performer row's options (variant_rows.cpp), read once: by the module's constructor and
// the row's exp() count.
struct PerformerSettings {
  int64_t nb_features;      // m random features; 0: int(d·ln d)
  int64_t redraw_interval;  // training forward calls between redraws; 0: never
  int64_t feature_seed;     // seeds every draw, with the module's seed and the draw's number
  int64_t ortho_scaling;    // row lengths: 0 those of Gaussian rows, 1 all √d
  float feature_eps;        // added to every random feature
};
PerformerSettings performer_settings(const AttentionOptions& opt);

class PerformerAttention : public Attention {
 public:
  // Uses its row's options (PerformerSettings, checked again here for code that builds the class
  // directly); attn_drop must be 0.
  explicit PerformerAttention(const AttentionOptions& opt);

  // q, k, v (B, h, N, d) -> (B, h, N, d). In training, counts the call and redraws W when due.
  Tensor core(const Tensor& q, const Tensor& k, const Tensor& v, int64_t H, int64_t W) override;

  // Draws W anew from (feature_seed, module_seed, redraw_count) (no counting).
  void draw_projection();

  int64_t nb_features() const { return projection_matrix.size(0); }

  // Buffers (saved in checkpoints): the (m, d) matrix, and three integers kept as floats
  // (exact below 2^24): training forward calls since the last draw, the number of the
  // draw (0 at construction), and this module's seed (drawn from the Init stream when the
  // module is built, so that the layers of a model draw different features).
  const PerformerSettings settings;
  Tensor projection_matrix, calls_since_last_redraw, redraw_count, module_seed;

 private:
  void redraw_if_due();
};

}  // namespace sima
