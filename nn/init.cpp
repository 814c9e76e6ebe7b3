#include "nn/init.h"

#include <cmath>

#include "core/error.h"

namespace sima {

void trunc_normal_(const Tensor& t, float std, float mean, float a, float b, Generator& gen) {
  check(std > 0.f && a < b, "trunc_normal_: need std > 0 and a < b (std=", std, ", a=", a, ", b=", b, ")");
  // Probability mass of [a, b] under N(mean, std²); refuse intervals rejection cannot hit.
  auto cdf = [&](float x) { return 0.5 * (1.0 + std::erf((x - mean) / (std * std::sqrt(2.0)))); };
  check(cdf(b) - cdf(a) > 1e-4, "trunc_normal_: [", a, ", ", b, "] holds almost none of N(", mean,
        ", ", std, "^2)");
  float* p = t.data();
  for (int64_t i = 0; i < t.numel(); ++i) {
    float v;
    do v = mean + std * gen.normal();
    while (v < a || v > b);
    p[i] = v;
  }
}

void normal_(const Tensor& t, float mean, float std, Generator& gen) { gen.fill_normal(t.data(), t.numel(), mean, std); }
void uniform_(const Tensor& t, float low, float high, Generator& gen) { gen.fill_uniform(t.data(), t.numel(), low, high); }
void constant_(const Tensor& t, float value) {
  float* p = t.data();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = value;
}
void zeros_(const Tensor& t) { constant_(t, 0.f); }

int64_t fan_in(const Tensor& w) {
  check(w.dim() >= 2, "fan_in: weight of shape ", w.shape(), " needs at least 2 dims");
  return w.numel() / w.size(0);
}

void kaiming_uniform_(const Tensor& t, float a, Generator& gen) {
  float bound = std::sqrt(6.f / ((1.f + a * a) * static_cast<float>(fan_in(t))));
  uniform_(t, -bound, bound, gen);
}

void default_bias_(const Tensor& bias, const Tensor& weight, Generator& gen) {
  float bound = 1.f / std::sqrt(static_cast<float>(fan_in(weight)));
  uniform_(bias, -bound, bound, gen);
}

}  // namespace sima
