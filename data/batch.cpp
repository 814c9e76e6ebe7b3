#include "data/batch.h"

#include "core/ops/shape_ops.h"

#include <cstring>

#include "core/error.h"

namespace sima {
namespace {

std::string shape_of(const Image& im) { return Shape{im.channels, im.height, im.width}.str(); }

// An image a tensor can be built from: positive dims and exactly C·H·W values.
void check_image(const Image& im, int64_t index, const std::string& what) {
  bool ok = im.channels > 0 && im.height > 0 && im.width > 0 &&
            static_cast<int64_t>(im.data.size()) == im.numel();
  check(ok, what, ": the image of dataset index ", index, " is invalid: shape ", shape_of(im),
        " with ", im.data.size(), " values");
}

}  // namespace

Tensor stack_images(const std::vector<const Image*>& images, const std::vector<int64_t>& indices,
                    const std::string& what) {
  check(!images.empty(), what, ": no images to stack");
  check(images.size() == indices.size(), what, ": ", images.size(), " images but ", indices.size(),
        " indices");
  const Image& first = *images[0];
  check_image(first, indices[0], what);
  for (size_t i = 1; i < images.size(); ++i) {
    const Image& im = *images[i];
    check_image(im, indices[i], what);
    check(im.channels == first.channels && im.height == first.height && im.width == first.width,
          what, ": the image of dataset index ", indices[i], " has shape ", shape_of(im),
          " but the image of dataset index ", indices[0], " has ", shape_of(first),
          "; every image of a batch must have the same shape (resize or crop in a transform)");
  }
  // out[b] = images[b]: one contiguous copy per image, (C, H, W) row-major each.
  const int64_t B = static_cast<int64_t>(images.size()), per = first.numel();
  Tensor out = empty(Shape{B, first.channels, first.height, first.width});
  for (int64_t b = 0; b < B; ++b)
    std::memcpy(out.data() + b * per, images[b]->data.data(), sizeof(float) * per);
  return out;
}

void collate_images(std::vector<Sample>& samples, Batch& out, Generator&) {
  std::vector<const Image*> images;
  images.reserve(samples.size());
  for (const Sample& s : samples) images.push_back(&s.image);
  out.images = stack_images(images, out.indices, "collate");
}

MultiViewTransformedDataset::MultiViewTransformedDataset(std::shared_ptr<const Dataset> base,
                                                         MultiViewTransform t)
    : base_(std::move(base)), t_(std::move(t)) {
  check(base_ != nullptr, "MultiViewTransformedDataset: the base dataset is null");
  check(static_cast<bool>(t_), "MultiViewTransformedDataset: the transform is empty");
}

MultiViewSample MultiViewTransformedDataset::get_views(int64_t index, Generator& rng) const {
  Sample s = base_->get(index, rng);
  return MultiViewSample{t_(std::move(s.image), rng), s.label};
}

void collate_views(std::vector<MultiViewSample>& samples, MultiViewBatch& out, Generator&) {
  check(!samples.empty(), "collate_views: empty batch");
  const size_t V = samples[0].views.size();
  check(V > 0, "collate_views: dataset index ", out.indices[0], " has no views");
  for (size_t i = 1; i < samples.size(); ++i)
    check(samples[i].views.size() == V, "collate_views: dataset index ", out.indices[i], " has ",
          samples[i].views.size(), " views but dataset index ", out.indices[0], " has ", V);
  out.views.clear();
  std::vector<const Image*> images(samples.size());
  for (size_t v = 0; v < V; ++v) {
    for (size_t i = 0; i < samples.size(); ++i) images[i] = &samples[i].views[v];
    out.views.push_back(stack_images(images, out.indices, "collate_views: view " + std::to_string(v)));
  }
}

void collate_views_by_resolution(std::vector<MultiViewSample>& samples, MultiViewBatch& out, Generator& rng) {
  collate_views(samples, out, rng);
  std::vector<Tensor> groups, run;
  for (const Tensor& v : out.views) {
    if (!run.empty() && (v.size(2) != run[0].size(2) || v.size(3) != run[0].size(3))) {
      groups.push_back(run.size() == 1 ? run[0] : cat(run, 0));
      run.clear();
    }
    run.push_back(v);
  }
  groups.push_back(run.size() == 1 ? run[0] : cat(run, 0));
  out.views = std::move(groups);
}

}  // namespace sima
