// Image: one decoded picture as float CHW values in [0, 1] (after ToTensor, before
// Normalize). Datasets produce it, transforms map it to another, the loader stacks
// images into a (B, C, H, W) batch tensor.
#pragma once
#include <cstdint>
#include <vector>

namespace sima {

struct Image {
  int64_t channels = 0, height = 0, width = 0;
  std::vector<float> data;  // channels · height · width, row-major CHW

  Image() = default;
  Image(int64_t c, int64_t h, int64_t w, float fill = 0.f) : channels(c), height(h), width(w), data(c * h * w, fill) {}
  float& at(int64_t c, int64_t y, int64_t x) { return data[(c * height + y) * width + x]; }
  float at(int64_t c, int64_t y, int64_t x) const { return data[(c * height + y) * width + x]; }
  int64_t numel() const { return channels * height * width; }
  bool empty() const { return data.empty(); }
};

}  // namespace sima
