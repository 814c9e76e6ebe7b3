// The Dataset interface: users add their own by implementing size() and get().
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/rng.h"
#include "data/image.h"

namespace sima {

struct Sample {
  Image image;
  int64_t label = -1;  // class index; -1 when unlabelled
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // The sample at `index` (0 <= index < size()). `rng` is the sample's own generator, seeded
  // by the loader from (seed, epoch, index): random augmentations draw from it only, so the
  // output does not depend on which worker thread ran it. Must be safe to call concurrently.
  virtual Sample get(int64_t index, Generator& rng) const = 0;
  virtual int64_t num_classes() const { return 0; }
  // Human-readable description for logs and errors ("IDX /usr/share/...: 60000 images").
  virtual std::string describe() const { return "dataset"; }
};

// A transform maps an image to another, drawing randomness from the sample's generator.
using Transform = std::function<Image(Image, Generator&)>;

// dataset[i] with `transform` applied to its image (labels unchanged).
class TransformedDataset : public Dataset {
 public:
  TransformedDataset(std::shared_ptr<const Dataset> base, Transform t) : base_(std::move(base)), t_(std::move(t)) {}
  int64_t size() const override { return base_->size(); }
  Sample get(int64_t index, Generator& rng) const override {
    Sample s = base_->get(index, rng);
    s.image = t_(std::move(s.image), rng);
    return s;
  }
  int64_t num_classes() const override { return base_->num_classes(); }
  std::string describe() const override { return base_->describe() + " (transformed)"; }

 private:
  std::shared_ptr<const Dataset> base_;
  Transform t_;
};

}  // namespace sima
