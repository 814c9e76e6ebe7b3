// What the supervised objective (supervised.cpp) and DINO's (dino.cpp) set up alike before
// their first step: the training images, the loader's options, the steps of an epoch and the
// seeded model. Each objective adds its own views, heads and schedules around them.
#pragma once
#include <cstdint>
#include <memory>

#include "data/dataset.h"
#include "data/loader_pipeline.h"
#include "models/model.h"
#include "train/config/data_spec.h"
#include "train/config/experiment_config.h"
#include "train/distributed/distributed.h"

namespace sima {

// The run's training images: the training split of `spec`, less data.validation images held
// out by data.validation_seed (when > 0; they go to `validation` if given, and the test split
// is never opened), then a data.train_subset of them seeded by train.seed (when > 0; larger
// than the images: an error naming both sizes).
std::shared_ptr<const Dataset> training_images(const ExperimentConfig& c, const DataSpec& spec,
                                               std::shared_ptr<const Dataset>* validation = nullptr);

// The training loader: data.batch_size, shuffled and augmented by train.seed, full batches
// only, data.num_workers threads, this rank's slice of every global batch.
LoaderOptions training_loader_options(const ExperimentConfig& c, const Comm& comm);

// `batches` (the loader's per epoch) checked: 0 means data.batch_size exceeds the `images`,
// an error naming both.
int64_t checked_steps_per_epoch(int64_t batches, const ExperimentConfig& c, int64_t images);

// The model of model.*, its initial weights drawn from train.seed, after the memory budget
// passed it for the run's batch (models/budget.h), so an oversized model fails before any tensor.
std::shared_ptr<Model> seeded_model(const ExperimentConfig& c);

}  // namespace sima
