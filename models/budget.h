// The size of a model, from its config alone: checked against the memory limit
// (core/memory_limit.h) BEFORE any tensor is created, so a config whose numbers are absurd
// (embed_dim 10^6, depth 10^5, ...) fails at once with a message naming the keys that make it
// large, instead of zero-filling gigabytes first.
//
//   count_parameters(cfg)   exact: equals create_model(cfg)->num_parameters() (tests/models/test_budget.cpp
//                           checks every registered model and every config in configs/)
//   activation_bytes(cfg)   rough: the float32 tensors one training sample keeps for backward,
//                           per block about tokens · (10 · width + 2 · mlp hidden) values, plus
//                           heads · tokens² · 2 for the variants that form the N × N map
//                           (softmax, relu); within a small factor of the real peak, enough to
//                           refuse the absurd, not to plan a tight run.
//
// Counts use double arithmetic (exact below 2^53, never overflowing), so any config can be
// estimated; values a constructor would refuse (negative sizes) count as 0 and the
// constructor names them afterwards.
#pragma once
#include <cstdint>
#include <string>

#include "models/config.h"

namespace sima {

double count_parameters(const ModelConfig& cfg);
double activation_bytes(const ModelConfig& cfg);  // per sample

// sima::Error when 4 · count_parameters + batch · activation_bytes exceeds memory_limit_bytes():
//   "model config (deit): embed_dim 100000, depth 12, mlp_ratio 4, img_size 224 / patch_size 16 ...
//    needs about 5.6 TiB (1.4e12 parameters: 5.6 TiB; activations for batch 1: 20 GiB),
//    more than the memory limit of 12.0 GiB (3/4 of the physical memory; set SIMA_MEMORY_LIMIT ...)"
void check_model_budget(const ModelConfig& cfg, int64_t batch = 1);

}  // namespace sima
