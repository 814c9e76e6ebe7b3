// Helpers shared by the attention tests: fused-vs-composed comparison, module set-up.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "nn/attention/attention.h"
#include "nn/init.h"
#include "testing.h"

namespace sima::testing {

using AttnFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Max |a − b| / max |b|: the error relative to the scale of the expected tensor.
inline float rel_error(const Tensor& got, const Tensor& expected) {
  REQUIRE(got.shape() == expected.shape());
  float scale = 0.f;
  for (int64_t i = 0; i < expected.numel(); ++i) scale = std::fmax(scale, std::fabs(expected.data()[i]));
  return max_abs_diff(got, expected) / std::fmax(scale, 1e-30f);
}

// Fresh leaf copies of `inputs` (same requires_grad).
inline std::vector<Tensor> leaf_copies(const std::vector<Tensor>& inputs) {
  std::vector<Tensor> c;
  for (const Tensor& t : inputs) {
    Tensor d = t.detach().clone();
    d.requires_grad_(t.requires_grad());
    c.push_back(d);
  }
  return c;
}

// Runs a and b on fresh copies of `inputs`, backward with one random gradient, and checks
// that the outputs and every input gradient agree to `rel` (relative to the tensor's scale).
inline void check_same_fn(const AttnFn& a, const AttnFn& b, const std::vector<Tensor>& inputs,
                          float rel = 1e-4f, uint64_t grad_seed = 77) {
  std::vector<Tensor> xa = leaf_copies(inputs), xb = leaf_copies(inputs);
  Tensor ya = a(xa), yb = b(xb);
  {
    INFO("forward");
    CHECK(rel_error(ya, yb) <= rel);
  }
  Generator g(grad_seed);
  Tensor gy = randn(ya.shape(), g);
  ya.backward(gy);
  yb.backward(gy);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].requires_grad()) continue;
    INFO("gradient of input " << i);
    REQUIRE(xa[i].grad().defined());
    REQUIRE(xb[i].grad().defined());
    CHECK(rel_error(xa[i].grad(), xb[i].grad()) <= rel);
  }
}

inline bool all_finite(const Tensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!std::isfinite(t.data()[i])) return false;
  return true;
}

// Sets every Linear weight and bias of an attention module to N(0, std²) from a seeded stream,
// so a gradcheck sees modest, generic values.
inline void randomize_linears(Attention& m, uint64_t seed, float std = 0.4f) {
  Generator g(seed);
  for (const Tensor& t : {m.qkv->weight, m.qkv->bias, m.proj->weight, m.proj->bias})
    if (t.defined()) normal_(t, 0.f, std, g);
}

// Gradcheck of a module's forward w.r.t. x and every parameter.
inline void gradcheck_module(Attention& m, const Tensor& x, const GradcheckOptions& opt = {}) {
  std::vector<Tensor> inputs{x};
  std::vector<std::string> names{"x"};
  for (auto& [name, p] : m.named_parameters()) {
    inputs.push_back(p);
    names.push_back(name);
  }
  auto r = gradcheck([&m](const std::vector<Tensor>& in) { return m.forward(in[0]); }, inputs, opt);
  std::string all;
  for (auto& n : names) all += n + " ";
  INFO("inputs: " << all << "| " << r.message);
  CHECK(r.ok);
  int64_t expected = 0;
  for (auto& t : inputs) expected += t.numel();
  CHECK(r.checked == expected);
}

}  // namespace sima::testing
