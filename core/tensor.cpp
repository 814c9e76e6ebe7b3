#include "core/tensor.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <ostream>
#include <sstream>

#include "core/allocator.h"
#include "core/autograd.h"
#include "core/error.h"
#include "core/rng.h"

namespace sima {

// ---- storage ----------------------------------------------------------------

Storage::Storage(int64_t n) : numel(n) {
  // Refuse absurd sizes before asking for memory (a hostile shape must not overflow).
  constexpr int64_t kMaxNumel = std::numeric_limits<int64_t>::max() / 8;
  check(n >= 0 && n < kMaxNumel, "tensor of ", n, " elements is too large");
  data = static_cast<float*>(storage_alloc(static_cast<size_t>(n) * sizeof(float), &block_bytes));
}

Storage::~Storage() { storage_free(data, block_bytes); }

// ---- handle -----------------------------------------------------------------

void Tensor::check_defined(const char* what) const {
  check(impl_ != nullptr, what, ": the tensor is undefined");
}

const Shape& Tensor::shape() const {
  check_defined("shape");
  return impl_->shape;
}

float* Tensor::data() const {
  check_defined("data");
  return impl_->storage->data + impl_->offset;
}

float Tensor::item() const {
  check_defined("item");
  check(numel() == 1, "item: the tensor has ", numel(), " elements, shape ", shape());
  return data()[0];
}

float& Tensor::at(std::initializer_list<int64_t> index) const {
  check_defined("at");
  const Shape& s = shape();
  check(static_cast<int>(index.size()) == s.ndim(), "at: ", index.size(),
        " indices for a tensor of shape ", s);
  int64_t flat = 0;
  int d = 0;
  for (int64_t i : index) {
    int64_t n = s[d];
    check(i >= -n && i < n, "at: index ", i, " out of range for dim ", d, " of shape ", s);
    flat = flat * n + (i < 0 ? i + n : i);
    ++d;
  }
  return data()[flat];
}

Tensor Tensor::clone() const {
  check_defined("clone");
  Tensor out = empty(shape());
  std::memcpy(out.data(), data(), sizeof(float) * numel());
  if (needs_grad(*this))
    attach_grad_fn(out, "clone", {*this}, [](const Tensor& g) -> Grads { return {g}; });
  return out;
}

Tensor Tensor::detach() const {
  check_defined("detach");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->offset = impl_->offset;
  impl->shape = impl_->shape;
  return Tensor(std::move(impl));
}

bool Tensor::requires_grad() const { return impl_ && impl_->requires_grad; }

Tensor& Tensor::requires_grad_(bool on) {
  check_defined("requires_grad_");
  check(!impl_->grad_fn, "requires_grad_: only leaf tensors can change requires_grad; "
                         "use detach() to make a new leaf");
  impl_->requires_grad = on;
  return *this;
}

bool Tensor::is_leaf() const { return impl_ && !impl_->grad_fn; }

const std::shared_ptr<Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<Node> none;
  return impl_ ? impl_->grad_fn : none;
}

Tensor Tensor::grad() const {
  check_defined("grad");
  return Tensor(impl_->grad);
}

void Tensor::set_grad(const Tensor& g) const {
  check_defined("set_grad");
  check(!g.defined() || g.shape() == shape(), "set_grad: gradient of shape ", g.shape(),
        " for a tensor of shape ", shape());
  impl_->grad = g.impl_ptr();
}

void Tensor::zero_grad() const {
  check_defined("zero_grad");
  impl_->grad.reset();
}

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  run_backward(*this, grad, retain_graph);
}

// ---- printing ---------------------------------------------------------------

namespace {
void print_rec(std::ostream& os, const float* p, const Shape& s, int d, int64_t stride_prod) {
  constexpr int64_t kEdge = 3;  // elements shown at each end of a long dimension
  int64_t n = s[d];
  int64_t inner = stride_prod / n;
  os << '[';
  for (int64_t i = 0; i < n; ++i) {
    if (n > 2 * kEdge + 1 && i == kEdge) {
      os << "..., ";
      i = n - kEdge - 1;
      continue;
    }
    if (d + 1 == s.ndim()) os << p[i];
    else print_rec(os, p + i * inner, s, d + 1, inner);
    if (i + 1 < n) os << ", ";
  }
  os << ']';
}
}  // namespace

std::string Tensor::str() const {
  if (!impl_) return "tensor(undefined)";
  std::ostringstream os;
  os << "tensor(";
  if (dim() == 0) os << data()[0];
  else if (numel() == 0) os << "[]";
  else print_rec(os, data(), shape(), 0, numel());
  os << ", shape=" << shape();
  if (requires_grad()) os << ", requires_grad";
  os << ')';
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

// ---- factories --------------------------------------------------------------

Tensor empty(const Shape& shape) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(shape.numel());
  impl->shape = shape;
  return Tensor(std::move(impl));
}

Tensor full(const Shape& shape, float value) {
  Tensor t = empty(shape);
  float* p = t.data();
  for (int64_t i = 0, n = t.numel(); i < n; ++i) p[i] = value;
  return t;
}

Tensor zeros(const Shape& shape) {
  Tensor t = empty(shape);
  std::memset(t.data(), 0, sizeof(float) * t.numel());
  return t;
}
Tensor ones(const Shape& shape) { return full(shape, 1.0f); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape()); }
Tensor scalar_tensor(float value) { return full(Shape{}, value); }

Tensor arange(float end) { return arange(0.0f, end, 1.0f); }
Tensor arange(float start, float end, float step) {
  check(step != 0.0f && std::isfinite(start) && std::isfinite(end) && std::isfinite(step),
        "arange: invalid range start=", start, " end=", end, " step=", step);
  double n = std::ceil((static_cast<double>(end) - start) / step);
  int64_t count = n > 0 ? static_cast<int64_t>(n) : 0;
  Tensor t = empty(Shape{count});
  for (int64_t i = 0; i < count; ++i) t.data()[i] = static_cast<float>(start + i * static_cast<double>(step));
  return t;
}

Tensor randn(const Shape& shape, Generator& gen) {
  Tensor t = empty(shape);
  gen.fill_normal(t.data(), t.numel());
  return t;
}
Tensor randn(const Shape& shape) { return randn(shape, rng(RngStream::Init)); }

Tensor rand(const Shape& shape, Generator& gen) {
  Tensor t = empty(shape);
  gen.fill_uniform(t.data(), t.numel());
  return t;
}
Tensor rand(const Shape& shape) { return rand(shape, rng(RngStream::Init)); }

Tensor from_vector(const std::vector<float>& values) {
  return from_vector(values, Shape{static_cast<int64_t>(values.size())});
}

Tensor from_vector(const std::vector<float>& values, const Shape& shape) {
  check(static_cast<int64_t>(values.size()) == shape.numel(), "from_vector: ", values.size(),
        " values for shape ", shape, " (", shape.numel(), " elements)");
  Tensor t = empty(shape);
  if (!values.empty()) std::memcpy(t.data(), values.data(), sizeof(float) * values.size());
  return t;
}

std::vector<float> to_vector(const Tensor& t) { return {t.data(), t.data() + t.numel()}; }

Tensor view_storage(const Tensor& t, const Shape& shape, int64_t extra_offset) {
  check(extra_offset >= 0 &&
            t.impl()->offset + extra_offset + shape.numel() <= t.impl()->storage->numel,
        "view: shape ", shape, " at offset ", extra_offset, " does not fit in a tensor of shape ",
        t.shape());
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = t.impl()->storage;
  impl->offset = t.impl()->offset + extra_offset;
  impl->shape = shape;
  return Tensor(std::move(impl));
}

}  // namespace sima
