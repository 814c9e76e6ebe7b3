// The ImageNet-1k class names (index -> name), for models converted from upstream ImageNet
// checkpoints (sima-convert writes them into the checkpoint's "classes", so sima-eval --image
// prints names). Compiled in (data/imagenet_classes.cpp): no file is read at run time.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace sima {

constexpr int64_t kImagenetNumClasses = 1000;
// torchvision's _IMAGENET_CATEGORIES, in class-index order ("tench", "goldfish", ...).
const std::vector<std::string>& imagenet_class_names();
// Checkpoint metadata for a model with num_classes outputs: {"classes": JSON list of the
// ImageNet-1k names} when num_classes is 1000 (an upstream ImageNet-1k head), else empty.
std::map<std::string, std::string> imagenet_classes_metadata(int64_t num_classes);

}  // namespace sima
