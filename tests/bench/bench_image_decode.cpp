// bench_image_decode: images per second that read_image decodes in one thread, for 224 × 224
// JPEGs (quality 90) and PNGs written to a temporary folder. Content is a smooth colour
// gradient plus noise, closer to a photo's entropy than a flat image. Each figure is the
// median over repetitions of decoding all files (file read + decode + HWC→CHW floats).
//
//   ./build/bin/bench_image_decode [num_images] [reps]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/rng.h"
#include "data/image_io.h"

using namespace sima;
namespace fs = std::filesystem;

namespace {

double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

Image photo_like(Generator& g) {
  Image im(3, 224, 224);
  const float a = g.uniform(), b = g.uniform();
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t y = 0; y < 224; ++y)
      for (int64_t x = 0; x < 224; ++x) {
        float v = 0.5f + 0.3f * std::sin(0.03f * (x * (a + c) + y * (b + 0.5f))) + 0.08f * g.normal();
        im.at(c, y, x) = std::clamp(v, 0.f, 1.f);
      }
  return im;
}

double images_per_second(const std::vector<std::string>& files, int reps) {
  std::vector<double> times;
  double checksum = 0;
  for (int r = 0; r < reps + 1; ++r) {  // first pass warms the page cache
    double t0 = now_s();
    for (const std::string& f : files) checksum += read_image(f, 3).data[0];
    if (r > 0) times.push_back(now_s() - t0);
  }
  std::sort(times.begin(), times.end());
  if (checksum < 0) std::printf("?");
  return double(files.size()) / times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 50;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 5;
  const fs::path dir = fs::temp_directory_path() / ("sima_bench_decode_" + std::to_string(getpid()));
  fs::create_directories(dir);
  Generator g(0);
  std::vector<std::string> jpegs, pngs;
  uintmax_t jpeg_bytes = 0, png_bytes = 0;
  for (int i = 0; i < n; ++i) {
    Image im = photo_like(g);
    jpegs.push_back((dir / ("im" + std::to_string(i) + ".jpg")).string());
    pngs.push_back((dir / ("im" + std::to_string(i) + ".png")).string());
    write_jpeg(jpegs.back(), im, 90);
    write_png(pngs.back(), im);
    jpeg_bytes += fs::file_size(jpegs.back());
    png_bytes += fs::file_size(pngs.back());
  }
  std::printf("decode 224x224 RGB, one thread, %d files, median of %d passes\n", n, reps);
  std::printf("  JPEG q90 (%5.1f KB avg): %7.0f images/s\n", jpeg_bytes / 1024.0 / n, images_per_second(jpegs, reps));
  std::printf("  PNG      (%5.1f KB avg): %7.0f images/s\n", png_bytes / 1024.0 / n, images_per_second(pngs, reps));
  fs::remove_all(dir);
  return 0;
}
