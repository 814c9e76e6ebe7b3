// The single-threaded GEMM under sima::gemm (gemm.h): oneDNN's dnnl_sgemm, or OpenBLAS's
// cblas_sgemm when SIMA_GEMM=openblas (to compare the two in one binary, or to fall back).
#include <cblas.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "core/flops.h"
#include "core/ops/dnnl_context.h"  // OneOmpThread
#include "core/ops/gemm.h"

namespace sima {

namespace {

std::string sima_gemm() {
  const char* v = std::getenv("SIMA_GEMM");
  return v ? v : "";
}

GemmBackend read_backend() {
  const std::string why = gemm_backend_problem();
  check(why.empty(), why);
  return sima_gemm() == "openblas" ? GemmBackend::OpenBlas : GemmBackend::OneDnn;
}

}  // namespace

std::string gemm_backend_problem() {
  const std::string s = sima_gemm();
  if (s.empty() || s == "onednn" || s == "openblas") return "";
  return "SIMA_GEMM='" + s + "': the GEMM library must be onednn (the default) or openblas";
}

GemmBackend gemm_backend() {
  static const GemmBackend b = read_backend();
  return b;
}

const char* gemm_backend_name(GemmBackend b) { return b == GemmBackend::OneDnn ? "onednn" : "openblas"; }

namespace detail {

void sgemm_with(GemmBackend backend, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* A,
                int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  lda = std::max<int64_t>(1, lda), ldb = std::max<int64_t>(1, ldb), ldc = std::max<int64_t>(1, ldc);
  if (backend == GemmBackend::OpenBlas) {  // single-threaded inside a chunk, as below
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1.0f, A,
                static_cast<int>(lda), B, static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
    return;
  }
  OneOmpThread one;
  const dnnl_status_t st =
      dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.0f, A, lda, B, ldb, beta, C, ldc);
  check(st == dnnl_success, "gemm: oneDNN's dnnl_sgemm failed (status ", int(st), ") on ", m, "x", n,
        "x", k);
}

void sgemm_block(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* A, int64_t lda,
                 const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  count_gemm_call();
  if (!gemm_timing_on()) {
    sgemm_with(gemm_backend(), ta, tb, m, n, k, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  sgemm_with(gemm_backend(), ta, tb, m, n, k, A, lda, B, ldb, beta, C, ldc);
  count_gemm_ns(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace detail
}  // namespace sima
