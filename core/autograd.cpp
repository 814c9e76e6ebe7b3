// The backward engine, in three steps (micrograd's idea, made iterative):
//
// 1. Walk the graph from the root with an explicit stack (no recursion, so a
//    chain of 10 000 ops is fine) and count, for every node, how many edges
//    point at it: the number of gradient contributions it will receive.
// 2. Start from the root with d(root) = grad. Pop a node whose contributions
//    have all arrived, run its backward, and push each returned gradient along
//    its edge: summed into the producer node's pending gradient (a tensor used
//    twice receives two contributions), or into a leaf's .grad. A producer
//    whose count drops to zero is ready. This is Kahn's topological order.
// 3. After a node has run, its backward lambda is destroyed, freeing what the
//    forward saved; running backward through it again is an error unless the
//    first call asked to retain the graph.
#include "core/autograd.h"

#include <unordered_map>

#include "core/error.h"
#include "core/parallel.h"

namespace sima {

namespace {
thread_local bool g_grad_mode = true;
GradReadyHook g_grad_ready_hook;  // set_grad_ready_hook

// a + b into new storage (gradients are summed out of place: a backward may hand
// the same tensor to two inputs, so neither may be modified).
Tensor add_grads(const Tensor& a, const Tensor& b) {
  Tensor out = empty(a.shape());
  const float* pa = a.data();
  const float* pb = b.data();
  float* po = out.data();
  parallel_for(a.numel(), kGrainElementwise, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) po[i] = pa[i] + pb[i];
  });
  return out;
}

void accumulate_leaf(TensorImpl& leaf, const Tensor& g) {
  if (!leaf.grad) {
    leaf.grad = g.clone().impl_ptr();  // own copy: g may be shared with other edges
  } else {
    float* dst = leaf.grad->storage->data + leaf.grad->offset;
    const float* src = g.data();
    parallel_for(g.numel(), kGrainElementwise, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) dst[i] += src[i];
    });
  }
}
}  // namespace

Node::~Node() {
  // Take over the edges of every producer that only we keep alive, so their
  // destructors run here in a loop instead of recursively.
  std::vector<std::shared_ptr<Node>> orphans;
  for (Edge& e : next)
    if (e.node && e.node.use_count() == 1) orphans.push_back(std::move(e.node));
  while (!orphans.empty()) {
    std::shared_ptr<Node> n = std::move(orphans.back());
    orphans.pop_back();
    for (Edge& e : n->next)
      if (e.node && e.node.use_count() == 1) orphans.push_back(std::move(e.node));
    n->backward = nullptr;  // saved tensors may own further graphs only via detached data
  }  // n dies here with its edges already emptied
}

bool grad_mode_enabled() { return g_grad_mode; }
void set_grad_ready_hook(GradReadyHook hook) { g_grad_ready_hook = std::move(hook); }
NoGradGuard::NoGradGuard() : prev_(g_grad_mode) { g_grad_mode = false; }
NoGradGuard::~NoGradGuard() { g_grad_mode = prev_; }

bool needs_grad_list(const std::vector<Tensor>& ts) {
  if (!grad_mode_enabled()) return false;
  for (const Tensor& t : ts)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

void attach_grad_fn(Tensor& out, const char* name, const std::vector<Tensor>& inputs,
                    BackwardFn fn) {
  if (!needs_grad_list(inputs)) return;
  auto node = std::make_shared<Node>();
  node->name = name;
  node->backward = std::move(fn);
  node->next.reserve(inputs.size());
  for (const Tensor& in : inputs) {
    Edge e;
    if (in.defined() && in.requires_grad()) {
      if (in.grad_fn()) e.node = in.grad_fn();
      else e.leaf = in.impl_ptr();
      e.shape = in.shape();
    }
    node->next.push_back(std::move(e));
  }
  out.impl()->grad_fn = std::move(node);
  out.impl()->requires_grad = true;
}

void run_backward(const Tensor& root, const Tensor& grad_in, bool retain_graph) {
  check(root.defined(), "backward: called on an undefined tensor");
  check(root.requires_grad(),
        "backward: the tensor does not require grad (no input of the graph requires grad)");
  Tensor grad = grad_in;
  if (!grad.defined()) {
    check(root.numel() == 1, "backward: a gradient must be given for a non-scalar output of shape ",
          root.shape());
    grad = ones(root.shape());
  }
  check(grad.shape() == root.shape(), "backward: gradient of shape ", grad.shape(),
        " for an output of shape ", root.shape());

  NoGradGuard no_grad;  // backward formulas build no graph of their own
  if (!root.grad_fn()) {
    accumulate_leaf(*root.impl(), grad);
    if (g_grad_ready_hook) g_grad_ready_hook(*root.impl());
    return;
  }

  // 1. Count the contributions each node will receive (and, for the grad-ready hook, each leaf).
  const bool hook = static_cast<bool>(g_grad_ready_hook);
  std::unordered_map<Node*, int> pending;
  std::unordered_map<TensorImpl*, int> leaf_pending;
  std::vector<Node*> stack{root.grad_fn().get()};
  pending[stack[0]] = 0;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next) {
      if (hook && e.leaf) leaf_pending[e.leaf.get()]++;
      if (!e.node) continue;
      auto [it, first_visit] = pending.try_emplace(e.node.get(), 0);
      it->second++;
      if (first_visit) stack.push_back(e.node.get());
    }
  }

  // 2. Run nodes in topological order.
  std::unordered_map<Node*, Tensor> grads;
  grads[root.grad_fn().get()] = grad;
  std::vector<Node*> ready{root.grad_fn().get()};
  while (!ready.empty()) {
    Node* n = ready.back();
    ready.pop_back();
    Tensor g = std::move(grads[n]);
    grads.erase(n);
    Grads in_grads;
    if (g.defined()) {  // a node no gradient reached passes none on
      check(!n->released, "backward: trying to backward through the graph a second time (",
            n->name, "'s saved tensors were freed); pass retain_graph=true to the first backward");
      in_grads = n->backward(g);
      check(in_grads.size() == n->next.size(), "internal: backward of ", n->name, " returned ",
            in_grads.size(), " gradients for ", n->next.size(), " inputs");
      if (!retain_graph) {  // 3. free the saved state
        n->backward = nullptr;
        n->released = true;
      }
    }
    for (size_t i = 0; i < n->next.size(); ++i) {
      const Edge& e = n->next[i];
      const Tensor* gi = i < in_grads.size() && in_grads[i].defined() ? &in_grads[i] : nullptr;
      if (gi)
        check(gi->shape() == e.shape, "internal: backward of ", n->name, " returned a gradient of shape ",
              gi->shape(), " for input ", i, " of shape ", e.shape);
      if (e.node) {
        Node* p = e.node.get();
        if (gi) {
          auto it = grads.find(p);
          if (it == grads.end() || !it->second.defined()) grads[p] = *gi;
          else it->second = add_grads(it->second, *gi);
        }
        if (--pending[p] == 0) ready.push_back(p);
      } else if (e.leaf) {
        if (gi) accumulate_leaf(*e.leaf, *gi);
        if (hook && --leaf_pending[e.leaf.get()] == 0) g_grad_ready_hook(*e.leaf);
      }
    }
  }
}

}  // namespace sima
