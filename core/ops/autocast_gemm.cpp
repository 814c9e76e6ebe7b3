// gemm() under autocast (autocast.h): the bf16 product through oneDNN, the float16 emulation
// through the float32 product on rounded copies.
//
//   BF16  a = bf16(A), b = bf16(B)               (floats_to_bf16_bits: to nearest even)
//         C = op(a)·op(b) + beta·C              oneDNN matmul, bf16 sources, float32 sums and
//                                               destination; beta·C is its "sum" post-op
//   FP16  a = fp16(A), b = fp16(B), c = fp16(C)  (round_to_fp16: to nearest even, ±inf beyond 65504)
//         C = fp16(op(a)·op(b) + beta·c)         gemm_f32; the products of two float16 values are
//                                               exact in float32, so this is a float16 GEMM with a
//                                               float32 accumulator, as CUDA's, up to the sums' order
//
// Threads, as in gemm_f32 (gemm.h): a big product is cut into num_threads() blocks of C's rows
// (or columns) and each block is one single-threaded oneDNN call, so the bits depend only on the
// requested thread count, and a resumed bf16 run repeats an uninterrupted one.
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <chrono>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/ops/dnnl_context.h"
#include "core/ops/gemm.h"
#include "core/ops/quantize.h"

namespace sima {

namespace {

using dnnl::memory;
using dt = memory::data_type;

// A block's product: op(A) (m×k), op(B) (k×n), C (m×n), leading dimensions as stored.
struct BlockKey {
  bool ta, tb;
  int64_t m, n, k, lda, ldb, ldc;
  float beta;
  bool operator==(const BlockKey&) const = default;
};
struct BlockKeyHash {
  size_t operator()(const BlockKey& s) const {
    size_t h = size_t(s.ta) * 2 + size_t(s.tb);
    for (int64_t v : {s.m, s.n, s.k, s.lda, s.ldb, s.ldc}) h = h * 1000003u ^ size_t(v);
    return h ^ std::hash<float>()(s.beta);
  }
};

struct Bf16Matmul {
  dnnl::matmul prim;
  memory a, b, c;  // made once; each call points them at its data (set_data_handle)
};

// op(A) stored transposed is the (m, k) matrix with strides (1, lda); likewise op(B).
Bf16Matmul make_bf16_matmul(const BlockKey& s) {
  const memory::desc a({s.m, s.k}, dt::bf16, s.ta ? memory::dims{1, s.lda} : memory::dims{s.lda, 1});
  const memory::desc b({s.k, s.n}, dt::bf16, s.tb ? memory::dims{1, s.ldb} : memory::dims{s.ldb, 1});
  const memory::desc c({s.m, s.n}, dt::f32, memory::dims{s.ldc, 1});
  dnnl::primitive_attr attr;
  if (s.beta != 0.f) {
    dnnl::post_ops ops;
    ops.append_sum(s.beta);
    attr.set_post_ops(ops);
  }
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, dnnl_ctx().eng);
  const dnnl::engine& eng = dnnl_ctx().eng;
  return {dnnl::matmul(pd), memory(a, eng, nullptr), memory(b, eng, nullptr), memory(c, eng, nullptr)};
}

// One single-threaded bf16 block; the primitive for its shape is made once per thread and kept.
void bf16_block(const BlockKey& s, const uint16_t* A, const uint16_t* B, float* C) {
  OneOmpThread one;
  thread_local std::unordered_map<BlockKey, Bf16Matmul, BlockKeyHash> made;
  thread_local dnnl::stream st(dnnl_ctx().eng);
  auto it = made.find(s);
  if (it == made.end()) {
    if (made.size() >= 4096) made.clear();  // a bound on the shapes kept (evaluation, odd batches)
    try {
      it = made.emplace(s, make_bf16_matmul(s)).first;
    } catch (const dnnl::error& e) {
      fail("bf16 gemm: oneDNN made no bf16 matmul for ", s.m, "x", s.n, "x", s.k, " (", e.what(),
           "); train.precision bf16 needs AVX512-BF16 or AMX");
    }
  }
  Bf16Matmul& mm = it->second;
  mm.a.set_data_handle(const_cast<uint16_t*>(A));
  mm.b.set_data_handle(const_cast<uint16_t*>(B));
  mm.c.set_data_handle(C);
  count_gemm_call();
  const bool timed = gemm_timing_on();
  const auto t0 = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  mm.prim.execute(st, {{DNNL_ARG_SRC, mm.a}, {DNNL_ARG_WEIGHTS, mm.b}, {DNNL_ARG_DST, mm.c}});
  st.wait();
  if (timed)
    count_gemm_ns(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
}

// A and B rounded here unless A16 / B16 hold their rounded copies already (Bf16Operand).
void gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* A, const uint16_t* A16,
               const float* B, const uint16_t* B16, float beta, float* C) {
  count_gemm_flops(2 * m * n * k);
  thread_local std::vector<uint16_t> a16, b16;  // this thread's rounded copies, reused
  if (!A16) {
    if (a16.size() < size_t(m * k)) a16.resize(size_t(m * k));
    floats_to_bf16_bits(A, a16.data(), m * k);
    A16 = a16.data();
  }
  if (!B16) {
    if (b16.size() < size_t(k * n)) b16.resize(size_t(k * n));
    floats_to_bf16_bits(B, b16.data(), k * n);
    B16 = b16.data();
  }
  const uint16_t *a = A16, *b = B16;
  const int64_t lda = ta ? m : k, ldb = tb ? k : n, ldc = n;
  const bool by_rows = m >= n;
  const int64_t cut = by_rows ? m : n;
  const int64_t blocks = in_parallel() || m * n * k < kGemmSplitWork
                             ? 1
                             : std::min<int64_t>(num_threads(), cut / kGemmMinBlock);
  if (blocks <= 1) {
    if (!in_parallel()) govern_threads();
    bf16_block({ta, tb, m, n, k, lda, ldb, ldc, beta}, a, b, C);
    return;
  }
  run_chunks(blocks, [&](int64_t blk) {
    const int64_t i0 = cut * blk / blocks, len = cut * (blk + 1) / blocks - i0;
    if (by_rows)  // rows i0.. of C and of op(A)
      bf16_block({ta, tb, len, n, k, lda, ldb, ldc, beta}, ta ? a + i0 : a + i0 * k, b, C + i0 * ldc);
    else  // columns i0.. of C and of op(B)
      bf16_block({ta, tb, m, len, k, lda, ldb, ldc, beta}, a, tb ? b + i0 * k : b + i0, C + i0);
  });
}

void gemm_fp16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* A, const float* B, float beta,
               float* C) {
  thread_local std::vector<float> a16, b16;
  if (a16.size() < size_t(m * k)) a16.resize(size_t(m * k));
  if (b16.size() < size_t(k * n)) b16.resize(size_t(k * n));
  round_to_fp16(A, a16.data(), m * k);
  round_to_fp16(B, b16.data(), k * n);
  if (beta != 0.f) round_to_fp16(C, C, m * n);  // what is added (a bias, a partial sum) is float16 too
  gemm_f32(ta, tb, m, n, k, a16.data(), b16.data(), beta, C);
  round_to_fp16(C, C, m * n);
}

// X stored rows × cols with row stride ld, rounded by `round` (x, y, n) into buf, contiguous.
template <class T, class Round>
const T* rounded_rows(std::vector<T>& buf, const float* X, int64_t rows, int64_t cols, int64_t ld, Round round) {
  if (buf.size() < size_t(rows * cols)) buf.resize(size_t(rows * cols));
  if (ld == cols) round(X, buf.data(), rows * cols);
  else
    for (int64_t r = 0; r < rows; ++r) round(X + r * ld, buf.data() + r * cols, cols);
  return buf.data();
}

void bf16_bits(const float* x, uint16_t* y, int64_t n) { floats_to_bf16_bits(x, y, n); }
void fp16_floats(const float* x, float* y, int64_t n) { round_to_fp16(x, y, n); }

}  // namespace

void gemm_block(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const float* B,
                int64_t ldb, float beta, float* C, int64_t ldc) {
  const AutocastMode mode = autocast_mode();
  if (mode == AutocastMode::Off || m == 0 || n == 0 || k == 0) {
    detail::sgemm_block(ta, tb, m, n, k, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  const int64_t a_rows = ta ? k : m, a_cols = ta ? m : k;  // as stored
  const int64_t b_rows = tb ? n : k, b_cols = tb ? k : n;
  if (mode == AutocastMode::BF16) {
    thread_local std::vector<uint16_t> a16, b16;
    const uint16_t* a = rounded_rows(a16, A, a_rows, a_cols, lda, bf16_bits);
    const uint16_t* b = rounded_rows(b16, B, b_rows, b_cols, ldb, bf16_bits);
    bf16_block({ta, tb, m, n, k, a_cols, b_cols, ldc, beta}, a, b, C);
    return;
  }
  thread_local std::vector<float> a32, b32;  // FP16: the rounded values, as floats
  const Fp16AttentionSite site;  // their sizes count as the attention cores' (fp16_attention_peak_take)
  const float* a = rounded_rows(a32, A, a_rows, a_cols, lda, fp16_floats);
  const float* b = rounded_rows(b32, B, b_rows, b_cols, ldb, fp16_floats);
  if (beta != 0.f)
    for (int64_t r = 0; r < m; ++r) round_to_fp16(C + r * ldc, C + r * ldc, n);  // what beta adds is float16
  detail::sgemm_block(ta, tb, m, n, k, a, a_cols, b, b_cols, beta, C, ldc);
  for (int64_t r = 0; r < m; ++r) round_to_fp16(C + r * ldc, C + r * ldc, n);
}

void detail::gemm_autocast(AutocastMode mode, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* A,
                           const float* B, float beta, float* C) {
  if (mode == AutocastMode::BF16) gemm_bf16(ta, tb, m, n, k, A, nullptr, B, nullptr, beta, C);
  else gemm_fp16(ta, tb, m, n, k, A, B, beta, C);
}

void detail::gemm_bf16_rounded(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* A,
                               const uint16_t* A16, const float* B, const uint16_t* B16, float beta, float* C) {
  gemm_bf16(ta, tb, m, n, k, A, A16, B, B16, beta, C);
}

Bf16Operand::Bf16Operand(const float* x, int64_t n) {
  if (autocast_mode() != AutocastMode::BF16 || n <= 0) return;
  bits_ = empty(Shape{(n + 1) / 2});  // two bfloat16 values a float
  floats_to_bf16_bits(x, reinterpret_cast<uint16_t*>(bits_.data()), n);
}

}  // namespace sima
