#include "train/bench/benchmark.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/autograd.h"
#include "core/error.h"
#include "core/flops.h"
#include "core/ops.h"
#include "core/ops/gemm.h"
#include "core/omp_wait.h"
#include "core/parallel.h"
#include "models/quantized.h"
#include "models/registry.h"
#include "nn/attention/sima.h"
#include "nn/attention/variants.h"
#include "train/config/experiment_config.h"
#include "train/optim/optim.h"

namespace sima {

using json = nlohmann::json;

namespace {
// The wall times of timing.reps runs of f after timing.warmup, sorted.
std::vector<double> sorted_times_ms(const char* who, const std::function<void()>& f, const TimingOptions& timing) {
  check(timing.reps >= 1 && timing.warmup >= 0, who, ": reps must be >= 1 and warmup >= 0");
  for (int i = 0; i < timing.warmup; ++i) f();
  std::vector<double> t;
  for (int i = 0; i < timing.reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t;
}
}  // namespace

double median_ms(const std::function<void()>& f, const TimingOptions& timing) {
  const std::vector<double> t = sorted_times_ms("median_ms", f, timing);
  return t[t.size() / 2];
}

double best_ms(const std::function<void()>& f, const TimingOptions& timing) {
  return sorted_times_ms("best_ms", f, timing).front();
}

namespace {

// The token grid (SOFT's bottleneck needs one): all N tokens when N is a square; else, when
// N - 1 is a square (a class token then the patches, as in DeiT's 197 = 1 + 14²), the last
// N - 1; else an N x 1 strip.
std::pair<int64_t, int64_t> bench_token_grid(int64_t tokens) {
  auto isqrt = [](int64_t n) { return int64_t(std::llround(std::sqrt(double(n)))); };
  int64_t H = isqrt(tokens), W = H;
  if (H * W != tokens) {
    H = W = isqrt(tokens - 1);
    if (H * W != tokens - 1 || H == 0) H = tokens, W = 1;
  }
  return {H, W};
}

// One run per variant, and per product order for the variants with an "order" option (SimA):
// (variant, order), order "" for the others.
std::vector<std::pair<std::string, std::string>> attention_runs(const AttentionBenchConfig& cfg) {
  // Every row of the variant table (nn/attention/variants.h) unless a list is given.
  std::vector<std::string> variants = cfg.variants.empty() ? attention_variant_names() : cfg.variants;
  for (auto& v : variants) attention_variant(v, "attention bench");  // an unknown name lists the valid ones
  const std::vector<std::string>& words = sima_order_names();  // the words SimA's order key takes
  for (auto& o : cfg.orders)
    check(std::find(words.begin(), words.end(), o) != words.end(), "attention bench: order '", o,
          "' is not one of: ", join_words(words));
  std::vector<std::pair<std::string, std::string>> runs;
  for (const std::string& name : variants) {
    if (!attention_variant(name).option("order")) runs.emplace_back(name, "");
    else
      for (const std::string& o : cfg.orders) runs.emplace_back(name, o);
  }
  return runs;
}

// One attention block of `cfg`'s shape with variant `name` (and SimA's product `order`) on an
// H x W token grid: forward and forward + backward times, GEMM GFLOP and exp calls of one
// forward; a sima::Error becomes the row's error.
AttentionBenchRow bench_attention_run(const AttentionBenchConfig& cfg, const std::string& name,
                                      const std::string& order, int64_t H, int64_t W) {
  AttentionBenchRow row;
  row.variant = name;
  row.order = order;
  try {
    AttentionOptions opt;
    opt.variant = name;
    opt.dim = cfg.dim;
    opt.num_heads = cfg.heads;
    if (!order.empty()) opt.with("order", order);
    opt.num_tokens = cfg.tokens;  // linformer: the N its E, F are built for
    auto attn = make_attention(opt);
    Tensor x = randn({cfg.batch, cfg.tokens, cfg.dim});
    Tensor gy = randn({cfg.batch, cfg.tokens, cfg.dim});
    row.forward_ms = median_ms(
        [&] {
          NoGradGuard ng;
          attn->forward(x, H, W);
        },
        cfg.timing);
    attn->reset_exp_calls();
    const int64_t flops0 = gemm_flops();
    {
      NoGradGuard ng;
      attn->forward(x, H, W);
    }
    row.gemm_gflop = double(gemm_flops() - flops0) * 1e-9;
    row.exp_calls = attn->exp_calls();
    row.train_ms = median_ms(
        [&] {
          attn->zero_grad();
          attn->forward(x, H, W).backward(gy);
        },
        cfg.timing);
  } catch (const Error& e) {
    row.error = e.what();
  }
  return row;
}

}  // namespace

std::vector<AttentionBenchRow> bench_attention(const AttentionBenchConfig& cfg) {
  check(cfg.batch >= 1 && cfg.tokens >= 1 && cfg.heads >= 1 && cfg.dim >= 1, "attention bench: batch, tokens, dim ",
        "and heads must be positive");
  check(cfg.dim % cfg.heads == 0, "attention bench: --heads ", cfg.heads, " does not divide --dim ", cfg.dim);
  const std::vector<std::pair<std::string, std::string>> runs = attention_runs(cfg);
  const auto [H, W] = bench_token_grid(cfg.tokens);
  std::vector<AttentionBenchRow> rows;
  for (const auto& [name, order] : runs) rows.push_back(bench_attention_run(cfg, name, order, H, W));
  return rows;
}

void check_attention_rows(const std::vector<AttentionBenchRow>& rows, const AttentionBenchConfig& cfg) {
  std::string errors;
  for (const AttentionBenchRow& r : rows)
    if (!r.error.empty())
      errors += std::string(errors.empty() ? "" : "; ") + "variant '" + r.variant + "'" +
                (r.order.empty() ? "" : " (order " + r.order + ")") + " cannot run: " + r.error;
  check(errors.empty(), "attention bench: B=", cfg.batch, " N=", cfg.tokens, " C=", cfg.dim, " heads=", cfg.heads,
        ": ", errors);
}

std::vector<std::string> attention_preset_names() { return {"table3", "table3_head", "fig1_tokens", "fig1_dim"}; }

std::vector<AttentionBenchConfig> attention_preset(const std::string& name, const AttentionBenchConfig& base) {
  auto shape = [&](int64_t batch, int64_t tokens, int64_t dim, int64_t heads, std::vector<std::string> orders) {
    AttentionBenchConfig c = base;
    c.batch = batch, c.tokens = tokens, c.dim = dim, c.heads = heads, c.orders = std::move(orders);
    return c;
  };
  std::vector<AttentionBenchConfig> out;
  // The SimA paper's Table 3 times one block at (N = 256, D = 64, H = 8) and (N = 64, D = 256, H = 8).
  // "table3" reads D as the width of a token, as the paper defines it (its section 2.1): C = D, so the
  // head width is D / H. "table3_head" reads D as the head width: C = D * H. SimA runs with the
  // product order fixed to (q k^T) v, the order softmax must use (like-for-like, as the paper's
  // table), and with "auto" (the cheaper order, what a user gets).
  if (name == "table3" || name == "table3_head") {
    const int64_t per_token = name == "table3" ? 1 : 8;
    out.push_back(shape(8, 256, 64 * per_token, 8, {"qk_first", "auto"}));
    out.push_back(shape(8, 64, 256 * per_token, 8, {"qk_first", "auto"}));
  } else if (name == "fig1_tokens") {
    for (int64_t img : {224, 320, 448, 640, 896})
      out.push_back(shape(1, (img / 16) * (img / 16) + 1, 384, 6, {"qk_first", "kv_first", "auto"}));
  } else if (name == "fig1_dim") {
    for (int64_t d : {16, 32, 64, 128, 256}) out.push_back(shape(1, 197, 8 * d, 8, {"qk_first", "kv_first", "auto"}));
  } else {
    std::string names;
    for (auto& n : attention_preset_names()) names += (names.empty() ? "" : ", ") + n;
    fail("attention bench: preset '", name, "' is not one of: ", names);
  }
  return out;
}

json to_json(const AttentionBenchRow& r, const AttentionBenchConfig& cfg) {
  json j = {{"bench", "attention"}, {"variant", r.variant}, {"batch", cfg.batch}, {"tokens", cfg.tokens},
            {"dim", cfg.dim},        {"heads", cfg.heads},   {"threads", num_threads()},
            {"omp_wait", omp_wait_policy()}, {"thread_governor", thread_governor_stats().enabled}};
  if (!r.order.empty()) j["order"] = r.order;
  if (!r.error.empty()) {
    j["error"] = r.error;
    return j;
  }
  j["forward_ms"] = r.forward_ms;
  j["train_ms"] = r.train_ms;
  j["exp_calls"] = r.exp_calls;
  j["gemm_gflop"] = r.gemm_gflop;
  return j;
}

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) / 1024.0;  // Linux: KiB
}

double measure_sgemm_peak(int64_t n, const TimingOptions& timing) {
  check(n >= 64, "measure_sgemm_peak: n must be >= 64");
  Tensor a = randn({n, n}), b = randn({n, n}), c = empty({n, n});
  const double ms = best_ms([&] { gemm(false, false, n, n, n, a.data(), b.data(), 0.f, c.data()); }, timing);
  return 2.0 * double(n) * double(n) * double(n) / (ms * 1e-3) * 1e-9;
}

namespace {

// The training step's times and GEMM work into r: the median step, then one step counted and
// one timed call by call.
void bench_training(Model& model, const Tensor& images, const std::vector<int64_t>& labels,
                    const ModelBenchConfig& cfg, ModelBenchResult& r) {
  AdamW opt(param_groups_no_decay(model.named_parameters(), OptimizerConfig().no_weight_decay),
            {.lr = 1e-4, .weight_decay = 0.05});
  check(autocast_unsupported(cfg.train_precision).empty(), "model bench: --train-precision: ",
        autocast_unsupported(cfg.train_precision));
  r.train_precision = autocast_mode_name(cfg.train_precision);
  auto step = [&] {
    model.train();
    const AutocastGuard autocast(cfg.train_precision);  // forward and backward, as the training loop
    Tensor loss = cross_entropy(model.forward(images), labels, 0.1f);
    loss.backward();
    opt.step();
    opt.zero_grad();
  };
  r.train_step_ms = median_ms(step, cfg.timing);
  const int64_t flops0 = gemm_flops(), calls0 = gemm_calls();
  step();
  r.train_gemm_gflop = double(gemm_flops() - flops0) * 1e-9;
  r.train_gemm_calls = gemm_calls() - calls0;
  {
    GemmTiming timing;  // one more step, timed call by call and whole (the median above is untimed steps')
    const int64_t ns0 = gemm_ns();
    const auto t0 = std::chrono::steady_clock::now();
    step();
    r.timed_step_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    r.train_gemm_ms = double(gemm_ns() - ns0) * 1e-6;
  }
  r.train_img_per_s = double(cfg.batch) / (r.train_step_ms * 1e-3);
  r.train_gflop_per_s = r.train_gemm_gflop / (r.train_step_ms * 1e-3);
}

// Inference at the asked precision into r: the batch's GEMM work (float32), its median time and
// the batch-1 latency.
void bench_inference(Model& model, const Tensor& images, const ModelConfig& mc, const ModelBenchConfig& cfg,
                     ModelBenchResult& r) {
  model.eval();
  {
    NoGradGuard ng;
    const int64_t f0 = gemm_flops();
    model.forward(images);
    r.infer_gemm_gflop = double(gemm_flops() - f0) * 1e-9;
  }
  r.precision = precision_name(cfg.precision);
  r.precision = cfg.int8_attention ? "int8+attention" : r.precision;
  r.precision_note = set_inference_precision(model, cfg.precision, cfg.int8_attention);  // training ran float32
  if (cfg.pack_fp32) {
    check(cfg.precision == Precision::F32, "model bench: packed weights are for fp32 inference");
    pack_fp32_inference(model);
    r.precision = "fp32-packed";
  }
  r.infer_ms = median_ms(
      [&] {
        NoGradGuard ng;
        model.forward(images);
      },
      cfg.timing);
  r.infer_img_per_s = double(cfg.batch) / (r.infer_ms * 1e-3);
  r.infer_gflop_per_s = r.infer_gemm_gflop / (r.infer_ms * 1e-3);
  Tensor one = randn({1, mc.in_chans, mc.img_size, mc.img_size});
  r.latency_b1_ms = median_ms(
      [&] {
        NoGradGuard ng;
        model.forward(one);
      },
      {.warmup = 3, .reps = std::max(9, cfg.timing.reps)});
}

}  // namespace

ModelBenchResult bench_model(const ModelBenchConfig& cfg) {
  check(cfg.batch >= 1, "model bench: --batch must be positive");
  ModelConfig mc = cfg.model.is_string() ? model_config(cfg.model.get<std::string>()) : config_from_json(cfg.model);
  if (cfg.img_size > 0) mc.img_size = cfg.img_size;
  auto model = create_model(mc);
  ModelBenchResult r;
  r.model = cfg.model.is_string() ? cfg.model.get<std::string>() : cfg.model.dump();
  r.batch = cfg.batch;
  r.img_size = mc.img_size;
  r.parameters = model->num_parameters();

  Tensor images = randn({cfg.batch, mc.in_chans, mc.img_size, mc.img_size});
  std::vector<int64_t> labels(size_t(cfg.batch));
  for (int64_t i = 0; i < cfg.batch; ++i) labels[size_t(i)] = i % mc.num_classes;
  bench_training(*model, images, labels, cfg, r);
  bench_inference(*model, images, mc, cfg, r);
  r.peak_rss_mb = peak_rss_mb();
  r.sgemm_peak_gflop_per_s = measure_sgemm_peak();
  return r;
}

json to_json(const ModelBenchResult& r) {
  return {{"bench", "model"},
          {"model", r.model},
          {"precision", r.precision},
          {"train_precision", r.train_precision},
          {"batch", r.batch},
          {"img_size", r.img_size},
          {"parameters", r.parameters},
          {"threads", num_threads()},
          {"omp_wait", omp_wait_policy()},
          {"thread_governor", thread_governor_stats().enabled},
          {"team_changes", thread_governor_stats().changes},
          {"train_step_ms", r.train_step_ms},
          {"train_img_per_s", r.train_img_per_s},
          {"infer_ms", r.infer_ms},
          {"infer_img_per_s", r.infer_img_per_s},
          {"latency_b1_ms", r.latency_b1_ms},
          {"train_gemm_gflop", r.train_gemm_gflop},
          {"train_gflop_per_s", r.train_gflop_per_s},
          {"train_gemm_calls", r.train_gemm_calls},
          {"train_gemm_ms", r.train_gemm_ms},
          {"timed_step_ms", r.timed_step_ms},
          {"sgemm_peak_gflop_per_s", r.sgemm_peak_gflop_per_s}, {"gemm", gemm_backend_name(gemm_backend())},
          {"fraction_of_sgemm_peak", r.sgemm_peak_gflop_per_s > 0 ? r.train_gflop_per_s / r.sgemm_peak_gflop_per_s : 0.0},
          {"infer_gemm_gflop", r.infer_gemm_gflop},
          {"infer_gflop_per_s", r.infer_gflop_per_s},
          {"infer_fraction_of_sgemm_peak", r.sgemm_peak_gflop_per_s > 0 ? r.infer_gflop_per_s / r.sgemm_peak_gflop_per_s : 0.0},
          {"peak_rss_mb", r.peak_rss_mb}};
}

}  // namespace sima
