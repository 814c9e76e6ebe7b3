#include "core/gradcheck.h"

#include <cmath>
#include <sstream>

#include "core/autograd.h"
#include "core/error.h"
#include "core/rng.h"

namespace sima {

namespace {
double weighted_sum(const Tensor& y, const Tensor& w) {
  double s = 0.0;
  const float *py = y.data(), *pw = w.data();
  for (int64_t i = 0; i < y.numel(); ++i) s += static_cast<double>(py[i]) * pw[i];
  return s;
}
}  // namespace

GradcheckResult gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& opt) {
  GradcheckResult res;
  for (const Tensor& x : inputs)
    if (x.defined() && x.requires_grad()) x.zero_grad();

  // Analytic: backward of L = Σ w ⊙ y.
  Tensor y = fn(inputs);
  check(y.requires_grad(), "gradcheck: the output does not require grad");
  Generator gen(opt.seed);
  Tensor w = randn(y.shape(), gen);
  y.backward(w);

  // Numeric: central differences, one element at a time.
  NoGradGuard no_grad;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& x = inputs[k];
    if (!x.defined() || !x.requires_grad()) continue;
    Tensor g = x.grad();
    for (int64_t i = 0; i < x.numel(); ++i) {
      float* p = x.data() + i;
      float orig = *p;
      *p = static_cast<float>(orig + opt.eps);
      double lp = weighted_sum(fn(inputs), w);
      *p = static_cast<float>(orig - opt.eps);
      double lm = weighted_sum(fn(inputs), w);
      *p = orig;
      double numeric = (lp - lm) / (2.0 * opt.eps);
      double analytic = g.defined() ? g.data()[i] : 0.0;
      double err = std::fabs(analytic - numeric);
      res.max_abs_error = std::max(res.max_abs_error, err);
      res.checked++;
      if (res.ok && !(err <= opt.atol + opt.rtol * std::fabs(numeric))) {
        std::ostringstream os;
        os << "input " << k << " (shape " << x.shape() << ") element " << i << ": analytic "
           << analytic << " vs numeric " << numeric << (g.defined() ? "" : " (no gradient reached it)");
        res.ok = false;
        res.message = os.str();
      }
    }
  }
  return res;
}

}  // namespace sima
