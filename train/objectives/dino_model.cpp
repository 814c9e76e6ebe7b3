// MultiCropWrapper and the teacher config (see dino_model.h).
#include "train/objectives/dino_model.h"

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops/shape_ops.h"

namespace sima {

MultiCropWrapper::MultiCropWrapper(std::shared_ptr<Model> b, std::shared_ptr<DINOHead> h)
    : Module("MultiCropWrapper"), backbone(std::move(b)), head(std::move(h)) {
  check(backbone != nullptr && head != nullptr, "MultiCropWrapper: backbone and head must be given");
  register_module("backbone", backbone);
  register_module("head", head);
}

Tensor MultiCropWrapper::forward(const std::vector<Tensor>& groups) {
  check(!groups.empty(), "MultiCropWrapper: no crops");
  std::vector<Tensor> features;
  for (const Tensor& g : groups) features.push_back(backbone->forward_features(g));  // (n_g·B, D)
  return head->forward(features.size() == 1 ? features[0] : cat(features, 0));
}

bool is_backbone_classifier(const std::string& name) {
  return name.rfind("backbone.head.", 0) == 0 || name.rfind("backbone.head_dist.", 0) == 0;
}

std::vector<std::pair<std::string, Tensor>> MultiCropWrapper::trainable_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [name, p] : named_parameters())
    if (p.requires_grad() && !is_backbone_classifier(name)) out.emplace_back(name, p);
  return out;
}

ModelConfig dino_teacher_config(const ModelConfig& student) {
  ModelConfig t = student;
  t.drop_rate = 0.f;
  t.attn_drop_rate = 0.f;
  t.drop_path_rate = 0.f;
  for (float& r : t.stage_drop_path) r = 0.f;
  return t;
}

int64_t backbone_feature_dim(Model& backbone, int64_t size) {
  const bool was_training = backbone.is_training();
  backbone.eval();  // BatchNorm uses (and keeps) its running statistics; no dropout draws
  NoGradGuard no_grad;
  Tensor f;
  try {
    f = backbone.forward_features(zeros({1, backbone.config().in_chans, size, size}));
  } catch (...) {
    backbone.train(was_training);
    throw;
  }
  backbone.train(was_training);
  check(f.dim() == 2 && f.size(0) == 1, "the backbone's features have shape ", f.shape(), ", expected (1, D)");
  return f.size(1);
}

}  // namespace sima
