// Upstream checkpoints (PyTorch state dicts) -> sima.cpp models; the reverse is models/io/upstream_export.h.
//
//   layout     from                                          our model
//   official   UCDvision/sima sima.py (XCiT-SimA), usually   XCiT, attention sima
//              saved as {'model': state_dict}
//   timm       timm vision_transformer.py / deit.py (DeiT,   DeiT (softmax)
//              distilled too: dist_token, head_dist)
//              timm xcit.py                                  XCiT (xca)
//   cvt        microsoft/CvT lib/models/cls_cvt.py           CvT (softmax)
//
// Name maps (everything not listed is the same name on both sides; our models use the timm
// and the official CvT names, models/deit.h, xcit.h, cvt.h):
//   every layout      a "module." prefix on every key (DistributedDataParallel) is dropped
//   official          pos_embeder.*                      -> pos_embed.*
//   timm XCiT         cls_attn_blocks.i.attn.{q,k,v}.*   -> cls_attn_blocks.i.attn.qkv.* (concatenated
//                     in that order along dim 0; recent timm splits what older timm and the official
//                     code keep as one qkv Linear)
// After the map the tensors must match the model exactly: every missing, unexpected or
// mis-shaped name is listed in one sima::Error.
//
// The model config is inferred from the names and shapes (depth, widths, patch size, classes,
// MLP ratio, qkv bias, distillation, DeiT's image size from pos_embed, XCiT's heads from
// attn.temperature, CvT's stages) and, where shapes say nothing, from the upstream defaults:
// heads D/64 for DeiT and every CvT stage, XCiT-SimA heads by width as the official registry
// (128, 192: 4; 384, 512: 8; 768: 16), XCiT tokens_norm false only at width 128 (the nano
// models), CvT embedding stride 4 / padding 2 for a 7x7 kernel and 2 / 1 for a 3x3 one, image
// size 224 for XCiT and CvT, ImageNet mean and std. `model_spec` overrides: a registry name
// (used as is) or a JSON object / .json file of config keys applied on top of the inferred
// config (models/registry.h), e.g. {"num_heads": 2, "tokens_norm": false}.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "models/model.h"
#include "models/io/safetensors.h"

namespace sima {

// "official", "timm" or "cvt" from the key names; "" when they fit none.
std::string detect_layout(const NamedTensors& sd);

// The names of our model's tensors (the map above); `from` as detect_layout's result.
NamedTensors map_upstream_names(const NamedTensors& sd, const std::string& from, const std::string& label);

// The config inferred from mapped tensors (see above); `from` as detect_layout's result.
struct InferredConfig {
  ModelConfig config;
  // Config keys the shapes and defaults cannot give (key, why): --model must set them.
  std::vector<std::pair<std::string, std::string>> unknown;
};
InferredConfig infer_upstream_config(const NamedTensors& mapped, const std::string& from, const std::string& label);

struct UpstreamModel {
  std::shared_ptr<Model> model;
  std::string layout;  // official | timm | cvt
  std::string where;   // where in the saved object the state dict was, e.g. "['model']"
  double crop_pct = 0.875;  // the eval crop the upstream code evaluates this model at (upstream_crop_pct)
  std::string note;    // a hint for the user ("" when none): a timm DeiT's attention is a guess
};

// The eval crop (resize the shorter side to img_size / crop_pct, centre crop) each upstream
// evaluates its models at, written into the converted checkpoint's metadata:
//   timm DeiT      0.9, 1.0 at 384 px (timm deit.py pretrained_cfg: _cfg crop_pct .9,
//                  deit_base_patch16_384 crop_pct=1.0)
//   timm XCiT      1.0 (timm xcit.py _cfg crop_pct 1.0)
//   official       0.875 (UCDvision/sima datasets.py: Resize(256 / 224 · input_size), CenterCrop)
//   cvt            0.875, 1.0 at 384 px (microsoft/CvT lib/dataset/transformas/build.py:
//                  Resize(int(IMAGE_SIZE / 0.875)) + CenterCrop when TEST.CENTER_CROP, the
//                  default; the 384x384 configs set CENTER_CROP: False and resize to 384 x 384)
double upstream_crop_pct(const std::string& layout, const ModelConfig& config);

// Reads a .pth file and builds our model from it. `from`: "" (detect) or a layout name;
// `model_spec`: "" or as above. Errors name the file, the layout and the keys at fault.
UpstreamModel load_upstream_checkpoint(const std::string& path, const std::string& from = "",
                                       const std::string& model_spec = "");
// The same for a state dict already read (`label` names it in errors).
UpstreamModel build_upstream_model(const NamedTensors& sd, const std::string& from, const std::string& model_spec,
                                   const std::string& label);

}  // namespace sima
