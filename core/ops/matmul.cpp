// Matrix products: matmul (batched, broadcast, transposes as BLAS flags) and linear.
//
// Every product here is one gemm() on contiguous row-major matrices (gemm.h).
// Notation: op(A) = Aᵀ if trans_a else A, op(A) is M×K, op(B) is K×N, C is M×N.
//
// Backward of C = op(A)·op(B), from dL = Σ dC ⊙ dC_ij:
//   d op(A) = dC · op(B)ᵀ   (M×N · N×K)
//   d op(B) = op(A)ᵀ · dC   (K×M · M×N)
// and when an operand is stored transposed we want the transpose of that:
//   trans_a:  dA = (dC · op(B)ᵀ)ᵀ = op(B) · dCᵀ   (K×N · N×M)
//   trans_b:  dB = (op(A)ᵀ · dC)ᵀ = dCᵀ · op(A)   (N×M · M×K)
// Each is again one sgemm per matrix with flags, never a transposed copy.
// An operand broadcast over batch dims gets the sum of the gradients of every
// output matrix it took part in (accumulated with beta = 1).
#include "core/ops/matmul.h"

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops/gemm.h"
#include "core/ops/linear_kernels.h"
#include "core/parallel.h"

namespace sima {

namespace {

std::string describe(const Tensor& t, bool trans) { return t.shape().str() + (trans ? ".T" : ""); }

// How the output's batch (the leading dims) maps onto the matrices of a and b.
struct BatchPlan {
  Shape batch;                  // broadcast batch shape of the output
  int64_t count = 1;            // number of output matrices
  int64_t count_a = 1, count_b = 1;  // number of matrices stored in a and in b
  std::vector<int64_t> ia, ib;  // output matrix i = op(a[ia[i]]) · op(b[ib[i]])
};

BatchPlan plan_batches(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  const Shape &sa = a.shape(), &sb = b.shape();
  const int na = sa.ndim() - 2, nb = sb.ndim() - 2, n = std::max(na, nb);
  check(n + 2 <= kMaxDims, "matmul: ", describe(a, ta), " @ ", describe(b, tb), ": too many dims");
  BatchPlan p;
  std::array<int64_t, kMaxDims> da{}, db{};  // batch dims of a and b, left-padded with 1
  for (int d = 0; d < n; ++d) {
    da[d] = d - (n - na) >= 0 ? sa[d - (n - na)] : 1;
    db[d] = d - (n - nb) >= 0 ? sb[d - (n - nb)] : 1;
    check(da[d] == db[d] || da[d] == 1 || db[d] == 1, "matmul: ", describe(a, ta), " @ ",
          describe(b, tb), ": batch dimensions ", Shape(std::vector<int64_t>(sa.begin(), sa.end() - 2)),
          " and ", Shape(std::vector<int64_t>(sb.begin(), sb.end() - 2)), " cannot be broadcast");
    p.batch.push_back(da[d] == 1 ? db[d] : da[d]);
  }
  p.count = p.batch.numel();
  p.count_a = prod(sa, 0, na);
  p.count_b = prod(sb, 0, nb);
  p.ia.resize(p.count);
  p.ib.resize(p.count);
  // Walk the output batch in row-major order, carrying each operand's matrix index
  // (a dim of size 1 is not stepped through: stride 0).
  for (int64_t i = 0; i < p.count; ++i) {
    int64_t r = i, ia = 0, ib = 0, sta = 1, stb = 1;
    for (int d = n - 1; d >= 0; --d) {
      int64_t idx = r % p.batch[d];
      r /= p.batch[d];
      if (da[d] != 1) ia += idx * sta;
      if (db[d] != 1) ib += idx * stb;
      sta *= da[d];
      stb *= db[d];
    }
    p.ia[i] = ia;
    p.ib[i] = ib;
  }
  return p;
}

// For i in [0, count): C[ic[i]] (+)= op(A[ia[i]]) · op(B[ib[i]]), matrices m×n from a k-sum.
// Several i may write the same C matrix (the gradient of a broadcast operand): they are
// grouped by target and summed in order of i (beta = 1 after the first). Groups run in
// parallel when the matrices are small, so the result never depends on the thread count.
void gemm_batched(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* A,
                  const std::vector<int64_t>& ia, const float* B, const std::vector<int64_t>& ib,
                  float* C, const std::vector<int64_t>& ic, int64_t count_c) {
  const int64_t count = static_cast<int64_t>(ic.size());
  const int64_t sA = m * k, sB = k * n, sC = m * n;
  // Counting sort of the outputs by target: order[start[t] .. start[t+1]) write C[t].
  std::vector<int64_t> start(count_c + 1, 0), order(count);
  for (int64_t i = 0; i < count; ++i) start[ic[i] + 1]++;
  for (int64_t t = 0; t < count_c; ++t) start[t + 1] += start[t];
  {
    std::vector<int64_t> fill(start.begin(), start.end() - 1);
    for (int64_t i = 0; i < count; ++i) order[fill[ic[i]]++] = i;
  }
  auto run = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* c = C + t * sC;
      if (start[t] == start[t + 1]) std::fill(c, c + sC, 0.f);  // no contribution (empty batch)
      for (int64_t j = start[t]; j < start[t + 1]; ++j) {
        int64_t i = order[j];
        gemm(ta, tb, m, n, k, A + ia[i] * sA, B + ib[i] * sB, j == start[t] ? 0.f : 1.f, c);
      }
    }
  };
  const int64_t mnk = m * n * k;
  if (mnk >= kGemmBatchParallelWork) {  // big matrices: OpenBLAS splits each one
    run(0, count_c);
    return;
  }
  const int64_t work_per_target = std::max<int64_t>(1, mnk * (count / std::max<int64_t>(1, count_c)));
  parallel_for(count_c, grain_for(kGemmGrain, work_per_target), run);
}

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

}  // namespace

// ---- matmul -------------------------------------------------------------------
// a (..., M, K) @ b (..., K, N) -> c (..., M, N)   [a is (..., K, M) if trans_a, b (..., N, K) if trans_b]
Tensor matmul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  check(a.defined() && b.defined(), "matmul: undefined operand");
  check(a.dim() >= 2 && b.dim() >= 2, "matmul: ", describe(a, ta), " @ ", describe(b, tb),
        ": both operands must be at least 2-d");
  const int64_t M = ta ? a.size(-1) : a.size(-2), K = ta ? a.size(-2) : a.size(-1);
  const int64_t Kb = tb ? b.size(-1) : b.size(-2), N = tb ? b.size(-2) : b.size(-1);
  check(K == Kb, "matmul: ", describe(a, ta), " @ ", describe(b, tb), ": inner dimensions ", K,
        " and ", Kb, " differ");
  BatchPlan p = plan_batches(a, b, ta, tb);
  Shape cs = p.batch;
  cs.push_back(M);
  cs.push_back(N);
  Tensor c = empty(cs);

  // b is one matrix shared by the whole batch and a is not transposed: the batch of a
  // is one tall (count·M, K) matrix, so the whole product is one sgemm.
  const bool flat = p.count_b == 1 && !ta;
  if (flat) gemm(false, tb, p.count * M, N, K, a.data(), b.data(), 0.f, c.data());
  else gemm_batched(ta, tb, M, N, K, a.data(), p.ia, b.data(), p.ib, c.data(), iota(p.count), p.count);

  if (needs_grad(a, b))
    attach_grad_fn(c, "matmul", {a, b}, [as = a.detach(), bs = b.detach(), ra = a.requires_grad(),
                                         rb = b.requires_grad(), ta, tb, M, N, K, flat,
                                         p = std::move(p)](const Tensor& gc) -> Grads {
      // gc (..., M, N)
      Tensor ga, gb;
      const std::vector<int64_t> ic = iota(p.count);
      if (ra) {
        ga = empty(as.shape());
        if (flat)  // dA (count·M, K) = dC (count·M, N) · op(B)ᵀ
          gemm(false, !tb, p.count * M, K, N, gc.data(), bs.data(), 0.f, ga.data());
        else if (!ta)  // dA_i (M×K) = dC_i · op(B_i)ᵀ
          gemm_batched(false, !tb, M, K, N, gc.data(), ic, bs.data(), p.ib, ga.data(), p.ia, p.count_a);
        else  // dA_i (K×M) = op(B_i) · dC_iᵀ
          gemm_batched(tb, true, K, M, N, bs.data(), p.ib, gc.data(), ic, ga.data(), p.ia, p.count_a);
      }
      if (rb) {
        gb = empty(bs.shape());
        if (flat && !tb)  // dB (K×N) = A_flatᵀ · dC_flat, a sum over all count·M rows
          gemm(true, false, K, N, p.count * M, as.data(), gc.data(), 0.f, gb.data());
        else if (flat)  // dB (N×K) = dC_flatᵀ · A_flat
          gemm(true, false, N, K, p.count * M, gc.data(), as.data(), 0.f, gb.data());
        else if (!tb)  // dB_i (K×N) = op(A_i)ᵀ · dC_i
          gemm_batched(!ta, false, K, N, M, as.data(), p.ia, gc.data(), ic, gb.data(), p.ib, p.count_b);
        else  // dB_i (N×K) = dC_iᵀ · op(A_i)
          gemm_batched(true, ta, N, K, M, gc.data(), ic, as.data(), p.ia, gb.data(), p.ib, p.count_b);
      }
      return {ga, gb};
    });
  return c;
}

// ---- linear -------------------------------------------------------------------
// x (..., in) viewed as (R, in), weight (out, in), bias (out) -> y (..., out) viewed as (R, out)
//   y = x · Wᵀ + b (linear_rows in linear_kernels.h)
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  check(x.defined() && w.defined(), "linear: undefined input or weight");
  check(x.dim() >= 1 && w.dim() == 2, "linear: input ", x.shape(), " and weight ", w.shape(),
        ": need an input of at least 1 dim and a 2-d weight (out_features, in_features)");
  const int64_t in = x.size(-1), out = w.size(0), R = prod(x.shape(), 0, x.dim() - 1);
  check(w.size(1) == in, "linear: input ", x.shape(), " and weight ", w.shape(), ": in_features ",
        in, " and ", w.size(1), " differ");
  check(!bias.defined() || (bias.dim() == 1 && bias.size(0) == out), "linear: bias ",
        bias.defined() ? bias.shape().str() : "", " does not match weight ", w.shape(),
        " (expected (", out, "))");
  Shape ys = x.shape();
  ys[ys.ndim() - 1] = out;
  Tensor y = empty(ys);
  // Under bf16 autocast x and W are rounded once here, and the backward reuses them (gemm.h).
  const Bf16Operand x16(x.data(), R * in), w16(w.data(), out * in);
  if (bias.defined()) linear_rows(x.data(), w.data(), bias.data(), y.data(), R, out, in, x16, w16);
  else gemm(false, true, R, out, in, x.data(), x16, w.data(), w16, 0.f, y.data());

  if (needs_grad(x, w, bias))
    attach_grad_fn(y, "linear", {x, w, bias}, [xs = x.detach(), ws = w.detach(), R, in, out,
                                               x16 = w.requires_grad() ? x16 : Bf16Operand(),  // for dW
                                               w16 = x.requires_grad() ? w16 : Bf16Operand(),  // for dx
                                               rx = x.requires_grad(), rw = w.requires_grad(),
                                               rb = bias.defined() && bias.requires_grad()](
                                                  const Tensor& gy) -> Grads {
      // gy (R, out)
      Tensor gx, gw, gb;
      const Bf16Operand gy16 = rx && rw ? Bf16Operand(gy.data(), R * out) : Bf16Operand();  // read twice
      if (rx) {  // dx (R×in) = dy (R×out) · W (out×in)
        gx = empty(xs.shape());
        gemm(false, false, R, in, out, gy.data(), gy16, ws.data(), w16, 0.f, gx.data());
      }
      if (rw) {  // dW (out×in) = dyᵀ (out×R) · x (R×in): one sgemm summing over all rows
        gw = empty(ws.shape());
        gemm(true, false, out, in, R, gy.data(), gy16, xs.data(), x16, 0.f, gw.data());
      }
      if (rb) gb = bias_grad(gy.data(), R, out);  // db (out) = column sums of dy
      return {gx, gw, gb};
    });
  return y;
}

}  // namespace sima
