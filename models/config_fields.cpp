// The model schema: every key of a model JSON object (ModelConfig's fields), with its type,
// valid values, help and the architectures that read it (core/json_schema.h). A key its
// architecture does not read is an error (models/registry.cpp), and the `model.*` rows of
// `sima-train --config-reference` are generated from this table.
#include <algorithm>

#include "models/registry.h"

namespace sima {

namespace {

using Field = SchemaField<ModelConfig>;
using Archs = std::vector<std::string>;

const Archs kAll = {};  // every architecture
const Archs kTrunk = {"deit", "xcit"};
const Archs kDeit = {"deit"};
const Archs kXcit = {"xcit"};
const Archs kCvt = {"cvt"};

template <class T>
Field key(const char* name, T ModelConfig::*member, Rule<T> rule, const std::string& help, const Archs& archs) {
  return schema_member<ModelConfig, T>(name, member, std::move(rule), help, archs);
}

// The registered names without their _sima twins.
std::vector<std::string> registered_base_names() {
  std::vector<std::string> out;
  for (const auto& n : model_names())
    if (n.size() < 5 || n.compare(n.size() - 5, 5, "_sima") != 0) out.push_back(n);
  return out;
}

// A rate in [0, 1).
Rule<float> rate() { return within<float>(0.f, 1.f, true); }

std::vector<Field> make_fields() {
  const auto pos = positive<int64_t>();
  const auto pos_list = each(positive<int64_t>());
  return {
      key("arch", &ModelConfig::arch, one_of({"deit", "xcit", "cvt"}),
          "the architecture (required unless name gives it); decides which keys apply", kAll),
      key("name", &ModelConfig::name, any_value<std::string>(),
          "a registered model to start from (each also as <name>_sima, with SimA attention): " +
              join_words(registered_base_names()) + "; with arch given, any label",
          kAll),
      key("img_size", &ModelConfig::img_size, pos, "input height = width in pixels", kAll),
      key("in_chans", &ModelConfig::in_chans, pos, "input channels", kAll),
      key("num_classes", &ModelConfig::num_classes, pos, "classes of the head (the dataset's)", kAll),
      key("mean", &ModelConfig::mean, any_value<std::vector<float>>(),
          "input normalisation mean, one per channel (in_chans values)", kAll),
      key("std", &ModelConfig::std, each(positive<float>()), "input normalisation std, one per channel", kAll),
      key("patch_size", &ModelConfig::patch_size, pos, "patch side in pixels (divides img_size)", kTrunk),
      key("embed_dim", &ModelConfig::embed_dim, pos, "token width D", kTrunk),
      key("depth", &ModelConfig::depth, pos, "transformer blocks", kTrunk),
      key("num_heads", &ModelConfig::num_heads, pos, "attention heads (divides embed_dim)", kTrunk),
      key("mlp_ratio", &ModelConfig::mlp_ratio, positive<float>(), "MLP hidden width / token width", kAll),
      key("act", &ModelConfig::act, one_of({"gelu", "relu", "quick_gelu"}), "MLP activation", kAll),
      key("qkv_bias", &ModelConfig::qkv_bias, any_value<bool>(), "bias in the q, k, v projection", kAll),
      key("drop_rate", &ModelConfig::drop_rate, rate(), "dropout after the MLP layers and on the projections", kAll),
      key("attn_drop_rate", &ModelConfig::attn_drop_rate, rate(), "dropout on the attention weights", kAll),
      key("drop_path_rate", &ModelConfig::drop_path_rate, rate(),
          "stochastic depth (DeiT: linspace(0, rate, depth); XCiT: constant)", kTrunk),
      key("norm_eps", &ModelConfig::norm_eps, positive<float>(), "LayerNorm eps (1e-6 DeiT/XCiT, 1e-5 CvT)", kAll),
      key("distilled", &ModelConfig::distilled, any_value<bool>(), "distillation token and head (DeiT-B distilled)",
          kDeit),
      key("patch_embed", &ModelConfig::patch_embed, one_of({"conv", "conv_stem"}),
          "conv (Conv2d, kernel = stride = patch) or conv_stem (XCiT's ConvPatchEmbed)", kDeit),
      key("layer_scale_init", &ModelConfig::layer_scale_init, any_value<float>(), "LayerScale init (0: none)", kDeit),
      key("eta", &ModelConfig::eta, positive<float>(), "LayerScale init of every residual branch", kXcit),
      key("tokens_norm", &ModelConfig::tokens_norm, any_value<bool>(),
          "class-attention blocks: norm2 on all tokens (true) or the class token only", kXcit),
      key("cls_attn_layers", &ModelConfig::cls_attn_layers, at_least<int64_t>(1), "class-attention blocks", kXcit),
      key("cls_attn_variant", &ModelConfig::cls_attn_variant, one_of({"", "softmax", "sima"}),
          "class-attention form; \"\": sima with attention.type sima, else softmax", kXcit),
      key("stage_dims", &ModelConfig::stage_dims, pos_list, "token width per stage", kCvt),
      key("stage_depths", &ModelConfig::stage_depths, pos_list, "blocks per stage", kCvt),
      key("stage_heads", &ModelConfig::stage_heads, pos_list, "heads per stage (divide stage_dims)", kCvt),
      key("stage_embed_kernel", &ModelConfig::stage_embed_kernel, pos_list, "conv embedding kernel per stage", kCvt),
      key("stage_embed_stride", &ModelConfig::stage_embed_stride, pos_list, "conv embedding stride per stage", kCvt),
      key("stage_embed_padding", &ModelConfig::stage_embed_padding, each(at_least<int64_t>(0)),
          "conv embedding padding per stage", kCvt),
      key("stage_drop_path", &ModelConfig::stage_drop_path, each(rate()),
          "max stochastic-depth rate per stage (linear within)", kCvt),
      key("stage_stride_kv", &ModelConfig::stage_stride_kv, pos_list,
          "stride of the k, v depthwise conv projections per stage (the official STRIDE_KV)", kCvt),
  };
}

}  // namespace

const std::vector<SchemaField<ModelConfig>>& model_config_fields() {
  static const std::vector<Field> fields = make_fields();
  return fields;
}

std::vector<std::string> model_arch_names() { return {"deit", "xcit", "cvt"}; }

}  // namespace sima
