// Shape ops. Every tensor is contiguous, so an op either keeps the data where it
// is (reshape, flatten, unsqueeze, squeeze, narrow of the leading non-unit dim:
// views through view_storage) or copies it into a new layout (permute, cat, pad, ...).
//
// All the copies go through one helper, copy_block: walk a block of `shape`
// reading src and writing dst, each with its own strides. permute is src strides
// permuted; narrow is src at an offset with the parent's strides; cat and pad
// write into a region of a bigger dst. Backwards are the same copies reversed.
#include "core/ops/shape_ops.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <sstream>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops/broadcast.h"
#include "core/parallel.h"

namespace sima {

namespace {

using Strides = std::array<int64_t, kMaxDims>;

template <class T>
std::string list_str(const std::vector<T>& v) {
  std::ostringstream os;
  os << '(';
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << ')';
  return os.str();
}

// A copy's dims coalesced, inner to outer: size-1 dims dropped, a dim merged into the next
// inner one when both src and dst step through them as one (stride = inner stride · inner size).
struct CopyDims {
  int m = 0;
  int64_t size[kMaxDims], cs[kMaxDims], cd[kMaxDims];  // sizes, src strides, dst strides

  CopyDims(const Strides& ss, const Strides& ds, const Shape& shape) {
    for (int i = shape.ndim() - 1; i >= 0; --i) {
      if (shape[i] == 1) continue;
      if (m > 0 && ss[i] == cs[m - 1] * size[m - 1] && ds[i] == cd[m - 1] * size[m - 1]) {
        size[m - 1] *= shape[i];
      } else {
        size[m] = shape[i];
        cs[m] = ss[i];
        cd[m] = ds[i];
        ++m;
      }
    }
  }
};

// A transposing copy (dst steps by 1 along dim 0, src by 1 along dim t): 32×32 tiles of dims
// 0 and t, so that each tile touches 32 cache lines of src and 32 of dst.
void copy_tiles(const float* src, float* dst, const CopyDims& D, int t, int64_t numel) {
  constexpr int64_t kTile = 32;
  const int64_t n0 = D.size[0], nt = D.size[t], t_tiles = (nt + kTile - 1) / kTile;
  const int64_t others = numel / (n0 * nt);
  parallel_for(others * t_tiles, std::max<int64_t>(1, kGrainElementwise / (kTile * n0)), [&](int64_t q0, int64_t q1) {
    for (int64_t q = q0; q < q1; ++q) {
      int64_t k = q / t_tiles, os = 0, od = 0;
      for (int i = 1; i < D.m; ++i) {
        if (i == t) continue;
        os += (k % D.size[i]) * D.cs[i];
        od += (k % D.size[i]) * D.cd[i];
        k /= D.size[i];
      }
      const int64_t t0 = (q % t_tiles) * kTile, t1 = std::min(nt, t0 + kTile);
      for (int64_t i0 = 0; i0 < n0; i0 += kTile)
        for (int64_t j = t0; j < t1; ++j) {
          const float* s = src + os + j;  // cs[t] = 1
          float* d = dst + od + j * D.cd[t];
          for (int64_t i = i0, e = std::min(n0, i0 + kTile); i < e; ++i) d[i] = s[i * D.cs[0]];
        }
    }
  });
}

// Rows along the innermost coalesced dim (index 0: the order is inner to outer). The rows'
// offsets advance as an odometer over dims 1..m-1 (one division per chunk, not per row): a head
// split at head width 8 copies rows of 8 floats, where the index arithmetic and a memcpy call
// per row cost more than the copy.
void copy_rows(const float* src, float* dst, const CopyDims& D, int64_t numel) {
  const int64_t inner = D.size[0], rows = numel / inner;
  const int m = D.m;
  const bool contiguous_row = D.cs[0] == 1 && D.cd[0] == 1;
  parallel_for(rows, grain_for(kGrainElementwise, inner), [&](int64_t r0, int64_t r1) {
    int64_t idx[kMaxDims] = {}, k = r0, os = 0, od = 0;
    for (int i = 1; i < m; ++i) {
      idx[i] = k % D.size[i];
      k /= D.size[i];
      os += idx[i] * D.cs[i];
      od += idx[i] * D.cd[i];
    }
    for (int64_t r = r0; r < r1; ++r) {
      const float* s = src + os;
      float* d = dst + od;
      if (contiguous_row && inner > 32) std::memcpy(d, s, sizeof(float) * inner);
      else if (contiguous_row)
        for (int64_t j = 0; j < inner; ++j) d[j] = s[j];
      else
        for (int64_t j = 0; j < inner; ++j) d[j * D.cd[0]] = s[j * D.cs[0]];
      for (int i = 1; i < m; ++i) {  // next row
        os += D.cs[i];
        od += D.cd[i];
        if (++idx[i] < D.size[i]) break;
        os -= D.cs[i] * D.size[i];
        od -= D.cd[i] * D.size[i];
        idx[i] = 0;
      }
    }
  });
}

// dst[Σ i_d·ds_d] = src[Σ i_d·ss_d] for every index i of `shape`.
void copy_block(const float* src, const Strides& ss, float* dst, const Strides& ds,
                const Shape& shape) {
  if (shape.numel() == 0) return;
  const CopyDims D(ss, ds, shape);
  if (D.m == 0) {
    dst[0] = src[0];
    return;
  }
  int t = 1;  // the dim along which src steps by 1
  while (t < D.m && D.cs[t] != 1) ++t;
  if (D.cd[0] == 1 && D.cs[0] != 1 && t < D.m) copy_tiles(src, dst, D, t, shape.numel());
  else copy_rows(src, dst, D, shape.numel());
}

// The (outer, len, inner) slab [start, start + len) of dim `dim` in a contiguous tensor of
// `full` shape, copied to or from a contiguous tensor of the slab's shape.
void copy_slab(const float* src, const Shape& src_shape, float* dst, const Shape& dst_shape,
               const Shape& slab, int64_t src_offset, int64_t dst_offset) {
  copy_block(src + src_offset, contiguous_strides(src_shape), dst + dst_offset,
             contiguous_strides(dst_shape), slab);
}

}  // namespace

// ---- reshape / view ------------------------------------------------------------
// y = x with a new shape (same storage). Backward: gx = gy with x's shape.
Tensor reshape(const Tensor& x, const std::vector<int64_t>& shape) {
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      check(infer < 0, "reshape: only one dimension can be -1, got ", list_str(shape));
      infer = static_cast<int>(i);
    } else {
      check(shape[i] >= 0, "reshape: invalid size ", shape[i], " in shape ", list_str(shape));
      known *= shape[i];
    }
  }
  std::vector<int64_t> dims = shape;
  const int64_t n = x.numel();
  if (infer >= 0) {
    check(known > 0 && n % known == 0, "reshape: shape ", list_str(shape),
          " is invalid for input of shape ", x.shape(), " (", n, " elements)");
    dims[infer] = n / known;
  }
  Shape out(dims);
  check(out.numel() == n, "reshape: shape ", list_str(shape), " is invalid for input of shape ",
        x.shape(), " (", n, " elements)");
  Tensor y = view_storage(x, out);
  if (needs_grad(x))
    attach_grad_fn(y, "reshape", {x}, [xs = x.shape()](const Tensor& gy) -> Grads {
      return {view_storage(gy, xs)};
    });
  return y;
}

// (d0, ..., ds, ..., de, ...) -> (d0, ..., ds·...·de, ...); a 0-d tensor becomes (1).
Tensor flatten(const Tensor& x, int start_dim, int end_dim) {
  const Shape& s = x.shape();
  if (s.ndim() == 0) return reshape(x, {1});
  int a = wrap_dim(start_dim, s.ndim(), "flatten"), b = wrap_dim(end_dim, s.ndim(), "flatten");
  check(a <= b, "flatten: start_dim ", start_dim, " comes after end_dim ", end_dim, " for shape ", s);
  std::vector<int64_t> dims;
  for (int i = 0; i < a; ++i) dims.push_back(s[i]);
  dims.push_back(prod(s, a, b + 1));
  for (int i = b + 1; i < s.ndim(); ++i) dims.push_back(s[i]);
  return reshape(x, dims);
}

// Inserts a size-1 dim at `dim` in [-ndim-1, ndim].
Tensor unsqueeze(const Tensor& x, int dim) {
  const Shape& s = x.shape();
  int d = wrap_dim(dim, s.ndim() + 1, "unsqueeze");
  std::vector<int64_t> dims = s.vec();
  dims.insert(dims.begin() + d, 1);
  return reshape(x, dims);
}

// Removes dim `dim`, which must have size 1 (torch silently keeps a non-1 dim; we refuse).
Tensor squeeze(const Tensor& x, int dim) {
  const Shape& s = x.shape();
  int d = wrap_dim(dim, s.ndim(), "squeeze");
  if (s.ndim() == 0) return reshape(x, {});
  check(s[d] == 1, "squeeze: dim ", dim, " has size ", s[d], ", not 1, in shape ", s);
  std::vector<int64_t> dims = s.vec();
  dims.erase(dims.begin() + d);
  return reshape(x, dims);
}

// ---- permute / transpose / contiguous -------------------------------------------
// y[i_0, ..., i_n] = x[i at positions inv(dims)]:  y.shape[k] = x.shape[dims[k]].
// Backward: gx = permute(gy, inverse of dims).
Tensor permute(const Tensor& x, const std::vector<int>& dims) {
  const Shape& s = x.shape();
  const int nd = s.ndim();
  check(static_cast<int>(dims.size()) == nd, "permute: ", dims.size(), " dims ", list_str(dims),
        " for a tensor of shape ", s);
  std::vector<int> perm(nd), inv(nd, -1);
  for (int k = 0; k < nd; ++k) {
    perm[k] = wrap_dim(dims[k], nd, "permute");
    check(inv[perm[k]] < 0, "permute: dim ", dims[k], " repeats in ", list_str(dims),
          " for shape ", s);
    inv[perm[k]] = k;
  }
  Shape out;
  Strides xs = contiguous_strides(s), ss{};
  for (int k = 0; k < nd; ++k) {
    out.push_back(s[perm[k]]);
    ss[k] = xs[perm[k]];  // walking y's dim k steps x along its dim perm[k]
  }
  Tensor y = empty(out);
  copy_block(x.data(), ss, y.data(), contiguous_strides(out), out);
  if (needs_grad(x))
    attach_grad_fn(y, "permute", {x}, [inv](const Tensor& gy) -> Grads {
      return {permute(gy, inv)};
    });
  return y;
}

Tensor transpose(const Tensor& x, int dim0, int dim1) {
  const int nd = x.dim();
  int a = wrap_dim(dim0, nd, "transpose"), b = wrap_dim(dim1, nd, "transpose");
  std::vector<int> perm(nd);
  for (int i = 0; i < nd; ++i) perm[i] = i;
  if (nd > 0) std::swap(perm[a], perm[b]);
  return permute(x, perm);
}

Tensor contiguous(const Tensor& x) { return x.clone(); }

// ---- narrow / slice -------------------------------------------------------------
// y = x[..., start:start+length, ...] along dim:  x (A, S, B) -> y (A, length, B).
// A view when A = 1 (every dim before `dim` has size 1: the slab is one contiguous run).
// Backward: gx = zeros with gy copied into the slab.
Tensor narrow(const Tensor& x, int dim, int64_t start, int64_t length) {
  const Shape& s = x.shape();
  check(s.ndim() > 0, "narrow: cannot narrow a 0-d tensor");
  const int d = wrap_dim(dim, s.ndim(), "narrow");
  const int64_t size = s[d];
  if (start < 0) start += size;  // torch accepts a negative start
  check(start >= 0 && length >= 0 && start + length <= size, "narrow: start ", start, " length ",
        length, " is out of range for dim ", dim, " of size ", size, " in shape ", s);
  Shape out = s;
  out[d] = length;
  const int64_t offset = start * prod(s, d + 1, s.ndim());  // of the slab in x, per outer index
  Tensor y;
  if (prod(s, 0, d) == 1) {
    y = view_storage(x, out, offset);
  } else {
    y = empty(out);
    copy_slab(x.data(), s, y.data(), out, out, offset, 0);
  }
  if (needs_grad(x))
    attach_grad_fn(y, "narrow", {x}, [s, out, offset](const Tensor& gy) -> Grads {
      Tensor gx = zeros(s);
      copy_slab(gy.data(), out, gx.data(), s, out, 0, offset);
      return {gx};
    });
  return y;
}

// Python slicing along dim: negative start/end count from the end, both clamped to [0, size].
Tensor slice(const Tensor& x, int dim, int64_t start, int64_t end) {
  check(x.dim() > 0, "slice: cannot slice a 0-d tensor");
  const int64_t size = x.size(wrap_dim(dim, x.dim(), "slice"));
  auto clamp_index = [size](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + size : i, 0, size); };
  start = clamp_index(start);
  end = clamp_index(end);
  return narrow(x, dim, start, std::max<int64_t>(0, end - start));
}

// ---- cat / stack ------------------------------------------------------------------
// y = [x_0, x_1, ...] along dim:  x_k (A, S_k, B) -> y (A, Σ S_k, B).
// Backward: gx_k = the slab of gy that x_k was copied to.
Tensor cat(const std::vector<Tensor>& xs, int dim) {
  check(!xs.empty(), "cat: expected a non-empty list of tensors");
  const Shape& s0 = xs[0].shape();
  check(s0.ndim() > 0, "cat: tensor 0 is 0-d and cannot be concatenated");
  const int d = wrap_dim(dim, s0.ndim(), "cat");
  Shape out = s0;
  out[d] = 0;
  for (size_t k = 0; k < xs.size(); ++k) {
    const Shape& sk = xs[k].shape();
    bool ok = sk.ndim() == s0.ndim();
    for (int i = 0; ok && i < s0.ndim(); ++i) ok = i == d || sk[i] == s0[i];
    check(ok, "cat: tensor ", k, " has shape ", sk, " but tensor 0 has ", s0, " (dim ", d,
          " may differ)");
    out[d] += sk[d];
  }
  Tensor y = empty(out);
  const int64_t inner = prod(out, d + 1, out.ndim());
  std::vector<int64_t> offsets;  // of each input's slab in y
  int64_t at = 0;
  for (const Tensor& x : xs) {
    offsets.push_back(at * inner);
    copy_slab(x.data(), x.shape(), y.data(), out, x.shape(), 0, at * inner);
    at += x.size(d);
  }
  if (needs_grad_list(xs)) {
    std::vector<Shape> shapes;
    std::vector<bool> want;
    for (const Tensor& x : xs) {
      shapes.push_back(x.shape());
      want.push_back(x.requires_grad());
    }
    attach_grad_fn(y, "cat", xs, [out, shapes, want, offsets](const Tensor& gy) -> Grads {
      Grads g(shapes.size());
      for (size_t k = 0; k < shapes.size(); ++k) {
        if (!want[k]) continue;
        g[k] = empty(shapes[k]);
        copy_slab(gy.data(), out, g[k].data(), shapes[k], shapes[k], offsets[k], 0);
      }
      return g;
    });
  }
  return y;
}

// y = cat of the x_k each unsqueezed at dim:  k tensors of S -> (..., k, ...) with k at dim.
// The gradient flows back through those two ops.
Tensor stack(const std::vector<Tensor>& xs, int dim) {
  check(!xs.empty(), "stack: expected a non-empty list of tensors");
  const Shape& s0 = xs[0].shape();
  for (size_t k = 1; k < xs.size(); ++k)
    check(xs[k].shape() == s0, "stack: tensor ", k, " has shape ", xs[k].shape(),
          " but tensor 0 has ", s0, " (all must match)");
  const int d = wrap_dim(dim, s0.ndim() + 1, "stack");
  std::vector<Tensor> parts;
  parts.reserve(xs.size());
  for (const Tensor& x : xs) parts.push_back(unsqueeze(x, d));
  return cat(parts, d);
}

// ---- split / chunk ------------------------------------------------------------------
// Each piece is a narrow of x (a view when narrow can make one), with narrow's backward.
std::vector<Tensor> split_with_sizes(const Tensor& x, const std::vector<int64_t>& sizes, int dim) {
  check(x.dim() > 0, "split_with_sizes: cannot split a 0-d tensor");
  const int d = wrap_dim(dim, x.dim(), "split_with_sizes");
  int64_t total = 0;
  for (int64_t n : sizes) {
    check(n >= 0, "split_with_sizes: negative size ", n, " in ", list_str(sizes));
    total += n;
  }
  check(total == x.size(d), "split_with_sizes: sizes ", list_str(sizes), " sum to ", total,
        " but dim ", dim, " has size ", x.size(d), " in shape ", x.shape());
  std::vector<Tensor> pieces;
  int64_t at = 0;
  for (int64_t n : sizes) {
    pieces.push_back(narrow(x, d, at, n));
    at += n;
  }
  return pieces;
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int dim) {
  check(x.dim() > 0, "split: cannot split a 0-d tensor");
  const int d = wrap_dim(dim, x.dim(), "split");
  const int64_t size = x.size(d);
  check(split_size > 0 || (split_size == 0 && size == 0), "split: split_size must be positive, got ",
        split_size, " for dim ", dim, " of shape ", x.shape());
  if (size == 0) return {narrow(x, d, 0, 0)};
  std::vector<int64_t> sizes;
  for (int64_t at = 0; at < size; at += split_size) sizes.push_back(std::min(split_size, size - at));
  return split_with_sizes(x, sizes, d);
}

// torch.chunk: pieces of ceil(size / chunks), so there may be fewer than `chunks`.
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int dim) {
  check(chunks > 0, "chunk: chunks must be positive, got ", chunks);
  check(x.dim() > 0, "chunk: cannot chunk a 0-d tensor");
  const int64_t size = x.size(wrap_dim(dim, x.dim(), "chunk"));
  return split(x, (size + chunks - 1) / chunks, dim);
}

// ---- expand ------------------------------------------------------------------------
// y = x broadcast to `sizes` (materialised):  x (S) -> y (L..., S') with S' = S where 1s grow.
// Backward: an element copied to k places gets the sum of their gradients: gx = sum_to(gy).
Tensor expand(const Tensor& x, const std::vector<int64_t>& sizes) {
  const Shape& s = x.shape();
  const int nd = s.ndim(), n = static_cast<int>(sizes.size());
  check(n >= nd, "expand: ", n, " sizes ", list_str(sizes), " for a tensor of shape ", s,
        " (need at least ", nd, ")");
  std::vector<int64_t> dims(n);
  for (int i = 0; i < n; ++i) {
    int j = i - (n - nd);  // the matching dim of x, if any
    if (sizes[i] == -1) {
      check(j >= 0, "expand: -1 is not allowed for the new leading dim ", i, " in ",
            list_str(sizes));
      dims[i] = s[j];
    } else {
      check(sizes[i] >= 0, "expand: invalid size ", sizes[i], " in ", list_str(sizes));
      const int64_t had = j >= 0 ? s[j] : 1;  // a new leading dim counts as size 1
      check(had == 1 || had == sizes[i], "expand: shape ", s, " cannot be expanded to ",
            list_str(sizes), " (dim ", i, " has size ", had, ", not 1)");
      dims[i] = sizes[i];
    }
  }
  Tensor y = broadcast_to(x, Shape(dims), "expand");
  if (needs_grad(x))
    attach_grad_fn(y, "expand", {x}, [s](const Tensor& gy) -> Grads { return {sum_to(gy, s)}; });
  return y;
}

// ---- index_select --------------------------------------------------------------------
// y[k] = x[index[k]] along dim 0:  x (N, ...) -> y (K, ...).
// Backward: gx[n] = Σ_{k: index[k] = n} gy[k] (scatter-add; repeated indices accumulate).
Tensor index_select(const Tensor& x, int dim, const std::vector<int64_t>& index) {
  const Shape& s = x.shape();
  check(s.ndim() > 0, "index_select: cannot index a 0-d tensor");
  const int d = wrap_dim(dim, s.ndim(), "index_select");
  check(d == 0, "index_select: only dim 0 is supported, got dim ", dim, " for shape ", s,
        " (permute the dim to the front first)");
  const int64_t n = s[0], k_len = static_cast<int64_t>(index.size());
  for (int64_t k = 0; k < k_len; ++k)
    check(index[k] >= 0 && index[k] < n, "index_select: index ", index[k], " at position ", k,
          " is out of range for dim 0 of size ", n, " in shape ", s);
  const int64_t row = prod(s, 1, s.ndim());
  Shape out = s;
  out[0] = k_len;
  Tensor y = empty(out);
  const float* px = x.data();
  float* py = y.data();
  parallel_for(k_len, grain_for(kGrainElementwise, row),
               [&](int64_t k0, int64_t k1) {
                 for (int64_t k = k0; k < k1; ++k)
                   std::memcpy(py + k * row, px + index[k] * row, sizeof(float) * row);
               });
  if (needs_grad(x))
    attach_grad_fn(y, "index_select", {x}, [s, index, row](const Tensor& gy) -> Grads {
      Tensor gx = zeros(s);
      const float* pg = gy.data();
      float* po = gx.data();
      const int64_t k_len = static_cast<int64_t>(index.size());
      // Threads split the columns, so repeated rows never race and the order of the sum
      // (k ascending) is fixed.
      parallel_for(row, grain_for(kGrainElementwise, k_len),
                   [&](int64_t j0, int64_t j1) {
                     for (int64_t k = 0; k < k_len; ++k) {
                       const float* src = pg + k * row;
                       float* dst = po + index[k] * row;
                       for (int64_t j = j0; j < j1; ++j) dst[j] += src[j];
                     }
                   });
      return {gx};
    });
  return y;
}

// ---- pad ----------------------------------------------------------------------------
// F.pad, constant mode: pads = (last_lo, last_hi, second_last_lo, second_last_hi, ...).
// y = value everywhere, x copied into the interior:  x (..., H, W) -> (..., H+hl+hh, W+wl+wh).
// Backward: gx = the interior of gy.
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, float value) {
  const Shape& s = x.shape();
  const int np = static_cast<int>(pads.size());
  check(np % 2 == 0, "pad: pads ", list_str(pads), " must have an even number of entries");
  check(np / 2 <= s.ndim(), "pad: pads ", list_str(pads), " cover ", np / 2,
        " dims but the tensor has shape ", s);
  for (int64_t p : pads)
    check(p >= 0, "pad: negative padding in ", list_str(pads),
          " is not supported (crop with narrow or slice instead)");
  Shape out = s;
  std::vector<int64_t> lo(s.ndim(), 0);
  for (int i = 0; i < np / 2; ++i) {
    int d = s.ndim() - 1 - i;
    lo[d] = pads[2 * i];
    out[d] = s[d] + pads[2 * i] + pads[2 * i + 1];
  }
  const Strides os = contiguous_strides(out);
  int64_t offset = 0;  // of x's first element in y
  for (int d = 0; d < s.ndim(); ++d) offset += lo[d] * os[d];
  Tensor y = full(out, value);
  copy_block(x.data(), contiguous_strides(s), y.data() + offset, os, s);
  if (needs_grad(x))
    attach_grad_fn(y, "pad", {x}, [s, out, offset](const Tensor& gy) -> Grads {
      Tensor gx = empty(s);
      copy_block(gy.data() + offset, contiguous_strides(out), gx.data(), contiguous_strides(s), s);
      return {gx};
    });
  return y;
}

}  // namespace sima
