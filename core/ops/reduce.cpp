// Reductions: sum, mean, var over any set of dims, and max / argmax.
//
// Every sum-like reduction runs through one kernel. The input's dims are first
// coalesced into alternating groups of kept (K) and reduced (R) dims, dropping
// size-1 dims, so (B, N, C) summed over N is the groups [K B, R N, K C] and
// (B, N, C) summed over (N, C) is [K B, R N·C]. Then either
//   - the innermost group is reduced: each output is a sum of contiguous runs, or
//   - the innermost group is kept: each output row of `inner` values accumulates
//     rows of the input (a column sum, vectorised across the row).
// Each output element is summed by one thread in a fixed order, in double, so
// the result does not depend on the thread count.
#include "core/ops/reduce.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops/broadcast.h"
#include "core/ops/elementwise.h"
#include "core/parallel.h"

namespace sima {

namespace {

std::string dims_str(const std::vector<int>& dims) {
  std::ostringstream os;
  os << '(';
  for (size_t i = 0; i < dims.size(); ++i) os << (i ? ", " : "") << dims[i];
  os << ')';
  return os.str();
}

// Which dims a reduction covers, and the shapes on either side of it.
struct ReduceDims {
  std::array<bool, kMaxDims> reduced{};
  Shape out_shape;    // the result's shape (reduced dims dropped, or 1 with keepdim)
  Shape keep_shape;   // reduced dims as 1: the result viewed so that it broadcasts to x
  int64_t count = 1;  // N, the number of elements summed into each output
};

// An empty `dims` reduces every dim, as torch.sum(x, dim=[]) does.
ReduceDims reduce_dims(const char* op, const Shape& s, const std::vector<int>& dims, bool keepdim) {
  ReduceDims rd;
  int nd = s.ndim();
  if (dims.empty())
    for (int i = 0; i < nd; ++i) rd.reduced[i] = true;
  for (int d : dims) {
    int w = wrap_dim(d, nd, op);
    if (nd == 0) continue;  // dim 0 / -1 of a 0-d tensor: nothing to reduce
    check(!rd.reduced[w], op, ": dim ", d, " appears more than once in dims ", dims_str(dims),
          " for shape ", s);
    rd.reduced[w] = true;
  }
  for (int i = 0; i < nd; ++i) {
    if (rd.reduced[i]) {
      rd.count *= s[i];
      rd.keep_shape.push_back(1);
      if (keepdim) rd.out_shape.push_back(1);
    } else {
      rd.keep_shape.push_back(s[i]);
      rd.out_shape.push_back(s[i]);
    }
  }
  return rd;
}

// ---- the sum kernel ---------------------------------------------------------
// One summand: x, or (x - c)² for the second pass of var.
template <bool kSquaredDeviation>
inline double reduce_term(float v, double c) {
  if constexpr (kSquaredDeviation) {
    double d = static_cast<double>(v) - c;
    return d * d;
  } else {
    return static_cast<double>(v);
  }
}

// Σ term(p[i]) over a contiguous run. Eight independent accumulators let the adds
// pipeline (and vectorise); the split is fixed, so the result is too.
template <bool kSquaredDeviation>
double sum_run(const float* p, int64_t n, double c) {
  double acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += reduce_term<kSquaredDeviation>(p[i + k], c);
  for (; i < n; ++i) acc[0] += reduce_term<kSquaredDeviation>(p[i], c);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// x's dimensions coalesced into groups, outer to inner: neighbours that are both reduced or
// both kept merge, size-1 dimensions drop out.
struct Groups {
  int m = 0;
  int64_t size[kMaxDims], stride[kMaxDims];
  bool reduced[kMaxDims];
  std::vector<int64_t> roff{0};  // offsets of every combination of the outer reduced groups

  Groups(const Shape& s, const ReduceDims& rd) {
    for (int i = 0; i < s.ndim(); ++i) {
      if (s[i] == 1) continue;
      if (m > 0 && reduced[m - 1] == rd.reduced[i]) {
        size[m - 1] *= s[i];
      } else {
        size[m] = s[i];
        reduced[m] = rd.reduced[i];
        ++m;
      }
    }
    int64_t st = 1;
    for (int g = m - 1; g >= 0; --g) {
      stride[g] = st;
      st *= size[g];
    }
    for (int g = 0; g < outer(); ++g) {  // an odometer, outer to inner
      if (!reduced[g]) continue;
      std::vector<int64_t> next;
      next.reserve(roff.size() * size[g]);
      for (int64_t base : roff)
        for (int64_t i = 0; i < size[g]; ++i) next.push_back(base + i * stride[g]);
      roff.swap(next);
    }
  }
  bool last_kept() const { return m > 0 && !reduced[m - 1]; }
  int64_t inner() const { return m > 0 ? size[m - 1] : 1; }  // the contiguous innermost group
  int outer() const { return m > 0 ? m - 1 : 0; }            // groups walked by index arithmetic
  // Input offset of the k-th combination of the outer kept groups (row-major).
  int64_t kept_offset(int64_t k) const {
    int64_t off = 0;
    for (int g = outer() - 1; g >= 0; --g) {
      if (reduced[g]) continue;
      off += (k % size[g]) * stride[g];
      k /= size[g];
    }
    return off;
  }
};

// Innermost group reduced: out[o] = Σ over roff of a contiguous run of `inner` values.
template <bool kSquaredDeviation>
void sum_reduced_inner(const Groups& G, const float* px, const float* center, float* out, int64_t n_out,
                       int64_t work_per_out, double scale) {
  const int64_t inner = G.inner();
  if (n_out == 1 && G.roff.size() == 1) {
    // One long contiguous reduction: fixed blocks of partial sums (their layout does not
    // depend on the thread count), then the partials summed in order.
    constexpr int64_t kBlock = 1 << 16;
    const int64_t nb = (inner + kBlock - 1) / kBlock;
    const double c = kSquaredDeviation ? center[0] : 0.0;
    std::vector<double> part(nb);
    parallel_for(nb, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t i0 = b * kBlock;
        part[b] = sum_run<kSquaredDeviation>(px + i0, std::min(kBlock, inner - i0), c);
      }
    });
    double acc = 0.0;
    for (double p : part) acc += p;
    out[0] = static_cast<float>(acc * scale);
    return;
  }
  parallel_for(n_out, grain_for(kGrainElementwise, work_per_out), [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      const float* base = px + G.kept_offset(o);
      const double c = kSquaredDeviation ? center[o] : 0.0;
      double acc = 0.0;
      for (int64_t r : G.roff) acc += sum_run<kSquaredDeviation>(base + r, inner, c);
      out[o] = static_cast<float>(acc * scale);
    }
  });
}

// Innermost group kept: out[o, j] = Σ over roff of x[base(o) + r + j], for j in [0, inner).
// Tasks are (o, block of kCols columns), each with its accumulators on the stack.
template <bool kSquaredDeviation>
void sum_kept_inner(const Groups& G, const float* px, const float* center, float* out, int64_t n_out,
                    int64_t work_per_out, double scale) {
  constexpr int64_t kCols = 256;
  const int64_t inner = G.inner();
  const int64_t n_rows = n_out / inner, col_blocks = (inner + kCols - 1) / kCols;
  const int64_t work_per_task = std::min(inner, kCols) * work_per_out;
  parallel_for(n_rows * col_blocks, grain_for(kGrainElementwise, work_per_task), [&](int64_t t0, int64_t t1) {
    double acc[kCols];
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t o = t / col_blocks, j0 = (t % col_blocks) * kCols;
      const int64_t nj = std::min(kCols, inner - j0);
      const float* base = px + G.kept_offset(o) + j0;
      const float* c = kSquaredDeviation ? center + o * inner + j0 : nullptr;
      std::fill(acc, acc + nj, 0.0);
      for (int64_t r : G.roff) {
        const float* row = base + r;
        for (int64_t j = 0; j < nj; ++j)
          acc[j] += reduce_term<kSquaredDeviation>(row[j], kSquaredDeviation ? c[j] : 0.0);
      }
      float* dst = out + o * inner + j0;
      for (int64_t j = 0; j < nj; ++j) dst[j] = static_cast<float>(acc[j] * scale);
    }
  });
}

// out[o] = scale · Σ_r x[o, r]              (kSquaredDeviation = false)
// out[o] = scale · Σ_r (x[o, r] - c[o])²     (kSquaredDeviation = true, c laid out like out)
template <bool kSquaredDeviation>
void reduce_sum_kernel(const Tensor& x, const ReduceDims& rd, const float* center, float* out,
                       double scale) {
  const int64_t n_out = rd.out_shape.numel();
  if (n_out == 0) return;
  if (x.numel() == 0) {  // every output is a sum of nothing: 0 (and 0/0 = nan for mean)
    std::fill(out, out + n_out, static_cast<float>(0.0 * scale));
    return;
  }
  const Groups G(x.shape(), rd);
  if (G.last_kept()) sum_kept_inner<kSquaredDeviation>(G, x.data(), center, out, n_out, rd.count, scale);
  else sum_reduced_inner<kSquaredDeviation>(G, x.data(), center, out, n_out, rd.count, scale);
}

// g (shaped like the result) broadcast back to x's shape, times `scale`.
Tensor broadcast_grad(const Tensor& g, const ReduceDims& rd, const Shape& x_shape, float scale) {
  Tensor out = broadcast_to(view_storage(g, rd.keep_shape), x_shape, "sum");
  if (scale != 1.f) {
    float* p = out.data();
    parallel_for(out.numel(), kGrainElementwise, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) p[i] *= scale;
    });
  }
  return out;
}

}  // namespace

// ---- sum --------------------------------------------------------------------
// y = Σ_{reduced dims} x            x: (..., R, ...) -> y: (..., [1], ...)
Tensor sum(const Tensor& x, const std::vector<int>& dims, bool keepdim) {
  ReduceDims rd = reduce_dims("sum", x.shape(), dims, keepdim);
  Tensor y = empty(rd.out_shape);
  reduce_sum_kernel<false>(x, rd, nullptr, y.data(), 1.0);
  // dy/dx_i = 1 for every x_i summed into y: gx = gy broadcast back over the reduced dims.
  if (needs_grad(x))
    attach_grad_fn(y, "sum", {x}, [rd, xs = x.shape()](const Tensor& gy) -> Grads {
      return {broadcast_grad(gy, rd, xs, 1.f)};
    });
  return y;
}
Tensor sum(const Tensor& x) { return sum(x, {}, false); }

// ---- mean -------------------------------------------------------------------
// y = (1/N) Σ_{reduced dims} x      N = product of the reduced sizes
Tensor mean(const Tensor& x, const std::vector<int>& dims, bool keepdim) {
  ReduceDims rd = reduce_dims("mean", x.shape(), dims, keepdim);
  Tensor y = empty(rd.out_shape);
  const double n = static_cast<double>(rd.count);
  reduce_sum_kernel<false>(x, rd, nullptr, y.data(), 1.0 / n);
  // gx = gy / N broadcast back over the reduced dims.
  if (needs_grad(x))
    attach_grad_fn(y, "mean", {x}, [rd, xs = x.shape(), n](const Tensor& gy) -> Grads {
      return {broadcast_grad(gy, rd, xs, static_cast<float>(1.0 / n))};
    });
  return y;
}
Tensor mean(const Tensor& x) { return mean(x, {}, false); }

// ---- var --------------------------------------------------------------------
// Two passes: m = mean(x), then y = Σ (x - m)² / (N - correction), summed in double.
Tensor var(const Tensor& x, const std::vector<int>& dims, int64_t correction, bool keepdim) {
  ReduceDims rd = reduce_dims("var", x.shape(), dims, keepdim);
  const int64_t n = rd.count;
  // N - correction <= 0 gives inf or nan, as torch does (with a warning there).
  const double denom = static_cast<double>(std::max<int64_t>(0, n - correction));
  Tensor m = empty(rd.keep_shape);  // laid out like y (keepdim only adds 1s)
  reduce_sum_kernel<false>(x, rd, nullptr, m.data(), 1.0 / static_cast<double>(n));
  Tensor y = empty(rd.out_shape);
  reduce_sum_kernel<true>(x, rd, m.data(), y.data(), 1.0 / denom);
  // dy/dx_i = 2(x_i - m)/(N - c) - (2/(N - c))·Σ_j (x_j - m)/N, and Σ_j (x_j - m) = 0,
  // so gx = gy · 2(x - m)/(N - c), with gy and m broadcast over the reduced dims.
  if (needs_grad(x))
    attach_grad_fn(y, "var", {x}, [rd, xs = x.detach(), m, denom](const Tensor& gy) -> Grads {
      Tensor d = sub(xs, m);  // (x shape)
      return {mul(d, mul(view_storage(gy, rd.keep_shape), static_cast<float>(2.0 / denom)))};
    });
  return y;
}

// ---- max / argmax -------------------------------------------------------------
namespace {

// v beats the current best if larger, or NaN over a number (max propagates NaN, as torch).
// Ties keep the earlier element.
inline bool beats(float v, float best) { return v > best || (v != v && best == best); }

// x viewed as (outer, R, inner) around `dim`: vals[o, j] = max_r x[o, r, j], idx the first r.
void max_kernel(const Tensor& x, int dim, float* vals, int64_t* idx) {
  const Shape& s = x.shape();
  const int64_t outer = prod(s, 0, dim), r_len = s.ndim() ? s[dim] : 1;
  const int64_t inner = prod(s, dim + 1, s.ndim());
  const float* px = x.data();
  if (inner == 1) {
    // Max along the last dim, per contiguous row: first the value, over eight independent
    // lanes (v > m ? v : m is one branch-free maxss; one running max would be a single
    // dependency chain), with NaNs flagged separately; then the first index holding it.
    parallel_for(outer, grain_for(kGrainElementwise, r_len), [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o) {
        const float* row = px + o * r_len;
        float lane[8];
        int nan[8] = {};
        std::fill(lane, lane + 8, row[0]);
        int64_t r = 0;
        for (; r + 8 <= r_len; r += 8)
          for (int k = 0; k < 8; ++k) {
            const float v = row[r + k];
            lane[k] = v > lane[k] ? v : lane[k];
            nan[k] |= v != v;
          }
        for (; r < r_len; ++r) {
          lane[0] = row[r] > lane[0] ? row[r] : lane[0];
          nan[0] |= row[r] != row[r];
        }
        float best = lane[0];
        bool any_nan = nan[0];
        for (int k = 1; k < 8; ++k) {
          best = lane[k] > best ? lane[k] : best;
          any_nan |= nan[k];
        }
        int64_t at = 0;
        if (any_nan) {
          while (row[at] == row[at]) ++at;  // the first NaN wins
          best = row[at];
        } else {
          while (row[at] != best) ++at;
        }
        vals[o] = best;
        idx[o] = at;
      }
    });
    return;
  }
  // Otherwise tasks are (o, block of kCols columns), scanning rows of the block.
  constexpr int64_t kCols = 256;
  const int64_t col_blocks = (inner + kCols - 1) / kCols;
  const int64_t work_per_task = std::min(inner, kCols) * r_len;
  parallel_for(outer * col_blocks, grain_for(kGrainElementwise, work_per_task),
               [&](int64_t t0, int64_t t1) {
                 for (int64_t t = t0; t < t1; ++t) {
                   const int64_t o = t / col_blocks, j0 = (t % col_blocks) * kCols;
                   const int64_t nj = std::min(kCols, inner - j0);
                   const float* base = px + o * r_len * inner + j0;
                   float* v = vals + o * inner + j0;
                   int64_t* ix = idx + o * inner + j0;
                   for (int64_t j = 0; j < nj; ++j) {
                     v[j] = base[j];
                     ix[j] = 0;
                   }
                   for (int64_t r = 1; r < r_len; ++r) {
                     const float* row = base + r * inner;
                     for (int64_t j = 0; j < nj; ++j)
                       if (beats(row[j], v[j])) {
                         v[j] = row[j];
                         ix[j] = r;
                       }
                   }
                 }
               });
}

}  // namespace

// values: (..., R, ...) -> (..., [1], ...); indices laid out like values.
MaxResult max(const Tensor& x, int dim, bool keepdim) {
  const Shape& s = x.shape();
  const int d = wrap_dim(dim, s.ndim(), "max");
  check(s.ndim() == 0 || s[d] > 0, "max: cannot reduce over dim ", dim, " of size 0 in shape ", s);
  ReduceDims rd = reduce_dims("max", s, {d}, keepdim);
  MaxResult res;
  res.values = empty(rd.out_shape);
  res.indices.resize(rd.out_shape.numel());
  max_kernel(x, d, res.values.data(), res.indices.data());
  // Only the first maximal element moves y: gx[o, idx[o, j], j] = gy[o, j], zero elsewhere.
  if (needs_grad(x))
    attach_grad_fn(res.values, "max", {x},
                   [xs = s, d, idx = res.indices](const Tensor& gy) -> Grads {
                     Tensor gx = zeros(xs);
                     const int64_t r_len = xs.ndim() ? xs[d] : 1;
                     const int64_t inner = prod(xs, d + 1, xs.ndim());
                     const float* pg = gy.data();
                     float* po = gx.data();
                     parallel_for(static_cast<int64_t>(idx.size()), kGrainElementwise,
                                  [&](int64_t k0, int64_t k1) {
                                    for (int64_t k = k0; k < k1; ++k) {
                                      const int64_t o = k / inner, j = k % inner;
                                      po[(o * r_len + idx[k]) * inner + j] = pg[k];
                                    }
                                  });
                     return {gx};
                   });
  return res;
}

std::vector<int64_t> argmax(const Tensor& x, int dim) {
  const Shape& s = x.shape();
  const int d = wrap_dim(dim, s.ndim(), "argmax");
  check(s.ndim() == 0 || s[d] > 0, "argmax: cannot reduce over dim ", dim, " of size 0 in shape ", s);
  const int64_t n_out = s.ndim() ? s.numel() / s[d] : 1;
  std::vector<float> vals(n_out);
  std::vector<int64_t> idx(n_out);
  max_kernel(x, d, vals.data(), idx.data());
  return idx;
}

// Over all elements -> 0-d. The gradient goes to the first maximal element, as for
// max(x, dim) (torch instead splits it evenly between tied maxima here).
Tensor max(const Tensor& x) {
  const int64_t n = x.numel();
  check(n > 0, "max: cannot take the max of an empty tensor of shape ", x.shape());
  // Fixed blocks, each finds its first max; combining them in order keeps the first overall.
  constexpr int64_t kBlock = 1 << 16;
  const int64_t nb = (n + kBlock - 1) / kBlock;
  std::vector<float> bval(nb);
  std::vector<int64_t> bidx(nb);
  const float* px = x.data();
  parallel_for(nb, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      int64_t i0 = b * kBlock, e = std::min(n, i0 + kBlock), best = i0;
      for (int64_t i = i0 + 1; i < e; ++i)
        if (beats(px[i], px[best])) best = i;
      bval[b] = px[best];
      bidx[b] = best;
    }
  });
  int64_t best = 0;
  for (int64_t b = 1; b < nb; ++b)
    if (beats(bval[b], bval[best])) best = b;
  Tensor y = scalar_tensor(bval[best]);
  // gx = gy at the first maximal element, 0 elsewhere.
  if (needs_grad(x))
    attach_grad_fn(y, "max", {x}, [xs = x.shape(), at = bidx[best]](const Tensor& gy) -> Grads {
      Tensor gx = zeros(xs);
      gx.data()[at] = gy.item();
      return {gx};
    });
  return y;
}

}  // namespace sima
