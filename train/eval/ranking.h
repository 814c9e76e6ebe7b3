// Where a class ranks among a row of scores (logits, k-NN votes): the one rule every top-k
// figure of evaluate.h and feature_eval.h counts with, so a summary, its per-class table and
// its confusion matrix always agree.
//
// Order: decreasing score, ties broken by the lower class index first (rank 0 is the class
// torch.argmax returns); a NaN score ranks as -inf, below every number, so a row always has
// a first maximum.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>

namespace sima {

template <class T>
T rank_value(T v) {
  return std::isnan(v) ? -std::numeric_limits<T>::infinity() : v;
}

// The rank of class `label` in row[0 .. C).
template <class T>
int64_t rank_of(const T* row, int64_t C, int64_t label) {
  const T v = rank_value(row[label]);
  int64_t rank = 0;
  for (int64_t j = 0; j < C; ++j) {
    const T u = rank_value(row[j]);
    rank += u > v || (u == v && j < label);
  }
  return rank;
}

}  // namespace sima
