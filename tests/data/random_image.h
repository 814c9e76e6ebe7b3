// A float image of the given size with values uniform in [0, 1) from a seeded generator: the
// input of the transform tests (data/ and train/ alike).
#pragma once
#include <cstdint>

#include "core/rng.h"
#include "data/image.h"

namespace sima::testing {

inline Image random_image(int64_t c, int64_t h, int64_t w, uint64_t seed) {
  Generator g(seed);
  Image img(c, h, w);
  g.fill_uniform(img.data.data(), img.numel());
  return img;
}

}  // namespace sima::testing
