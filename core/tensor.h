// Tensor: a cheap handle (shared_ptr) over contiguous float32 storage.
//
// Every tensor is contiguous and row-major, so every kernel is a plain loop and
// every matmul one BLAS call. Views that keep contiguity (reshape, flatten,
// slicing the leading dim) share storage through `offset`; permute/transpose copy.
//
// A tensor that requires grad is either a leaf (a parameter or an input the
// user marked) whose `.grad()` accumulates, or the output of an op, holding the
// autograd Node (`grad_fn`) that knows how to push gradients to the op's inputs.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "core/shape.h"

namespace sima {

struct Node;
class Generator;

// A block of floats from the caching allocator; returned to the cache when the last owner dies.
struct Storage {
  explicit Storage(int64_t numel);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  float* data = nullptr;
  int64_t numel = 0;
  size_t block_bytes = 0;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in floats, from storage->data
  Shape shape;
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;  // accumulated gradient (leaves only)
  std::shared_ptr<Node> grad_fn;     // the op that produced this tensor (non-leaves)
};

class Tensor {
 public:
  Tensor() = default;  // an undefined tensor (e.g. "no gradient")
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  int dim() const { return shape().ndim(); }
  int64_t numel() const { return shape().numel(); }
  int64_t size(int d) const { return shape().size(d); }

  // Raw data. The handle is shared: a const Tensor still lets you write its values,
  // as in PyTorch; use it under NoGradGuard or on tensors no graph has saved.
  float* data() const;
  float item() const;  // the value of a one-element tensor
  // Element access for tests and small tools: t.at({i, j}) with negative indices allowed.
  float& at(std::initializer_list<int64_t> index) const;

  // Differentiable copy into new storage.
  Tensor clone() const;
  // Same storage, cut from the graph, requires_grad = false.
  Tensor detach() const;

  bool requires_grad() const;
  // Marks a leaf as needing a gradient. Throws on a non-leaf (as PyTorch does).
  Tensor& requires_grad_(bool on = true);
  bool is_leaf() const;
  const std::shared_ptr<Node>& grad_fn() const;

  Tensor grad() const;  // undefined until a backward reached this leaf
  void set_grad(const Tensor& g) const;
  void zero_grad() const;  // drops the gradient (PyTorch's set_to_none=True)

  // Reverse-mode autodiff from this tensor. Without `grad`, the tensor must hold one value
  // (d self / d self = 1). The graph's saved tensors are freed unless retain_graph.
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;

  std::string str() const;  // "tensor([[1, 2], [3, 4]], shape=(2, 2))", long tensors elided
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
  void check_defined(const char* what) const;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// ---- factories -------------------------------------------------------------
Tensor empty(const Shape& shape);  // uninitialised values
Tensor zeros(const Shape& shape);
Tensor ones(const Shape& shape);
Tensor full(const Shape& shape, float value);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor scalar_tensor(float value);  // 0-d tensor
// [start, end) in steps of `step` (like torch.arange), as a 1-d tensor.
Tensor arange(float end);
Tensor arange(float start, float end, float step = 1.0f);
// Standard normal / uniform [0, 1) values from `gen` (default: the init stream).
Tensor randn(const Shape& shape);
Tensor randn(const Shape& shape, Generator& gen);
Tensor rand(const Shape& shape);
Tensor rand(const Shape& shape, Generator& gen);
// Copies `values` into a tensor of `shape` (1-d of values.size() if no shape given).
Tensor from_vector(const std::vector<float>& values);
Tensor from_vector(const std::vector<float>& values, const Shape& shape);
std::vector<float> to_vector(const Tensor& t);

// A tensor sharing t's storage with a different shape of the same numel (no copy, no autograd).
Tensor view_storage(const Tensor& t, const Shape& shape, int64_t extra_offset = 0);

}  // namespace sima
