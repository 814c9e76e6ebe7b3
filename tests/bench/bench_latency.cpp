// Inference latency of a model at batch 1 (as sima-bench model's latency_b1_ms measures it) or
// another batch, repeated for long enough to profile (perf record -g build/bin/bench_latency ...).
//
//   build/bin/bench_latency [MODEL] [reps] [--batch B] [--precision fp32|bf16|int8] [--pack-fp32]
//     MODEL: a registry name or a model JSON object (default: the DeiT-Tiny-style model of
//            tests/bench/compare_pytorch.py, softmax attention, no drop path)
// Prints the median, min and max milliseconds of the reps.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "bench_timing.h"
#include "core/autograd.h"
#include "core/error.h"
#include "core/ops.h"
#include "models/quantized.h"
#include "models/registry.h"

using namespace sima;

namespace {

int run(int argc, char** argv) {
  std::string model_arg = R"({"name":"deit_tiny_patch4_32","drop_path_rate":0,"attention":{"type":"softmax"}})";
  int reps = 500;
  bool pack = false;
  int64_t batch = 1;
  Precision precision = Precision::F32;
  std::vector<std::string> pos;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--pack-fp32") == 0) pack = true;
    else if (std::strcmp(argv[i], "--batch") == 0 && i + 1 < argc) batch = std::atoll(argv[++i]);
    else if (std::strcmp(argv[i], "--precision") == 0 && i + 1 < argc) precision = parse_precision(argv[++i], "bench_latency");
    else pos.push_back(argv[i]);
  }
  if (!pos.empty()) model_arg = pos[0];
  if (pos.size() > 1) reps = std::atoi(pos[1].c_str());
  check(reps >= 1 && batch >= 1, "reps (", reps, ") and --batch (", batch, ") must be positive");
  const ModelConfig mc = model_arg.front() == '{' ? config_from_json(nlohmann::json::parse(model_arg))
                                                  : model_config(model_arg);
  auto model = create_model(mc);
  model->eval();
  set_inference_precision(*model, precision);
  if (pack) pack_fp32_inference(*model);
  const Tensor one = randn({batch, mc.in_chans, mc.img_size, mc.img_size});
  std::vector<double> ms;
  for (int i = 0; i < reps + 5; ++i) {
    const double t0 = bench_timing::now_ms();
    {
      NoGradGuard ng;
      model->forward(one);
    }
    if (i >= 5) ms.push_back(bench_timing::now_ms() - t0);  // the first 5: warm-up
  }
  std::sort(ms.begin(), ms.end());
  std::printf("batch-%lld %s forward: median %.3f ms, min %.3f, max %.3f over %d reps\n", (long long)batch,
              precision_name(precision), bench_timing::median(ms), ms.front(), ms.back(), reps);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // a bad model name or JSON, a bad flag value
    std::fprintf(stderr, "bench_latency: error: %s\n", e.what());
    return 2;
  }
}
