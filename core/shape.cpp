#include "core/shape.h"

#include <algorithm>
#include <ostream>
#include <sstream>

#include "core/error.h"

namespace sima {

Shape::Shape(std::initializer_list<int64_t> dims) : Shape(std::vector<int64_t>(dims)) {}

Shape::Shape(const std::vector<int64_t>& dims) {
  check(dims.size() <= kMaxDims, "Shape: ", dims.size(), " dimensions, at most ", kMaxDims,
        " are supported");
  for (int64_t n : dims) {
    check(n >= 0, "Shape: negative dimension ", n);
    d_[ndim_++] = n;
  }
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim_; ++i)
    if (__builtin_mul_overflow(n, d_[i], &n)) fail("Shape: ", str(), " has too many elements");
  return n;
}

int64_t Shape::size(int i) const { return d_[wrap_dim(i, ndim_, "size")]; }

void Shape::push_back(int64_t n) {
  check(ndim_ < kMaxDims, "Shape: at most ", kMaxDims, " dimensions are supported");
  check(n >= 0, "Shape: negative dimension ", n);
  d_[ndim_++] = n;
}

std::string Shape::str() const {
  std::ostringstream os;
  os << '(';
  for (int i = 0; i < ndim_; ++i) os << (i ? ", " : "") << d_[i];
  os << ')';
  return os.str();
}

bool Shape::operator==(const Shape& o) const {
  if (ndim_ != o.ndim_) return false;
  for (int i = 0; i < ndim_; ++i)
    if (d_[i] != o.d_[i]) return false;
  return true;
}

std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << s.str(); }

int wrap_dim(int dim, int ndim, const char* op) {
  // A 0-d tensor accepts dim 0 / -1, as in PyTorch.
  int n = ndim == 0 ? 1 : ndim;
  check(dim >= -n && dim < n, op, ": dim ", dim, " out of range for a ", ndim, "-d tensor");
  return dim < 0 ? dim + n : dim;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  int n = std::max(a.ndim(), b.ndim());
  std::vector<int64_t> out(n);
  for (int i = 0; i < n; ++i) {
    int ia = a.ndim() - n + i, ib = b.ndim() - n + i;
    int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    check(da == db || da == 1 || db == 1, op, ": shapes ", a, " and ", b, " cannot be broadcast");
    out[i] = da == 1 ? db : da;
  }
  return Shape(out);
}

std::array<int64_t, kMaxDims> contiguous_strides(const Shape& s) {
  std::array<int64_t, kMaxDims> st{};
  int64_t acc = 1;
  for (int i = s.ndim() - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}

int64_t prod(const Shape& s, int from, int to) {
  int64_t p = 1;
  for (int i = from; i < to; ++i) p *= s[i];
  return p;
}

}  // namespace sima
