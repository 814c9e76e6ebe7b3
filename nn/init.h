// Parameter initialisers (in place, no autograd), named as torch.nn.init / timm.
#pragma once
#include "core/rng.h"
#include "core/tensor.h"

namespace sima {

// Normal(mean, std) truncated to [a, b] (absolute bounds, as timm's trunc_normal_:
// with std = .02 the default ±2 cuts nothing). Exact, by rejection.
void trunc_normal_(const Tensor& t, float std = 1.f, float mean = 0.f, float a = -2.f, float b = 2.f,
                   Generator& gen = rng(RngStream::Init));
void normal_(const Tensor& t, float mean = 0.f, float std = 1.f, Generator& gen = rng(RngStream::Init));
void uniform_(const Tensor& t, float low = 0.f, float high = 1.f, Generator& gen = rng(RngStream::Init));
void constant_(const Tensor& t, float value);
void zeros_(const Tensor& t);

// fan_in of a Linear (out, in) or Conv (out, in/groups, kh, kw) weight: in·kh·kw.
int64_t fan_in(const Tensor& weight);
// kaiming_uniform_(a): U(-bound, bound), bound = √(6 / ((1 + a²)·fan_in)). With a = √5
// (PyTorch's default for Linear and Conv weights) the bound is 1/√fan_in.
void kaiming_uniform_(const Tensor& t, float a = 2.2360679775f, Generator& gen = rng(RngStream::Init));
// PyTorch's default Linear/Conv bias: U(-1/√fan_in, 1/√fan_in) with the weight's fan_in.
void default_bias_(const Tensor& bias, const Tensor& weight, Generator& gen = rng(RngStream::Init));

}  // namespace sima
