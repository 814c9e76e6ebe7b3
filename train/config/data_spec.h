// Datasets named by a short spec string, as configs and `--data` flags write them:
//
//   "fashion_mnist"           Debian's /usr/share/datasets/fashion-mnist (train / t10k)
//   "fashion_mnist:ROOT"      the same files under ROOT
//   "mnist:ROOT"              MNIST IDX files under ROOT
//   "cifar10:ROOT"            CIFAR-10 binary version (data_batch_*.bin, test_batch.bin)
//   "cifar100:ROOT"           CIFAR-100 binary version (fine labels)
//   "folder:ROOT"             ImageFolder: ROOT/train/<class>/* and ROOT/val/<class>/*
//
// open_dataset returns the raw images in [0, 1] (no transform); the trainer and sima-eval
// add the transforms (train/config/transforms_factory.h) for the model's input.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace sima {

struct DataSpec {
  std::string kind;  // fashion_mnist | mnist | cifar10 | cifar100 | folder
  std::string root;  // "" = the default location (fashion_mnist only)
};

// The spec kinds, for help texts and errors.
std::vector<std::string> data_spec_kinds();
// Throws sima::Error naming the spec and the allowed forms when it is malformed.
DataSpec parse_data_spec(const std::string& spec);
std::string to_string(const DataSpec& spec);

// The train (true) or test (false) split. Errors (missing files...) name the files.
std::shared_ptr<const Dataset> open_dataset(const DataSpec& spec, bool train);
// Class names for printing, if the dataset kind has them (Fashion-MNIST, CIFAR, folder);
// otherwise "0", "1", ...
std::vector<std::string> class_names(const DataSpec& spec, int64_t num_classes);

// dataset restricted to `indices` (each in range; checked).
class SubsetDataset : public Dataset {
 public:
  SubsetDataset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices);
  int64_t size() const override { return int64_t(indices_.size()); }
  Sample get(int64_t index, Generator& rng) const override;
  int64_t num_classes() const override { return base_->num_classes(); }
  std::string describe() const override;
  const std::vector<int64_t>& indices() const { return indices_; }

 private:
  std::shared_ptr<const Dataset> base_;
  std::vector<int64_t> indices_;
};

// The first `n` samples of a seeded permutation of `dataset` (n >= size: the dataset itself),
// sorted by index so reading stays sequential. With `key` (the config key that asked for n, e.g.
// "data.train_subset"), an n larger than the dataset is a sima::Error naming the key and the size.
std::shared_ptr<const Dataset> random_subset(std::shared_ptr<const Dataset> dataset, int64_t n, uint64_t seed,
                                             const std::string& key = "");

// A held-out validation split: `n` samples of a seeded permutation of `dataset` become the
// validation set and the rest the training set, disjoint and together the whole dataset, both
// sorted by index. The seed fixes the split alone (data.validation_seed), so every run and
// every training seed sees the same validation images. 0 < n < size.
struct HoldoutSplit {
  std::shared_ptr<const Dataset> train, validation;
};
HoldoutSplit holdout_split(std::shared_ptr<const Dataset> dataset, int64_t n, uint64_t seed);

}  // namespace sima
