// sima.cpp models -> upstream PyTorch checkpoints, the inverse of models/io/upstream.h:
// a .pth the upstream model code loads with load_state_dict(strict=True) and runs to our logits.
//
//   --to       our model (config)                               written as
//   official   XCiT with sima attention (l1), SimA class         {'model': state_dict} (the official
//              attention, patch 8 | 16, 3 input channels         UCDvision/sima releases),
//              (UCDvision/sima sima.py)                          pos_embed.* -> pos_embeder.*
//   timm       DeiT with softmax attention, conv patch embed,    the state dict (deit.py's distilled
//              distilled or not (timm vision_transformer.py,     model: dist_token, head_dist)
//              deit.py)
//              XCiT with xca attention, softmax class            cls_attn_blocks.i.attn.qkv.* split
//              attention, patch 8 | 16 (timm xcit.py)            into attn.{q,k,v}.* (recent timm), or
//                                                                kept as one qkv (legacy_qkv: timm
//                                                                before the split)
//   cvt        CvT with softmax attention (microsoft/CvT         the state dict
//              lib/models/cls_cvt.py)
//
// Every other name is the same on both sides (our models use the upstream names). BatchNorm's
// num_batches_tracked is written as int64, as PyTorch keeps it. Anything of the config that
// changes the math and that the upstream code has no form for (an attention variant, the MLP
// activation, the LayerNorm eps, XCiT's patch size or class-attention form, ...) is refused in
// one sima::Error naming the model, the attention, every fault and the valid combinations:
// a file that loads strictly but computes something else would be a silent wrong result.
#pragma once
#include <string>
#include <vector>

#include "models/model.h"
#include "models/io/pth_writer.h"

namespace sima {

struct ExportOptions {
  std::string to;           // official | timm | cvt
  bool legacy_qkv = false;  // timm XCiT: the class attention as one qkv Linear (timm before the q/k/v split)
};

// The faults that keep `cfg` from being written in layout opt.to ("" when there are none).
std::string export_problems(const ModelConfig& cfg, const ExportOptions& opt);

// The model's tensors under the upstream names (checks export_problems; `label` names the model
// in errors, e.g. the checkpoint it came from).
std::vector<PthTensor> export_upstream_state_dict(const Model& model, const ExportOptions& opt, const std::string& label);

// The .pth at `path` (atomic write, models/io/pth_writer.h), wrapped as the layout's releases are.
void save_upstream_checkpoint(const std::string& path, const Model& model, const ExportOptions& opt,
                              const std::string& label);

}  // namespace sima
