// DataLoader / MultiViewLoader: batch values worked out by hand on tiny synthetic images,
// the epoch order (each index once, reshuffled per epoch, reproducible, uniform), drop_last,
// bit-identical batches for every worker / prefetch setting under jittered timings, worker
// exceptions, early destruction and restarts under a watchdog, and the error messages.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>

#include "core/error.h"
#include "data/loader.h"
#include "testing.h"

using namespace sima;

namespace {

// Synthetic dataset: index i is a (2, 3, 4) image with value i + 0.01·c + 0.001·(4y + x),
// label i % 7. With `augment`, every pixel is shifted by one rng.uniform() draw.
// Options: jitter sleeps a few microseconds (varying from call to call) to shuffle worker
// timings; throw_at makes that index fail like a corrupt file; odd_at gets shape (2, 5, 4).
struct ToyDataset : Dataset {
  int64_t n = 37;
  bool augment = true;
  bool jitter = false;
  int64_t throw_at = -1, odd_at = -1;
  int64_t sleep_us = 0;
  mutable std::atomic<int64_t> calls{0};
  mutable std::mutex mu;
  mutable std::vector<int> omp_threads_seen;  // omp_get_max_threads() inside get()

  int64_t size() const override { return n; }
  int64_t num_classes() const override { return 7; }
  std::string describe() const override { return "toy"; }
  Sample get(int64_t index, Generator& rng) const override {
    int64_t k = calls++;
    if (jitter) std::this_thread::sleep_for(std::chrono::microseconds((k * 37) % 50));
    if (sleep_us) std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
    {
      std::lock_guard<std::mutex> lock(mu);
      omp_threads_seen.push_back(omp_get_max_threads());
    }
    if (index == throw_at) fail("corrupt image ", index);
    Image im(2, index == odd_at ? 5 : 3, 4);
    float shift = augment ? rng.uniform() : 0.f;
    for (int64_t c = 0; c < im.channels; ++c)
      for (int64_t y = 0; y < im.height; ++y)
        for (int64_t x = 0; x < 4; ++x)
          im.at(c, y, x) = float(index) + 0.01f * c + 0.001f * (4 * y + x) + shift;
    return Sample{std::move(im), index % 7};
  }
};

// Every batch of some epochs, flattened: bit-comparable across loaders.
struct Record {
  std::vector<float> values;
  std::vector<int64_t> labels, indices, batch_sizes;
  bool operator==(const Record& o) const {
    return values.size() == o.values.size() &&
           std::memcmp(values.data(), o.values.data(), values.size() * sizeof(float)) == 0 &&
           labels == o.labels && indices == o.indices && batch_sizes == o.batch_sizes;
  }
};

void append(Record& r, const Batch& b) {
  std::vector<float> v = to_vector(b.images);
  r.values.insert(r.values.end(), v.begin(), v.end());
  r.labels.insert(r.labels.end(), b.labels.begin(), b.labels.end());
  r.indices.insert(r.indices.end(), b.indices.begin(), b.indices.end());
  r.batch_sizes.push_back(b.images.size(0));
}

Record run_epochs(DataLoader& loader, std::vector<int64_t> epochs) {
  Record r;
  for (int64_t e : epochs) {
    loader.start_epoch(e);
    Batch b;
    while (loader.next(b)) append(r, b);
  }
  return r;
}

Record run(std::shared_ptr<const Dataset> ds, LoaderOptions opt, std::vector<int64_t> epochs) {
  DataLoader loader(std::move(ds), opt);
  return run_epochs(loader, epochs);
}

// The message of the sima::Error f throws ("" if none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
std::vector<int64_t> range(int64_t n) {
  std::vector<int64_t> v(n);
  std::iota(v.begin(), v.end(), int64_t(0));
  return v;
}
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Ends the process with a message if the scope does not finish within `seconds`: a hang
// fails the test instead of blocking the suite.
class Watchdog {
 public:
  Watchdog(const char* what, int seconds)
      : thread_([this, what, seconds] {
          std::unique_lock<std::mutex> lock(mu_);
          if (!cv_.wait_for(lock, std::chrono::seconds(seconds), [&] { return done_; })) {
            std::fprintf(stderr, "watchdog: '%s' did not finish within %d s (hang)\n", what, seconds);
            std::_Exit(3);
          }
        }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// The whole suite takes well under a second; a hang anywhere (e.g. a destructor that
// never joins its workers) ends it here.
Watchdog whole_suite("data_test_loader", 60);

std::shared_ptr<ToyDataset> toy(int64_t n = 37) {
  auto ds = std::make_shared<ToyDataset>();
  ds->n = n;
  return ds;
}

}  // namespace

TEST_CASE("loader: values of an unshuffled batch, by hand") {
  auto ds = toy(10);
  ds->augment = false;
  DataLoader loader(ds, {.batch_size = 4, .shuffle = false});
  CHECK(loader.batches_per_epoch() == 3);
  loader.start_epoch(0);
  Batch b;
  REQUIRE(loader.next(b));
  REQUIRE(loader.next(b));  // batch 1: indices 4, 5, 6, 7
  CHECK(b.images.shape() == Shape{4, 2, 3, 4});
  CHECK(b.indices == std::vector<int64_t>{4, 5, 6, 7});
  CHECK(b.labels == std::vector<int64_t>{4, 5, 6, 0});
  CHECK(b.images.at({0, 0, 0, 0}) == doctest::Approx(4.0f).epsilon(1e-7));
  CHECK(b.images.at({1, 1, 2, 3}) == doctest::Approx(5.021f).epsilon(1e-7));  // 5 + .01 + .011
  CHECK(b.images.at({3, 0, 1, 2}) == doctest::Approx(7.006f).epsilon(1e-7));  // 7 + 0 + .006
  REQUIRE(loader.next(b));  // last partial batch: 8, 9
  CHECK(b.images.shape() == Shape{2, 2, 3, 4});
  CHECK(b.indices == std::vector<int64_t>{8, 9});
  CHECK(b.images.at({1, 1, 0, 1}) == doctest::Approx(9.011f).epsilon(1e-7));
  CHECK_FALSE(loader.next(b));
  CHECK_FALSE(loader.next(b));  // stays at the end
}

TEST_CASE("loader: augmentation draws from Generator(sample_seed(seed, epoch, index))") {
  auto ds = toy(12);
  for (int workers : {0, 2}) {
    DataLoader loader(ds, {.batch_size = 5, .num_workers = workers, .seed = 42});
    for (int64_t epoch : {0, 3}) {
      loader.start_epoch(epoch);
      Batch b;
      while (loader.next(b)) {
        for (int64_t k = 0; k < b.images.size(0); ++k) {
          Generator g(sample_seed(42, epoch, b.indices[k]));
          Sample s = ds->get(b.indices[k], g);
          CHECK(std::memcmp(b.images.data() + k * 24, s.image.data.data(), 24 * sizeof(float)) == 0);
        }
      }
    }
  }
  // The shift differs between epochs and between indices.
  Generator a(sample_seed(42, 0, 3)), b(sample_seed(42, 1, 3)), c(sample_seed(42, 0, 4));
  float ua = a.uniform(), ub = b.uniform(), uc = c.uniform();
  CHECK(ua != ub);
  CHECK(ua != uc);
  CHECK(sample_seed(1, 0, 0) != sample_seed(2, 0, 0));
  CHECK(batch_seed(1, 0, 0) != sample_seed(1, 0, 0));
}

TEST_CASE("loader: every index exactly once per epoch, reshuffled per epoch, same for the same seed") {
  auto ds = toy(37);
  for (int workers : {0, 3}) {
    DataLoader loader(ds, {.batch_size = 5, .num_workers = workers, .seed = 7});
    std::vector<std::vector<int64_t>> orders;
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      Record r = run_epochs(loader, {epoch});
      CHECK(r.indices == epoch_order(37, 7, epoch, true));
      std::vector<int64_t> sorted = r.indices;
      std::sort(sorted.begin(), sorted.end());
      CHECK(sorted == range(37));
      CHECK(r.batch_sizes == std::vector<int64_t>{5, 5, 5, 5, 5, 5, 5, 2});
      orders.push_back(r.indices);
    }
    CHECK(orders[0] != orders[1]);
    CHECK(orders[1] != orders[2]);
    CHECK(orders[0] != range(37));
  }
  CHECK(epoch_order(37, 7, 1, true) == epoch_order(37, 7, 1, true));
  CHECK(epoch_order(37, 7, 1, true) != epoch_order(37, 8, 1, true));
  CHECK(epoch_order(5, 7, 1, false) == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(epoch_order(0, 7, 1, true).empty());
  CHECK(epoch_order(1, 7, 1, true) == std::vector<int64_t>{0});
}

TEST_CASE("loader: Fisher-Yates gives every permutation of 3 equally often") {
  // 6 permutations over 1200 epochs: 200 each expected (std 13). A Sattolo slip
  // (j in [0, i) instead of [0, i]) would only ever give the 2 cyclic ones.
  std::map<std::vector<int64_t>, int> counts;
  for (int64_t e = 0; e < 1200; ++e) counts[epoch_order(3, 11, e, true)]++;
  CHECK(counts.size() == 6);
  for (auto& [perm_, count_] : counts) {
    const auto& perm = perm_; const auto& count = count_;  // clang 14 cannot capture a structured binding
    INFO("permutation count " << count);
    CHECK(count > 140);
    CHECK(count < 260);
  }
}

TEST_CASE("loader: drop_last and batch counts") {
  auto ds = toy(37);
  DataLoader keep(ds, {.batch_size = 5, .drop_last = false});
  DataLoader drop(ds, {.batch_size = 5, .drop_last = true, .num_workers = 2});
  CHECK(keep.batches_per_epoch() == 8);
  CHECK(drop.batches_per_epoch() == 7);
  Record r = run_epochs(drop, {0});
  CHECK(r.batch_sizes == std::vector<int64_t>(7, 5));
  // The dropped samples are the last 2 of the epoch order.
  std::vector<int64_t> order = epoch_order(37, 0, 0, true);
  CHECK(r.indices == std::vector<int64_t>(order.begin(), order.begin() + 35));

  CHECK(DataLoader(toy(35), {.batch_size = 5, .drop_last = true}).batches_per_epoch() == 7);
  CHECK(DataLoader(toy(35), {.batch_size = 5}).batches_per_epoch() == 7);
  CHECK(DataLoader(toy(3), {.batch_size = 5, .drop_last = true}).batches_per_epoch() == 0);
  CHECK(DataLoader(toy(3), {.batch_size = 5}).batches_per_epoch() == 1);
  // An empty dataset: no batches, next() is false at once.
  DataLoader empty_loader(toy(0), {.batch_size = 5, .num_workers = 2});
  CHECK(empty_loader.batches_per_epoch() == 0);
  CHECK(run_epochs(empty_loader, {0, 1}).batch_sizes.empty());
}

TEST_CASE("loader: batches bit-identical for any num_workers and prefetch, with jittered timings") {
  auto ds = toy(37);
  ds->jitter = true;
  const std::vector<int64_t> epochs = {0, 1, 5};
  Record ref = run(ds, {.batch_size = 5, .num_workers = 0, .seed = 3}, epochs);
  REQUIRE(ref.indices.size() == 3 * 37);
  for (int workers : {1, 3, 4}) {
    for (int prefetch : {1, 4, 0}) {
      INFO("num_workers " << workers << ", prefetch " << prefetch);
      LoaderOptions opt{.batch_size = 5, .num_workers = workers, .prefetch = prefetch, .seed = 3};
      CHECK(run(ds, opt, epochs) == ref);
    }
  }
  // And the seed matters.
  CHECK_FALSE(run(ds, {.batch_size = 5, .num_workers = 2, .seed = 4}, epochs) == ref);
}

TEST_CASE("loader: start_epoch(e, first_batch) continues mid-epoch with the same batches (resume)") {
  auto ds = toy(37);
  for (int workers : {0, 2}) {
    INFO("num_workers " << workers);
    LoaderOptions opt{.batch_size = 5, .num_workers = workers, .prefetch = 3, .seed = 9};
    DataLoader full(ds, opt);
    full.start_epoch(2);
    std::vector<Record> batches;
    Batch b;
    while (full.next(b)) {
      batches.emplace_back();
      append(batches.back(), b);
    }
    REQUIRE(batches.size() == 8);
    for (int64_t first : {0, 3, 7, 8}) {
      DataLoader resumed(ds, opt);
      resumed.start_epoch(2, first);
      int64_t k = first;
      while (resumed.next(b)) {
        Record r;
        append(r, b);
        REQUIRE(k < 8);
        CHECK(r == batches[size_t(k)]);
        ++k;
      }
      CHECK(k == 8);
    }
    DataLoader bad(ds, opt);
    CHECK(contains(error_of([&] { bad.start_epoch(0, 9); }), "first batch 9 is outside the epoch's 8 batches"));
  }
}

TEST_CASE("loader: workers run OpenMP single-threaded") {
  auto ds = toy(20);
  run(ds, {.batch_size = 4, .num_workers = 2}, {0});
  REQUIRE(ds->omp_threads_seen.size() == 20);
  for (int t : ds->omp_threads_seen) CHECK(t == 1);
}

TEST_CASE("loader: an exception in a worker reaches next() with its message; the epoch ends") {
  Watchdog dog("worker exception", 20);
  auto ds = toy(37);
  ds->throw_at = 13;
  for (int workers : {0, 1, 3}) {
    INFO("num_workers " << workers);
    DataLoader loader(ds, {.batch_size = 4, .shuffle = false, .num_workers = workers});
    for (int64_t epoch : {0, 1}) {  // a restart after a failure works the same way
      loader.start_epoch(epoch);
      Batch b;
      REQUIRE(loader.next(b));  // indices 0-3
      REQUIRE(loader.next(b));  // 4-7
      REQUIRE(loader.next(b));  // 8-11
      std::string msg = error_of([&] { loader.next(b); });  // 12-15 holds 13
      CHECK(contains(msg, "corrupt image 13"));
      CHECK(contains(msg, "DataLoader: loading dataset index 13 (batch 3 of epoch " + std::to_string(epoch)));
      CHECK(b.indices == std::vector<int64_t>{8, 9, 10, 11});  // untouched by the failure
      CHECK_FALSE(loader.next(b));
    }
  }
}

TEST_CASE("loader: destruction and restarts mid-epoch do not hang") {
  Watchdog dog("early destruction / restart", 30);
  auto slow = toy(200);
  slow->sleep_us = 300;
  {  // destroyed before any epoch, right after start_epoch, and after one batch
    DataLoader a(slow, {.batch_size = 4, .num_workers = 3});
    DataLoader b(slow, {.batch_size = 4, .num_workers = 3, .prefetch = 6});
    b.start_epoch(0);
    DataLoader c(slow, {.batch_size = 4, .num_workers = 4, .prefetch = 2});
    c.start_epoch(0);
    Batch batch;
    REQUIRE(c.next(batch));
  }
  // Restart mid-epoch: the new epoch is complete and equals a fresh loader's.
  auto ds = toy(37);
  ds->jitter = true;
  Record fresh = run(ds, {.batch_size = 5, .seed = 9}, {1});
  for (int workers : {0, 2, 3}) {
    INFO("num_workers " << workers);
    DataLoader loader(ds, {.batch_size = 5, .num_workers = workers, .seed = 9});
    for (int round = 0; round < 20; ++round) {  // abandon after 0, 1, 2, ... batches
      loader.start_epoch(round % 3);
      Batch b;
      for (int k = 0; k < round % 9; ++k) loader.next(b);
    }
    CHECK(run_epochs(loader, {1}) == fresh);
  }
}

TEST_CASE("loader: images of different shapes in a batch: error naming both indices and shapes") {
  auto ds = toy(12);
  ds->odd_at = 5;
  for (int workers : {0, 2}) {
    DataLoader loader(ds, {.batch_size = 4, .shuffle = false, .num_workers = workers});
    loader.start_epoch(0);
    Batch b;
    REQUIRE(loader.next(b));
    std::string msg = error_of([&] { loader.next(b); });
    INFO(msg);
    CHECK(contains(msg, "DataLoader: batch 1 of epoch 0: collate: the image of dataset index 5 has "
                        "shape (2, 5, 4) but the image of dataset index 4 has (2, 3, 4)"));
  }
}

TEST_CASE("loader: invalid options and misuse") {
  auto ds = toy(10);
  CHECK(error_of([&] { DataLoader(nullptr, {}); }) == "DataLoader: the dataset is null");
  CHECK(error_of([&] { DataLoader(ds, {.batch_size = 0}); }) ==
        "DataLoader: batch_size must be >= 1, got 0");
  CHECK(contains(error_of([&] { DataLoader(ds, {.num_workers = -1}); }),
                 "DataLoader: num_workers must be in [0, 256], got -1"));
  CHECK(contains(error_of([&] { DataLoader(ds, {.num_workers = 100000}); }), "got 100000"));
  CHECK(contains(error_of([&] { DataLoader(ds, {.num_workers = 1, .prefetch = -2}); }),
                 "DataLoader: prefetch must be in [0, 1024] (0 = 2 * num_workers), got -2"));
  CHECK(error_of([&] { DataLoader(ds, {}, Collate()); }) == "DataLoader: the collate function is empty");
  DataLoader loader(ds, {.num_workers = 1});
  Batch b;
  CHECK(error_of([&] { loader.next(b); }) == "DataLoader: call start_epoch(epoch) before next()");
  // A malformed Image (values do not match its shape) is caught before any copy.
  struct Bad : Dataset {
    int64_t size() const override { return 2; }
    Sample get(int64_t, Generator&) const override {
      Image im(1, 2, 2);
      im.data.resize(3);
      return Sample{im, 0};
    }
  };
  DataLoader bad(std::make_shared<Bad>(), {.batch_size = 2, .shuffle = false});
  bad.start_epoch(0);
  CHECK(contains(error_of([&] { bad.next(b); }),
                 "collate: the image of dataset index 0 is invalid: shape (1, 2, 2) with 3 values"));
}

TEST_CASE("loader: a custom collate gets indices, labels and a deterministic batch generator") {
  auto ds = toy(23);
  // Stacks the images, then adds 100 · (a draw of the batch generator) to each label.
  Collate collate = [](std::vector<Sample>& samples, Batch& out, Generator& rng) {
    REQUIRE(out.indices.size() == samples.size());
    REQUIRE(out.labels.size() == samples.size());
    for (size_t k = 0; k < samples.size(); ++k) REQUIRE(out.labels[k] == out.indices[k] % 7);
    collate_images(samples, out, rng);
    for (int64_t& l : out.labels) l += 100 * static_cast<int64_t>(rng.randint(50));
  };
  auto run_custom = [&](int workers) {
    DataLoader loader(ds, {.batch_size = 4, .num_workers = workers, .seed = 5}, collate);
    return run_epochs(loader, {0, 1});
  };
  Record r0 = run_custom(0);
  CHECK(r0 == run_custom(3));
  int64_t big = std::count_if(r0.labels.begin(), r0.labels.end(), [](int64_t l) { return l >= 100; });
  CHECK(big > 0);
}

// ---- multi-view -------------------------------------------------------------------------

namespace {
// Views of a toy image: the image itself, the image + rng.uniform(), and a random 2x2 crop.
std::vector<Image> three_views(Image im, Generator& rng) {
  Image shifted = im;
  float s = rng.uniform();
  for (float& v : shifted.data) v += s;
  int64_t y0 = static_cast<int64_t>(rng.randint(2)), x0 = static_cast<int64_t>(rng.randint(3));
  Image crop(im.channels, 2, 2);
  for (int64_t c = 0; c < im.channels; ++c)
    for (int64_t y = 0; y < 2; ++y)
      for (int64_t x = 0; x < 2; ++x) crop.at(c, y, x) = im.at(c, y0 + y, x0 + x);
  return {std::move(im), std::move(shifted), std::move(crop)};
}

std::vector<float> flatten(const MultiViewBatch& b) {
  std::vector<float> out;
  for (const Tensor& t : b.views) {
    std::vector<float> v = to_vector(t);
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}
}  // namespace

TEST_CASE("multi-view loader: one stacked tensor per view, same for any number of workers") {
  auto base = toy(11);
  base->augment = false;
  auto ds = std::make_shared<MultiViewTransformedDataset>(base, three_views);
  CHECK(ds->describe() == "toy (multi-view)");
  std::vector<std::vector<float>> runs;
  for (int workers : {0, 1, 3}) {
    MultiViewLoader loader(ds, {.batch_size = 4, .shuffle = false, .num_workers = workers, .seed = 2});
    CHECK(loader.batches_per_epoch() == 3);
    loader.start_epoch(0);
    MultiViewBatch b;
    std::vector<float> all;
    int64_t batches = 0;
    while (loader.next(b)) {
      REQUIRE(b.views.size() == 3);
      int64_t B = batches < 2 ? 4 : 3;
      CHECK(b.views[0].shape() == Shape{B, 2, 3, 4});
      CHECK(b.views[1].shape() == Shape{B, 2, 3, 4});
      CHECK(b.views[2].shape() == Shape{B, 2, 2, 2});
      CHECK(b.indices.front() == 4 * batches);
      CHECK(b.labels.front() == (4 * batches) % 7);
      // view 0 is the plain image: sample k, pixel (1, 2, 3) = index + .01 + .011
      CHECK(b.views[0].at({1, 1, 2, 3}) == doctest::Approx(4 * batches + 1 + 0.021f).epsilon(1e-7));
      // view 1 = view 0 + one shift per sample, in [0, 1)
      float shift = b.views[1].at({0, 0, 0, 0}) - b.views[0].at({0, 0, 0, 0});
      CHECK(shift >= 0.f);
      CHECK(shift < 1.f);
      float shift2 = b.views[1].at({0, 1, 2, 1}) - b.views[0].at({0, 1, 2, 1});
      CHECK(shift2 == doctest::Approx(shift).epsilon(1e-5));
      std::vector<float> f = flatten(b);
      all.insert(all.end(), f.begin(), f.end());
      ++batches;
    }
    CHECK(batches == 3);
    runs.push_back(all);
  }
  CHECK(runs[0] == runs[1]);
  CHECK(runs[0] == runs[2]);
}

TEST_CASE("multi-view loader: errors name the view and the indices") {
  auto base = toy(8);
  base->augment = false;  // pixel (0, 0, 0) is the index
  // Index `short_at` yields one view fewer; index `big_at`'s crop is 3x3.
  auto odd = [](int64_t short_at, int64_t big_at) -> MultiViewTransform {
    return [=](Image im, Generator& rng) {
      int64_t index = static_cast<int64_t>(im.at(0, 0, 0));
      std::vector<Image> v = three_views(std::move(im), rng);
      if (index == short_at) v.pop_back();
      if (index == big_at) v[2] = Image(2, 3, 3);
      return v;
    };
  };
  MultiViewBatch b;
  auto first_error = [&](MultiViewTransform t) {
    auto ds = std::make_shared<MultiViewTransformedDataset>(base, t);
    MultiViewLoader loader(ds, {.batch_size = 4, .shuffle = false, .num_workers = 2});
    loader.start_epoch(0);
    return error_of([&] {
      while (loader.next(b)) {
      }
    });
  };
  CHECK(contains(first_error(odd(2, -1)),
                 "MultiViewLoader: batch 0 of epoch 0: collate_views: dataset index 2 has 2 views "
                 "but dataset index 0 has 3"));
  CHECK(contains(first_error(odd(-1, 6)),
                 "MultiViewLoader: batch 1 of epoch 0: collate_views: view 2: the image of dataset "
                 "index 6 has shape (2, 3, 3) but the image of dataset index 4 has (2, 2, 2)"));
  CHECK(first_error(odd(-1, -1)).empty());
  CHECK(error_of([&] { MultiViewLoader(nullptr, {}); }) == "MultiViewLoader: the dataset is null");
  CHECK(error_of([&] { MultiViewTransformedDataset(base, MultiViewTransform()); }) ==
        "MultiViewTransformedDataset: the transform is empty");
}
