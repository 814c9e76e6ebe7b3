// matmul and linear: hand-computed values, a naive triple-loop reference with its own
// batch broadcasting, gradchecks for every trans flag and broadcast pattern, gradients
// of larger batched products against naive loops, and the errors.
#include <algorithm>
#include <limits>
#include <string>

#include "core/ops/broadcast.h"
#include "core/ops/gemm.h"
#include "testing.h"

using namespace sima;
using namespace sima::testing;

namespace {

// c[..., i, j] = Σ_k op(a)[..., i, k] · op(b)[..., k, j], batch dims broadcast numpy-style.
Tensor naive_matmul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  std::vector<int64_t> sa = a.shape().vec(), sb = b.shape().vec();
  const int64_t M = ta ? sa.back() : sa[sa.size() - 2], K = ta ? sa[sa.size() - 2] : sa.back();
  const int64_t N = tb ? sb[sb.size() - 2] : sb.back();
  const int na = int(sa.size()) - 2, nb = int(sb.size()) - 2, n = std::max(na, nb);
  std::vector<int64_t> da(n, 1), db(n, 1), batch(n);
  for (int d = 0; d < n; ++d) {
    if (d >= n - na) da[d] = sa[d - (n - na)];
    if (d >= n - nb) db[d] = sb[d - (n - nb)];
    batch[d] = std::max(da[d], db[d]);
  }
  std::vector<int64_t> cs = batch;
  cs.push_back(M);
  cs.push_back(N);
  Tensor c = zeros(Shape(cs));
  int64_t count = 1;
  for (int64_t s : batch) count *= s;
  for (int64_t i = 0; i < count; ++i) {
    // unravel i over the output batch, then ravel over a's and b's own batch dims
    std::vector<int64_t> idx(n);
    for (int d = n - 1, r = int(i); d >= 0; --d) {
      idx[d] = r % batch[d];
      r /= int(batch[d]);
    }
    int64_t ia = 0, ib = 0;
    for (int d = 0; d < n; ++d) {
      ia = ia * da[d] + (da[d] == 1 ? 0 : idx[d]);
      ib = ib * db[d] + (db[d] == 1 ? 0 : idx[d]);
    }
    const float* A = a.data() + ia * M * K;
    const float* B = b.data() + ib * K * N;
    for (int64_t r = 0; r < M; ++r)
      for (int64_t col = 0; col < N; ++col) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k)
          s += double(ta ? A[k * M + r] : A[r * K + k]) * double(tb ? B[col * K + k] : B[k * N + col]);
        c.data()[(i * M + r) * N + col] = float(s);
      }
  }
  return c;
}

// Shape of a (.., M, K) operand, stored transposed when trans.
Shape operand(std::vector<int64_t> batch, int64_t rows, int64_t cols, bool trans) {
  batch.push_back(trans ? cols : rows);
  batch.push_back(trans ? rows : cols);
  return Shape(batch);
}

struct Case {
  std::vector<int64_t> batch_a, batch_b;
  int64_t M, K, N;
};

}  // namespace

TEST_CASE("matmul: hand-computed values") {
  Tensor a = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = from_vector({7, 8, 9, 10, 11, 12}, {3, 2});
  check_close(matmul(a, b), {58, 64, 139, 154});
  // aᵀ (3, 2) @ a (2, 3) and a @ aᵀ through the flags, no copies
  check_close(matmul(a, a, true, false), {17, 22, 27, 22, 29, 36, 27, 36, 45});
  check_close(matmul(a, a, false, true), {14, 32, 32, 77});
  // bᵀ (2, 3) @ aᵀ (3, 2) = (a b)ᵀ
  check_close(matmul(b, a, true, true), {58, 139, 64, 154});
  // (2, 1, 2, 2) @ (3, 2, 2) -> (2, 3, 2, 2): a[1] @ b[2] = [[2, 0], [0, 2]] @ [[0, 1], [1, 0]]
  Tensor a4 = from_vector({1, 0, 0, 1, 2, 0, 0, 2}, {2, 1, 2, 2});
  Tensor b3 = from_vector({1, 2, 3, 4, 1, 0, 0, 1, 0, 1, 1, 0}, {3, 2, 2});
  Tensor c = matmul(a4, b3);
  CHECK(c.shape() == Shape{2, 3, 2, 2});
  CHECK(c.at({1, 2, 0, 1}) == 2.f);
  CHECK(c.at({1, 2, 1, 0}) == 2.f);
  CHECK(c.at({1, 2, 0, 0}) == 0.f);
  CHECK(c.at({0, 0, 1, 1}) == 4.f);
  CHECK(c.at({1, 0, 1, 0}) == 6.f);
}

TEST_CASE("matmul: forward against the naive loop, every flag and broadcast pattern") {
  const std::vector<Case> cases = {
      {{}, {}, 3, 4, 5},            // plain 2-d
      {{2, 3}, {2, 3}, 4, 5, 3},    // (B, h, N, d) @ (B, h, d, e)
      {{2, 3}, {}, 4, 5, 6},        // (B, N, C) @ (C, E): one flat sgemm
      {{3}, {1}, 4, 2, 5},          // (h, N, d) @ (1, d, e)
      {{}, {4}, 3, 5, 2},           // 2-d a broadcast over b's batch
      {{2, 1}, {1, 3}, 2, 3, 4},    // both broadcast
      {{1}, {5, 1, 1}, 3, 2, 3},    // b has more batch dims than a
      {{2}, {2}, 1, 1, 1},          // size-1 everything
      {{3}, {3}, 1, 4, 1},          // row @ column
      {{2}, {}, 5, 1, 4},           // K = 1 (outer products)
  };
  uint64_t seed = 10;
  for (const Case& c : cases)
    for (int flags = 0; flags < 4; ++flags) {
      const bool ta = flags & 1, tb = flags & 2;
      Tensor a = randn_leaf(operand(c.batch_a, c.M, c.K, ta), seed++, false);
      Tensor b = randn_leaf(operand(c.batch_b, c.K, c.N, tb), seed++, false);
      CAPTURE(a.shape());
      CAPTURE(b.shape());
      CAPTURE(ta);
      CAPTURE(tb);
      check_close(matmul(a, b, ta, tb), naive_matmul(a, b, ta, tb), 1e-5f, 1e-5f);
    }
}

TEST_CASE("matmul: large matrices (OpenBLAS threads) and many small ones (batch in parallel)") {
  for (bool ta : {false, true}) {
    Tensor a = randn_leaf(operand({2}, 260, 250, ta), 1, false);
    Tensor b = randn_leaf(operand({2}, 250, 270, false), 2, false);
    CHECK(max_abs_diff(matmul(a, b, ta, false), naive_matmul(a, b, ta, false)) < 1e-3f);
  }
  Tensor a = randn_leaf({64, 9, 7}, 3, false), b = randn_leaf({64, 5, 7}, 4, false);
  check_close(matmul(a, b, false, true), naive_matmul(a, b, false, true), 1e-5f, 1e-5f);
}

// The check below fills C with NaN to show that beta 0 never reads it: that only holds if the
// comparison sees a NaN. std::fmax drops one; max_abs_diff (testing.h) must not.
TEST_CASE("max_abs_diff and rel_error: a NaN is never within tolerance") {
  const Tensor a = full({2, 3}, 1.f);
  Tensor b = a.clone();
  b.data()[4] = std::numeric_limits<float>::quiet_NaN();
  CHECK(std::isinf(max_abs_diff(b, a)));
  CHECK(std::isinf(max_abs_diff(a, b)));
  CHECK_FALSE(rel_error(b, a) <= 1e3f);
  Tensor c = b.clone();
  CHECK(max_abs_diff(b, c) == 0.f);  // NaN where both have it: the same result
}

TEST_CASE("gemm: oneDNN and OpenBLAS agree with the naive loop, every flag, beta 0 over NaN and beta 1") {
  // The study's shapes, from a head product to a projection, and ragged ones.
  const int64_t shapes[][3] = {{50, 50, 16}, {50, 16, 50}, {7, 5, 3}, {1, 1, 1}, {640, 192, 64}, {192, 64, 640}, {33, 1, 9}};
  uint64_t seed = 40;
  for (const auto& s : shapes)
    for (int flags = 0; flags < 4; ++flags)
      for (GemmBackend backend : {GemmBackend::OneDnn, GemmBackend::OpenBlas}) {
        const int64_t m = s[0], n = s[1], k = s[2];
        const bool ta = flags & 1, tb = flags & 2;
        CAPTURE(m);
        CAPTURE(n);
        CAPTURE(k);
        CAPTURE(flags);
        CAPTURE(gemm_backend_name(backend));
        Tensor a = randn_leaf(ta ? Shape{k, m} : Shape{m, k}, seed++, false);
        Tensor b = randn_leaf(tb ? Shape{n, k} : Shape{k, n}, seed++, false);
        Tensor want = naive_matmul(a, b, ta, tb);
        Tensor c = full({m, n}, std::numeric_limits<float>::quiet_NaN());  // beta 0: C is never read
        detail::sgemm_with(backend, ta, tb, m, n, k, a.data(), ta ? m : k, b.data(), tb ? k : n, 0.f, c.data(), n);
        CHECK(max_abs_diff(c, want) < 1e-4f);
        detail::sgemm_with(backend, ta, tb, m, n, k, a.data(), ta ? m : k, b.data(), tb ? k : n, 1.f, c.data(), n);
        CHECK(max_abs_diff(c, mul(want, 2.f)) < 2e-4f);  // beta 1 accumulates
      }
  // The backend in use is the one SIMA_GEMM names (oneDNN unless it says openblas).
  const char* env = std::getenv("SIMA_GEMM");
  CHECK(gemm_backend() == (env && std::string(env) == "openblas" ? GemmBackend::OpenBlas : GemmBackend::OneDnn));
}

TEST_CASE("matmul: gradcheck for every flag and broadcast pattern") {
  const std::vector<Case> cases = {
      {{}, {}, 2, 3, 4},       {{2, 2}, {2, 2}, 2, 3, 2}, {{2, 2}, {}, 3, 2, 2},
      {{3}, {1}, 2, 2, 3},     {{}, {3}, 2, 3, 2},        {{2, 1}, {1, 3}, 2, 2, 2},
      {{1}, {2, 1, 1}, 2, 2, 1}, {{2}, {2}, 1, 1, 1},     {{2}, {}, 3, 1, 2},
  };
  uint64_t seed = 100;
  for (const Case& c : cases)
    for (int flags = 0; flags < 4; ++flags) {
      const bool ta = flags & 1, tb = flags & 2;
      Tensor a = randn_leaf(operand(c.batch_a, c.M, c.K, ta), seed++);
      Tensor b = randn_leaf(operand(c.batch_b, c.K, c.N, tb), seed++);
      CAPTURE(a.shape());
      CAPTURE(b.shape());
      CAPTURE(ta);
      CAPTURE(tb);
      CHECK_GRADCHECK([=](const std::vector<Tensor>& v) { return matmul(v[0], v[1], ta, tb); },
                      std::vector<Tensor>{a, b});
    }
  // Only one side requiring grad, and the same tensor on both sides (x xᵀ).
  Tensor a = randn_leaf({2, 3, 4}, 7), w = randn_leaf({4, 5}, 8, false);
  CHECK_GRADCHECK([](const std::vector<Tensor>& v) { return matmul(v[0], v[1]); },
                  std::vector<Tensor>{a, w});
  CHECK_FALSE(w.grad().defined());
  CHECK_GRADCHECK([](const std::vector<Tensor>& v) { return matmul(v[0], v[0], false, true); },
                  std::vector<Tensor>{a});
}

TEST_CASE("matmul: gradients of larger broadcast batches against naive loops") {
  // L = Σ w ⊙ op(a)·op(b):  d op(a) = w · op(b)ᵀ and d op(b) = op(a)ᵀ · w, summed over
  // the broadcast batch dims. Written with naive_matmul on explicit transposes.
  auto transpose_last = [](const Tensor& t) {  // copy with the last two dims swapped
    std::vector<int64_t> s = t.shape().vec();
    const int64_t R = s[s.size() - 2], C = s.back(), n = t.numel() / (R * C);
    std::swap(s[s.size() - 2], s.back());
    Tensor o = empty(Shape(s));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < C; ++c) o.data()[(i * C + c) * R + r] = t.data()[(i * R + r) * C + c];
    return o;
  };
  auto sum_batches_to = [](const Tensor& g, const Shape& s) {  // sum over broadcast batch dims
    return sum_to(g, s);
  };
  struct Big { Shape a, b; bool ta, tb; };
  const std::vector<Big> cases = {
      {{4, 1, 6, 5}, {1, 16, 5, 7}, false, false},  // groups of 16 and of 4 outputs per input
      {{4, 1, 5, 6}, {1, 16, 7, 5}, true, true},
      {{1, 6, 5}, {32, 7, 5}, false, true},         // a shared by the whole batch
      {{32, 6, 5}, {1, 5, 7}, false, false},        // flat path
      {{32, 6, 5}, {7, 5}, false, true},            // flat path, trans_b
  };
  uint64_t seed = 500;
  for (const Big& c : cases) {
    CAPTURE(c.a);
    CAPTURE(c.b);
    Tensor a = randn_leaf(c.a, seed++), b = randn_leaf(c.b, seed++);
    Tensor y = matmul(a, b, c.ta, c.tb);
    Tensor w = randn_leaf(y.shape(), seed++, false);
    y.backward(w);
    Tensor opa = c.ta ? transpose_last(a) : a, opb = c.tb ? transpose_last(b) : b;
    Tensor dopa = naive_matmul(w, opb, false, true);  // (.., M, K)
    Tensor dopb = naive_matmul(opa, w, true, false);  // (.., K, N)
    Shape sa_op = opa.shape(), sb_op = opb.shape();
    Tensor ga = sum_batches_to(dopa, sa_op), gb = sum_batches_to(dopb, sb_op);
    check_close(a.grad(), c.ta ? transpose_last(ga) : ga, 1e-4f, 1e-4f);
    check_close(b.grad(), c.tb ? transpose_last(gb) : gb, 1e-4f, 1e-4f);
  }
}

TEST_CASE("linear: forward against x Wᵀ + b, gradcheck, bias undefined") {
  Tensor x = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor w = from_vector({1, 0, -1, 2, 1, 0}, {2, 3});
  Tensor b = from_vector({10, 20});
  check_close(linear(x, w, b), {8, 24, 8, 33});
  check_close(linear(x, w), {-2, 4, -2, 13});
  check_close(linear(from_vector({1, 1, 1}), w, b), {10, 23});  // 1-d input
  // 3-d input against the naive product
  Tensor x3 = randn_leaf({2, 5, 4}, 1, false), w3 = randn_leaf({3, 4}, 2, false);
  Tensor b3 = randn_leaf({3}, 3, false);
  Tensor ref = add(naive_matmul(x3, w3, false, true), b3);
  check_close(linear(x3, w3, b3), ref, 1e-5f, 1e-5f);
  CHECK(linear(x3, w3, b3).shape() == Shape{2, 5, 3});

  Tensor xg = randn_leaf({2, 3, 4}, 4), wg = randn_leaf({5, 4}, 5), bg = randn_leaf({5}, 6);
  CHECK_GRADCHECK([](const std::vector<Tensor>& v) { return linear(v[0], v[1], v[2]); },
                  std::vector<Tensor>{xg, wg, bg});
  CHECK_GRADCHECK([](const std::vector<Tensor>& v) { return linear(v[0], v[1]); },
                  std::vector<Tensor>{xg, wg});
  Tensor x1 = randn_leaf({4}, 7), w1 = randn_leaf({1, 4}, 8), b1 = randn_leaf({1}, 9);
  CHECK_GRADCHECK([](const std::vector<Tensor>& v) { return linear(v[0], v[1], v[2]); },
                  std::vector<Tensor>{x1, w1, b1});
  // Many rows: the bias gradient is a column sum over all of them.
  Tensor xr = randn_leaf({300, 3}, 10, false), wr = randn_leaf({2, 3}, 11, false), br = zeros({2});
  br.requires_grad_(true);
  Tensor y = linear(xr, wr, br);
  y.backward(ones(y.shape()));
  check_close(br.grad(), {300, 300});
}

TEST_CASE("matmul and linear errors name the op and the shapes") {
  CHECK_THROWS_WITH_AS(matmul(zeros({2, 3}), zeros({4, 5})),
                       "matmul: (2, 3) @ (4, 5): inner dimensions 3 and 4 differ", Error);
  CHECK_THROWS_WITH_AS(matmul(zeros({3, 2}), zeros({4, 5}), true, false),
                       "matmul: (3, 2).T @ (4, 5): inner dimensions 3 and 4 differ", Error);
  CHECK_THROWS_WITH_AS(matmul(zeros({3}), zeros({3, 2})),
                       "matmul: (3) @ (3, 2): both operands must be at least 2-d", Error);
  CHECK_THROWS_WITH_AS(matmul(zeros({2, 3, 4}), zeros({5, 4, 2})),
                       "matmul: (2, 3, 4) @ (5, 4, 2): batch dimensions (2) and (5) cannot be broadcast",
                       Error);
  CHECK_THROWS_AS(matmul(zeros({2, 3}), Tensor()), Error);
  CHECK_THROWS_WITH_AS(linear(zeros({2, 3}), zeros({4, 5})),
                       "linear: input (2, 3) and weight (4, 5): in_features 3 and 5 differ", Error);
  CHECK_THROWS_WITH_AS(linear(zeros({2, 3}), zeros({4, 3}), zeros({3})),
                       "linear: bias (3) does not match weight (4, 3) (expected (4))", Error);
  CHECK_THROWS_AS(linear(zeros({2, 3}), zeros({4, 3, 1})), Error);
}
