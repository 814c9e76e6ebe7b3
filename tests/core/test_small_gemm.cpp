// small_gemm (core/ops/small_gemm.h): every transpose and beta against a double-precision
// triple loop and against the library's gemm(), its order of summation, and its size limit.
#include <cmath>
#include <string>
#include <vector>

#include "core/flops.h"
#include "core/ops/gemm.h"
#include "core/ops/small_gemm.h"
#include "testing.h"

using namespace sima;
using namespace sima::testing;

namespace {

// C = op(A)·op(B) + beta·C in double, A stored m×k (k×m when ta), B k×n (n×k when tb).
std::vector<double> reference(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* A,
                              const float* B, float beta, const float* C) {
  std::vector<double> out(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = double(beta) * C[i * n + j];
      for (int64_t l = 0; l < k; ++l)
        s += double(ta ? A[l * m + i] : A[i * k + l]) * double(tb ? B[j * k + l] : B[l * n + j]);
      out[i * n + j] = s;
    }
  return out;
}

struct Case {
  int64_t m, n, k;
};

}  // namespace

TEST_CASE("small_gemm: every transpose and beta agrees with a double loop and with gemm()") {
  const std::vector<Case> cases = {{1, 1, 1}, {10, 10, 10}, {3, 17, 5}, {16, 16, 16}, {17, 1, 33},
                                   {1, 40, 2}, {64, 64, 64}, {7, 64, 11}, {5, 3, 0}};
  int checked = 0;
  for (const Case& c : cases)
    for (int t = 0; t < 4; ++t)
      for (float beta : {0.f, 1.f, -1.f, 0.5f}) {
        const bool ta = t & 1, tb = t & 2;
        CAPTURE(c.m);
        CAPTURE(c.n);
        CAPTURE(c.k);
        CAPTURE(ta);
        CAPTURE(tb);
        CAPTURE(beta);
        Tensor A = randn_leaf({std::max<int64_t>(1, c.m * c.k)}, 11 + t, false);
        Tensor B = randn_leaf({std::max<int64_t>(1, c.k * c.n)}, 23 + t, false);
        Tensor C0 = randn_leaf({c.m * c.n}, 37, false);
        std::vector<float> got(C0.data(), C0.data() + c.m * c.n), lib = got;
        small_gemm(ta, tb, c.m, c.n, c.k, A.data(), B.data(), beta, got.data());
        gemm(ta, tb, c.m, c.n, c.k, A.data(), B.data(), beta, lib.data());
        const std::vector<double> want = reference(ta, tb, c.m, c.n, c.k, A.data(), B.data(), beta, C0.data());
        for (int64_t i = 0; i < c.m * c.n; ++i) {
          const double tol = 1e-5 * (1 + std::sqrt(double(c.k)));
          CHECK(std::abs(got[i] - want[i]) <= tol * (1 + std::abs(want[i])));
          CHECK(std::abs(got[i] - lib[i]) <= tol * (1 + std::abs(want[i])));
          ++checked;
        }
      }
  CHECK(checked > 10000);
}

TEST_CASE("small_gemm: each element sums over k in order, one product at a time") {
  // Row i of A is (1, 2^-24, 2^-24, ...): added in order, each 2^-24 is lost against 1
  // (half an ulp, rounds to even), so C = 1 exactly; a tree or a reordered sum would not be.
  const int64_t m = 2, n = 3, k = 9;
  std::vector<float> A(m * k, std::ldexp(1.f, -24)), B(k * n, 1.f), C(m * n, -7.f);
  for (int64_t i = 0; i < m; ++i) A[i * k] = 1.f;
  small_gemm(false, false, m, n, k, A.data(), B.data(), 0.f, C.data());
  for (float x : C) CHECK(x == 1.f);
  // and with the 2^-24 terms first they add up before meeting 1: 1 + 8·2^-24
  for (int64_t i = 0; i < m; ++i) A[i * k] = std::ldexp(1.f, -24), A[i * k + k - 1] = 1.f;
  small_gemm(false, false, m, n, k, A.data(), B.data(), 0.f, C.data());
  for (float x : C) CHECK(x == 1.f + std::ldexp(1.f, -21));
}

TEST_CASE("small_gemm: counts its FLOPs, not a library call; sizes past its limit are refused") {
  std::vector<float> A(100, 1.f), B(100, 1.f), C(100, 0.f);
  const int64_t flops0 = gemm_flops(), calls0 = gemm_calls();
  small_gemm(false, false, 10, 10, 10, A.data(), B.data(), 0.f, C.data());
  CHECK(gemm_flops() - flops0 == 2000);
  CHECK(gemm_calls() == calls0);
  CHECK(C[0] == 10.f);
  for (const Case& c : std::vector<Case>{{65, 1, 1}, {1, 65, 1}, {1, 1, 65}, {-1, 1, 1}}) {
    const std::string e =
        error_message([&] { small_gemm(false, false, c.m, c.n, c.k, A.data(), B.data(), 0.f, C.data()); });
    CHECK(e.find("outside the sizes it takes") != std::string::npos);
    CHECK(e.find("use gemm()") != std::string::npos);
  }
}
