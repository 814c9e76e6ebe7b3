// Reverse-mode automatic differentiation on a dynamic graph.
//
// Every op that produces a tensor needing a gradient attaches a Node to it:
//
//     Tensor y = ...forward kernel...;
//     if (needs_grad(x))
//       attach_grad_fn(y, "exp", {x}, [y_saved = y.detach()](const Tensor& gy) -> Grads {
//         return {mul(gy, y_saved)};        // dy/dx = exp(x) = y
//       });
//
// The lambda is the op's backward: given dL/dy it returns dL/d(input) for each
// input (an undefined Tensor where an input needs none). Whatever it captures
// is the op's saved state; the engine destroys the lambda after running it,
// which frees that state. See autograd.cpp for the engine itself.
#pragma once
#include <functional>
#include <initializer_list>
#include <memory>
#include <vector>

#include "core/tensor.h"

namespace sima {

using Grads = std::vector<Tensor>;
using BackwardFn = std::function<Grads(const Tensor& grad_output)>;

// Where a gradient flows from a node: into another node, or into a leaf's .grad.
struct Edge {
  std::shared_ptr<Node> node;        // the producer of the input, if it has one
  std::shared_ptr<TensorImpl> leaf;  // the input itself, if it is a leaf requiring grad
  Shape shape;                       // the input's shape, to check what backward returns
};

struct Node {
  Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  ~Node();  // iterative: dropping a 100 000-node chain must not recurse 100 000 deep
  const char* name = "";
  std::vector<Edge> next;  // one per op input, in order
  BackwardFn backward;     // reset after use: frees saved tensors
  bool released = false;
};

// Gradient mode: ops record the graph only while it is enabled (the default).
bool grad_mode_enabled();
struct NoGradGuard {
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// True if grad mode is on and any of the tensors requires grad.
template <class... Ts>
bool needs_grad(const Ts&... ts) {
  return grad_mode_enabled() && (... || (ts.defined() && ts.requires_grad()));
}
bool needs_grad_list(const std::vector<Tensor>& ts);

// Makes `out` a non-leaf produced by op `name` from `inputs`, with `fn` as its backward.
void attach_grad_fn(Tensor& out, const char* name, const std::vector<Tensor>& inputs,
                    BackwardFn fn);

// The engine: d(root)/d(leaves) given d(loss)/d(root) = grad.
void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph);

// Gradient-ready hook, for data-parallel training (train/distributed/distributed.h starts
// all-reducing a bucket of gradients while backward still runs). While set, run_backward calls it
// once per leaf the graph reaches, as soon as every contribution to that leaf's .grad of this
// backward has been accumulated (its .grad may still be undefined: no gradient reached it). The
// order is backward's, the same for the same graph. An empty function removes the hook.
using GradReadyHook = std::function<void(TensorImpl& leaf)>;
void set_grad_ready_hook(GradReadyHook hook);

}  // namespace sima
