// DataLoader: batches of a Dataset, shuffled per epoch, built ahead by worker threads.
//
//   DataLoader loader(dataset, {.batch_size = 128, .num_workers = 4, .seed = 0});
//   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
//     loader.start_epoch(epoch);
//     Batch batch;
//     while (loader.next(batch)) train_step(batch.images, batch.labels);
//   }
//
// Same seed and epoch -> the same batches, bit for bit, whatever num_workers and prefetch
// (see loader_pipeline.h for how). MultiViewLoader is the same over a MultiViewDataset (DINO
// multi-crop), producing one stacked tensor per view.
//
// Errors: a sample that fails to load (a corrupt image, a shape mismatch in the batch) throws
// from next() in the calling thread, as a sima::Error naming the dataset index and the
// cause; the epoch then ends (next() returns false until the next start_epoch).
// Destroying a loader mid-epoch, or calling start_epoch mid-epoch, waits only for the
// batches being built at that moment. start_epoch and next are for one consumer thread.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "data/batch.h"
#include "data/dataset.h"
#include "data/loader_pipeline.h"

namespace sima {

class DataLoader {
 public:
  // `collate` turns the samples of a batch into the Batch (default: stack the images).
  DataLoader(std::shared_ptr<const Dataset> dataset, const LoaderOptions& opt,
             Collate collate = collate_images);

  // Batches before `first_batch` are skipped (resuming mid-epoch).
  void start_epoch(int64_t epoch, int64_t first_batch = 0);
  // The next batch of the epoch into `out`; false (out untouched) at the end of the epoch.
  bool next(Batch& out);
  int64_t batches_per_epoch() const { return pipe_.batches_per_epoch(); }
  int64_t epoch() const { return pipe_.epoch(); }  // -1 before the first start_epoch
  const LoaderOptions& options() const { return pipe_.options(); }
  const Dataset& dataset() const { return *dataset_; }

 private:
  void produce(const BatchJob& job, int slot);  // in a worker thread

  std::shared_ptr<const Dataset> dataset_;
  Collate collate_;
  std::vector<Batch> ring_;  // one finished batch per pipeline slot
  BatchPipeline pipe_;       // last: destroyed (workers joined) before the members above
};

class MultiViewLoader {
 public:
  MultiViewLoader(std::shared_ptr<const MultiViewDataset> dataset, const LoaderOptions& opt,
                  MultiViewCollate collate = collate_views);

  void start_epoch(int64_t epoch, int64_t first_batch = 0);
  bool next(MultiViewBatch& out);
  int64_t batches_per_epoch() const { return pipe_.batches_per_epoch(); }
  int64_t epoch() const { return pipe_.epoch(); }
  const LoaderOptions& options() const { return pipe_.options(); }
  const MultiViewDataset& dataset() const { return *dataset_; }

 private:
  void produce(const BatchJob& job, int slot);

  std::shared_ptr<const MultiViewDataset> dataset_;
  MultiViewCollate collate_;
  std::vector<MultiViewBatch> ring_;
  BatchPipeline pipe_;
};

}  // namespace sima
