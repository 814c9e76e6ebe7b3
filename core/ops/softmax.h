// softmax, log_softmax and cross-entropy, fused (max-subtracted, one node each).
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace sima {

Tensor softmax(const Tensor& x, int dim);
Tensor log_softmax(const Tensor& x, int dim);

enum class Reduction { Mean, Sum, None };

// F.cross_entropy on logits (B, C) with integer class targets (B), each in [0, C).
// label_smoothing ε mixes the one-hot target with uniform: (1-ε)·onehot + ε/C.
// Mean averages over the batch; None returns (B).
Tensor cross_entropy(const Tensor& logits, const std::vector<int64_t>& target,
                     float label_smoothing = 0.0f, Reduction reduction = Reduction::Mean);
// With soft targets (B, C) (rows of probabilities, e.g. from mixup); smoothing applies on top.
Tensor cross_entropy(const Tensor& logits, const Tensor& target_probs,
                     float label_smoothing = 0.0f, Reduction reduction = Reduction::Mean);

}  // namespace sima
