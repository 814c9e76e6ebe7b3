// What the loaders hand out, and the collate functions that build it from samples.
//
//   DataLoader       over a Dataset           -> Batch          { images (B, C, H, W), labels, indices }
//   MultiViewLoader  over a MultiViewDataset  -> MultiViewBatch { views[v] (B, C, H_v, W_v), ... }
//
// Multi-view samples are for self-supervised recipes such as DINO's multi-crop: each
// sample is several augmented views of one picture (2 global crops, 8 smaller local
// crops). The collate stacks view v of every sample into views[v], as PyTorch's default
// collate does for a list of crops; the trainer feeds views of one size together.
//
// A collate runs in a loader worker thread (it must be safe to call concurrently). The
// loader fills out.indices and out.labels before calling it; the collate fills the
// images and may change the labels. `rng` is the batch's own generator, seeded from
// (seed, epoch, batch number), for batch-level randomness (mixup, cutmix).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"
#include "data/dataset.h"

namespace sima {

struct Batch {
  Tensor images;                 // (B, C, H, W) float32
  std::vector<int64_t> labels;   // B class indices, -1 when unlabelled
  std::vector<int64_t> indices;  // B dataset indices, in batch order (for debugging/tests)
};

using Collate = std::function<void(std::vector<Sample>& samples, Batch& out, Generator& rng)>;

// The default collate: stacks the samples' images into out.images. All images must have
// the same shape; otherwise a sima::Error names both dataset indices and both shapes.
void collate_images(std::vector<Sample>& samples, Batch& out, Generator& rng);

// ---- multi-view ------------------------------------------------------------------

struct MultiViewSample {
  std::vector<Image> views;  // every sample of a dataset yields the same number of views
  int64_t label = -1;
};

// Like Dataset, but each sample is several images. get_views must be safe to call
// concurrently and draw its randomness from `rng` only (see Dataset::get).
class MultiViewDataset {
 public:
  virtual ~MultiViewDataset() = default;
  virtual int64_t size() const = 0;
  virtual MultiViewSample get_views(int64_t index, Generator& rng) const = 0;
  virtual int64_t num_classes() const { return 0; }
  virtual std::string describe() const { return "multi-view dataset"; }
};

// Maps one image to several views (e.g. DINO multi-crop), drawing from the sample's generator.
using MultiViewTransform = std::function<std::vector<Image>(Image, Generator&)>;

// dataset[i]'s image through a multi-view transform (label unchanged).
class MultiViewTransformedDataset : public MultiViewDataset {
 public:
  MultiViewTransformedDataset(std::shared_ptr<const Dataset> base, MultiViewTransform t);
  int64_t size() const override { return base_->size(); }
  MultiViewSample get_views(int64_t index, Generator& rng) const override;
  int64_t num_classes() const override { return base_->num_classes(); }
  std::string describe() const override { return base_->describe() + " (multi-view)"; }

 private:
  std::shared_ptr<const Dataset> base_;
  MultiViewTransform t_;
};

struct MultiViewBatch {
  std::vector<Tensor> views;     // views[v]: (B, C, H_v, W_v), view v of every sample
  std::vector<int64_t> labels;   // B
  std::vector<int64_t> indices;  // B dataset indices
};

using MultiViewCollate =
    std::function<void(std::vector<MultiViewSample>& samples, MultiViewBatch& out, Generator& rng)>;

// The default multi-view collate: views[v] = stack of view v. Every sample must have the
// same number of views and view v the same shape in every sample (errors name the indices).
void collate_views(std::vector<MultiViewSample>& samples, MultiViewBatch& out, Generator& rng);

// Views grouped by resolution: consecutive views of equal shape become one tensor,
// view-major (all samples' view v, then view v+1, ...). For DINO's 2 global + M local
// crops: views = {(2·B, C, g, g), (M·B, C, l, l)}, one forward per group.
void collate_views_by_resolution(std::vector<MultiViewSample>& samples, MultiViewBatch& out, Generator& rng);

// ---- helper ----------------------------------------------------------------------

// Stacks images[i] (C, H, W) into one (B, C, H, W) tensor. indices[i] is the dataset index
// of images[i] and `what` prefixes error messages ("batch view 3").
Tensor stack_images(const std::vector<const Image*>& images, const std::vector<int64_t>& indices,
                    const std::string& what);

}  // namespace sima
