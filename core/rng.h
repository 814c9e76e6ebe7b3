// Seeded random number generators, one stream per purpose.
//
// Separate streams (init, data, augment, dropout) mean that, e.g., turning
// dropout on does not change the data order. Each stream is xoshiro256**
// seeded through splitmix64 from (seed, stream id): same seed, same numbers.
#pragma once
#include <array>
#include <cstdint>

namespace sima {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) { manual_seed(seed); }
  void manual_seed(uint64_t seed);

  uint64_t next_u64();
  float uniform();                  // [0, 1), 24 random bits
  double uniform_double();          // [0, 1), 53 random bits
  float normal();                   // standard normal (Box-Muller)
  uint64_t randint(uint64_t n);     // uniform in [0, n), unbiased
  void fill_uniform(float* p, int64_t n, float low = 0.f, float high = 1.f);
  void fill_normal(float* p, int64_t n, float mean = 0.f, float std = 1.f);

  // The full state, for exact resume from a checkpoint.
  std::array<uint64_t, 4> state() const { return s_; }
  void set_state(const std::array<uint64_t, 4>& s) { s_ = s; }

 private:
  std::array<uint64_t, 4> s_{};
};

enum class RngStream { Init = 0, Data = 1, Augment = 2, Dropout = 3 };
constexpr int kNumRngStreams = 4;

// The process-wide generator of a stream (default seed 0).
Generator& rng(RngStream stream);
// Seeds every stream from one seed (stream i gets splitmix64(seed, i)).
void manual_seed(uint64_t seed);

}  // namespace sima
