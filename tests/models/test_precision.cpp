// Every precision on tiny models of all three architectures, SimA and the softmax-family
// attention (docs/precision.md, "Error bounds"):
// - int8 and bf16 logits against float32: relative error ‖y − y32‖ / ‖y32‖ within the bounds;
// - back to fp32: the float32 logits bit for bit (fp32 is unchanged);
// - a quantized checkpoint (I8 weights + F32 scales) loads back to the same int8 logits, bit for
//   bit, and to float32 weights W_q s; bad scales, a scale-less I8 weight and an unknown scheme
//   are refused naming the tensor; a distillation teacher that is quantized is refused.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <set>

#include "core/autograd.h"
#include "core/tensor.h"
#include "data/temp_dir.h"
#include "models/io/checkpoint.h"
#include "models/quantized.h"
#include "models/registry.h"
#include "nn/attention/sima.h"
#include "testing.h"
#include "train/objectives/distill.h"

using namespace sima;
using sima::testing::error_message;
using sima::testing::rel_l2_error;
using sima::testing::TempDir;

namespace {

bool bit_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  for (int64_t i = 0; i < a.numel(); ++i)
    if (a.data()[i] != b.data()[i]) return false;
  return true;
}

// Tiny models: DeiT, XCiT and CvT at 28x28, each with SimA and with its usual attention.
std::vector<nlohmann::json> tiny_models() {
  std::vector<nlohmann::json> out;
  for (std::string twin : {"", "_sima"}) {
    out.push_back({{"name", "deit_tiny_patch4_28" + twin}, {"embed_dim", 32}, {"depth", 2}, {"num_heads", 2}});
    out.push_back({{"name", "xcit_nano_12_p4_28" + twin}, {"embed_dim", 32}, {"depth", 2}, {"num_heads", 2}});
    out.push_back({{"name", "cvt_13_28" + twin}, {"stage_dims", {16, 32, 48}}, {"stage_depths", {1, 1, 1}},
                   {"stage_heads", {1, 2, 3}}});
  }
  return out;
}

Tensor logits(Model& m, const Tensor& x) {
  NoGradGuard ng;
  return m.forward(x);
}

// Weights with some spread (timm's init gives logits of almost nothing but the bias).
std::shared_ptr<Model> spread_model(const nlohmann::json& j) {
  manual_seed(5);
  auto m = create_model(j);
  for (auto& [name, p] : m->named_parameters())
    if (p.dim() >= 2) {
      const Tensor r = randn(p.shape());
      const float s = 1.f / std::sqrt(float(p.numel() / p.size(0)));
      for (int64_t i = 0; i < p.numel(); ++i) p.data()[i] = r.data()[i] * s;
    }
  m->eval();
  return m;
}

}  // namespace

TEST_CASE("every precision on tiny DeiT / XCiT / CvT, SimA and softmax: logits against fp32") {
  manual_seed(6);
  const Tensor x = randn({4, 1, 28, 28});
  for (const nlohmann::json& j : tiny_models()) {
    auto m = spread_model(j);
    const Tensor y32 = logits(*m, x);
    CHECK(set_inference_precision(*m, Precision::Int8).empty());
    const double e8 = rel_l2_error(logits(*m, x), y32);
    set_inference_precision(*m, Precision::Int8, /*int8_attention=*/true);  // SimA's core too
    const double e8a = rel_l2_error(logits(*m, x), y32);
    set_inference_precision(*m, Precision::BF16);
    const double e16 = rel_l2_error(logits(*m, x), y32);
    pack_fp32_inference(*m);  // float32, weights packed for oneDNN
    const double e32p = rel_l2_error(logits(*m, x), y32);
    set_inference_precision(*m, Precision::F32);
    MESSAGE(j["name"].get<std::string>() << ": int8 rel err " << e8 << " (with the SimA core in int8: " << e8a
                                          << "), bf16 rel err " << e16 << ", fp32 packed rel err " << e32p);
    CHECK(e8 < 0.05);
    CHECK(e8a < 0.05);
    CHECK(e16 < 0.02);
    CHECK(e32p < 1e-5);
    CHECK(bit_equal(logits(*m, x), y32));  // fp32 again: unchanged
  }
}

TEST_CASE("the inference set-ups switch every SimA core to its inference path, and F32 switches it back") {
  for (const nlohmann::json& j : tiny_models()) {
    if (j["name"].get<std::string>().find("_sima") == std::string::npos) continue;
    CAPTURE(j.dump());
    auto m = spread_model(j);
    // (SimA cores, of them with the inference core on, of them with the int8 core on)
    auto count = [&] {
      std::array<int, 3> n{};
      for (auto& [name, mod] : m->named_modules())
        if (auto* sa = dynamic_cast<SimaAttention*>(mod)) n = {n[0] + 1, n[1] + sa->inference_core, n[2] + sa->int8_core};
      return n;
    };
    const int cores = count()[0];
    REQUIRE(cores > 0);
    CHECK(count() == std::array<int, 3>{cores, 0, 0});
    set_inference_precision(*m, Precision::BF16);
    CHECK(count() == std::array<int, 3>{cores, cores, 0});
    set_inference_precision(*m, Precision::Int8, /*int8_attention=*/true);  // the int8 core takes precedence
    CHECK(count() == std::array<int, 3>{cores, cores, cores});
    set_inference_precision(*m, Precision::F32);
    CHECK(count() == std::array<int, 3>{cores, 0, 0});
    pack_fp32_inference(*m);
    CHECK(count() == std::array<int, 3>{cores, cores, 0});
    set_inference_precision(*m, Precision::F32);
    CHECK(count() == std::array<int, 3>{cores, 0, 0});
  }
}

TEST_CASE("a quantized checkpoint: same int8 logits after a round trip, float32 weights W_q s") {
  TempDir tmp;
  manual_seed(7);
  const Tensor x = randn({3, 1, 28, 28});
  for (const nlohmann::json& j : tiny_models()) {
    INFO(j.dump());
    auto m = spread_model(j);
    const Tensor y32 = logits(*m, x);
    set_inference_precision(*m, Precision::Int8);
    const Tensor y8 = logits(*m, x);
    const std::string path = tmp.file("q.safetensors");
    save_quantized_checkpoint(path, *m, {{"data", "fashion_mnist"}});
    auto back = load_checkpoint(path);
    back->eval();
    const Tensor back32 = logits(*back, x);  // loaded: float32, with the dequantized weights W_q s
    CHECK(rel_l2_error(back32, y32) < 0.03);
    set_inference_precision(*back, Precision::Int8);  // the stored integers
    CHECK(bit_equal(logits(*back, x), y8));
    set_inference_precision(*back, Precision::F32);
    CHECK(bit_equal(logits(*back, x), back32));
    const SafetensorsFile f = load_safetensors(path);
    CHECK(f.dtypes.at("head.weight") == "I8");
    CHECK(f.dtypes.at("head.weight_scale") == "F32");
    CHECK(f.metadata.at("quantization") == kQuantizationInt8);
  }
}

namespace {
// Rewrites a quantized file with `edit` applied to its tensors; returns the load error.
std::string load_edited(const std::string& src, const std::string& dst,
                        const std::function<void(NamedTensors&, std::map<std::string, std::string>&)>& edit) {
  SafetensorsFile f = load_safetensors(src);
  edit(f.tensors, f.metadata);
  std::set<std::string> i8;
  for (auto& [name, t] : f.tensors)
    if (f.dtypes.count(name) && f.dtypes.at(name) == "I8") i8.insert(name);
  save_safetensors(dst, f.tensors, f.metadata, i8);
  return error_message([&] { load_checkpoint(dst); });
}
Tensor& named(NamedTensors& ts, const std::string& name) {
  for (auto& [n, t] : ts)
    if (n == name) return t;
  FAIL("no tensor " << name);
  throw;
}
}  // namespace

TEST_CASE("quantized checkpoints: bad scales and missing scales are refused, naming the tensor") {
  TempDir tmp;
  auto m = spread_model(tiny_models()[0]);
  const std::string src = tmp.file("q.safetensors"), bad = tmp.file("bad.safetensors");
  save_quantized_checkpoint(src, *m);
  CHECK(load_edited(src, bad, [](NamedTensors& t, auto&) { named(t, "head.weight_scale").data()[3] = -1.f; })
            .find("quantized weight 'head.weight': scale[3] = -1 is not a positive finite number") != std::string::npos);
  CHECK(load_edited(src, bad, [](NamedTensors& t, auto&) { named(t, "head.weight_scale").data()[0] = 0.f; })
            .find("scale[0] = 0 is not a positive finite number") != std::string::npos);
  // Finite but out of range: a denormal scale evaluated at chance, a huge one at a NaN loss.
  CHECK(load_edited(src, bad, [](NamedTensors& t, auto&) { named(t, "head.weight_scale").data()[2] = 3e38f; })
            .find("quantized weight 'head.weight': scale[2] = 3e+38 is outside [1e-30, 1e+06] (max|w| / 127 of a "
                  "trained model's row; the products would overflow to inf)") != std::string::npos);
  CHECK(load_edited(src, bad, [](NamedTensors& t, auto&) { named(t, "head.weight_scale").data()[1] = 1e-45f; })
            .find("scale[1] = 1.4013e-45 is outside [1e-30, 1e+06] (max|w| / 127 of a trained model's row; the "
                  "products would underflow to zero)") != std::string::npos);
  CHECK(load_edited(src, bad, [](NamedTensors& t, auto&) {
          named(t, "head.weight_scale") = from_vector({1.f, 2.f});
        }).find("scale (2) must be (10), one per output channel") != std::string::npos);
  CHECK(load_edited(src, bad, [](NamedTensors& t, auto&) {
          std::erase_if(t, [](auto& p) { return p.first == "head.weight_scale"; });
        }).find("I8 tensor 'head.weight' has no 'head.weight_scale'") != std::string::npos);
  CHECK(load_edited(src, bad, [](NamedTensors&, auto& meta) { meta["quantization"] = "int4"; })
            .find("metadata quantization 'int4' is not supported") != std::string::npos);
  // a float32 checkpoint is not a quantized one: I8 weights without the metadata are not loaded as floats
  CHECK(load_edited(src, bad, [](NamedTensors&, auto& meta) { meta.erase("quantization"); })
            .find("is I8 but the metadata has no \"quantization\"") != std::string::npos);
}

TEST_CASE("training refuses a quantized checkpoint") {
  TempDir tmp;
  auto m = spread_model(tiny_models()[0]);
  const std::string path = tmp.file("q.safetensors");
  save_quantized_checkpoint(path, *m);
  const std::string e = error_message([&] { DistillTeacher(path, m->config(), {}); });
  CHECK(e.find("is a quantized checkpoint (int8 weights, sima-convert --quantize): training needs float32") !=
        std::string::npos);
}
