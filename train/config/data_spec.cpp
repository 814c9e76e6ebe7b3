// Dataset specs (see data_spec.h): "kind[:ROOT]" -> the dataset's train or test split.
#include "train/config/data_spec.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "data/cifar.h"
#include "data/idx.h"
#include "data/image_folder.h"

namespace sima {

namespace {

constexpr const char* kFashionMnistRoot = "/usr/share/datasets/fashion-mnist";

// The allowed forms, for errors: "fashion_mnist[:ROOT], mnist:ROOT, ...".
std::string allowed_forms() {
  std::string s;
  for (const std::string& k : data_spec_kinds())
    s += (s.empty() ? "" : ", ") + k + (k == "fashion_mnist" ? "[:ROOT]" : ":ROOT");
  return s;
}

// Fashion-MNIST's classes, in label order (data/idx.h).
const std::vector<std::string> kFashionMnistClasses = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                       "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

}  // namespace

std::vector<std::string> data_spec_kinds() { return {"fashion_mnist", "mnist", "cifar10", "cifar100", "folder"}; }

DataSpec parse_data_spec(const std::string& spec) {
  const size_t colon = spec.find(':');
  DataSpec d;
  d.kind = spec.substr(0, colon);
  if (colon != std::string::npos) d.root = spec.substr(colon + 1);
  const std::vector<std::string> kinds = data_spec_kinds();
  check(std::find(kinds.begin(), kinds.end(), d.kind) != kinds.end(), "data spec '", spec, "': unknown kind '",
        d.kind, "' (allowed: ", allowed_forms(), ")");
  check(colon == std::string::npos || !d.root.empty(), "data spec '", spec, "': the ROOT after ':' is empty (allowed: ",
        allowed_forms(), ")");
  check(d.kind == "fashion_mnist" || !d.root.empty(), "data spec '", spec, "': ", d.kind,
        " needs the folder of its files, as ", d.kind, ":ROOT");
  return d;
}

std::string to_string(const DataSpec& spec) { return spec.root.empty() ? spec.kind : spec.kind + ":" + spec.root; }

std::shared_ptr<const Dataset> open_dataset(const DataSpec& spec, bool train) {
  if (spec.kind == "fashion_mnist")
    return std::make_shared<IdxDataset>(
        IdxDataset::fashion_mnist(train, spec.root.empty() ? kFashionMnistRoot : spec.root));
  check(!spec.root.empty(), "data spec '", to_string(spec), "': ", spec.kind, " needs a ROOT");
  if (spec.kind == "mnist") return std::make_shared<IdxDataset>(IdxDataset::mnist(train, spec.root));
  if (spec.kind == "cifar10") return std::make_shared<CifarDataset>(CifarDataset::cifar10(spec.root, train));
  if (spec.kind == "cifar100") return std::make_shared<CifarDataset>(CifarDataset::cifar100(spec.root, train));
  if (spec.kind == "folder")
    return std::make_shared<ImageFolderDataset>(spec.root + (train ? "/train" : "/val"));
  fail("data spec '", to_string(spec), "': unknown kind '", spec.kind, "' (allowed: ", allowed_forms(), ")");
}

std::vector<std::string> class_names(const DataSpec& spec, int64_t num_classes) {
  std::vector<std::string> names;
  if (spec.kind == "fashion_mnist") {
    names = kFashionMnistClasses;
  } else if (spec.kind == "cifar10" || spec.kind == "cifar100" || spec.kind == "folder") {
    // The names live with the data (CIFAR's meta file, the folder names): read them from the
    // test split. Names are only for printing, so data that cannot be opened gives numbers.
    try {
      std::shared_ptr<const Dataset> ds = open_dataset(spec, false);
      if (auto* c = dynamic_cast<const CifarDataset*>(ds.get())) names = c->classes();
      if (auto* f = dynamic_cast<const ImageFolderDataset*>(ds.get())) names = f->classes();
    } catch (const Error&) {
      names.clear();
    }
  }
  // One name per class: numbers where the dataset has none (or fewer than the model's classes).
  std::vector<std::string> out;
  for (int64_t i = 0; i < num_classes; ++i)
    out.push_back(size_t(i) < names.size() ? names[size_t(i)] : std::to_string(i));
  return out;
}

// ---- subsets ----------------------------------------------------------------------

SubsetDataset::SubsetDataset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices)
    : base_(std::move(base)), indices_(std::move(indices)) {
  check(base_ != nullptr, "SubsetDataset: the base dataset is null");
  const int64_t n = base_->size();
  for (size_t i = 0; i < indices_.size(); ++i)
    check(indices_[i] >= 0 && indices_[i] < n, "SubsetDataset: index ", indices_[i], " (position ", i,
          ") is not in [0, ", n, ") of ", base_->describe());
}

Sample SubsetDataset::get(int64_t index, Generator& rng) const {
  check(index >= 0 && index < size(), "SubsetDataset: index ", index, " is not in [0, ", size(), ")");
  return base_->get(indices_[size_t(index)], rng);
}

std::string SubsetDataset::describe() const {
  return base_->describe() + " (subset of " + std::to_string(indices_.size()) + ")";
}

namespace {

// A Fisher–Yates permutation of 0..size-1 drawn from `seed`.
std::vector<int64_t> seeded_permutation(int64_t size, uint64_t seed) {
  std::vector<int64_t> perm(static_cast<size_t>(size));
  std::iota(perm.begin(), perm.end(), int64_t(0));
  Generator gen(seed);
  for (int64_t i = size - 1; i > 0; --i) std::swap(perm[size_t(i)], perm[gen.randint(uint64_t(i) + 1)]);
  return perm;
}

// perm[begin, end), sorted, as a subset of `dataset`.
std::shared_ptr<const Dataset> sorted_subset(std::shared_ptr<const Dataset> dataset, const std::vector<int64_t>& perm,
                                             size_t begin, size_t end) {
  std::vector<int64_t> idx(perm.begin() + std::ptrdiff_t(begin), perm.begin() + std::ptrdiff_t(end));
  std::sort(idx.begin(), idx.end());
  return std::make_shared<SubsetDataset>(std::move(dataset), std::move(idx));
}

}  // namespace

std::shared_ptr<const Dataset> random_subset(std::shared_ptr<const Dataset> dataset, int64_t n, uint64_t seed,
                                             const std::string& key) {
  check(dataset != nullptr, "random_subset: the dataset is null");
  check(n > 0, "random_subset: the subset size ", n, " must be positive");
  const int64_t size = dataset->size();
  check(key.empty() || n <= size, key, " is ", n, " but ", dataset->describe(), " has only ", size,
        " images: give at most ", size, " (0 = all)");
  if (n >= size) return dataset;
  return sorted_subset(dataset, seeded_permutation(size, seed), 0, size_t(n));
}

HoldoutSplit holdout_split(std::shared_ptr<const Dataset> dataset, int64_t n, uint64_t seed) {
  check(dataset != nullptr, "holdout_split: the dataset is null");
  const int64_t size = dataset->size();
  check(n > 0 && n < size, "data.validation is ", n, " but must be in [1, ", size - 1, "] for ", dataset->describe(),
        " (", size, " training images; 0 = no validation split)");
  const std::vector<int64_t> perm = seeded_permutation(size, seed);
  return {.train = sorted_subset(dataset, perm, size_t(n), perm.size()),
          .validation = sorted_subset(dataset, perm, 0, size_t(n))};
}

}  // namespace sima
