#include "train/objectives/objective_setup.h"

#include "core/error.h"
#include "core/rng.h"
#include "models/budget.h"
#include "models/registry.h"

namespace sima {

std::shared_ptr<const Dataset> training_images(const ExperimentConfig& c, const DataSpec& spec,
                                               std::shared_ptr<const Dataset>* validation) {
  std::shared_ptr<const Dataset> images = open_dataset(spec, true);
  if (c.data.validation > 0) {  // the protocol of docs/RESULTS.md: choose settings without the test set
    HoldoutSplit split = holdout_split(images, c.data.validation, uint64_t(c.data.validation_seed));
    images = split.train;
    if (validation) *validation = split.validation;
  }
  if (c.data.train_subset > 0)
    images = random_subset(images, c.data.train_subset, uint64_t(c.train.seed), "data.train_subset");
  return images;
}

LoaderOptions training_loader_options(const ExperimentConfig& c, const Comm& comm) {
  return LoaderOptions{.batch_size = c.data.batch_size,
                       .shuffle = true,
                       .drop_last = true,
                       .num_workers = int(c.data.num_workers),
                       .seed = uint64_t(c.train.seed),
                       .num_replicas = comm.size(),
                       .rank = comm.rank()};
}

int64_t checked_steps_per_epoch(int64_t batches, const ExperimentConfig& c, int64_t images) {
  check(batches > 0, "data.batch_size ", c.data.batch_size, " exceeds the ", images, " training images: no full batch");
  return batches;
}

std::shared_ptr<Model> seeded_model(const ExperimentConfig& c) {
  manual_seed(uint64_t(c.train.seed));
  check_model_budget(c.model, c.data.batch_size);  // the run's batch, before any tensor
  return create_model(c.model);
}

}  // namespace sima
