// Saliency heatmaps, the token side: which layer, which tokens are patches, and the per-token
// norms of the q̂, k̂ the layer's attention core reports through its qk_hook (see
// attention_heatmap.h).
// The pixel side (geometry, upsampling, colours, files) is in attention_heatmap_image.cpp.
#include "train/viz/attention_heatmap.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <utility>

#include "core/autograd.h"
#include "core/error.h"
#include "models/cvt.h"
#include "models/deit.h"
#include "models/xcit.h"
#include "nn/attention/variants.h"

namespace sima {

namespace {

// Installs a qk_hook for the scope, restoring whatever hook was there before.
class HookGuard {
 public:
  using Hook = std::function<void(const Tensor&, const Tensor&)>;
  HookGuard(Attention& a, Hook h) : a_(a), saved_(std::move(a.qk_hook)) { a_.qk_hook = std::move(h); }
  ~HookGuard() { a_.qk_hook = std::move(saved_); }
  HookGuard(const HookGuard&) = delete;
  HookGuard& operator=(const HookGuard&) = delete;

 private:
  Attention& a_;
  Hook saved_;
};

// conv output side: (side + 2p − k) / s + 1 (0 when the kernel does not fit).
int64_t conv_out(int64_t side, const Conv2d& c) {
  const int64_t padded = side + 2 * c.padding;
  return padded < c.kernel_size ? 0 : (padded - c.kernel_size) / c.stride + 1;
}

std::string describe(const Attention& a) { return a.options().variant + " (" + a.type_name() + ")"; }

// The scale inside the softmax of the attentions whose class-token row we can rebuild from
// q and k (traits.softmax_row in the variant table): the module's softmax_scale(), timm's
// d^-½ or CvT's C^-½ (the official quirk, models/cvt_attention.h).
float softmax_scale(const Attention& a, int64_t layer) {
  check(attention_variant(a.options().variant).traits.softmax_row, "the class token's attention row (which = cls) "
        "needs softmax attention: layer ", layer, " is ", describe(a),
        ", which forms no softmax attention matrix; use q, k or both");
  return a.softmax_scale();
}

// t (1, h, N, d): per patch token of `grid`, the ℓ2 norm over every head's channels.
//   out[r·w + c] = sqrt(Σ_head Σ_ch t[0, head, prefix + r·w + c, ch]²)
std::vector<float> patch_norms(const Tensor& t, const TokenGrid& grid) {
  const int64_t h = t.size(1), N = t.size(2), d = t.size(3), P = grid.height * grid.width;
  const float* p = t.data();
  std::vector<float> out(static_cast<size_t>(P));
  for (int64_t n = 0; n < P; ++n) {
    double s = 0.0;
    for (int64_t hh = 0; hh < h; ++hh) {
      const float* row = p + (hh * N + grid.prefix + n) * d;
      for (int64_t c = 0; c < d; ++c) s += double(row[c]) * row[c];
    }
    out[size_t(n)] = static_cast<float>(std::sqrt(s));
  }
  return out;
}

// The class token's (query 0) attention over the patch keys of `kgrid`, mean over heads:
//   P[head, j] = softmax_j(scale · q[0, head, 0, :] · k[0, head, j, :])   over all Nk keys
//   out[n] = mean_head P[head, kgrid.prefix + n]
// Exactly the row softmax_attention forms (it does not keep it, so it is rebuilt here).
std::vector<float> cls_row(const Tensor& q, const Tensor& k, float scale, const TokenGrid& kgrid) {
  const int64_t h = q.size(1), Nq = q.size(2), d = q.size(3), Nk = k.size(2), P = kgrid.height * kgrid.width;
  std::vector<float> out(static_cast<size_t>(P), 0.f);
  std::vector<double> s(static_cast<size_t>(Nk));
  for (int64_t hh = 0; hh < h; ++hh) {
    const float* qc = q.data() + hh * Nq * d;  // the class token's query
    const float* kh = k.data() + hh * Nk * d;
    double mx = -std::numeric_limits<double>::infinity(), sum = 0.0;
    for (int64_t j = 0; j < Nk; ++j) {
      double dot = 0.0;
      for (int64_t c = 0; c < d; ++c) dot += double(qc[c]) * kh[j * d + c];
      s[size_t(j)] = scale * dot;
      mx = std::max(mx, s[size_t(j)]);
    }
    for (int64_t j = 0; j < Nk; ++j) sum += (s[size_t(j)] = std::exp(s[size_t(j)] - mx));
    for (int64_t n = 0; n < P; ++n) out[size_t(n)] += static_cast<float>(s[size_t(kgrid.prefix + n)] / sum / h);
  }
  return out;
}

}  // namespace

int64_t resolve_layer(int64_t layer, int64_t count) {
  check(count > 0, "the model has no self-attention layers to draw a heatmap from");
  check(layer >= -count && layer < count, "layer ", layer, " does not exist: the model has ", count,
        " self-attention layers (valid: ", -count, " .. ", count - 1, ", negative counts from the end)");
  return layer < 0 ? layer + count : layer;
}

AttentionLayout attention_layout(Model& model, int64_t layer, int64_t height, int64_t width) {
  const int64_t count = static_cast<int64_t>(model.attention_layers().size());
  check(layer >= 0 && layer < count, "attention_layout: layer ", layer, " is not in 0 .. ", count - 1);
  if (auto* m = dynamic_cast<DeiT*>(&model)) {
    const TokenGrid g{m->dist_token.defined() ? 2 : 1, m->patch_embed->grid_size(height),
                      m->patch_embed->grid_size(width)};
    return {g, g};
  }
  if (auto* m = dynamic_cast<XCiT*>(&model)) {
    const TokenGrid g{0, m->patch_embed->grid_size(height), m->patch_embed->grid_size(width)};
    return {g, g};
  }
  if (auto* m = dynamic_cast<CvT*>(&model)) {
    int64_t H = height, W = width, first = 0;
    for (auto& stage : m->stages) {
      H = stage->patch_embed->out_size(H);
      W = stage->patch_embed->out_size(W);
      const int64_t n = static_cast<int64_t>(stage->blocks.size());
      if (layer < first + n) {
        const CvtAttention& attn = *stage->blocks[size_t(layer - first)]->attn;
        const int64_t prefix = stage->cls_token.defined() ? 1 : 0;
        const TokenGrid q{prefix, H, W};
        if (!attn.conv_proj_k) return {q, q};  // SOFT: k = q
        const Conv2d& c = *attn.conv_proj_k->conv;
        return {q, TokenGrid{prefix, conv_out(H, c), conv_out(W, c)}};
      }
      first += n;
    }
  }
  fail("heatmaps: the token layout of a ", model.type_name(), " model is unknown (DeiT, XCiT and CvT are)");
}

TokenMaps token_maps(Model& model, const Tensor& input, int64_t layer, bool with_cls) {
  check(input.defined() && input.dim() == 4 && input.size(0) == 1, "token_maps: the input ",
        input.defined() ? input.shape().str() : "undefined", " must be one image (1, C, H, W)");
  const std::vector<Attention*> layers = model.attention_layers();
  TokenMaps m;
  m.layer_count = static_cast<int64_t>(layers.size());
  m.layer = resolve_layer(layer, m.layer_count);
  Attention& attn = *layers[size_t(m.layer)];
  m.attention = attn.type_name();
  m.variant = attn.options().variant;
  m.layout = attention_layout(model, m.layer, input.size(2), input.size(3));
  float scale = 0.f;
  if (with_cls) {
    scale = softmax_scale(attn, m.layer);
    check(m.layout.q.prefix >= 1, "the class token's attention row (which = cls): layer ", m.layer, " of this ",
          model.type_name(), " sees no class token (", dynamic_cast<XCiT*>(&model)
              ? "XCiT's self-attention layers run on the patch tokens only"
              : "only the last CvT stage has one", ")");
  }

  Tensor q, k;
  int calls = 0;
  {
    HookGuard hook(attn, [&](const Tensor& qh, const Tensor& kh) {
      q = qh.detach().clone();  // the core may reuse or free its buffers after the call
      k = kh.detach().clone();
      ++calls;
    });
    EvalModeGuard mode(model);
    NoGradGuard no_grad;
    Tensor logits = model.forward(input);
    m.logits = to_vector(logits);
  }
  check(calls == 1, "layer ", m.layer, ", ", describe(attn), ", reported its q and k ", calls,
        " times in one forward (expected once): its core does not call Attention::qk_hook as heatmaps need");
  check(q.defined() && k.defined() && q.dim() == 4 && k.dim() == 4 && q.size(0) == 1 && k.size(0) == 1 &&
            q.size(1) == k.size(1) && q.size(3) == k.size(3),
        "layer ", m.layer, ", ", describe(attn), ": its qk_hook gave q ", q.defined() ? q.shape().str() : "undefined",
        " and k ", k.defined() ? k.shape().str() : "undefined", ", not (1, h, N, d) each");
  auto tokens_match = [&](const Tensor& t, const TokenGrid& g, const char* which) {
    check(t.size(2) == g.tokens(), "layer ", m.layer, ", ", describe(attn), ": ", which, " has ", t.size(2),
          " tokens but the ", model.type_name(), " layout expects ", g.prefix, " + ", g.height, "x", g.width);
  };
  tokens_match(q, m.layout.q, "q");
  tokens_match(k, m.layout.k, "k");
  m.q = patch_norms(q, m.layout.q);
  m.k = patch_norms(k, m.layout.k);
  if (with_cls) m.cls = cls_row(q, k, scale, m.layout.k);
  m.q_hat = q;
  m.k_hat = k;
  return m;
}

}  // namespace sima
