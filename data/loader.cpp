#include "data/loader.h"

#include <exception>
#include <string>
#include <utility>

#include "core/error.h"

namespace sima {
namespace {

// Builds one batch, the same way for both loaders:
//   sample k = get(indices[k], Generator(sample_seed(seed, epoch, indices[k])))
//   out      = collate(samples) with indices and labels filled in first
// Exceptions come out as a sima::Error naming the loader, the batch and the dataset index.
template <class SampleT, class BatchT, class Get, class CollateFn>
void build_batch(const char* owner, const BatchJob& job, uint64_t seed, const Get& get,
                 const CollateFn& collate, BatchT& out) {
  std::vector<SampleT> samples;
  samples.reserve(job.indices.size());
  for (int64_t index : job.indices) {
    Generator rng(sample_seed(seed, job.epoch, index));
    try {
      samples.push_back(get(index, rng));
    } catch (const std::exception& e) {
      fail(owner, ": loading dataset index ", index, " (batch ", job.batch, " of epoch ", job.epoch,
           ") failed: ", e.what());
    }
  }
  out = BatchT{};
  out.indices = job.indices;
  out.labels.reserve(samples.size());
  for (const SampleT& s : samples) out.labels.push_back(s.label);
  Generator batch_rng(batch_seed(seed, job.epoch, job.batch));
  try {
    collate(samples, out, batch_rng);
  } catch (const std::exception& e) {
    fail(owner, ": batch ", job.batch, " of epoch ", job.epoch, ": ", e.what());
  }
}

// A loader's dataset must exist before the pipeline asks its size.
template <class D>
int64_t size_of(const std::shared_ptr<const D>& dataset, const char* owner) {
  check(dataset != nullptr, owner, ": the dataset is null");
  return dataset->size();
}

}  // namespace

// ---- DataLoader ----------------------------------------------------------------------

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, const LoaderOptions& opt,
                       Collate collate)
    : dataset_(std::move(dataset)),
      collate_(std::move(collate)),
      pipe_(size_of(dataset_, "DataLoader"), opt,
            [this](const BatchJob& job, int slot) { produce(job, slot); }, "DataLoader") {
  check(static_cast<bool>(collate_), "DataLoader: the collate function is empty");
  ring_.resize(pipe_.slots());
}

void DataLoader::produce(const BatchJob& job, int slot) {
  auto get = [this](int64_t index, Generator& rng) { return dataset_->get(index, rng); };
  build_batch<Sample>("DataLoader", job, pipe_.options().seed, get, collate_, ring_[slot]);
}

void DataLoader::start_epoch(int64_t epoch, int64_t first_batch) { pipe_.start_epoch(epoch, first_batch); }

bool DataLoader::next(Batch& out) {
  const int slot = pipe_.acquire();
  if (slot < 0) return false;
  out = std::move(ring_[slot]);
  pipe_.release(slot);
  return true;
}

// ---- MultiViewLoader -------------------------------------------------------------------

MultiViewLoader::MultiViewLoader(std::shared_ptr<const MultiViewDataset> dataset,
                                 const LoaderOptions& opt, MultiViewCollate collate)
    : dataset_(std::move(dataset)),
      collate_(std::move(collate)),
      pipe_(size_of(dataset_, "MultiViewLoader"), opt,
            [this](const BatchJob& job, int slot) { produce(job, slot); }, "MultiViewLoader") {
  check(static_cast<bool>(collate_), "MultiViewLoader: the collate function is empty");
  ring_.resize(pipe_.slots());
}

void MultiViewLoader::produce(const BatchJob& job, int slot) {
  auto get = [this](int64_t index, Generator& rng) { return dataset_->get_views(index, rng); };
  build_batch<MultiViewSample>("MultiViewLoader", job, pipe_.options().seed, get, collate_,
                               ring_[slot]);
}

void MultiViewLoader::start_epoch(int64_t epoch, int64_t first_batch) {
  pipe_.start_epoch(epoch, first_batch);
}

bool MultiViewLoader::next(MultiViewBatch& out) {
  const int slot = pipe_.acquire();
  if (slot < 0) return false;
  out = std::move(ring_[slot]);
  pipe_.release(slot);
  return true;
}

}  // namespace sima
