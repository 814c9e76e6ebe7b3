// Reductions over one or more dims (PyTorch semantics; negative dims count from the end).
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace sima {

// Over all elements -> 0-d tensor.
Tensor sum(const Tensor& x);
Tensor mean(const Tensor& x);
// Over `dims` (each once); keepdim keeps them as size 1. An empty `dims` reduces every
// dim, as torch.sum(x, dim=[]) does. Sums accumulate in double, deterministically.
Tensor sum(const Tensor& x, const std::vector<int>& dims, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int>& dims, bool keepdim = false);
// Variance with Bessel-style `correction` (1 = unbiased, torch's default; 0 = population).
Tensor var(const Tensor& x, const std::vector<int>& dims, int64_t correction = 1,
           bool keepdim = false);

// torch.max(x, dim): values (differentiable; the gradient goes to the first maximal
// element) and the index of that element along `dim`, laid out like `values`.
struct MaxResult {
  Tensor values;
  std::vector<int64_t> indices;
};
MaxResult max(const Tensor& x, int dim, bool keepdim = false);
// Over all elements -> 0-d; the gradient goes to the first maximal element (torch splits it
// evenly between tied maxima here). NaN counts as the maximum, as in torch.
Tensor max(const Tensor& x);
std::vector<int64_t> argmax(const Tensor& x, int dim);

}  // namespace sima
