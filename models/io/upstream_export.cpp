// Our models -> upstream state dicts and .pth files; the layouts are described in upstream_export.h.
#include "models/io/upstream_export.h"

#include <cstring>

#include "core/error.h"
#include "nn/attention/variants.h"

namespace sima {

namespace {

constexpr const char* kValid =
    "valid: --to official for an xcit with sima attention (UCDvision/sima), --to timm for a deit with softmax "
    "attention or an xcit with xca attention, --to cvt for a cvt with softmax attention";

bool starts(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

// The attention each (layout, arch) pair has upstream; "" when the layout has no such model.
std::string upstream_attention(const std::string& to, const std::string& arch) {
  if (to == "official") return arch == "xcit" ? "sima" : "";
  if (to == "timm") return arch == "deit" ? "softmax" : arch == "xcit" ? "xca" : "";
  if (to == "cvt") return arch == "cvt" ? "softmax" : "";
  return "";
}

// The config fields outside the attention that the upstream model code fixes.
void check_fixed_fields(const ModelConfig& c, const std::string& to, std::string& out) {
  auto need = [&](bool ok, const std::string& what) {
    if (!ok) out += "\n  " + what;
  };
  const bool cvt = c.arch == "cvt";
  need(c.act == (cvt ? "quick_gelu" : "gelu"), "act " + c.act + ": the upstream MLP uses " + (cvt ? "QuickGELU" : "GELU"));
  need(c.norm_eps == (cvt ? 1e-5f : 1e-6f), "norm_eps " + std::to_string(c.norm_eps) + ": the upstream LayerNorms use " +
                                                (cvt ? "1e-5" : "1e-6"));
  if (c.arch == "deit") need(c.patch_embed == "conv", "patch_embed " + c.patch_embed + ": timm's DeiT embeds with one Conv2d (conv)");
  if (c.arch != "xcit") return;
  need(c.patch_size == 8 || c.patch_size == 16, "patch_size " + std::to_string(c.patch_size) +
                                                    ": the upstream ConvPatchEmbed has patch 8 or 16 only");
  const std::string cls =  // "": the form the variant's row pairs with it, as XCiT builds it
      c.cls_attn_variant.empty() ? attention_variant(c.attention.variant, "model").traits.class_attention
                                 : c.cls_attn_variant;
  const std::string want = to == "official" ? "sima" : "softmax";
  need(cls == want, "cls_attn_variant " + cls + ": the " + to + " class attention is the " + want + " form");
  if (to != "official") return;
  need(c.in_chans == 3, "in_chans " + std::to_string(c.in_chans) + ": the official ConvPatchEmbed takes 3 channels");
  const std::string norm = attention_option<std::string>(c.attention, "norm");  // its variant is sima here
  const float eps = attention_option<float>(c.attention, "eps");
  need(norm == "l1", "attention.norm " + norm + ": the official SimA l1-normalises q and k");
  need(eps == 1e-12f, "attention.eps " + std::to_string(eps) + ": the official SimA normalises with F.normalize's eps 1e-12");
}

// cls_attn_blocks.i.attn.qkv.{weight, bias} (3C, ...) -> attn.{q, k, v}.* (C, ...) each, in that order.
void split_qkv(const std::string& name, const Tensor& t, std::vector<PthTensor>& out) {
  const size_t at = name.rfind(".qkv.");
  std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
  shape[0] /= 3;
  const int64_t n = t.numel() / 3;
  for (int i = 0; i < 3; ++i) {
    Tensor part = empty(Shape(shape));
    std::memcpy(part.data(), t.data() + i * n, sizeof(float) * size_t(n));
    out.push_back({name.substr(0, at) + "." + "qkv"[i] + name.substr(at + 4), part, StorageDtype::Float32});
  }
}

}  // namespace

std::string export_problems(const ModelConfig& c, const ExportOptions& opt) {
  if (opt.to != "official" && opt.to != "timm" && opt.to != "cvt")
    return "layout '" + opt.to + "' is unknown (allowed: official, timm, cvt)";
  const std::string attn = upstream_attention(opt.to, c.arch);
  const std::string what = "a " + c.arch + " with " + c.attention.variant + " attention";
  if (attn.empty()) return what + " cannot be written in the " + opt.to + " layout, which has no " + c.arch + " model; " + kValid;
  if (c.attention.variant != attn)
    return what + " cannot be written in the " + opt.to + " layout: its " + c.arch + " has " + attn +
           " attention only; " + kValid;
  std::string out;
  check_fixed_fields(c, opt.to, out);
  if (opt.legacy_qkv && !(opt.to == "timm" && c.arch == "xcit")) out += "\n  legacy_qkv applies to timm's XCiT only";
  return out.empty() ? "" : what + " cannot be written in the " + opt.to + " layout:" + out;
}

std::vector<PthTensor> export_upstream_state_dict(const Model& model, const ExportOptions& opt, const std::string& label) {
  const std::string problems = export_problems(model.config(), opt);
  check(problems.empty(), label, ": ", problems);
  const bool split = opt.to == "timm" && model.config().arch == "xcit" && !opt.legacy_qkv;
  std::vector<PthTensor> out;
  std::vector<std::pair<std::string, Tensor>> named = model.named_parameters();
  for (auto& b : model.named_buffers()) named.push_back(b);
  for (const auto& [name, t] : named) {
    if (split && starts(name, "cls_attn_blocks.") && name.find(".attn.qkv.") != std::string::npos) {
      split_qkv(name, t, out);
      continue;
    }
    std::string n = name;
    if (opt.to == "official" && starts(n, "pos_embed.")) n = "pos_embeder." + n.substr(std::strlen("pos_embed."));
    const bool count = n.ends_with(".num_batches_tracked");
    out.push_back({n, t, count ? StorageDtype::Int64 : StorageDtype::Float32});
  }
  return out;
}

void save_upstream_checkpoint(const std::string& path, const Model& model, const ExportOptions& opt,
                              const std::string& label) {
  save_pth(path, export_upstream_state_dict(model, opt, label), opt.to == "official" ? "model" : "");
}

}  // namespace sima
