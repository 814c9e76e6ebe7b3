// bench_loader: images per second the DataLoader delivers, for each worker count, over a
// dataset chosen on the command line. The caller does nothing with the batches, so this is
// the loader's ceiling (sample decoding + augmentation + collate), not a training rate.
// Images per CPU-second (all threads) shows the threading overhead even on a busy machine.
//
//   ./build/bin/bench_loader [--dataset synthetic] [--n 8192] [--size 32] [--batch 128]
//                            [--workers 0,1,2] [--epochs 3]
//
// Datasets (make_dataset below):
//   synthetic   n images of 3 x size x size made from the index, then a CIFAR-style
//               augmentation: 4-pixel zero padding, random size x size crop, random flip.
//   fashion_mnist  the installed Fashion-MNIST training set with the standard training
//                  transforms: random crop 28 with 4-pixel padding, horizontal flip, normalise.
//   jpeg_folder    an ImageFolder of --n synthetic 256x256 JPEGs (10 classes) written to a
//                  temporary folder, with DeiT's training transforms at --size (224):
//                  RandomResizedCrop (bicubic), flip, RandAugment rand-m9-mstd0.5-inc1,
//                  normalise, random erasing 0.25.
//   folder:PATH    an existing ImageFolder, with the same transforms as jpeg_folder.
// With --train MODEL (a registry name) every batch also runs a training step (forward,
// cross-entropy, backward, SGD update) for --steps steps, and the bench reports the share
// of the step time spent waiting for the loader.
#include <omp.h>

#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <filesystem>

#include "core/error.h"
#include "core/ops.h"
#include "data/idx.h"
#include "data/image_folder.h"
#include "data/image_io.h"
#include "data/loader.h"
#include "data/rand_augment.h"
#include "data/transforms.h"
#include "models/registry.h"

using namespace sima;

namespace {

// index -> a deterministic picture, then pad 4 / random crop / random horizontal flip.
class SyntheticDataset : public Dataset {
 public:
  SyntheticDataset(int64_t n, int64_t size) : n_(n), size_(size) {}
  int64_t size() const override { return n_; }
  int64_t num_classes() const override { return 10; }
  std::string describe() const override {
    return "synthetic: " + std::to_string(n_) + " images of 3x" + std::to_string(size_) + "x" +
           std::to_string(size_);
  }
  Sample get(int64_t index, Generator& rng) const override {
    const int64_t S = size_, pad = 4;
    // "Decode": a cheap integer hash per pixel, as a stand-in for reading a file.
    Image src(3, S, S);
    for (int64_t i = 0; i < src.numel(); ++i) {
      uint32_t h = static_cast<uint32_t>(index * 2654435761u) ^ static_cast<uint32_t>(i * 40503u);
      h ^= h >> 13;
      h *= 0x5bd1e995u;
      src.data[i] = static_cast<float>(h >> 24) / 255.f;
    }
    // RandomCrop(S, padding=4) + RandomHorizontalFlip.
    const int64_t oy = static_cast<int64_t>(rng.randint(2 * pad + 1)) - pad;
    const int64_t ox = static_cast<int64_t>(rng.randint(2 * pad + 1)) - pad;
    const bool flip = rng.uniform() < 0.5f;
    Image out(3, S, S);
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t y = 0; y < S; ++y)
        for (int64_t x = 0; x < S; ++x) {
          int64_t sy = y + oy, sx = (flip ? S - 1 - x : x) + ox;
          out.at(c, y, x) = (sy >= 0 && sy < S && sx >= 0 && sx < S) ? src.at(c, sy, sx) : 0.f;
        }
    return Sample{std::move(out), index % 10};
  }

 private:
  int64_t n_, size_;
};

struct Args {
  std::string dataset = "synthetic";
  int64_t n = 8192, size = 32, batch = 128, epochs = 3, steps = 20;
  std::vector<int> workers = {0, 1, 2};
  std::string train;  // registry model name: also run training steps
};

// DeiT's ImageNet training pipeline at size x size.
Transform deit_train_transform(int64_t size) {
  return transforms::compose({transforms::random_resized_crop(size), transforms::horizontal_flip(0.5),
                              RandAugment("rand-m9-mstd0.5-inc1").transform(),
                              transforms::normalize(transforms::kImageNetMean, transforms::kImageNetStd),
                              transforms::random_erasing({.probability = 0.25})});
}

// n synthetic 256x256 JPEGs in 10 class folders under a fresh temporary folder.
std::string write_jpeg_folder(int64_t n) {
  auto root = std::filesystem::temp_directory_path() / "sima_bench_jpegs";
  std::filesystem::remove_all(root);
  for (int64_t i = 0; i < n; ++i) {
    auto dir = root / ("class" + std::to_string(i % 10));
    std::filesystem::create_directories(dir);
    Image img(3, 256, 256);
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t y = 0; y < 256; ++y)
        for (int64_t x = 0; x < 256; ++x)
          img.at(c, y, x) = float((x * (c + 1) + y * (i % 7 + 1) + ((x / 16 + y / 16) % 2) * 90) % 256) / 255.f;
    write_jpeg((dir / (std::to_string(i) + ".jpg")).string(), img, 90);
  }
  return root.string();
}

// The one place that knows how to build each dataset named on the command line.
std::shared_ptr<const Dataset> make_dataset(const Args& a) {
  if (a.dataset == "synthetic") return std::make_shared<SyntheticDataset>(a.n, a.size);
  if (a.dataset == "fashion_mnist") {
    auto base = std::make_shared<IdxDataset>(IdxDataset::fashion_mnist(true));
    return std::make_shared<TransformedDataset>(
        base, transforms::compose({transforms::random_crop(28, 4, 0.f), transforms::horizontal_flip(0.5),
                                   transforms::normalize({0.2860f}, {0.3530f})}));
  }
  if (a.dataset == "jpeg_folder" || a.dataset.rfind("folder:", 0) == 0) {
    std::string root = a.dataset == "jpeg_folder" ? write_jpeg_folder(a.n) : a.dataset.substr(7);
    return std::make_shared<TransformedDataset>(std::make_shared<ImageFolderDataset>(root),
                                                deit_train_transform(a.size));
  }
  fail("--dataset: unknown dataset '", a.dataset, "' (known: synthetic, fashion_mnist, jpeg_folder, folder:PATH)");
}

int64_t parse_int(const std::string& flag, const std::string& s, int64_t lo, int64_t hi) {
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  check(!s.empty() && *end == '\0' && v >= lo && v <= hi, flag, ": expected an integer in [", lo,
        ", ", hi, "], got '", s, "'");
  return v;
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    check(i + 1 < argc, flag, ": missing value");
    std::string v = argv[++i];
    if (flag == "--dataset") a.dataset = v;
    else if (flag == "--n") a.n = parse_int(flag, v, 1, int64_t(1) << 30);
    else if (flag == "--size") a.size = parse_int(flag, v, 1, 4096);
    else if (flag == "--batch") a.batch = parse_int(flag, v, 1, 1 << 20);
    else if (flag == "--epochs") a.epochs = parse_int(flag, v, 1, 1000);
    else if (flag == "--steps") a.steps = parse_int(flag, v, 1, 1000000);
    else if (flag == "--train") a.train = v;
    else if (flag == "--workers") {
      a.workers.clear();
      size_t start = 0;
      while (start <= v.size()) {
        size_t comma = v.find(',', start);
        if (comma == std::string::npos) comma = v.size();
        a.workers.push_back(static_cast<int>(parse_int(flag, v.substr(start, comma - start), 0, 256)));
        start = comma + 1;
      }
    } else fail("unknown option '", flag, "' (options: --dataset --n --size --batch --workers --epochs --steps --train)");
  }
  return a;
}

double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// Training steps fed by the loader: the time spent in next() is time the step waited.
void train_steps(const Args& a, const std::shared_ptr<const Dataset>& ds) {
  // A registry name, or a JSON model config ('{"name": ..., "depth": 4}').
  auto model = a.train[0] == '{' ? create_model(nlohmann::json::parse(a.train)) : create_model(a.train);
  std::vector<Tensor> params = model->parameters();
  for (int w : a.workers) {
    DataLoader loader(ds, {.batch_size = a.batch, .drop_last = true, .num_workers = w, .seed = 0});
    Batch b;
    double wait = 0, total = 0;
    int64_t steps = 0, images = 0;
    for (int64_t e = 0; steps < a.steps + 2; ++e) {
      loader.start_epoch(e);
      while (steps < a.steps + 2) {
        double t0 = now_s();
        if (!loader.next(b)) break;
        double t1 = now_s();
        for (Tensor& p : params) p.zero_grad();
        Tensor loss = cross_entropy(model->forward(b.images), b.labels, 0.1f);
        loss.backward();
        {
          NoGradGuard ng;
          for (Tensor& p : params) {
            float* d = p.data();
            const float* g = p.grad().data();
            for (int64_t i = 0; i < p.numel(); ++i) d[i] -= 1e-3f * g[i];
          }
        }
        double t2 = now_s();
        if (steps >= 2) {  // two warm-up steps
          wait += t1 - t0;
          total += t2 - t0;
          images += b.images.size(0);
        }
        ++steps;
      }
    }
    std::printf("  train %s, num_workers %d: %lld steps, %.1f images/s, waiting for data %.2f%% of the step time\n",
                a.train.c_str(), w, (long long)a.steps, images / total, 100.0 * wait / total);
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Args a = parse_args(argc, argv);
    std::shared_ptr<const Dataset> ds = make_dataset(a);
    std::printf("%s, batch %lld, %lld timed epochs after one warm-up, OMP threads %d\n",
                ds->describe().c_str(), (long long)a.batch, (long long)a.epochs, omp_get_max_threads());
    if (!a.train.empty()) {
      train_steps(a, ds);
      return 0;
    }
    for (int w : a.workers) {
      DataLoader loader(ds, {.batch_size = a.batch, .num_workers = w, .seed = 0});
      Batch b;
      loader.start_epoch(0);  // warm-up: threads, allocator cache
      while (loader.next(b)) {
      }
      int64_t images = 0;
      double t0 = now_s();
      std::clock_t c0 = std::clock();  // CPU time of all threads: shows overhead under contention
      for (int64_t e = 1; e <= a.epochs; ++e) {
        loader.start_epoch(e);
        while (loader.next(b)) images += b.images.size(0);
      }
      double dt = now_s() - t0, cpu = double(std::clock() - c0) / CLOCKS_PER_SEC;
      std::printf("  num_workers %3d: %9.0f images/s %9.0f images/CPU-s (%.3f s, %lld images)\n",
                  w, images / dt, images / cpu, dt, (long long)images);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
