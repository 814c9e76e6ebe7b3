// Checked int64 arithmetic for counts derived from user values (steps = epochs × steps per
// epoch, bytes = batch × pixels × 4, ...). A product that does not fit is a sima::Error
// naming the key at fault and the largest value it may take, never a wrapped count.
//
//   int64_t total = checked_mul(c.train.epochs, steps_per_epoch, "train.epochs",
//                               "steps per epoch");
//   // "train.epochs: 4611686018427387904 × 469 steps per epoch overflows a 64-bit count;
//   //  the largest allowed is 19665884954274682"
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "core/error.h"

namespace sima {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

// value · factor for value, factor >= 0; `key` names value, `factor_what` says what factor is.
inline int64_t checked_mul(int64_t value, int64_t factor, const std::string& key, const std::string& factor_what) {
  int64_t out = 0;
  if (!__builtin_mul_overflow(value, factor, &out)) return out;
  fail(key, ": ", value, " × ", factor, " ", factor_what, " overflows a 64-bit count; the largest allowed is ",
       factor > 0 ? kInt64Max / factor : kInt64Max);
}

// value + addend, `key` naming value.
inline int64_t checked_add(int64_t value, int64_t addend, const std::string& key, const std::string& addend_what) {
  int64_t out = 0;
  if (!__builtin_add_overflow(value, addend, &out)) return out;
  fail(key, ": ", value, " + ", addend, " ", addend_what, " overflows a 64-bit count; the largest allowed is ",
       kInt64Max - addend);
}

// llround(value · factor) for a non-negative double value (epochs may be fractional);
// `key` names value.
inline int64_t checked_round_mul(double value, int64_t factor, const std::string& key, const std::string& factor_what) {
  const double x = value * double(factor);
  // 2^63 is exactly representable; every double below it converts without overflow.
  if (x < 9223372036854775808.0) return std::llround(x);
  fail(key, ": ", value, " × ", factor, " ", factor_what, " overflows a 64-bit count; the largest allowed is ",
       double(kInt64Max) / double(factor > 0 ? factor : 1));
}

}  // namespace sima
