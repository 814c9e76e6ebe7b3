// Parameter and activation sizes of DeiT, XCiT and CvT from their configs (see budget.h).
// Each count mirrors the constructor it stands for: models/deit.cpp, models/xcit.cpp with
// models/xcit_blocks.cpp, models/cvt.cpp with models/cvt_attention.cpp, and the attention
// variants of nn/attention/ (the parameters each adds: its row's extra_parameters, variant_rows.cpp).
#include "models/budget.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"
#include "core/memory_limit.h"
#include "nn/attention/variants.h"

namespace sima {

namespace {

double pos(int64_t v) { return v > 0 ? double(v) : 0.0; }
double linear(double in, double out, bool bias = true) { return in * out + (bias ? out : 0.0); }
double layer_norm(double d) { return 2 * d; }
// int(dim · mlp_ratio), computed in float as the constructors do.
double mlp_hidden(int64_t dim, float ratio) { return pos(static_cast<int64_t>(static_cast<float>(dim) * ratio)); }
double mlp(int64_t dim, float ratio) { const double h = mlp_hidden(dim, ratio); return linear(pos(dim), h) + linear(h, pos(dim)); }

double attention(const AttentionOptions& o) {
  const double D = pos(o.dim);
  const double qkv_outputs = attention_variant(o.variant, "model").traits.shares_qk ? 2 : 3;
  return (o.projections ? linear(D, qkv_outputs * D, o.qkv_bias) + linear(D, D) : 0.0) + attention_extra_parameters(o);
}

AttentionOptions trunk_options(const ModelConfig& c, int64_t dim, int64_t heads, int64_t tokens) {
  AttentionOptions a = c.attention;
  a.dim = dim, a.num_heads = heads, a.qkv_bias = c.qkv_bias, a.num_tokens = tokens;
  return layer_attention_options(a);
}

// XCiT's ConvPatchEmbed: conv3x3 (no bias) + BatchNorm per step, widths D/2^(n-1) ... D.
double conv_stem(const ModelConfig& c) {
  const int n = c.patch_size == 16 ? 4 : c.patch_size == 8 ? 3 : 2;
  double total = 0, cin = pos(c.in_chans);
  for (int i = 0; i < n; ++i) {
    const double cout = pos(c.embed_dim >> (n - 1 - i));
    total += cin * cout * 9 + 2 * cout;
    cin = cout;
  }
  return total;
}

int64_t grid(const ModelConfig& c) { return c.patch_size > 0 ? c.img_size / c.patch_size : 0; }

double deit_parameters(const ModelConfig& c) {
  const double D = pos(c.embed_dim), P = c.distilled ? 2 : 1, g = pos(grid(c));
  const double embed = c.patch_embed == "conv_stem" ? conv_stem(c)
                                                    : linear(pos(c.in_chans) * pos(c.patch_size) * pos(c.patch_size), D);
  const int64_t N = grid(c) * grid(c) + (c.distilled ? 2 : 1);
  const double block = 2 * layer_norm(D) + attention(trunk_options(c, c.embed_dim, c.num_heads, N)) +
                       mlp(c.embed_dim, c.mlp_ratio) + (c.layer_scale_init > 0.f ? 2 * D : 0.0);
  return P * D + (g * g + P) * D + embed + pos(c.depth) * block + layer_norm(D) + P * linear(D, pos(c.num_classes));
}

double xcit_parameters(const ModelConfig& c) {
  const double D = pos(c.embed_dim);
  const double lpi = 2 * (9 * D + D) + 2 * D;  // two depthwise 3x3 convs with bias, BatchNorm
  const double block = 3 * layer_norm(D) + attention(trunk_options(c, c.embed_dim, c.num_heads, grid(c) * grid(c))) +
                       lpi + mlp(c.embed_dim, c.mlp_ratio) + 3 * D;
  const double cls_block = 2 * layer_norm(D) + linear(D, 3 * D, c.qkv_bias) + linear(D, D) +
                           mlp(c.embed_dim, c.mlp_ratio) + 2 * D;
  const double head = c.num_classes > 0 ? linear(D, pos(c.num_classes)) : 0.0;
  return conv_stem(c) + D + linear(64, D) + pos(c.depth) * block + pos(c.cls_attn_layers) * cls_block +
         layer_norm(D) + head;
}

// The token-grid side of every CvT stage (0 where the embedding leaves none).
std::vector<int64_t> cvt_sides(const ModelConfig& c) {
  std::vector<int64_t> sides;
  int64_t side = c.img_size;
  for (size_t i = 0; i < c.stage_dims.size(); ++i) {
    const int64_t k = i < c.stage_embed_kernel.size() ? c.stage_embed_kernel[i] : 1;
    const int64_t s = i < c.stage_embed_stride.size() ? std::max<int64_t>(1, c.stage_embed_stride[i]) : 1;
    const int64_t p = i < c.stage_embed_padding.size() ? c.stage_embed_padding[i] : 0;
    side = side + 2 * p < k ? 0 : (side + 2 * p - k) / s + 1;
    sides.push_back(side);
  }
  return sides;
}

double cvt_parameters(const ModelConfig& c) {
  const std::vector<int64_t> sides = cvt_sides(c);
  double total = 0, in = pos(c.in_chans);
  const size_t S = c.stage_dims.size();
  for (size_t i = 0; i < S; ++i) {
    const double C = pos(c.stage_dims[i]), k = i < c.stage_embed_kernel.size() ? pos(c.stage_embed_kernel[i]) : 0;
    const bool with_cls = i + 1 == S;
    const int64_t heads = i < c.stage_heads.size() ? c.stage_heads[i] : 1;
    AttentionOptions core = trunk_options(c, c.stage_dims[i], heads, (with_cls ? 1 : 0) + sides[i] * sides[i]);
    core.projections = false;
    const bool shares_qk = attention_variant(core.variant, "model").traits.shares_qk;
    const double conv_proj = 9 * C + 2 * C;  // depthwise 3x3 without bias, BatchNorm
    const double attn = (shares_qk ? 2 : 3) * (conv_proj + linear(C, C, c.qkv_bias)) + attention(core) + linear(C, C);
    const double block = 2 * layer_norm(C) + attn + mlp(c.stage_dims[i], c.mlp_ratio);
    const int64_t depth = i < c.stage_depths.size() ? c.stage_depths[i] : 0;
    total += linear(in * k * k, C) + layer_norm(C) + (with_cls ? C : 0.0) + pos(depth) * block;
    in = C;
  }
  return total + layer_norm(in) + (c.num_classes > 0 ? linear(in, pos(c.num_classes)) : 0.0);
}

// Per block: tokens · (10 · width + 2 · hidden) floats, plus 2 · heads · tokens² for N × N maps.
double block_activations(double tokens, int64_t width, float ratio, double heads, const std::string& variant) {
  const bool quadratic = attention_variant(variant, "model").traits.token_maps;
  return tokens * (10 * pos(width) + 2 * mlp_hidden(width, ratio)) + (quadratic ? 2 * heads * tokens * tokens : 0.0);
}

// "embed_dim 192, depth 12, ...": the keys that drive the size, for the error.
std::string size_keys(const ModelConfig& c) {
  std::ostringstream os;
  auto list = [&](const char* key, const auto& v) {
    os << key << " [";
    for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
    os << "]";
  };
  if (c.arch == "cvt") {
    list("stage_dims", c.stage_dims), os << ", ", list("stage_depths", c.stage_depths);
    os << ", mlp_ratio " << c.mlp_ratio << ", img_size " << c.img_size;
  } else {
    os << "embed_dim " << c.embed_dim << ", depth " << c.depth << ", mlp_ratio " << c.mlp_ratio << ", img_size "
       << c.img_size << " / patch_size " << c.patch_size;
    if (c.arch == "xcit") os << ", cls_attn_layers " << c.cls_attn_layers;
  }
  os << ", num_classes " << c.num_classes << ", attention.type " << c.attention.variant;
  return os.str();
}

}  // namespace

double count_parameters(const ModelConfig& cfg) {
  if (cfg.arch == "deit") return deit_parameters(cfg);
  if (cfg.arch == "xcit") return xcit_parameters(cfg);
  if (cfg.arch == "cvt") return cvt_parameters(cfg);
  fail("model: arch '", cfg.arch, "' is unknown (allowed: deit, xcit, cvt)");
}

double activation_bytes(const ModelConfig& c) {
  double floats = 0;
  if (c.arch == "cvt") {
    const std::vector<int64_t> sides = cvt_sides(c);
    for (size_t i = 0; i < c.stage_dims.size(); ++i) {
      const double tokens = double(sides[i]) * double(sides[i]) + 1;
      const int64_t depth = i < c.stage_depths.size() ? c.stage_depths[i] : 0;
      const int64_t h = i < c.stage_heads.size() ? c.stage_heads[i] : 1;
      const bool with_cls = i + 1 == c.stage_dims.size();
      const std::string layer = trunk_options(c, c.stage_dims[i], h, (with_cls ? 1 : 0) + sides[i] * sides[i]).variant;
      floats += pos(depth) * block_activations(tokens, c.stage_dims[i], c.mlp_ratio, pos(h), layer);
    }
  } else {
    const double tokens = double(grid(c)) * double(grid(c)) + 2;
    const double depth = pos(c.depth) + (c.arch == "xcit" ? pos(c.cls_attn_layers) : 0.0);
    const int64_t N = grid(c) * grid(c) + (c.arch == "xcit" ? 0 : c.distilled ? 2 : 1);  // as the models build
    const std::string layer = trunk_options(c, c.embed_dim, c.num_heads, N).variant;
    floats = depth * block_activations(tokens, c.embed_dim, c.mlp_ratio, pos(c.num_heads), layer);
  }
  return 4 * floats + 4 * pos(c.in_chans) * pos(c.img_size) * pos(c.img_size);  // + the input image
}

void check_model_budget(const ModelConfig& cfg, int64_t batch) {
  const double params = count_parameters(cfg), acts = double(std::max<int64_t>(1, batch)) * activation_bytes(cfg);
  const double need = 4 * params + acts;
  const int64_t limit = memory_limit_bytes();
  if (need <= double(limit)) return;
  std::ostringstream count;
  count << params;
  fail("model config (", cfg.arch, cfg.name.empty() ? "" : " '" + cfg.name + "'", "): ", size_keys(cfg),
       " needs about ", format_bytes(need), " (", count.str(), " parameters: ", format_bytes(4 * params),
       "; activations for batch ", std::max<int64_t>(1, batch), ": ", format_bytes(acts),
       "), more than the memory limit of ", memory_limit_description());
}

}  // namespace sima
