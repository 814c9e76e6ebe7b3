// The built-in rows of the variant table (variants.h): each holds every fact of its variant,
// its options (keys it owns, with type, default, valid values and help), traits, the
// parameters its module adds and the exp() evaluations of its core.
#include <algorithm>
#include <sstream>

#include "nn/attention/efficient.h"
#include "nn/attention/linear_attention.h"
#include "nn/attention/linformer.h"
#include "nn/attention/nystromformer.h"
#include "nn/attention/performer.h"
#include "nn/attention/relu_attention.h"
#include "nn/attention/sima.h"
#include "nn/attention/soft_gaussian.h"
#include "nn/attention/softmax_attention.h"
#include "nn/attention/variants.h"
#include "nn/attention/xca.h"

namespace sima {

using json = nlohmann::json;

namespace {

// ---- rules of the built-in keys (core/json_schema.h's Rule) ------------------------------

Rule<bool> flag() { return {"true, false", nullptr}; }
// json_value<float> already refuses inf and nan.
Rule<float> finite() { return {"finite", nullptr}; }

// x >= lo (or x > lo when open); the error shows x as JSON writes it ("got -1.0").
template <class T>
Rule<T> bound(T lo, bool open) {
  std::ostringstream text;  // "0", not json's "0.0"
  text << lo;
  const std::string valid = (open ? "> " : ">= ") + text.str();
  return {valid, [=](const T& x) {
            const bool ok = open ? x > lo : x >= lo;
            return ok ? std::string() : "must be " + valid + ", got " + json(x).dump();
          }};
}

// A kernel size: 0 (none) or an odd positive integer.
Rule<int64_t> odd_or_zero() {
  return {"0 or odd > 0", [](const int64_t& x) {
            return x == 0 || (x > 0 && x % 2 == 1) ? std::string()
                                                   : "must be 0 or an odd number > 0, got " + std::to_string(x);
          }};
}

// A float key of a built-in row: own_option's spec, written as the float's own double
// (9.999999960041972e-13 for 1e-12), the form the configs and checkpoints of these keys have
// always had, so that they stay byte-identical and drop_unread_default_keys recognises them.
AttentionOptionSpec float_option(const std::string& key, float fallback, Rule<float> rule, const std::string& help) {
  AttentionOptionSpec s = own_option<float>(key, fallback, std::move(rule), help);
  s.write = [write = s.write](const AttentionOptions& o) { return json(write(o).get<float>()); };
  return s;
}

template <class T>
std::function<std::shared_ptr<Attention>(const AttentionOptions&)> make() {
  return [](const AttentionOptions& o) { return std::make_shared<T>(o); };
}

// A row with its name, help and factory; the row functions below add the rest.
template <class T>
AttentionVariant row_of(const char* name, const char* help) {
  AttentionVariant row;
  row.name = name;
  row.help = help;
  row.make = make<T>();
  return row;
}

// ---- sizes: the parameters a module adds (D = C, h heads of width d; Linear(a, b) with bias
// is a·b + b, a LayerNorm(d) 2d) and the exp() of one core forward (B images, N tokens) ----

double positive(int64_t v) { return v > 0 ? double(v) : 0.0; }
double heads(const AttentionOptions& o) { return positive(o.num_heads); }
double head_width(const AttentionOptions& o) { return o.num_heads > 0 ? positive(o.dim / o.num_heads) : 0.0; }
int64_t head_dim(const AttentionOptions& o) { return o.num_heads > 0 ? o.dim / o.num_heads : 0; }
int64_t pairs(const AttentionOptions& o, int64_t B) { return B * o.num_heads; }  // B·h

// One exp per score of an N × N map per head: softmax's B·h·N².
int64_t token_map_exps(const AttentionOptions& o, int64_t B, int64_t N, int64_t, int64_t) {
  return pairs(o, B) * N * N;
}

// ---- the rows --------------------------------------------------------------------------

AttentionVariant softmax_row() {
  AttentionVariant row = row_of<SoftmaxAttention>("softmax",
      "softmax(q k^T / sqrt(d)) v (ViT, DeiT; timm's Attention)");
  row.traits.strided_kv = row.traits.softmax_row = row.traits.token_maps = true;
  row.exp_calls = token_map_exps;
  return row;
}

AttentionVariant xca_row() {
  AttentionVariant row = row_of<XCAttention>("xca", "cross-covariance attention over channels (XCiT; timm's XCA)");
  row.extra_parameters = [](const AttentionOptions& o) { return heads(o); };  // temperature (h, 1, 1)
  row.exp_calls = [](const AttentionOptions& o, int64_t B, int64_t, int64_t, int64_t) {
    return pairs(o, B) * head_dim(o) * head_dim(o);  // softmax over the d × d cross-covariance
  };
  return row;
}

AttentionVariant sima_row() {
  AttentionVariant row = row_of<SimaAttention>("sima", "SimA: l1-normalised q, k, no softmax (UCDvision/sima)");
  row.options = {
      own_option<std::string>("norm", "l1", one_of(sima_norm_names()),
                              "how q and k are normalised over the tokens per channel (l1: the paper)"),
      own_option<std::string>("order", "auto", one_of(sima_order_names()),
                              "product order; auto = (q k^T) v iff N < d, as the official code"),
      float_option("eps", 1e-12f, bound(0.f, true), "floor of the q, k channel norms (F.normalize's eps)")};
  row.traits.strided_kv = true;
  row.traits.class_attention = "sima";
  row.exp_calls = [](const AttentionOptions&, int64_t, int64_t, int64_t, int64_t) { return int64_t(0); };
  return row;
}

AttentionVariant relu_row() {
  AttentionVariant row = row_of<ReluAttention>("relu",
      "h(q k^T / sqrt(d)) v / N^alpha, h elementwise (ReLU attention)");
  row.options = {
      float_option("alpha", 1.f, finite(), "the output is scaled by N^-alpha"),
      own_option<std::string>("fn", "relu", one_of(score_fn_names()),
                              "the function applied to the scores q k^T / sqrt(d)"),
      own_option<bool>("qk_norm", false, flag(), "LayerNorm over d on q and k"),
      own_option<bool>("qk_norm_bias", true, flag(),
                       "relu: the qk LayerNorm has a bias (timm); false: scale only (Flax normalize_qk)"),
      own_option<bool>("gate", false, flag(), "multiply the merged heads by Linear(C, C)(x) before proj")};
  row.traits.token_maps = true;
  row.extra_parameters = [](const AttentionOptions& o) {
    const ReluSettings s = relu_settings(o);
    const double d = head_width(o), D = positive(o.dim);
    return (s.qk_norm ? 2 * (d + (s.qk_norm_bias ? d : 0.0)) : 0.0) + (s.gate ? D * D + D : 0.0);
  };
  // gelu and sigmoid: one exp per score; softplus: one per score at or below its threshold (20),
  // so B·h·N² is its count while no score exceeds 20; the others none.
  row.exp_calls = [](const AttentionOptions& o, int64_t B, int64_t N, int64_t H, int64_t W) {
    const ScoreFn fn = relu_settings(o).fn;
    const bool exps = fn == ScoreFn::Gelu || fn == ScoreFn::Sigmoid || fn == ScoreFn::Softplus;
    return exps ? token_map_exps(o, B, N, H, W) : int64_t(0);
  };
  return row;
}

// The official SOFT's vision model runs softmax attention in its last stage.
AttentionOptionSpec softmax_max_tokens_option() {
  return own_option<int64_t>(
      "softmax_max_tokens", 0, sima::at_least<int64_t>(0),
      "soft: a layer built for at most this many tokens (class token included) runs softmax attention "
      "instead, as the official SOFT vision model's last stage (7x7 + class token = 50 at 224 px); 0: never");
}

AttentionVariant soft_row() {
  AttentionVariant row = row_of<SoftAttention>("soft",
      "SOFT: Gaussian kernel with Nystrom bottleneck tokens, q = k (fudan-zvg/SOFT)");
  row.options = {
      own_option<int64_t>("sr", 2, bound<int64_t>(1, false), "bottleneck kernel = stride on the token grid"),
      own_option<std::string>("bottleneck", "conv", one_of({"conv", "avgpool"}),
                              "how the bottleneck tokens are made from q"),
      own_option<int64_t>("nr_iters", 20, bound<int64_t>(0, false), "Newton-Raphson iterations of the pseudo-inverse"),
      float_option("ridge", 0.01f, bound(0.f, false), "soft: iterate on A + ridge I (the official 0.01; 0: none)"),
      own_option<int64_t>("v_conv", 3, odd_or_zero(),
                          "soft: kernel of the depthwise conv on v added to the output (0: none)"),
      own_option<std::string>("nr_backward", "inverse", one_of({"inverse", "unrolled"}),
                              "soft: inverse = the official -V^T G V^T; unrolled = through the iterations"),
      softmax_max_tokens_option()};
  row.layer_variant = [](const AttentionOptions& o) {
    const int64_t most = attention_option<int64_t>(o, "softmax_max_tokens");
    return most > 0 && o.num_tokens > 0 && o.num_tokens <= most ? "softmax" : "soft";
  };
  row.traits.shares_qk = row.traits.needs_grid = true;
  row.traits.min_grid_side = [](const AttentionOptions& o) { return soft_settings(o).sr; };
  row.extra_parameters = [](const AttentionOptions& o) {
    const SoftSettings s = soft_settings(o);
    const double d = head_width(o), k = positive(s.v_conv), sr = positive(s.sr);
    return (s.v_conv > 0 ? heads(o) * k * k : 0.0) +                   // depthwise Conv2d(h, h, k), no bias
           (s.bottleneck == "conv" ? d * d * sr * sr + 2 * d : 0.0);  // Conv2d(d, d, sr) + LayerNorm(d)
  };
  // The Gaussian kernels P (m × N) and A (m × m), m = (H / sr)·(W / sr) bottleneck tokens.
  row.exp_calls = [](const AttentionOptions& o, int64_t B, int64_t N, int64_t H, int64_t W) {
    const int64_t sr = soft_settings(o).sr, m = (H / sr) * (W / sr);
    return pairs(o, B) * (m * N + m * m);
  };
  return row;
}

AttentionVariant linear_elu_row() {
  AttentionVariant row =
      row_of<LinearEluAttention>("linear_elu", "linear attention with phi = elu + 1 (Katharopoulos et al.)");
  row.exp_calls = [](const AttentionOptions& o, int64_t B, int64_t N, int64_t, int64_t) {
    return 2 * pairs(o, B) * N * head_dim(o);  // elu + 1 of every element of q and of k
  };
  return row;
}

AttentionVariant cosformer_row() {
  AttentionVariant row = row_of<CosformerAttention>(
      "cosformer", "linear attention with phi = relu, optional cos re-weighting (cosFormer)");
  row.options = {own_option<std::string>("reweight", "none", one_of({"none", "cos1d", "cos2d"}),
                                         "cosformer: none (SimA Table 2), cos1d (cosFormer Eq. 10), cos2d (SimA A.4)")};
  row.exp_calls = [](const AttentionOptions&, int64_t, int64_t, int64_t, int64_t) { return int64_t(0); };  // relu
  return row;
}

AttentionVariant performer_row() {
  AttentionVariant row = row_of<PerformerAttention>("performer",
      "FAVOR+: positive orthogonal random features (Performer)");  // its features are buffers, not parameters
  row.options = {
      own_option<int64_t>("nb_features", 0, bound<int64_t>(0, false), "performer: random features m (0: int(d ln d))"),
      own_option<int64_t>("redraw_interval", 1000, bound<int64_t>(0, false),
                          "performer: training forward calls between redraws (0: never)"),
      own_option<int64_t>("feature_seed", 0, bound<int64_t>(0, false), "performer: seed of every feature draw"),
      own_option<int64_t>("ortho_scaling", 0,
                          Rule<int64_t>{"0, 1",
                                        [](const int64_t& x) {
                                          return x == 0 || x == 1 ? std::string()
                                                                  : "must be 0 or 1, got " + std::to_string(x);
                                        }},
                          "performer: row lengths of the features (0: Gaussian, 1: sqrt(d))"),
      float_option("feature_eps", 1e-4f, bound(0.f, true), "performer: added to every random feature")};
  // exp of every random feature of q and of k: 2·B·h·N·m.
  row.exp_calls = [](const AttentionOptions& o, int64_t B, int64_t N, int64_t, int64_t) {
    const int64_t nb = performer_settings(o).nb_features;
    return 2 * pairs(o, B) * N * (nb > 0 ? nb : performer_default_features(head_dim(o)));
  };
  return row;
}

AttentionVariant nystromformer_row() {
  AttentionVariant row = row_of<NystromAttention>("nystromformer",
      "Nystrom approximation with segment-mean landmarks (Nystromformer)");
  row.options = {
      own_option<int64_t>("num_landmarks", 64, bound<int64_t>(1, false),
                          "nystromformer: segment-mean landmarks m (<= N)"),
      own_option<int64_t>("pinv_iters", 6, bound<int64_t>(0, false), "nystromformer: iterations of the pseudo-inverse"),
      own_option<std::string>("pinv_init", "original", one_of({"original", "exact"}),
                              "nystromformer: original = one scale per batch (official); exact = per matrix"),
      own_option<int64_t>("conv_kernel_size", 0, odd_or_zero(),
                          "nystromformer: depthwise conv of v over the tokens (0: none)")};
  row.extra_parameters = [](const AttentionOptions& o) {
    const int64_t k = nystrom_settings(o).conv_kernel_size;
    return k > 0 ? heads(o) * positive(k) : 0.0;  // Conv2d(h, h, (k, 1)), no bias
  };
  // m = min(num_landmarks, N); m = N is exact softmax (N²), else three softmaxes: the landmark
  // rows over the tokens (m·N), the landmarks' own (m²) and the tokens over the landmarks (N·m).
  row.exp_calls = [](const AttentionOptions& o, int64_t B, int64_t N, int64_t, int64_t) {
    const int64_t m = std::min(nystrom_settings(o).num_landmarks, N);
    return pairs(o, B) * (m == N ? N * N : 2 * m * N + m * m);
  };
  return row;
}

AttentionVariant efficient_row() {
  AttentionVariant row = row_of<EfficientAttention>(
      "efficient", "softmax of q over channels, of k over tokens, q (k^T v) (Efficient Attention)");
  row.exp_calls = [](const AttentionOptions& o, int64_t B, int64_t N, int64_t, int64_t) {
    return 2 * pairs(o, B) * N * head_dim(o);  // one softmax over q's channels, one over k's tokens
  };
  return row;
}

AttentionVariant linformer_row() {
  AttentionVariant row = row_of<LinformerAttention>("linformer",
      "softmax(q (E k)^T / sqrt(d)) (F v), E, F learned along the tokens (Linformer)");
  row.options = {
      own_option<int64_t>("proj_len", 0, bound<int64_t>(0, false),
                          "linformer: tokens k that K, V are projected to (0: N / 4)"),
      own_option<std::string>("sharing", "headwise", one_of({"headwise", "kv", "none"}),
                              "linformer: one E, F for all heads (fairseq), E = F too, or per head"),
      own_option<std::string>("compress", "kv", one_of({"kv", "input"}),
                              "linformer: E, F act on k, v (the paper) or on x before the projection (fairseq)")};
  row.extra_parameters = [](const AttentionOptions& o) {  // E, F (k, N): one pair, one shared, or h pairs
    const LinformerSettings s = linformer_settings(o);
    const double one = (s.sharing == "none" ? heads(o) : 1.0) * positive(s.k(o.num_tokens)) * positive(o.num_tokens);
    return s.sharing == "kv" ? one : 2 * one;
  };
  row.exp_calls = [](const AttentionOptions& o, int64_t B, int64_t N, int64_t, int64_t) {
    return pairs(o, B) * N * linformer_settings(o).k(o.num_tokens);  // softmax over the k projected tokens
  };
  return row;
}

}  // namespace

std::deque<AttentionVariant> builtin_attention_variants() {
  return {
      softmax_row(),   xca_row(),           sima_row(),      relu_row(),     soft_row(),       linear_elu_row(),
      cosformer_row(), performer_row(),     nystromformer_row(), efficient_row(), linformer_row(),
  };
}

}  // namespace sima
