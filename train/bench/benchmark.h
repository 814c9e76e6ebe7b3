// Speed measurements behind `sima-bench`: one attention block per variant, a model's
// training step and inference, and the machine's SGEMM peak to compare them with.
//
// Timings are the median of `reps` runs after `warmup` runs. The machine may be shared:
// compare ratios measured in one run, not absolute times across runs.
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/ops/autocast.h"
#include "core/ops/quantize.h"

namespace sima {

struct TimingOptions {
  int warmup = 2;
  int reps = 7;
};
// Median wall time of f in milliseconds.
double median_ms(const std::function<void()>& f, const TimingOptions& timing = {});
// Shortest wall time of f in milliseconds (for a peak: the best case, not the typical one).
double best_ms(const std::function<void()>& f, const TimingOptions& timing = {});

// ---- one attention block ------------------------------------------------------------
struct AttentionBenchConfig {
  int64_t batch = 8;
  int64_t tokens = 256;  // N; a square number gives the (H, W) grid SOFT needs
  int64_t dim = 512;     // C = heads · head width
  int64_t heads = 8;
  std::vector<std::string> variants;  // empty: every row of the variant table (nn/attention/variants.h)
  // SimA's product orders, one row each: auto | qk_first | kv_first
  std::vector<std::string> orders = {"auto"};
  TimingOptions timing;
};

struct AttentionBenchRow {
  std::string variant;
  std::string order;        // variants with an "order" option (sima) only; "" for the others
  double forward_ms = 0.0;  // the whole block: qkv Linear, core, proj
  double train_ms = 0.0;    // forward + backward
  int64_t exp_calls = 0;    // per forward of the whole batch
  double gemm_gflop = 0.0;  // GEMM work of one forward (core/flops.h)
  std::string error;        // when the variant cannot run at this shape
};

// sima::Error naming every row with an error and the shape, e.g.
//   "attention bench: B=1 N=18 C=32 heads=4: variant 'soft' cannot run: <why>";
// sima-bench calls it before printing, so a failure is never a row of its table.
void check_attention_rows(const std::vector<AttentionBenchRow>& rows, const AttentionBenchConfig& cfg);

// The paper's shapes (SimA, Table 3 and Figure 1), each a list of configs built on `base`
// (its variants and timing kept). SimA runs with the order the paper pins for the shape
// and with auto (and both orders in the Figure 1 sweeps, where the crossover is the point):
//   table3       B=8: N=256, C=512, h=8 (d=64; pinned qk_first, the products softmax does) and
//                N=64, C=256, h=8 (d=32; pinned kv_first, the products XCA/SOFT do)
//   fig1_tokens  resolution sweep at fixed width: DeiT-S (C=384, h=6, d=64), patch 16, B=1,
//                images 224/320/448/640/896 -> N = 197, 401, 785, 1601, 3137
//   fig1_dim     width sweep at fixed resolution: N=197 (224/16), h=8, B=1, d = 16..256
//                (C = 128..2048)
std::vector<AttentionBenchConfig> attention_preset(const std::string& name, const AttentionBenchConfig& base);
std::vector<std::string> attention_preset_names();
std::vector<AttentionBenchRow> bench_attention(const AttentionBenchConfig& cfg);
nlohmann::json to_json(const AttentionBenchRow& row, const AttentionBenchConfig& cfg);

// ---- a whole model ------------------------------------------------------------------
struct ModelBenchConfig {
  nlohmann::json model = "deit_tiny_patch4_32_sima";  // a registry name or model JSON
  int64_t batch = 64;
  int64_t img_size = 0;  // 0: the model's
  TimingOptions timing{.warmup = 2, .reps = 5};
  Precision precision = Precision::F32;  // of the inference and batch-1 runs (models/quantized.h)
  bool int8_attention = false;           // with Int8: SimA's core in int8 too
  bool pack_fp32 = false;                // with F32: weights packed once for oneDNN (pack_fp32_inference)
  // The training step's products (train.precision, core/ops/autocast.h). FP16 is an emulation of
  // CUDA's numerics (rounding passes around float32 products): slower than fp32 by design.
  AutocastMode train_precision = AutocastMode::Off;
};

struct ModelBenchResult {
  std::string model;
  std::string precision = "fp32", precision_note;  // the note: e.g. bf16 emulated on this CPU
  std::string train_precision = "fp32";
  int64_t batch = 0, img_size = 0, parameters = 0;
  double train_step_ms = 0.0, train_img_per_s = 0.0;  // forward + backward + AdamW step
  double infer_ms = 0.0, infer_img_per_s = 0.0;       // eval mode, no grad, at `batch`
  double latency_b1_ms = 0.0;                         // eval, batch 1
  double train_gemm_gflop = 0.0;                      // GEMM work of one training step
  double train_gflop_per_s = 0.0;
  int64_t train_gemm_calls = 0;  // the GEMM library's calls in one training step (core/flops.h)
  double train_gemm_ms = 0.0;     // the time inside them, summed over threads, in a step of its own
  double timed_step_ms = 0.0;     // that step's wall time (the clock reads around each call slow it)
  // GEMM work of one inference forward at `batch`, counted on the float32 model (the same products
  // at every precision), and that work over infer_ms: against the SGEMM peak, how close the
  // forward comes to running nothing but GEMMs at the library's best speed.
  double infer_gemm_gflop = 0.0, infer_gflop_per_s = 0.0;
  double sgemm_peak_gflop_per_s = 0.0;                // measured in the same run
  double peak_rss_mb = 0.0;                           // of the process so far (getrusage)
};

ModelBenchResult bench_model(const ModelBenchConfig& cfg);
nlohmann::json to_json(const ModelBenchResult& r);

// GFLOP/s of gemm() (the library in use, core/ops/gemm.h) on n×n×n at the current thread count:
// the best of timing.reps runs after timing.warmup. A peak is a best case; the first runs in a
// process are up to a quarter slower, and a median of 5 after one warm-up still caught them
// (fractions of the peak above 1 in a record: docs/latency.md).
double measure_sgemm_peak(int64_t n = 1024, const TimingOptions& timing = {.warmup = 3, .reps = 9});
// Peak resident memory of this process in MiB.
double peak_rss_mb();

}  // namespace sima
