// sima-bench: speed of attention blocks and whole models (train/bench/benchmark.h).
//
//   sima-bench attention [--n N] [--dim D] [--heads H] [--batch B] [--variants all|a,b,..]
//                        [--order LIST] [--preset table3|table3_head|fig1_tokens|fig1_dim] [--reps K] [--json]
//   sima-bench model --model NAME|JSON [--batch B] [--img S] [--reps K] [--json]
//
// --preset runs the SimA paper's shapes (attention_preset in train/bench/benchmark.h): Table 3 with D
// read as the token width (table3) or as the head width (table3_head), and the Figure 1 sweeps over
// resolution (tokens) and width, SimA in each pinned order and auto.
// Compare with PyTorch in the same session: /usr/bin/python3 tests/bench/deit_peer.py
// (tests/bench/compare_pytorch.py runs both, alternating).
#include <cstdio>
#include <iostream>
#include <sstream>

#include "core/error.h"
#include "core/json_schema.h"
#include "core/omp_wait.h"
#include "core/parallel.h"
#include "nn/attention/variants.h"
#include "train/bench/benchmark.h"
#include "train/config/cli.h"
#include "sima_version.h"  // generated at build time: SIMA_VERSION_STRING

namespace {

using namespace sima;

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

int run_attention(int argc, const char* const* argv) {
  Cli cli("sima-bench attention", "Forward and forward+backward time of one attention block per variant.");
  cli.version(SIMA_VERSION_STRING);
  cli.flag("n", "N", "tokens", false, "256");
  cli.flag("dim", "D", "model width C (heads x head width)", false, "512");
  cli.flag("heads", "H", "heads", false, "8");
  cli.flag("batch", "B", "batch size", false, "8");
  std::string names;
  for (const auto& v : attention_variant_names()) names += (names.empty() ? "" : ", ") + v;
  cli.flag("variants", "LIST", "all, or a comma-separated list of: " + names, false, "all");
  cli.flag("order", "LIST", "SimA's product orders, comma-separated: auto | qk_first | kv_first", false, "auto");
  cli.flag("preset", "NAME",
           "the paper's shapes: table3 | table3_head | fig1_tokens | fig1_dim (overrides --n/--dim/--heads/--batch/--order)");
  cli.flag("reps", "K", "timed runs per measurement (median)", false, "7");
  cli.option("json", "one JSON object per line instead of the table");
  if (!cli.parse(argc, argv)) return cli.exit_code();
  std::vector<AttentionBenchConfig> shapes;
  AttentionBenchConfig base;
  if (cli.get("variants") != "all") base.variants = split_commas(cli.get("variants"));
  base.orders = split_commas(cli.get("order"));
  base.timing.reps = int(cli.get_int("reps"));
  if (!cli.get("preset").empty()) {
    shapes = attention_preset(cli.get("preset"), base);
  } else {
    base.tokens = cli.get_int("n"), base.dim = cli.get_int("dim"), base.heads = cli.get_int("heads");
    base.batch = cli.get_int("batch");
    shapes.push_back(base);
  }
  // Every shape is measured before anything is printed: a variant that cannot run is an error
  // (exit 1, the message naming it and the shape), never a row of the table.
  std::vector<std::vector<AttentionBenchRow>> results;
  for (const AttentionBenchConfig& c : shapes) {
    results.push_back(bench_attention(c));
    check_attention_rows(results.back(), c);
  }
  for (size_t s = 0; s < shapes.size(); ++s) {
    const AttentionBenchConfig& c = shapes[s];
    const std::vector<AttentionBenchRow>& rows = results[s];
    if (cli.is_set("json")) {
      for (auto& r : rows) std::cout << to_json(r, c).dump() << "\n";
      continue;
    }
    std::printf("B=%lld N=%lld C=%lld heads=%lld d=%lld, %d threads (%s), ms (median of %d)\n",
                (long long)c.batch, (long long)c.tokens, (long long)c.dim, (long long)c.heads,
                (long long)(c.dim / c.heads), num_threads(), app_threading().c_str(), c.timing.reps);
    std::printf("%-11s %-9s %10s %10s %14s %11s\n", "variant", "order", "forward", "fwd+bwd", "exp() calls",
                "GEMM GFLOP");
    for (auto& r : rows) {
      std::printf("%-11s %-9s %10.3f %10.3f %14lld %11.4f\n", r.variant.c_str(), r.order.c_str(), r.forward_ms,
                  r.train_ms, (long long)r.exp_calls, r.gemm_gflop);
    }
    std::printf("\n");
  }
  return 0;
}

int run_model(int argc, const char* const* argv) {
  Cli cli("sima-bench model", "Training-step and inference speed of a model, against the machine's SGEMM peak.");
  cli.version(SIMA_VERSION_STRING);
  cli.flag("model", "NAME|JSON", "a registry name or a model JSON object", true);
  cli.flag("batch", "B", "batch size", false, "64");
  cli.flag("img", "S", "image size (default: the model's)");
  cli.flag("reps", "K", "timed runs per measurement (median)", false, "5");
  cli.flag("precision", "fp32|bf16|int8", "precision of the inference runs (training: --train-precision)", false, "fp32");
  cli.flag("train-precision", "fp32|bf16|fp16", "precision of the training step's products (train.precision)", false,
           "fp32");
  cli.option("int8-attention", "with --precision int8: SimA's attention core in int8 too");
  cli.option("pack-fp32", "with --precision fp32: the Linears' weights packed once for oneDNN's GEMM");
  cli.option("json", "one JSON object instead of the report");
  if (!cli.parse(argc, argv)) return cli.exit_code();
  ModelBenchConfig c;
  c.precision = parse_precision(cli.get("precision"), "sima-bench model: --precision");
  c.train_precision = parse_autocast_mode(cli.get("train-precision"), "sima-bench model: --train-precision");
  c.int8_attention = cli.is_set("int8-attention");
  check(!c.int8_attention || c.precision == Precision::Int8, "sima-bench model: --int8-attention needs --precision int8");
  c.pack_fp32 = cli.is_set("pack-fp32");
  check(!c.pack_fp32 || c.precision == Precision::F32, "sima-bench model: --pack-fp32 needs --precision fp32");
  const std::string m = cli.get("model");
  if (!m.empty() && m[0] == '{') {
    c.model = parse_json_strict(m, "--model");  // a key given twice is an error too
  } else {
    c.model = m;
  }
  c.batch = cli.get_int("batch");
  c.img_size = cli.has("img") ? cli.get_int("img") : 0;  // 0: the model's
  check(!cli.has("img") || c.img_size > 0, "sima-bench model: --img ", c.img_size,
        " is not an image size: give a positive number of pixels, or leave it out for the model's");
  c.timing.reps = int(cli.get_int("reps"));
  ModelBenchResult r = bench_model(c);
  if (!r.precision_note.empty()) std::fprintf(stderr, "sima-bench: %s\n", r.precision_note.c_str());
  if (cli.is_set("json")) {
    std::cout << to_json(r).dump() << "\n";
    return 0;
  }
  std::printf("%s: %lld parameters, batch %lld, %lldx%lld images, %d threads, %s\n", r.model.c_str(),
              (long long)r.parameters, (long long)r.batch, (long long)r.img_size, (long long)r.img_size, num_threads(),
              app_threading().c_str());
  std::printf("  training step (%s, fwd+bwd+AdamW) %9.2f ms  %9.1f img/s  %7.2f GFLOP/s in GEMMs (%.0f%% of SGEMM peak %.1f)\n",
              r.train_precision.c_str(), r.train_step_ms, r.train_img_per_s, r.train_gflop_per_s,
              100.0 * r.train_gflop_per_s / r.sgemm_peak_gflop_per_s, r.sgemm_peak_gflop_per_s);
  std::printf("    GEMM library calls per step  %9lld (%.0f multiply-adds each on average); %.2f ms inside them"
              " (summed over threads) in a step of %.2f ms timed call by call\n",
              (long long)r.train_gemm_calls, r.train_gemm_calls ? r.train_gemm_gflop * 1e9 / 2 / double(r.train_gemm_calls) : 0.0,
              r.train_gemm_ms, r.timed_step_ms);
  std::printf("  inference (%s)                %9.2f ms  %9.1f img/s  %7.2f GFLOP/s in GEMMs (%.0f%% of SGEMM peak)\n",
              r.precision.c_str(), r.infer_ms, r.infer_img_per_s, r.infer_gflop_per_s,
              100.0 * r.infer_gflop_per_s / r.sgemm_peak_gflop_per_s);
  std::printf("  latency, batch 1               %9.2f ms\n", r.latency_b1_ms);
  std::printf("  peak resident memory           %9.1f MiB\n", r.peak_rss_mb);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  sima::setup_app_threads();  // the thread governor (core/omp_wait.h)
  const std::string usage =
      "usage: sima-bench attention [flags]   one attention block per variant (--help for flags)\n"
      "       sima-bench model [flags]       a model's training step and inference (--help for flags)\n"
      "       sima-bench --version           the version and the commit it was built from\n";
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::cout << usage;
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  if (cmd == "--version") {
    std::cout << "sima-bench " << SIMA_VERSION_STRING << "\n";
    return 0;
  }
  try {
    if (cmd == "attention") return run_attention(argc - 1, argv + 1);
    if (cmd == "model") return run_model(argc - 1, argv + 1);
    std::fprintf(stderr, "sima-bench: error: unknown command '%s' (attention | model)\n", cmd.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sima-bench: error: %s\n", e.what());
    return 1;
  }
}
