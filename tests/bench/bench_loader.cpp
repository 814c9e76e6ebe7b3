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
// To add one (Fashion-MNIST through data/idx.h, an ImageFolder), add a branch to make_dataset.
#include <omp.h>

#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/loader.h"

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
  int64_t n = 8192, size = 32, batch = 128, epochs = 3;
  std::vector<int> workers = {0, 1, 2};
};

// The one place that knows how to build each dataset named on the command line.
std::shared_ptr<const Dataset> make_dataset(const Args& a) {
  if (a.dataset == "synthetic") return std::make_shared<SyntheticDataset>(a.n, a.size);
  fail("--dataset: unknown dataset '", a.dataset, "' (known: synthetic)");
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
    else if (flag == "--workers") {
      a.workers.clear();
      size_t start = 0;
      while (start <= v.size()) {
        size_t comma = v.find(',', start);
        if (comma == std::string::npos) comma = v.size();
        a.workers.push_back(static_cast<int>(parse_int(flag, v.substr(start, comma - start), 0, 256)));
        start = comma + 1;
      }
    } else fail("unknown option '", flag, "' (options: --dataset --n --size --batch --workers --epochs)");
  }
  return a;
}

double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Args a = parse_args(argc, argv);
    std::shared_ptr<const Dataset> ds = make_dataset(a);
    std::printf("%s, batch %lld, %lld timed epochs after one warm-up, OMP threads %d\n",
                ds->describe().c_str(), (long long)a.batch, (long long)a.epochs, omp_get_max_threads());
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
