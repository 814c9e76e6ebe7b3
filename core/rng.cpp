#include "core/rng.h"

#include <cmath>

namespace sima {
namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

void Generator::manual_seed(uint64_t seed) {
  uint64_t x = seed;
  for (auto& w : s_) w = splitmix64(x);
}

uint64_t Generator::next_u64() {  // xoshiro256** (Blackman & Vigna)
  uint64_t result = rotl(s_[1] * 5, 7) * 9;
  uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

float Generator::uniform() { return static_cast<float>(next_u64() >> 40) * 0x1.0p-24f; }
double Generator::uniform_double() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

float Generator::normal() {
  // Box-Muller; 1 - u keeps the log argument in (0, 1].
  double u1 = 1.0 - uniform_double(), u2 = uniform_double();
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

uint64_t Generator::randint(uint64_t n) {
  if (n <= 1) return 0;
  // Rejection sampling: drop the top partial block of 2^64 mod n values.
  uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t r;
  do r = next_u64();
  while (r >= limit);
  return r % n;
}

void Generator::fill_uniform(float* p, int64_t n, float low, float high) {
  for (int64_t i = 0; i < n; ++i) p[i] = low + (high - low) * uniform();
}

void Generator::fill_normal(float* p, int64_t n, float mean, float std) {
  for (int64_t i = 0; i < n; ++i) p[i] = mean + std * normal();
}

namespace {
void seed_streams(Generator* g, uint64_t seed) {
  for (int i = 0; i < kNumRngStreams; ++i) {
    uint64_t x = seed ^ (0x5851F42D4C957F2Dull * static_cast<uint64_t>(i + 1));
    g[i].manual_seed(splitmix64(x));
  }
}
Generator* streams() {
  static Generator* g = [] {
    auto* s = new Generator[kNumRngStreams];
    seed_streams(s, 0);
    return s;
  }();
  return g;
}
}  // namespace

Generator& rng(RngStream stream) { return streams()[static_cast<int>(stream)]; }

void manual_seed(uint64_t seed) { seed_streams(streams(), seed); }

}  // namespace sima
