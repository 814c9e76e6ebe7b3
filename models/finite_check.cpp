#include "models/finite_check.h"

#include <atomic>
#include <cstring>
#include <sstream>

#include "core/error.h"

namespace sima {

namespace {

std::atomic<bool> g_allow_nonfinite{false};

// Index of the first NaN / inf of t, or -1.
int64_t first_nonfinite_index(const Tensor& t) {
  const float* x = t.data();  // every tensor is contiguous (core/tensor.h)
  const int64_t n = t.numel();
  constexpr int64_t kBlock = 4096;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t m = std::min(kBlock, n - b);
    if (!has_nonfinite(x + b, m)) continue;
    for (int64_t j = b; j < b + m; ++j)
      if (has_nonfinite(x + j, 1)) return j;
  }
  return -1;
}

template <class Tensors>
void check_all(const Tensors& tensors, const std::string& file, bool saving) {
  if (allow_nonfinite_weights()) return;
  for (const auto& [name, t] : tensors) {
    if (!t.defined() || t.numel() == 0) continue;
    const int64_t j = first_nonfinite_index(t);
    if (j < 0) continue;
    std::ostringstream value;
    value << t.data()[j];
    fail(file, ": ", saving ? "refusing to write: " : "", "tensor '", name, "' holds a non-finite value (", value.str(),
         " at element ", j, " of ", t.numel(), ")", saving ? "; the weights have diverged" : "",
         ". Pass --allow-nonfinite to ", saving ? "write" : "load", " it anyway (for debugging)");
  }
}

}  // namespace

bool has_nonfinite(const float* x, int64_t n) {
  uint32_t any = 0;  // OR of (exponent bits all set) over the block
  for (int64_t j = 0; j < n; ++j) {
    uint32_t bits;
    std::memcpy(&bits, x + j, sizeof bits);
    any |= uint32_t((bits & 0x7f800000u) == 0x7f800000u);
  }
  return any != 0;
}

void set_allow_nonfinite_weights(bool allow) { g_allow_nonfinite.store(allow); }
bool allow_nonfinite_weights() { return g_allow_nonfinite.load(); }

void check_finite_weights(const NamedTensors& tensors, const std::string& file, bool saving) {
  check_all(tensors, file, saving);
}
void check_finite_weights(const StateDict& tensors, const std::string& file, bool saving) {
  check_all(tensors, file, saving);
}

}  // namespace sima
