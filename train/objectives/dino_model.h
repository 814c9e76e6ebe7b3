// DINO's networks: a backbone (any registry model; its feature is forward_features, what
// the classifier head would see) and a DINOHead, as facebookresearch/dino's
// utils.MultiCropWrapper runs them:
//
//   groups[g]  (n_g·B, C, H_g, W_g)  the crops of one resolution, view-major
//   features   cat over g of backbone.forward_features(groups[g])     (Σ n_g·B, D)
//   output     head(features)                                          (Σ n_g·B, K)
//
// One backbone forward per resolution (2 global crops together, the local crops together),
// one head forward on everything. Parameter names: "backbone.<timm name>", "head.<DINO
// name>", as the wrapper's state dict. The backbone's classifier ("backbone.head.*",
// "backbone.head_dist.*") is unused: DINO replaces it by an identity.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "models/model.h"
#include "nn/dino_head.h"

namespace sima {

class MultiCropWrapper : public Module {
 public:
  MultiCropWrapper(std::shared_ptr<Model> backbone, std::shared_ptr<DINOHead> head);
  using Module::forward;
  Tensor forward(const std::vector<Tensor>& groups);
  // The parameters the optimizer trains: every one requiring grad except the backbone's
  // classifier (named as in named_parameters()).
  std::vector<std::pair<std::string, Tensor>> trainable_parameters() const;
  std::shared_ptr<Model> backbone;
  std::shared_ptr<DINOHead> head;
};

// True for "backbone.head.*" / "backbone.head_dist.*": the classifier DINO does not use.
bool is_backbone_classifier(const std::string& name);

// The teacher's backbone config: the student's without dropout and stochastic depth
// (DINO builds the teacher without drop_path_rate; its other rates default to 0).
ModelConfig dino_teacher_config(const ModelConfig& student);

// The backbone's feature width D: forward_features of one image of `size`² in eval mode
// without a graph (nothing is updated). Throws the model's error when it cannot take that size.
int64_t backbone_feature_dim(Model& backbone, int64_t size);

}  // namespace sima
