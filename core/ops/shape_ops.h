// Shape ops. Tensors are always contiguous: reshape/flatten/squeeze and slicing
// the leading dim share storage (views); permute/transpose/narrow on inner dims
// copy. All are differentiable.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace sima {

// New shape with the same numel; one entry may be -1 (inferred). Shares storage.
Tensor reshape(const Tensor& x, const std::vector<int64_t>& shape);
inline Tensor view(const Tensor& x, const std::vector<int64_t>& shape) { return reshape(x, shape); }
// Merges dims [start_dim, end_dim] into one.
Tensor flatten(const Tensor& x, int start_dim = 0, int end_dim = -1);
Tensor unsqueeze(const Tensor& x, int dim);
Tensor squeeze(const Tensor& x, int dim);  // dim must have size 1

Tensor permute(const Tensor& x, const std::vector<int>& dims);  // copies
Tensor transpose(const Tensor& x, int dim0, int dim1);          // copies
// Every tensor here is contiguous already: returns a differentiable copy.
Tensor contiguous(const Tensor& x);

// x.narrow(dim, start, length): a view (shared storage) when every dim before `dim` has
// size 1, else a copy. A negative start counts from the end.
Tensor narrow(const Tensor& x, int dim, int64_t start, int64_t length);
// x[..., start:end, ...] along dim (end exclusive, negative start/end count from the end).
Tensor slice(const Tensor& x, int dim, int64_t start, int64_t end);

Tensor cat(const std::vector<Tensor>& xs, int dim);
Tensor stack(const std::vector<Tensor>& xs, int dim);
// Pieces of split_size along dim (the last may be smaller), as torch.split; each piece is
// a narrow of x (so a view when narrow makes one).
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int dim);
std::vector<Tensor> split_with_sizes(const Tensor& x, const std::vector<int64_t>& sizes, int dim);
// `chunks` pieces of ceil(size/chunks), as torch.chunk.
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int dim);

// Broadcast to `sizes` (-1 keeps a dim), materialised; backward sums over expanded dims.
Tensor expand(const Tensor& x, const std::vector<int64_t>& sizes);
// Rows of x (dim 0) picked by index (repeats allowed; backward scatters-adds).
Tensor index_select(const Tensor& x, int dim, const std::vector<int64_t>& index);
// F.pad with constant value: pads = (last_lo, last_hi, second_last_lo, second_last_hi, ...).
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, float value = 0.0f);

}  // namespace sima
