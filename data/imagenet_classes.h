// The ImageNet-1k class names (index -> name), for models converted from upstream ImageNet
// checkpoints (sima-convert writes them into the checkpoint's "classes", so sima-eval --image
// prints names). Compiled in (data/imagenet_classes.cpp): no file is read at run time.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace sima {

constexpr int64_t kImagenetNumClasses = 1000;
// torchvision's _IMAGENET_CATEGORIES, in class-index order ("tench", "goldfish", ...).
const std::vector<std::string>& imagenet_class_names();

}  // namespace sima
