// DINO multi-crop through the threaded loader: views grouped by resolution, the same
// layout as stack_multicrop, identical for any number of workers.
#include "testing.h"

#include "data/loader.h"
#include "data/loader_pipeline.h"
#include "data/multicrop.h"

using namespace sima;
using namespace sima::testing;

namespace {
// index -> a 3x32x32 picture with a gradient that depends on the index.
class Pictures : public Dataset {
 public:
  int64_t size() const override { return 10; }
  int64_t num_classes() const override { return 10; }
  Sample get(int64_t index, Generator&) const override {
    Image img(3, 32, 32);
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t y = 0; y < 32; ++y)
        for (int64_t x = 0; x < 32; ++x) img.at(c, y, x) = float((x + 2 * y + 7 * c + 5 * index) % 64) / 63.f;
    return {img, index % 10};
  }
};

MultiCropOptions small_options() {
  MultiCropOptions o;
  o.global_size = 28;
  o.local_size = 12;
  o.local_crops = 3;
  return o;
}
}  // namespace

TEST_CASE("MultiViewLoader + dino_multiview_transform + collate_views_by_resolution") {
  auto base = std::make_shared<Pictures>();
  auto ds = std::make_shared<MultiViewTransformedDataset>(base, dino_multiview_transform(small_options()));
  std::vector<std::vector<Tensor>> runs;
  for (int workers : {0, 2}) {
    LoaderOptions lo;
    lo.batch_size = 4;
    lo.drop_last = true;
    lo.num_workers = workers;
    lo.seed = 11;
    MultiViewLoader loader(ds, lo, collate_views_by_resolution);
    loader.start_epoch(0);
    MultiViewBatch b;
    std::vector<Tensor> all;
    int batches = 0;
    while (loader.next(b)) {
      REQUIRE(b.views.size() == 2);
      CHECK(b.views[0].shape() == Shape{2 * 4, 3, 28, 28});
      CHECK(b.views[1].shape() == Shape{3 * 4, 3, 12, 12});
      if (batches == 0) {
        // The same samples augmented by hand with their own generators, stacked by stack_multicrop.
        DataAugmentationDINO aug(small_options());
        std::vector<MultiCropViews> views;
        for (int64_t idx : b.indices) {
          Generator g(sample_seed(11, 0, idx));
          Sample s = base->get(idx, g);
          views.push_back(aug(s.image, g));
        }
        MultiCropBatch ref = stack_multicrop(views, b.labels);
        CHECK(max_abs_diff(ref.global_crops, b.views[0]) == 0.f);
        CHECK(max_abs_diff(ref.local_crops, b.views[1]) == 0.f);
      }
      for (auto& v : b.views) all.push_back(v);
      ++batches;
    }
    CHECK(batches == 2);
    runs.push_back(all);
  }
  REQUIRE(runs[0].size() == runs[1].size());
  for (size_t i = 0; i < runs[0].size(); ++i) CHECK(max_abs_diff(runs[0][i], runs[1][i]) == 0.f);
}
