// Finite-difference gradient check, the proof behind every hand-written backward.
//
// For fn: inputs -> output, it draws a fixed random weight w of the output's
// shape and compares, for every element x_k of every input that requires grad,
//   analytic  dL/dx_k  from backward of L = Σ w ⊙ fn(inputs)
//   numeric   (L(x_k + ε) − L(x_k − ε)) / 2ε        (central difference)
// A random w (not ones) checks a generic vector-Jacobian product: with w = 1,
// a softmax backward that forgot its Jacobian would still pass.
// Everything is float32, so ε is large (1e-2 by default) and the tolerance loose;
// a wrong backward is still off by O(1), far outside it.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace sima {

struct GradcheckOptions {
  double eps = 1e-2;
  double atol = 2e-3;
  double rtol = 2e-2;
  uint64_t seed = 1234;
};

struct GradcheckResult {
  bool ok = true;
  std::string message;  // the first mismatch: input, element, analytic vs numeric
  double max_abs_error = 0.0;
  int64_t checked = 0;  // number of elements compared
};

using GradcheckFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Inputs that require grad are checked; their .grad is overwritten.
GradcheckResult gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& opt = {});

}  // namespace sima
