// Data specs: parsing and its errors, every kind opened from small files written here (and
// the installed Fashion-MNIST), class names per kind, SubsetDataset and random_subset.
#include <filesystem>
#include <fstream>
#include <set>

#include "data/idx.h"
#include "data/image_io.h"
#include "data/temp_dir.h"
#include "testing.h"
#include "train/config/data_spec.h"

using namespace sima;
using namespace sima::testing;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

const std::string kAllowed = "(allowed: fashion_mnist[:ROOT], mnist:ROOT, cifar10:ROOT, cifar100:ROOT, folder:ROOT)";

// CIFAR-10 records: label byte then 3072 pixel bytes, pixel k of record r = (r + k) mod 256.
std::vector<uint8_t> cifar_records(const std::vector<uint8_t>& labels) {
  std::vector<uint8_t> b;
  for (size_t r = 0; r < labels.size(); ++r) {
    b.push_back(labels[r]);
    for (int k = 0; k < 3072; ++k) b.push_back(uint8_t((r + k) % 256));
  }
  return b;
}

// A dataset of `n` 1×1×1 images whose value is the index, label = index mod 3.
class IndexDataset : public Dataset {
 public:
  explicit IndexDataset(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  Sample get(int64_t i, Generator&) const override { return {Image(1, 1, 1, float(i)), i % 3}; }
  int64_t num_classes() const override { return 3; }
  std::string describe() const override { return "index dataset"; }

 private:
  int64_t n_;
};

}  // namespace

TEST_CASE("parse_data_spec: kinds, roots, round trip through to_string") {
  CHECK(data_spec_kinds() == std::vector<std::string>{"fashion_mnist", "mnist", "cifar10", "cifar100", "folder"});
  DataSpec d = parse_data_spec("fashion_mnist");
  CHECK(d.kind == "fashion_mnist");
  CHECK(d.root == "");
  d = parse_data_spec("cifar10:/data/cifar");
  CHECK(d.kind == "cifar10");
  CHECK(d.root == "/data/cifar");
  d = parse_data_spec("folder:/a:b");  // the first ':' separates; the root may hold more
  CHECK(d.kind == "folder");
  CHECK(d.root == "/a:b");
  for (const char* s : {"fashion_mnist", "fashion_mnist:/x", "mnist:m", "cifar10:c", "cifar100:/c100", "folder:f"})
    CHECK(to_string(parse_data_spec(s)) == s);
}

TEST_CASE("parse_data_spec: errors name the spec and the allowed forms") {
  CHECK(error_message([] { parse_data_spec("imagenet"); }) ==
        "data spec 'imagenet': unknown kind 'imagenet' " + kAllowed);
  CHECK(error_message([] { parse_data_spec("Fashion_MNIST"); }) ==
        "data spec 'Fashion_MNIST': unknown kind 'Fashion_MNIST' " + kAllowed);
  CHECK(error_message([] { parse_data_spec(""); }) == "data spec '': unknown kind '' " + kAllowed);
  CHECK(error_message([] { parse_data_spec("cifar10"); }) ==
        "data spec 'cifar10': cifar10 needs the folder of its files, as cifar10:ROOT");
  CHECK(error_message([] { parse_data_spec("mnist:"); }) ==
        "data spec 'mnist:': the ROOT after ':' is empty " + kAllowed);
}

TEST_CASE("open_dataset: Fashion-MNIST (installed) train and test splits, names") {
  const std::string root = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(root + "/t10k-images-idx3-ubyte.gz")) {
    MESSAGE("Fashion-MNIST not installed; skipped");
    return;
  }
  std::shared_ptr<const Dataset> test = open_dataset(parse_data_spec("fashion_mnist"), false);
  CHECK(test->size() == 10000);
  CHECK(test->num_classes() == 10);
  Generator g(0);
  const Sample s = test->get(0, g);
  CHECK(s.image.channels == 1);
  CHECK(s.image.height == 28);
  CHECK(s.image.width == 28);
  // The same as the IDX dataset read directly.
  IdxDataset direct = IdxDataset::fashion_mnist(false);
  CHECK(s.label == direct.get(0, g).label);
  CHECK(s.image.data == direct.get(0, g).image.data);
  CHECK(open_dataset(parse_data_spec("fashion_mnist:" + root), true)->size() == 60000);
  CHECK(class_names(parse_data_spec("fashion_mnist"), 10) ==
        std::vector<std::string>{"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
                                 "Bag", "Ankle boot"});
}

TEST_CASE("open_dataset: MNIST IDX files under a root; missing files are named") {
  TempDir tmp;
  // 2 images of 2×2, labels 7 and 1, raw (no .gz).
  std::vector<uint8_t> images = {0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 2, 0, 51, 102, 255, 1, 2, 3, 4};
  std::vector<uint8_t> labels = {0, 0, 8, 1, 0, 0, 0, 2, 7, 1};
  write_bytes(tmp.file("t10k-images-idx3-ubyte"), images);
  write_bytes(tmp.file("t10k-labels-idx1-ubyte"), labels);
  std::shared_ptr<const Dataset> d = open_dataset(parse_data_spec("mnist:" + tmp.str()), false);
  REQUIRE(d->size() == 2);
  Generator g(0);
  const Sample s = d->get(0, g);
  CHECK(s.label == 7);
  check_close(from_vector(s.image.data), {0.f, 0.2f, 0.4f, 1.f}, 1e-7f, 0.f);
  CHECK(class_names(parse_data_spec("mnist:" + tmp.str()), 10) ==
        std::vector<std::string>{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"});
  const std::string msg = error_message([&] { open_dataset(parse_data_spec("mnist:" + tmp.str()), true); });
  CHECK(contains(msg, tmp.str() + "/train-images-idx3-ubyte"));
}

TEST_CASE("open_dataset: CIFAR-10 binary files; class names from batches.meta.txt, else numbers") {
  TempDir tmp;
  for (int i = 1; i <= 5; ++i)
    write_bytes(tmp.file("data_batch_" + std::to_string(i) + ".bin"), cifar_records({uint8_t(i)}));
  write_bytes(tmp.file("test_batch.bin"), cifar_records({4, 8}));
  const DataSpec spec = parse_data_spec("cifar10:" + tmp.str());
  CHECK(open_dataset(spec, true)->size() == 5);
  std::shared_ptr<const Dataset> test = open_dataset(spec, false);
  REQUIRE(test->size() == 2);
  Generator g(0);
  CHECK(test->get(1, g).label == 8);
  CHECK(test->get(1, g).image.channels == 3);
  // No meta file: numbers.
  CHECK(class_names(spec, 10) == std::vector<std::string>{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"});
  std::ofstream(tmp.file("batches.meta.txt"))
      << "airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\ntruck\n";
  const std::vector<std::string> names = class_names(spec, 10);
  REQUIRE(names.size() == 10);
  CHECK(names[0] == "airplane");
  CHECK(names[9] == "truck");
  // CIFAR-100's files are train.bin / test.bin: missing here, named in the error.
  CHECK(contains(error_message([&] { open_dataset(parse_data_spec("cifar100:" + tmp.str()), false); }), "test.bin"));
  // Data that cannot be opened still gives printable names.
  CHECK(class_names(parse_data_spec("cifar100:" + tmp.str() + "/nowhere"), 3) ==
        std::vector<std::string>{"0", "1", "2"});
}

TEST_CASE("open_dataset: folder ROOT/train and ROOT/val; class names are the folder names") {
  TempDir tmp;
  Image red(3, 4, 5, 0.f), grey(3, 4, 5, 0.5f);
  for (int64_t i = 0; i < 20; ++i) red.data[size_t(i)] = 1.f;  // red plane
  write_png(tmp.file("train/cat/a.png"), red);
  write_png(tmp.file("train/cat/b.png"), grey);
  write_png(tmp.file("train/dog/c.png"), grey);
  write_png(tmp.file("val/cat/d.png"), grey);
  write_png(tmp.file("val/dog/e.png"), red);
  const DataSpec spec = parse_data_spec("folder:" + tmp.str());
  std::shared_ptr<const Dataset> train = open_dataset(spec, true), val = open_dataset(spec, false);
  CHECK(train->size() == 3);
  CHECK(val->size() == 2);
  CHECK(val->num_classes() == 2);
  Generator g(0);
  const Sample e = val->get(1, g);
  CHECK(e.label == 1);
  CHECK(e.image.at(0, 0, 0) == 1.f);
  CHECK(e.image.at(1, 0, 0) == 0.f);
  CHECK(class_names(spec, 2) == std::vector<std::string>{"cat", "dog"});
  CHECK(class_names(spec, 3) == std::vector<std::string>{"cat", "dog", "2"});  // more classes than folders

  std::filesystem::remove_all(tmp.str() + "/val");
  CHECK(contains(error_message([&] { open_dataset(spec, false); }), tmp.str() + "/val"));
}

TEST_CASE("SubsetDataset: samples of the base at the given indices; indices checked") {
  auto base = std::make_shared<IndexDataset>(10);
  SubsetDataset sub(base, {7, 2, 2, 9});
  CHECK(sub.size() == 4);
  CHECK(sub.num_classes() == 3);
  Generator g(0);
  std::vector<float> values;
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < sub.size(); ++i) {
    Sample s = sub.get(i, g);
    values.push_back(s.image.data[0]);
    labels.push_back(s.label);
  }
  CHECK(values == std::vector<float>{7, 2, 2, 9});
  CHECK(labels == std::vector<int64_t>{1, 2, 2, 0});
  CHECK(sub.describe() == "index dataset (subset of 4)");
  CHECK(error_message([&] { SubsetDataset bad(base, {0, 10}); }) ==
        "SubsetDataset: index 10 (position 1) is not in [0, 10) of index dataset");
  CHECK(error_message([&] { SubsetDataset bad(base, {-1}); }) ==
        "SubsetDataset: index -1 (position 0) is not in [0, 10) of index dataset");
  CHECK(error_message([&] { sub.get(4, g); }) == "SubsetDataset: index 4 is not in [0, 4)");
}

TEST_CASE("random_subset: n sorted distinct indices, seeded, uniform over seeds; n >= size is the dataset") {
  auto base = std::make_shared<IndexDataset>(20);
  CHECK(random_subset(base, 20, 1) == base);
  CHECK(random_subset(base, 50, 1) == base);
  CHECK(error_message([&] { random_subset(base, 0, 1); }) == "random_subset: the subset size 0 must be positive");

  auto indices_of = [&](uint64_t seed) {
    auto sub = std::dynamic_pointer_cast<const SubsetDataset>(random_subset(base, 5, seed));
    REQUIRE(sub != nullptr);
    return sub->indices();
  };
  const std::vector<int64_t> a = indices_of(7);
  CHECK(a.size() == 5);
  CHECK(std::is_sorted(a.begin(), a.end()));
  CHECK(std::set<int64_t>(a.begin(), a.end()).size() == 5);
  CHECK(indices_of(7) == a);  // same seed, same subset
  bool differs = false;
  for (uint64_t seed = 8; seed < 12; ++seed) differs |= indices_of(seed) != a;
  CHECK(differs);
  // Over many seeds every index is chosen with frequency 5/20 = 0.25 (binomial sd 0.0097 for
  // 2000 draws; 0.04 is 4 sd).
  std::vector<int> hits(20, 0);
  const int seeds = 2000;
  for (int s = 0; s < seeds; ++s)
    for (int64_t i : indices_of(uint64_t(s))) hits[size_t(i)]++;
  for (int i = 0; i < 20; ++i) {
    INFO("index " << i << " chosen " << hits[size_t(i)] << " times");
    CHECK(std::fabs(hits[size_t(i)] / double(seeds) - 0.25) < 0.04);
  }
}

TEST_CASE("holdout_split: disjoint, together the dataset, fixed by its seed alone; sizes checked") {
  auto base = std::make_shared<IndexDataset>(20);
  auto indices = [](const std::shared_ptr<const Dataset>& d) {
    auto sub = std::dynamic_pointer_cast<const SubsetDataset>(d);
    REQUIRE(sub != nullptr);
    return sub->indices();
  };
  const HoldoutSplit s = holdout_split(base, 6, 3);
  const std::vector<int64_t> tr = indices(s.train), va = indices(s.validation);
  CHECK(tr.size() == 14);
  CHECK(va.size() == 6);
  CHECK(std::is_sorted(tr.begin(), tr.end()));
  CHECK(std::is_sorted(va.begin(), va.end()));
  std::set<int64_t> all(tr.begin(), tr.end());
  all.insert(va.begin(), va.end());
  CHECK(all.size() == 20);  // disjoint and covering
  // The validation set is the random_subset of the same seed: one permutation, split in two.
  CHECK(indices(random_subset(base, 6, 3)) == va);
  CHECK(indices(holdout_split(base, 6, 3).validation) == va);
  CHECK(indices(holdout_split(base, 6, 4).validation) != va);
  CHECK(error_message([&] { holdout_split(base, 20, 0); }) ==
        "data.validation is 20 but must be in [1, 19] for index dataset (20 training images; 0 = no validation split)");
  CHECK(error_message([&] { holdout_split(base, 0, 0); }).find("data.validation is 0 but must be in [1, 19]") == 0);
}
