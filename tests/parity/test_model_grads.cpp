// Whole-model gradients of every SimA registry model against a float64 PyTorch reference, on
// real Fashion-MNIST images (the reference and the comparison: tests/parity/check_model_grads.py).
//
// For each model: the registry's model at its defaults, initialised at seed 0 with drop path off,
// in training mode (BatchNorm on the batch's statistics); a batch of 20 test images (the first
// two of each class) normalised as the model's config says; F.cross_entropy (mean, no label
// smoothing); one backward. The weights, the batch and our float32 gradients go to one
// safetensors file. The script loads the weights strictly into a PyTorch transcription of the
// model (official SimA code for XCiT, timm for DeiT, microsoft/CvT for CvT, each with SimA),
// runs it in float64 (the truth) and in float32 on the same float32 weights and images, and
// checks every gradient tensor (a packed qkv weight or bias per third: q, k, v) for
//   ‖ours − g64‖ / ‖g64‖  ≤  2 · ‖torch32 − g64‖ / ‖g64‖ + 2e-6 (float32's rounding of a sum
// over the batch's ~1000 token rows, which any float32 code has).
// Before the step, a forward with hooks records which side of zero each ℓ1-normalised q and k
// entry of every SimA layer lands on ("sign.<layer>.q/k"): where an entry is closer to zero than
// float32 rounding (the ℓ1 gradient's kink), its sign is the rounding's, in any float32 code,
// and the script takes the float64 reference on the same side (check_model_grads.py says why).
// A whole-model check on real images catches what the op-level cases (random tensors) miss:
// inputs whose structure (a background of identical patches) makes a backward ill-conditioned.
#include "testing.h"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/ops.h"
#include "core/rng.h"
#include "data/idx.h"
#include "models/registry.h"
#include "models/io/safetensors.h"
#include "nn/attention/attention.h"

using namespace sima;

namespace {

// The first two test images of each class, normalised per the model's config: (20, 1, 28, 28).
std::pair<Tensor, std::vector<int64_t>> first_two_per_class(const ModelConfig& cfg) {
  IdxDataset test = IdxDataset::fashion_mnist(false);
  Generator unused(0);
  std::vector<int64_t> labels;
  std::vector<Image> images;
  std::array<int, 10> seen{};
  for (int64_t i = 0; i < test.size() && images.size() < 20; ++i) {
    Sample s = test.get(i, unused);
    if (seen[s.label]++ >= 2) continue;
    labels.push_back(s.label);
    images.push_back(s.image);
  }
  REQUIRE(images.size() == 20);
  Tensor x = empty({20, 1, 28, 28});
  for (size_t b = 0; b < images.size(); ++b)
    for (int64_t j = 0; j < 28 * 28; ++j)
      x.data()[b * 784 + j] = (images[b].data[j] - cfg.mean[0]) / cfg.std[0];
  return {x, labels};
}

// Writes weights, batch and our gradients of `name` to `path`.
void write_case(const std::string& name, const std::string& path) {
  ModelConfig cfg = model_config(name);
  cfg.drop_path_rate = 0.f;                                    // DeiT, XCiT
  cfg.stage_drop_path.assign(cfg.stage_drop_path.size(), 0.f);  // CvT
  manual_seed(0);
  auto model = create_model(cfg);
  model->train();
  auto [x, labels] = first_two_per_class(cfg);
  NamedTensors out;
  // The side of the l1 kink our forward puts each q and k entry on: sign(q̂), sign(k̂) of every
  // SimA layer (hooks send the core down its unpacked path, so this is a forward of its own;
  // q and k are the same values on both paths).
  auto layers = model->attention_layers();
  for (size_t i = 0; i < layers.size(); ++i)
    layers[i]->qk_hook = [&out, i](const Tensor& q_hat, const Tensor& k_hat) {
      out.emplace_back("sign." + std::to_string(i) + ".q", sign(q_hat.detach()));
      out.emplace_back("sign." + std::to_string(i) + ".k", sign(k_hat.detach()));
    };
  {
    NoGradGuard no_grad;
    model->forward(x);
  }
  for (auto* a : layers) a->qk_hook = nullptr;
  Tensor loss = cross_entropy(model->forward(x), labels);
  loss.backward();
  for (auto& [n, t] : model->state_dict()) out.emplace_back("param." + n, t);
  for (auto& [n, p] : model->named_parameters()) {
    REQUIRE_MESSAGE(p.grad().defined(), name, ": ", n, " got no gradient");
    out.emplace_back("grad." + n, p.grad());
  }
  Tensor y = empty({20});
  for (int b = 0; b < 20; ++b) y.data()[b] = static_cast<float>(labels[b]);
  out.emplace_back("input.images", x);
  out.emplace_back("input.labels", y);
  out.emplace_back("loss", reshape(loss.detach(), {1}));
  save_safetensors(path, out, {{"model", name}});
}

// Runs the check script (`py` `script` `path`); returns its exit status, its output in `log`.
int run_check(const char* py, const char* script, const std::string& path, std::string& log) {
  const std::string cmd = std::string(py) + " " + script + " " + path + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  std::array<char, 4096> buf;
  while (fgets(buf.data(), buf.size(), p)) log += buf.data();
  const int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST_CASE("every SimA registry model: whole-model float32 gradients within 2x PyTorch float32's error") {
  const char* py = std::getenv("SIMA_PYTHON3");
  const char* script = std::getenv("SIMA_MODEL_GRADS_SCRIPT");
  REQUIRE_MESSAGE(py, "SIMA_PYTHON3 is not set (ctest sets it)");
  REQUIRE_MESSAGE(script, "SIMA_MODEL_GRADS_SCRIPT is not set (ctest sets it)");
  for (const std::string name : {"xcit_nano_12_p4_28_sima", "deit_tiny_patch4_28_sima", "cvt_13_28_sima"}) {
    CAPTURE(name);
    const std::string path = "model_grads_" + name + ".safetensors";
    write_case(name, path);
    std::string log;
    const int status = run_check(py, script, path, log);
    MESSAGE(log);
    CHECK(status == 0);
    std::remove(path.c_str());
  }
}
