// bench_lowp_gemm: the candidates for reduced-precision GEMMs on this CPU, on the transformer
// shapes of a DeiT-Tiny-style model at batch 64 (M = 64·65 tokens), against float32 sgemm
// (docs/precision.md, "Library choice"). Every timed run alternates with an sgemm run on the
// same shape, so load from other processes hits both alike; medians.
//   ./build/bin/bench_lowp_gemm [reps]          (OMP_NUM_THREADS sets the threads)
// Rows: OpenBLAS cblas_sgemm (the reference); oneDNN f32 matmul; oneDNN u8·s8 -> s32 matmul
// alone (weights packed); LowpLinear fp32 (that f32 matmul with W packed once, plus the bias:
// what pack_fp32_inference runs); LowpLinear int8 (quantize the input + that matmul + dequantize and
// bias: what a Linear runs); LowpLinear bf16 (oneDNN bf16 or its emulation); OpenBLAS
// cblas_sbgemm when the library exports it (looked up at run time).
#include <cblas.h>
#include <dlfcn.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "bench_timing.h"
#include "core/ops.h"
#include "core/ops/lowp_gemm.h"
#include "core/parallel.h"
#include "nn/attention/sima.h"

using namespace sima;
using bench_timing::median;
using bench_timing::now_ms;

namespace {

// op and the reference (the sgemm, or the float32 SimA core) alternately: 2 warm-ups, then `reps` timed runs each.
void row(const char* name, double flops, int reps, const std::function<void()>& op, const std::function<void()>& ref) {
  for (int i = 0; i < 2; ++i) op(), ref();
  std::vector<double> a, b;
  for (int i = 0; i < reps; ++i) {
    const double t0 = now_ms();
    op();
    const double t1 = now_ms();
    ref();
    b.push_back(now_ms() - t1);
    a.push_back(t1 - t0);
  }
  std::printf("  %-34s %8.3f ms %7.1f GOP/s  %5.2fx ref\n", name, median(a), flops / (median(a) * 1e6),
              median(b) / median(a));
}

using dnnl::memory;

// A oneDNN matmul x (M, K) · W (K, N), W given as (N, K) row-major and packed once.
std::function<void()> onednn_matmul(int64_t M, int64_t K, int64_t N, memory::data_type src, memory::data_type wei,
                                    memory::data_type dst, void* x, void* w, void* y) {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  static dnnl::stream st(eng);
  using tag = memory::format_tag;
  memory::desc xd({M, K}, src, tag::ab), wd({K, N}, wei, tag::any), yd({M, N}, dst, tag::ab);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(xd, wd, yd), eng);
  memory wu({{K, N}, wei, tag::ba}, eng, w), wp(pd.weights_desc(), eng);
  dnnl::reorder(wu, wp).execute(st, wu, wp);
  memory xm(xd, eng, x), ym(yd, eng, y);
  dnnl::matmul prim(pd);
  return [=]() mutable {
    prim.execute(st, {{DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wp}, {DNNL_ARG_DST, ym}});
    st.wait();
  };
}

using sbgemm_fn = void (*)(CBLAS_ORDER, CBLAS_TRANSPOSE, CBLAS_TRANSPOSE, blasint, blasint, blasint, float,
                           const uint16_t*, blasint, const uint16_t*, blasint, float, float*, blasint);

void bench_shape(int64_t M, int64_t K, int64_t N, int reps) {
  std::printf("x (%ld, %ld) . W^T, W (%ld, %ld), %d threads\n", long(M), long(K), long(N), long(K), num_threads());
  const Tensor x = randn({M, K}), w = randn({N, K}), b = randn({N});
  Tensor y = empty({M, N});
  const double flops = 2.0 * M * N * K;
  auto sgemm = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.f, x.data(), K, w.data(), K, 0.f, y.data(), N);
  };
  row("OpenBLAS sgemm (fp32)", flops, reps, sgemm, sgemm);
  row("oneDNN matmul fp32", flops, reps,
      onednn_matmul(M, K, N, memory::data_type::f32, memory::data_type::f32, memory::data_type::f32, x.data(),
                    w.data(), y.data()),
      sgemm);
  std::vector<uint8_t> xq(size_t(M * K), 70);
  std::vector<int8_t> wq(size_t(N * K), 3);
  std::vector<int32_t> acc(size_t(M * N));
  row("oneDNN matmul u8.s8->s32 alone", flops, reps,
      onednn_matmul(M, K, N, memory::data_type::u8, memory::data_type::s8, memory::data_type::s32, xq.data(),
                    wq.data(), acc.data()),
      sgemm);
  const LowpLinear f32(Precision::F32, w, b), i8(Precision::Int8, w, b), b16(Precision::BF16, w, b);
  row("LowpLinear fp32 packed (gemm+bias)", flops, reps, [&] { f32.forward(x); }, sgemm);
  row("LowpLinear int8 (quant+gemm+dequant)", flops, reps, [&] { i8.forward(x); }, sgemm);
  row(bf16_native() ? "LowpLinear bf16 (oneDNN)" : "LowpLinear bf16 (emulated)", flops, reps, [&] { b16.forward(x); },
      sgemm);
  if (auto sb = reinterpret_cast<sbgemm_fn>(dlsym(RTLD_DEFAULT, "cblas_sbgemm"))) {
    std::vector<uint16_t> xb(size_t(M * K), 0x3f80), wb(size_t(N * K), 0x3f80);
    row("OpenBLAS cblas_sbgemm", flops, reps, [&] {
      sb(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.f, xb.data(), K, wb.data(), K, 0.f, y.data(), N);
    }, sgemm);
  } else {
    std::printf("  %-34s not exported by this OpenBLAS\n", "OpenBLAS cblas_sbgemm");
  }
}

// SimA's core (B, h, N, d) of a DeiT-Tiny-style block at batch 64: float32 against int8.
void bench_sima_core(int reps) {
  const int64_t B = 64, h = 3, N = 65, d = 64;
  std::printf("SimA core q, k, v (%ld, %ld, %ld, %ld), %d threads\n", long(B), long(h), long(N), long(d), num_threads());
  const Tensor q = randn({B, h, N, d}), k = randn({B, h, N, d}), v = randn({B, h, N, d});
  for (SimaOrder o : {SimaOrder::KvFirst, SimaOrder::QkFirst}) {
    const double flops = 2.0 * B * h * (o == SimaOrder::KvFirst ? 2 * N * d * d : 2 * N * N * d);
    auto f32 = [&] { sima_attention(q, k, v, SimaNorm::L1, o); };
    row(o == SimaOrder::KvFirst ? "int8 core, kv_first (vs fp32 core)" : "int8 core, qk_first (vs fp32 core)", flops,
        reps, [&] { sima_attention_int8(q, k, v, SimaNorm::L1, o, 1e-12f); }, f32);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 15;
  NoGradGuard no_grad;
  std::printf("bf16 native on this CPU: %s; int8 input range Q = %d\n", bf16_native() ? "yes" : "no (emulated)",
              int8_input_range());
  bench_shape(64 * 65, 192, 576, reps);  // qkv
  bench_shape(64 * 65, 192, 768, reps);  // fc1
  bench_shape(64 * 65, 768, 192, reps);  // fc2
  bench_shape(65, 192, 576, reps);       // qkv at batch 1
  bench_shape(65, 192, 768, reps);       // fc1 at batch 1
  bench_shape(65, 768, 192, reps);       // fc2 at batch 1
  bench_sima_core(reps);
}
