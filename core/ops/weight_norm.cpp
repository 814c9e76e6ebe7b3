// weight_norm forward and backward (derived in docs/derivations.md §8).
#include "core/ops/weight_norm.h"

#include <cmath>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "core/parallel.h"

namespace sima {

// Forward, per row r of n values:
//   norm_r = ‖v_r‖₂ (summed in double),  scale_r = g_r / norm_r,  W_r = v_r · scale_r
// (scale first, then one product per element, as torch's v * (g / norm)).
// Saved for backward: v, g and the R norms.
Tensor weight_norm(const Tensor& v, const Tensor& g) {
  check(v.defined() && g.defined(), "weight_norm: v and g must be defined");
  check(v.dim() >= 1 && v.numel() > 0, "weight_norm: v must be a non-empty tensor of at least 1 dim, got shape ",
        v.shape());
  const int64_t R = v.size(0), n = v.numel() / R;
  bool g_ok = g.dim() == v.dim() && g.size(0) == R && g.numel() == R;
  check(g_ok, "weight_norm: g of shape ", g.shape(), " for v of shape ", v.shape(), " (expected (", R,
        v.dim() > 1 ? ", 1, ...)" : ")", ", one length per row of v)");

  Tensor w = empty(v.shape()), norms = empty({R});
  const float *pv = v.data(), *pg = g.data();
  float *pw = w.data(), *pn = norms.data();
  parallel_for(R, grain_for(kGrainElementwise, n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* vr = pv + r * n;
      double ss = 0.0;
      for (int64_t k = 0; k < n; ++k) ss += double(vr[k]) * double(vr[k]);
      const float nrm = static_cast<float>(std::sqrt(ss));
      pn[r] = nrm;
      const float scale = pg[r] / nrm;
      float* wr = pw + r * n;
      for (int64_t k = 0; k < n; ++k) wr[k] = vr[k] * scale;
    }
  });

  if (needs_grad(v, g))
    attach_grad_fn(w, "weight_norm", {v, g},
                   [vs = v.detach(), gs = g.detach(), norms, R, n, need_v = v.requires_grad(),
                    need_g = g.requires_grad()](const Tensor& dw) -> Grads {
      // dW (R, n) -> dv like v, dg like g. With v̂ = v/‖v‖ and s = dW·v (per row):
      //   dg = dW·v̂ = s/‖v‖
      //   dv = (g/‖v‖)(dW − v̂ (dW·v̂)) = (g/‖v‖)·(dW − v·s/‖v‖²)
      // (W = g·v/‖v‖ and d‖v‖/dv = v̂, so dW/dv = (g/‖v‖)(I − v̂ v̂ᵀ).)
      Tensor dv = need_v ? empty(vs.shape()) : Tensor(), dg = need_g ? empty(gs.shape()) : Tensor();
      const float *pv = vs.data(), *pg = gs.data(), *pd = dw.data(), *pn = norms.data();
      parallel_for(R, grain_for(kGrainElementwise, n), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const float *vr = pv + r * n, *dr = pd + r * n;
          double s = 0.0;
          for (int64_t k = 0; k < n; ++k) s += double(dr[k]) * double(vr[k]);
          const double nrm = pn[r];
          if (need_g) dg.data()[r] = static_cast<float>(s / nrm);
          if (need_v) {
            const float a = static_cast<float>(double(pg[r]) / nrm);          // g/‖v‖
            const float c = static_cast<float>(s / (nrm * nrm));               // s/‖v‖²
            float* out = dv.data() + r * n;
            for (int64_t k = 0; k < n; ++k) out[k] = a * (dr[k] - vr[k] * c);
          }
        }
      });
      return {dv, dg};
    });
  return w;
}

}  // namespace sima
