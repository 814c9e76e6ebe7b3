// Shape: up to 6 dimensions, stored inline (no heap allocation), plus the
// helpers every op needs: dim wrapping, numel, broadcasting, row-major strides.
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <string>
#include <vector>

namespace sima {

constexpr int kMaxDims = 6;

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(const std::vector<int64_t>& dims);

  int ndim() const { return ndim_; }
  int64_t operator[](int i) const { return d_[i]; }
  int64_t& operator[](int i) { return d_[i]; }
  int64_t numel() const;
  // Size of dimension i, where negative i counts from the end (size(-1) = last dim).
  int64_t size(int i) const;
  const int64_t* begin() const { return d_.data(); }
  const int64_t* end() const { return d_.data() + ndim_; }

  void push_back(int64_t n);
  std::vector<int64_t> vec() const { return {begin(), end()}; }
  std::string str() const;  // "(2, 3, 4)"

  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }

 private:
  std::array<int64_t, kMaxDims> d_{};
  int ndim_ = 0;
};

std::ostream& operator<<(std::ostream& os, const Shape& s);

// Wrap a possibly negative dim into [0, ndim); throws naming `op` if out of range.
int wrap_dim(int dim, int ndim, const char* op);

// numpy broadcasting of two shapes; throws naming `op` when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// Row-major strides of a contiguous tensor of this shape (in elements).
std::array<int64_t, kMaxDims> contiguous_strides(const Shape& s);

// Product of dims [from, to).
int64_t prod(const Shape& s, int from, int to);

}  // namespace sima
