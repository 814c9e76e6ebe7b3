// Model EMA: parameters averaged (hand values, and bit for bit against torch's float32
// arithmetic), buffers copied, the EMA copy frozen, mismatched models refused by name.
#include <cmath>
#include <memory>

#include "core/error.h"
#include "nn/linear.h"
#include "nn/normalization.h"
#include "testing.h"
#include "train/optim/ema.h"

using namespace sima;
using namespace sima::testing;

namespace {

// fc: Linear(in, out) with parameters fc.weight (out, in), fc.bias (out);
// bn: BatchNorm2d(out) with bn.weight, bn.bias and buffers bn.running_mean, bn.running_var,
// bn.num_batches_tracked.
struct Tiny : Module {
  Tiny(int64_t in = 2, int64_t out = 3, const std::string& norm_name = "bn") : Module("Tiny") {
    fc = register_module("fc", std::make_shared<Linear>(in, out));
    bn = register_module(norm_name, std::make_shared<BatchNorm2d>(out));
  }
  std::shared_ptr<Linear> fc;
  std::shared_ptr<BatchNorm2d> bn;
};

void fill(const Tensor& t, float start, float step) {
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = start + step * static_cast<float>(i);
}

}  // namespace

TEST_CASE("ModelEma: starts as a copy, then ema ← d·ema + (1 − d)·p; buffers copied") {
  Tiny model;
  fill(model.fc->weight, 1.f, 1.f);  // 1 2 3 4 5 6
  fill(model.fc->bias, 0.5f, 0.f);
  fill(model.bn->running_mean, 2.f, 0.f);
  auto ema_module = std::make_shared<Tiny>();
  ModelEma ema(ema_module, model, 0.9);
  CHECK(ema.decay() == 0.9);
  CHECK(&ema.module() == ema_module.get());
  check_close(ema_module->fc->weight, {1, 2, 3, 4, 5, 6}, 0.f, 0.f);
  check_close(ema_module->fc->bias, {0.5f, 0.5f, 0.5f}, 0.f, 0.f);
  check_close(ema_module->bn->running_mean, {2, 2, 2}, 0.f, 0.f);
  // The copy is independent storage, frozen.
  CHECK(ema_module->fc->weight.data() != model.fc->weight.data());
  for (auto& [name, p] : ema_module->named_parameters()) {
    INFO(name);
    CHECK_FALSE(p.requires_grad());
  }
  CHECK(model.fc->weight.requires_grad());

  // The model moves: weight → 11 … 16, bias → 1.5, running stats change.
  fill(model.fc->weight, 11.f, 1.f);
  fill(model.fc->bias, 1.5f, 0.f);
  fill(model.bn->running_mean, -1.f, 1.f);
  fill(model.bn->running_var, 4.f, 0.f);
  model.bn->num_batches_tracked.data()[0] = 7.f;
  ema.update(model);
  // weight: 0.9·w + 0.1·(w + 10) = w + 1 → 2 … 7; bias 0.9·0.5 + 0.1·1.5 = 0.6
  check_close(ema_module->fc->weight, {2, 3, 4, 5, 6, 7}, 1e-6f, 0.f);
  check_close(ema_module->fc->bias, {0.6f, 0.6f, 0.6f}, 1e-6f, 0.f);
  // bn.weight / bias stayed 1 / 0 in both: still 1 / 0
  check_close(ema_module->bn->weight, {1, 1, 1}, 1e-7f, 0.f);
  check_close(ema_module->bn->bias, {0, 0, 0}, 0.f, 0.f);
  // buffers: copied exactly, not averaged
  check_close(ema_module->bn->running_mean, {-1, 0, 1}, 0.f, 0.f);
  check_close(ema_module->bn->running_var, {4, 4, 4}, 0.f, 0.f);
  CHECK(ema_module->bn->num_batches_tracked.item() == 7.f);

  // An explicit decay (DINO's scheduled teacher momentum): d = 0.5 → midpoint of 2…7 and 11…16
  ema.update(model, 0.5);
  check_close(ema_module->fc->weight, {6.5f, 7.5f, 8.5f, 9.5f, 10.5f, 11.5f}, 1e-6f, 0.f);
  // d = 1 keeps the average; d = 0 copies the model
  ema.update(model, 1.0);
  check_close(ema_module->fc->weight, {6.5f, 7.5f, 8.5f, 9.5f, 10.5f, 11.5f}, 0.f, 0.f);
  ema_update(ema.module(), model, 0.0);
  check_close(ema_module->fc->weight, {11, 12, 13, 14, 15, 16}, 0.f, 0.f);
}

// torch 1.13: e = torch.tensor([0.1, -0.7, 0.3, 1.9]); p = torch.tensor([1.3, 0.2, -2.5, 0.01]);
// d = 0.996; e.mul_(d).add_((1 - d) * p) and d * e + (1. - d) * p (timm's ModelEmaV2) both give
//   [0.104800001, -0.696399987, 0.288800031, 1.89243996]
TEST_CASE("ema_update rounds as PyTorch does (two float32 products and a sum)") {
  Module model("M"), ema("M");
  model.register_parameter("w", from_vector({1.3f, 0.2f, -2.5f, 0.01f}));
  ema.register_parameter("w", from_vector({0.1f, -0.7f, 0.3f, 1.9f}));
  ema_update(ema, model, 0.996);
  const Tensor w = ema.named_parameters()[0].second;
  const std::vector<float> want = {0.104800001f, -0.696399987f, 0.288800031f, 1.89243996f};
  for (int i = 0; i < 4; ++i) {
    INFO("element " << i);
    CHECK(w.data()[i] == want[i]);
  }
}

TEST_CASE("ema: mismatched models are refused, naming the parameter or buffer") {
  Tiny model;
  {
    Tiny other(2, 4);  // fc.weight (4, 2)
    CHECK(error_message([&] { ema_update(other, model, 0.9); }) ==
          "ema: parameter 'fc.weight' has shape (4, 2) in the EMA model but (3, 2) in the model");
  }
  {
    Tiny other(2, 3, "norm");  // bn.* named norm.*
    CHECK(error_message([&] { ema_update(other, model, 0.9); }) ==
          "ema: parameter 2 is 'norm.weight' in the EMA model but 'bn.weight' in the model");
  }
  {
    Module wrapped("W");
    wrapped.register_module("fc", std::make_shared<Linear>(2, 3));
    const std::vector<float> before = to_vector(wrapped.named_parameters()[0].second);
    CHECK(error_message([&] { ema_update(wrapped, model, 0.9); }) ==
          "ema: parameter 'bn.weight' is only in the model (2 vs 4 parameters)");
    // nothing was averaged before the check failed
    CHECK(to_vector(wrapped.named_parameters()[0].second) == before);
  }
  {
    // Same parameters, a buffer fewer.
    Module a("A"), b("B");
    a.register_parameter("w", zeros(Shape{2}));
    b.register_parameter("w", zeros(Shape{2}));
    a.register_buffer("count", zeros(Shape{1}));
    CHECK(error_message([&] { ema_update(a, b, 0.9); }) ==
          "ema: buffer 'count' is only in the EMA model (1 vs 0 buffers)");
  }
  CHECK(error_message([&] { ModelEma(std::make_shared<Tiny>(2, 4), model, 0.9); }) ==
        "ema: parameter 'fc.weight' has shape (4, 2) in the EMA model but (3, 2) in the model");
  CHECK(error_message([&] { ModelEma(std::make_shared<Tiny>(), model, 1.5); }) ==
        "ModelEma: decay 1.5 is not in [0, 1]");
  Tiny same;
  CHECK(error_message([&] { ema_update(same, model, -0.1); }) == "ema: decay -0.1 is not in [0, 1]");
}
