// The facts docs/sima.md states about SimA's attention matrix and its two product orders, and
// the answers to the page's two exercises, computed with the library.
#include "core/flops.h"
#include "core/ops/elementwise.h"
#include "core/ops/matmul.h"
#include "core/ops/reduce.h"
#include "core/ops/shape_ops.h"
#include "nn/attention/sima.h"
#include "testing.h"

using namespace sima;
using namespace sima::testing;

namespace {

// A = q̂ k̂ᵀ (B, h, N, Nk) as sima_attention normalises q and k.
Tensor attention_matrix(const Tensor& q, const Tensor& k, SimaNorm norm = SimaNorm::L1) {
  Tensor qh, kh;
  sima_attention(q, k, k, norm, SimaOrder::KvFirst, 1e-12f, &qh, &kh);
  return matmul(qh, kh, false, true);
}

// GEMM FLOPs of sima_attention's forward, and of its backward, for one (B, h, N, d) input.
std::pair<int64_t, int64_t> sima_flops(int64_t N, int64_t d, SimaOrder order) {
  Tensor q = randn_leaf({1, 1, N, d}, 1), k = randn_leaf({1, 1, N, d}, 2), v = randn_leaf({1, 1, N, d}, 3);
  const int64_t f0 = gemm_flops();
  Tensor out = sima_attention(q, k, v, SimaNorm::L1, order);
  const int64_t f1 = gemm_flops();
  out.backward(randn({1, 1, N, d}));
  return {f1 - f0, gemm_flops() - f1};
}

}  // namespace

TEST_CASE("sima.md: with l1 columns, max |A_ij| <= sum |A_ij| <= d, at any N; l2 only bounds the entries") {
  for (int64_t N : {3, 50, 400}) {
    CAPTURE(N);
    const int64_t d = 8;
    Tensor q = randn_leaf({2, 3, N, d}, 10 + N, false), k = randn_leaf({2, 3, N, d}, 20 + N, false);
    Tensor A = attention_matrix(q, k);
    Tensor total = sum(abs(A), {2, 3});  // (B, h): Σ_ij |A_ij| per head
    for (int64_t i = 0; i < total.numel(); ++i) CHECK(total.data()[i] <= float(d) * (1 + 1e-5f));
    CHECK(max(abs(A)).item() <= float(d));
    // ℓ2 columns: every entry still ≤ d, but the sum grows with N (up to d·N)
    Tensor A2 = attention_matrix(q, k, SimaNorm::L2);
    CHECK(max(abs(A2)).item() <= float(d) * (1 + 1e-5f));
    if (N == 400) CHECK(sum(abs(A2), {2, 3}).data()[0] > float(d));
  }
}

TEST_CASE("sima.md: A has negative entries, and its rows do not sum to one") {
  Tensor q = randn_leaf({1, 1, 16, 8}, 5, false), k = randn_leaf({1, 1, 16, 8}, 6, false);
  Tensor A = attention_matrix(q, k);
  int64_t neg = 0;
  for (int64_t i = 0; i < A.numel(); ++i) neg += A.data()[i] < 0.f;
  CHECK(neg > 0);
  Tensor rows = sum(A, {3});
  float lo = rows.data()[0], hi = lo;
  for (int64_t i = 0; i < rows.numel(); ++i) lo = std::min(lo, rows.data()[i]), hi = std::max(hi, rows.data()[i]);
  CHECK(hi - lo > 1e-3f);  // rows differ
  CHECK(hi < 1.f);         // and none reaches one: Σ_j A_ij ≤ Σ_c |q̂_ic| < 1 here
}

TEST_CASE("sima.md exercise 2: |A_01| = d exactly when every channel of q sits on token 0 and of k on token 1") {
  // N = 3, d = 2: q's both channels only on token 0, k's only on token 1, same signs
  Tensor q = from_vector({5, -2, 0, 0, 0, 0}, {1, 1, 3, 2});
  Tensor k = from_vector({0, 0, 0.5f, -7, 0, 0}, {1, 1, 3, 2});
  Tensor A = attention_matrix(q, k);
  check_close(A, {0, 2, 0, 0, 0, 0, 0, 0, 0});  // A_01 = 1·1 + (−1)(−1) = d, the rest 0
  CHECK(sum(abs(A)).item() == doctest::Approx(2.0));
  // move a little of one channel's mass to another token: |A_01| drops below d
  Tensor q2 = from_vector({5, -2, 1, 0, 0, 0}, {1, 1, 3, 2});
  CHECK(attention_matrix(q2, k).data()[1] < 2.f - 0.1f);
}

TEST_CASE("sima.md: GEMM FLOPs per head, forward 4N²d | 4Nd², backward 10N²d | 8Nd²") {
  for (auto [N, d] : {std::pair<int64_t, int64_t>{60, 64}, {100, 32}}) {
    CAPTURE(N);
    auto [fq, bq] = sima_flops(N, d, SimaOrder::QkFirst);
    auto [fk, bk] = sima_flops(N, d, SimaOrder::KvFirst);
    CHECK(fq == 4 * N * N * d);
    CHECK(bq == 10 * N * N * d);
    CHECK(fk == 4 * N * d * d);
    CHECK(bk == 8 * N * d * d);
  }
}

TEST_CASE("sima.md exercise 1: at N = 60 < d = 64 (qk_first by the N < d rule) kv_first trains with fewer FLOPs") {
  const int64_t N = 60, d = 64;  // N < d: the official rule (resolve_sima_order's) picks qk_first
  auto [fq, bq] = sima_flops(N, d, SimaOrder::QkFirst);
  auto [fk, bk] = sima_flops(N, d, SimaOrder::KvFirst);
  CHECK(fq + bq == 3225600);  // 14 N² d
  CHECK(fk + bk == 2949120);  // 12 N d²
  CHECK(fq < fk);             // the forward alone: qk_first is cheaper (N < d)
  // the FLOP-optimal rule for a training step: qk_first iff 7N < 6d, i.e. N < 54.86 at d = 64
  for (int64_t n : {54, 55}) {
    auto [a, b] = sima_flops(n, d, SimaOrder::QkFirst);
    auto [c, e] = sima_flops(n, d, SimaOrder::KvFirst);
    CHECK(((a + b) < (c + e)) == (7 * n < 6 * d));
  }
}

TEST_CASE("sima.md: h heads = one head over all C channels with the channel sum cut into h blocks") {
  const int64_t N = 5, h = 2, d = 3, C = h * d;
  Tensor q = randn_leaf({1, N, C}, 31, false), k = randn_leaf({1, N, C}, 32, false);
  Tensor v = randn_leaf({1, N, C}, 33, false);
  // (1, N, C) -> (1, heads, N, C / heads)
  auto split = [&](const Tensor& x, int64_t heads) {
    return permute(reshape(x, {1, N, heads, C / heads}), {0, 2, 1, 3});
  };
  Tensor multi = sima_attention(split(q, h), split(k, h), split(v, h));  // (1, h, N, d)
  Tensor qs, ks;  // one head: q̂, k̂ (1, 1, N, C), the same per-channel normalisation
  sima_attention(split(q, 1), split(k, 1), split(v, 1), SimaNorm::L1, SimaOrder::Auto, 1e-12f, &qs, &ks);
  const float *pq = qs.data(), *pk = ks.data(), *pv = v.data(), *pm = multi.data();
  for (int64_t g = 0; g < h; ++g)
    for (int64_t i = 0; i < N; ++i)
      for (int64_t c2 = 0; c2 < d; ++c2) {  // output channel g·d + c2: only block g's products
        double o = 0;
        for (int64_t j = 0; j < N; ++j)
          for (int64_t c = g * d; c < (g + 1) * d; ++c)
            o += double(pq[i * C + c]) * pk[j * C + c] * pv[j * C + g * d + c2];
        CHECK(pm[(g * N + i) * d + c2] == doctest::Approx(o).epsilon(1e-4));
      }
}
