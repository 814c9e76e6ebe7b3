#include "models/cvt.h"

#include <algorithm>
#include <climits>
#include <string>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops/elementwise.h"
#include "core/ops/shape_ops.h"
#include "nn/attention/variants.h"
#include "nn/init.h"

namespace sima {

// ---- ConvEmbed --------------------------------------------------------------------

CvtConvEmbed::CvtConvEmbed(int64_t in_chans, int64_t dim, int64_t kernel, int64_t stride, int64_t padding,
                           float eps)
    : Module("CvtConvEmbed") {
  proj = register_module("proj", std::make_shared<Conv2d>(in_chans, dim, static_cast<int>(kernel),
                                                          static_cast<int>(stride), static_cast<int>(padding)));
  norm = register_module("norm", std::make_shared<LayerNorm>(dim, eps));
}

int64_t CvtConvEmbed::out_size(int64_t size) const {
  const int64_t padded = size + 2 * proj->padding;
  return padded < proj->kernel_size ? 0 : (padded - proj->kernel_size) / proj->stride + 1;
}

Tensor CvtConvEmbed::forward(const Tensor& x) {
  if (proj->lowp && !needs_grad(x, proj->weight, proj->bias)) {  // oneDNN writes the tokens channels last
    Tensor y = proj->lowp->forward(x, ConvLayout::NCHW, ConvLayout::NHWC);  // (B, H', W', C)
    return norm->forward(reshape(y, {y.size(0), y.size(1) * y.size(2), y.size(3)}));
  }
  Tensor y = proj->forward(x);  // (B, C, H', W')
  const int64_t B = y.size(0), C = y.size(1);
  return norm->forward(permute(reshape(y, {B, C, y.size(2) * y.size(3)}), {0, 2, 1}));  // (B, H'W', C)
}

// ---- Block ------------------------------------------------------------------------

CvtBlock::CvtBlock(const AttentionOptions& opt, int64_t stride_kv, bool with_cls_token, float mlp_ratio,
                   const std::string& act, float drop, float dpr, float eps)
    : Module("CvtBlock") {
  const int64_t C = opt.dim;
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(C, eps));
  attn = register_module("attn", std::make_shared<CvtAttention>(opt, stride_kv, with_cls_token));
  drop_path = register_module("drop_path", std::make_shared<DropPath>(dpr));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(C, eps));
  const auto hidden = static_cast<int64_t>(static_cast<float>(C) * mlp_ratio);  // int(dim * mlp_ratio)
  mlp = register_module("mlp", std::make_shared<Mlp>(C, hidden, C, act, drop));
}

Tensor CvtBlock::forward(const Tensor& x, int64_t H, int64_t W) {
  if (drop_path->p == 0.f || !drop_path->is_training()) {  // the residual added by each branch's last product
    Tensor y = attn->forward_add(norm1->forward(x), x, H, W);
    return mlp->forward_add(norm2->forward(y), y);
  }
  Tensor y = add(x, drop_path->forward(attn->forward(norm1->forward(x), H, W)));
  return add(y, drop_path->forward(mlp->forward(norm2->forward(y))));
}

// ---- Stage ------------------------------------------------------------------------

CvtStage::CvtStage(const ModelConfig& cfg, size_t i, int64_t in_chans) : Module("CvtStage") {
  const int64_t C = cfg.stage_dims[i], depth = cfg.stage_depths[i];
  patch_embed = register_module("patch_embed",
                                std::make_shared<CvtConvEmbed>(in_chans, C, cfg.stage_embed_kernel[i],
                                                               cfg.stage_embed_stride[i],
                                                               cfg.stage_embed_padding[i], cfg.norm_eps));
  const bool with_cls = i + 1 == cfg.stage_dims.size();
  if (with_cls) cls_token = register_parameter("cls_token", zeros({1, 1, C}));
  pos_drop = register_module("pos_drop", std::make_shared<Dropout>(cfg.drop_rate));

  AttentionOptions opt = cfg.attention;
  opt.dim = C;
  opt.num_heads = cfg.stage_heads[i];
  opt.qkv_bias = cfg.qkv_bias;
  opt.attn_drop = cfg.attn_drop_rate;
  opt.proj_drop = cfg.drop_rate;
  const int64_t side = cvt_grid_sizes(cfg, cfg.img_size)[i];
  opt.num_tokens = (with_cls ? 1 : 0) + side * side;  // linformer
  opt = layer_attention_options(opt);                 // SOFT's softmax_max_tokens
  auto list = register_module("blocks", std::make_shared<Module>("ModuleList"));
  for (int64_t j = 0; j < depth; ++j) {
    // torch.linspace(0, rate, depth)[j]
    const float dpr = depth > 1 ? cfg.stage_drop_path[i] * static_cast<float>(j) / static_cast<float>(depth - 1) : 0.f;
    blocks.push_back(list->register_module(
        std::to_string(j), std::make_shared<CvtBlock>(opt, cfg.stage_stride_kv[i], with_cls, cfg.mlp_ratio,
                                                      cfg.act, cfg.drop_rate, dpr, cfg.norm_eps)));
  }

  // The official init of a stage: cls_token trunc_normal(.02); then every Linear
  // trunc_normal(.02) with bias 0, LayerNorm and BatchNorm weight 1 bias 0 (their defaults
  // here). Conv2d layers keep PyTorch's default init, as there.
  if (with_cls) trunc_normal_(cls_token, .02f);
  for (auto& [name, m] : named_modules())
    if (auto* lin = dynamic_cast<Linear*>(m)) {
      trunc_normal_(lin->weight, .02f);
      if (lin->bias.defined()) zeros_(lin->bias);
    }
}

Tensor CvtStage::forward(const Tensor& x, Tensor* cls) {
  const int64_t B = x.size(0), H = patch_embed->out_size(x.size(2)), W = patch_embed->out_size(x.size(3));
  const int64_t C = patch_embed->proj->out_channels;
  Tensor t = patch_embed->forward(x);                                      // (B, HW, C)
  if (cls_token.defined()) t = cat({expand(cls_token, {B, 1, C}), t}, 1);  // (B, 1 + HW, C)
  t = pos_drop->forward(t);
  for (auto& blk : blocks) t = blk->forward(t, H, W);
  if (cls_token.defined()) {
    if (cls) *cls = narrow(t, 1, 0, 1);  // (B, 1, C)
    t = narrow(t, 1, 1, H * W);
  }
  return reshape(permute(t, {0, 2, 1}), {B, C, H, W});  // (B, C, H, W)
}

// ---- CvT --------------------------------------------------------------------------

std::vector<int64_t> cvt_grid_sizes(const ModelConfig& cfg, int64_t img_size) {
  const size_t S = cfg.stage_dims.size();
  check(S >= 1, "CvT: stage_dims is empty (one width per stage needed)");
  auto same_length = [&](size_t n, const char* field) {
    check(n == S, "CvT: ", field, " has ", n, " entries but stage_dims has ", S, " (one per stage)");
  };
  same_length(cfg.stage_depths.size(), "stage_depths");
  same_length(cfg.stage_heads.size(), "stage_heads");
  same_length(cfg.stage_embed_kernel.size(), "stage_embed_kernel");
  same_length(cfg.stage_embed_stride.size(), "stage_embed_stride");
  same_length(cfg.stage_embed_padding.size(), "stage_embed_padding");
  same_length(cfg.stage_drop_path.size(), "stage_drop_path");
  same_length(cfg.stage_stride_kv.size(), "stage_stride_kv");
  check(cfg.in_chans > 0, "CvT: in_chans must be > 0, got ", cfg.in_chans);
  check(cfg.num_classes >= 0, "CvT: num_classes must be >= 0 (0: no head), got ", cfg.num_classes);
  check(cfg.mlp_ratio > 0.f, "CvT: mlp_ratio must be > 0, got ", cfg.mlp_ratio);
  check(cfg.norm_eps > 0.f, "CvT: norm_eps must be > 0 (1e-5 for CvT), got ", cfg.norm_eps);
  check(cfg.drop_rate >= 0.f && cfg.drop_rate < 1.f, "CvT: drop_rate must be in [0, 1), got ", cfg.drop_rate);
  check(cfg.attn_drop_rate >= 0.f && cfg.attn_drop_rate < 1.f, "CvT: attn_drop_rate must be in [0, 1), got ",
        cfg.attn_drop_rate);
  const int64_t min_side = attention_min_grid_side(cfg.attention);  // SOFT: its bottleneck sr
  std::vector<int64_t> sides;
  int64_t side = img_size;
  check(img_size > 0, "CvT: img_size must be > 0, got ", img_size);
  for (size_t i = 0; i < S; ++i) {
    const int64_t C = cfg.stage_dims[i], h = cfg.stage_heads[i], k = cfg.stage_embed_kernel[i],
                  s = cfg.stage_embed_stride[i], p = cfg.stage_embed_padding[i];
    check(C > 0, "CvT: stage_dims[", i, "] must be > 0, got ", C);
    check(h > 0 && C % h == 0, "CvT: stage_heads[", i, "] = ", h, " must be > 0 and divide stage_dims[", i,
          "] = ", C);
    check(cfg.stage_depths[i] >= 0, "CvT: stage_depths[", i, "] must be >= 0, got ", cfg.stage_depths[i]);
    check(k >= 1 && s >= 1 && p >= 0, "CvT: stage ", i, " embedding needs stage_embed_kernel >= 1, ",
          "stage_embed_stride >= 1, stage_embed_padding >= 0 (got ", k, ", ", s, ", ", p, ")");
    check(cfg.stage_drop_path[i] >= 0.f && cfg.stage_drop_path[i] < 1.f, "CvT: stage_drop_path[", i,
          "] must be in [0, 1), got ", cfg.stage_drop_path[i]);
    check(cfg.stage_stride_kv[i] >= 1, "CvT: stage_stride_kv[", i, "] must be >= 1, got ", cfg.stage_stride_kv[i]);
    side = side + 2 * p < k ? 0 : (side + 2 * p - k) / s + 1;
    check(side >= 1, "CvT: img_size ", img_size, " is too small: stage ", i, "'s embedding (stage_embed_kernel ",
          k, ", stage_embed_stride ", s, ", stage_embed_padding ", p, ") leaves no token");
    check(side >= min_side, "CvT: img_size ", img_size, " gives stage ", i, " a ", side, "x", side,
          " token grid, smaller than the ", cfg.attention.variant, " attention's options allow (side >= ", min_side,
          ": ", attention_options_to_json(cfg.attention).dump(), ")");
    sides.push_back(side);
  }
  return sides;
}

CvT::CvT(const ModelConfig& cfg) : Model(cfg, "CvT") {
  cvt_grid_sizes(cfg, cfg.img_size);  // validates every CvT field
  int64_t in = cfg.in_chans;
  for (size_t i = 0; i < cfg.stage_dims.size(); ++i) {
    stages.push_back(register_module("stage" + std::to_string(i), std::make_shared<CvtStage>(cfg, i, in)));
    in = cfg.stage_dims[i];
  }
  norm = register_module("norm", std::make_shared<LayerNorm>(in, cfg.norm_eps));
  if (cfg.num_classes > 0) {
    // As the official code: trunc_normal(.02) on the weight only; the bias keeps
    // PyTorch's default U(±1/√C) (the stages' zero-bias init does not reach the head).
    head = register_module("head", std::make_shared<Linear>(in, cfg.num_classes));
    trunc_normal_(head->weight, .02f);
  }
}

// Values per channel the smallest BatchNorm of a forward sees for an H x W input: the k, v conv
// projections of the stages (stride_kv), B · ceil(H_i / s) · ceil(W_i / s).
int64_t CvT::smallest_batchnorm_values(int64_t B, int64_t H, int64_t W) const {
  int64_t smallest = INT64_MAX;
  for (size_t i = 0; i < stages.size(); ++i) {
    H = stages[i]->patch_embed->out_size(H), W = stages[i]->patch_embed->out_size(W);
    const int64_t s = cvt_kv_stride(cfg_.attention.variant, cfg_.stage_stride_kv[i]);
    smallest = std::min(smallest, B * ((H + s - 1) / s) * ((W + s - 1) / s));
  }
  return smallest;
}

// Training: BatchNorm needs more than one value per channel (batch statistics), so a batch of
// one tiny image fails; say so at the entry, with the smallest square image that trains.
void CvT::check_trainable_size(const Tensor& images) const {
  const int64_t B = images.size(0), H = images.size(2), W = images.size(3);
  if (!is_training() || smallest_batchnorm_values(B, H, W) > 1) return;
  int64_t min_side = 1;
  while (min_side < (int64_t(1) << 16) && smallest_batchnorm_values(B, min_side, min_side) <= 1) ++min_side;
  fail("CvT: images ", images.shape(), " are smaller than the model allows for training with batch ", B,
       ": the last stage's BatchNorm (conv_proj_k/v, stride_kv) would see one value per channel; the smallest is ",
       min_side, "x", min_side, " (or a batch of at least 2)");
}

Tensor CvT::forward_features(const Tensor& images) {
  check(images.dim() == 4 && images.size(1) == cfg_.in_chans, "CvT: images ", images.shape(),
        " must be (B, ", cfg_.in_chans, ", H, W)");
  for (int d : {2, 3}) {
    int64_t side = images.size(d);
    for (size_t i = 0; i < stages.size(); ++i) {
      side = stages[i]->patch_embed->out_size(side);
      check(side >= attention_min_grid_side(cfg_.attention), "CvT: images ",
            images.shape(), " are too small: stage ", i, " gets ", side, " tokens per side (fewer than the model allows)");
    }
  }
  check_trainable_size(images);
  Tensor x = images, cls;
  for (auto& stage : stages) x = stage->forward(x, &cls);
  return reshape(norm->forward(cls), {images.size(0), cls.size(2)});  // (B, C)
}

std::vector<Tensor> CvT::heads(const Tensor& features) {
  if (!head) return {features};
  return {head->forward(features)};
}

std::vector<Attention*> CvT::attention_layers() {
  std::vector<Attention*> out;
  for (auto& stage : stages)
    for (auto& blk : stage->blocks) out.push_back(blk->attn->core.get());
  return out;
}

// ---- configs ----------------------------------------------------------------------

ModelConfig cvt13_config() {
  ModelConfig c;
  c.arch = "cvt";
  c.name = "cvt_13";
  c.img_size = 224;
  c.num_classes = 1000;
  c.stage_dims = {64, 192, 384};
  c.stage_depths = {1, 2, 10};
  c.stage_heads = {1, 3, 6};
  c.stage_embed_kernel = {7, 3, 3};
  c.stage_embed_stride = {4, 2, 2};
  c.stage_embed_padding = {2, 1, 1};
  c.stage_drop_path = {0.f, 0.f, 0.1f};
  c.stage_stride_kv = {2, 2, 2};
  c.mlp_ratio = 4.f;
  c.act = "quick_gelu";
  c.qkv_bias = true;
  c.norm_eps = 1e-5f;
  c.attention.variant = "softmax";
  return c;
}

ModelConfig cvt_small_config(std::vector<int64_t> dims, std::vector<int64_t> depths, std::vector<int64_t> heads,
                             int64_t num_classes) {
  ModelConfig c = cvt13_config();
  c.name = "";
  c.img_size = 32;
  c.num_classes = num_classes;
  c.stage_dims = std::move(dims);
  c.stage_depths = std::move(depths);
  c.stage_heads = std::move(heads);
  c.stage_embed_kernel = {3, 3, 3};
  c.stage_embed_stride = {2, 2, 2};
  c.stage_embed_padding = {1, 1, 1};
  return c;
}

}  // namespace sima
