// custom_attention: an attention variant defined outside the sima.cpp tree, added to the
// variant table (nn/attention/variants.h) with register_attention_variant, then used by name
// from a model config like a built-in one: a DeiT with it runs a forward and a backward.
//
// The variant is sigmoid attention (Ramapuram et al. 2024, "Theory, Analysis, and Best Practices
// for Sigmoid Self-Attention", arXiv:2409.04431, Eq. 2 with their bias b = -log N):
//   out = sigmoid(q kᵀ / √d − s · log N) v      per (batch, head); q, k, v (N, d)
// with s an option key of its own, "bias_scale" (default 1: their bias), declared by its row.
// Its core is composed of library ops (matmul, sigmoid), whose backward autograd chains.
#include <cmath>
#include <cstdio>
#include <string>

#include "core/gradcheck.h"
#include "core/ops.h"
#include "models/registry.h"                 // config_from_json, create_model
#include "nn/attention/variants.h"           // AttentionVariant, register_attention_variant
#include "train/config/experiment_config.h"  // config_reference_markdown (sima-train --config-reference)

// q, k, v (B, h, N, d) -> (B, h, N, d).
sima::Tensor sigmoid_attention(const sima::Tensor& q, const sima::Tensor& k, const sima::Tensor& v,
                               float bias_scale = 1.f) {
  const int64_t N = q.size(2), d = q.size(3);
  sima::Tensor scores = sima::mul(sima::matmul(q, k, false, true), 1.f / std::sqrt(float(d)));  // (B, h, N, N)
  return sima::matmul(sima::sigmoid(sima::add(scores, -bias_scale * std::log(float(N)))), v);
}

class SigmoidAttention : public sima::Attention {
 public:
  explicit SigmoidAttention(const sima::AttentionOptions& opt)
      : Attention(opt, "SigmoidAttention"), bias_scale_(sima::attention_option<float>(opt, "bias_scale")) {}
  sima::Tensor core(const sima::Tensor& q, const sima::Tensor& k, const sima::Tensor& v, int64_t, int64_t) override {
    if (qk_hook) qk_hook(q, k);  // heatmaps see the q, k that feed the scores
    return sigmoid_attention(q, k, v, bias_scale_);  // matmul, sigmoid, matmul: autograd chains their backward
  }

 private:
  float bias_scale_;
};

int main() {
  try {
    sima::AttentionVariant row;
    row.name = "sigmoid";
    row.help = "sigmoid(q k^T / sqrt(d) - log N) v (sigmoid attention, Ramapuram et al. 2024)";
    row.make = [](const sima::AttentionOptions& o) { return std::make_shared<SigmoidAttention>(o); };
    // A key of its own: read from the row's schema, checked (>= 0), listed by --config-reference.
    row.options = {sima::own_option<float>("bias_scale", 1.f, sima::at_least(0.f),
                                           "sigmoid: the scores' bias is -bias_scale * log N (1: Ramapuram et al.)")};
    // row.traits: the defaults; row.extra_parameters: none (only qkv and proj).
    sima::register_attention_variant(row);
    // {"arch": "deit", ..., "attention": {"type": "sigmoid"}} now builds a DeiT with it.

    // The core's backward against finite differences (core/gradcheck.h).
    sima::Generator gen(0);
    std::vector<sima::Tensor> qkv;
    for (int i = 0; i < 3; ++i) qkv.push_back(sima::randn({1, 2, 5, 4}, gen).requires_grad_());
    auto core = [](const std::vector<sima::Tensor>& in) { return sigmoid_attention(in[0], in[1], in[2]); };
    sima::GradcheckResult check = sima::gradcheck(core, qkv);
    std::printf("gradcheck of the core: %s (%lld elements, max error %.2e)\n", check.ok ? "ok" : check.message.c_str(),
                static_cast<long long>(check.checked), check.max_abs_error);

    // A DeiT whose config names the new variant, as a JSON config file would.
    auto cfg = sima::config_from_json(nlohmann::json::parse(R"({"arch": "deit", "img_size": 16, "patch_size": 4,
        "in_chans": 1, "embed_dim": 32, "depth": 2, "num_heads": 2, "num_classes": 10,
        "attention": {"type": "sigmoid", "bias_scale": 0.5}})"));
    std::shared_ptr<sima::Model> model = sima::create_model(cfg);
    sima::Tensor logits = model->forward(sima::randn({4, 1, 16, 16}, gen));  // (4, 10)
    sima::Tensor loss = sima::cross_entropy(logits, {0, 1, 2, 3});
    loss.backward();
    int64_t with_grad = 0, params = 0;
    for (const auto& [name, p] : model->named_parameters()) with_grad += p.grad().defined(), ++params;
    std::printf("DeiT with attention '%s': logits (%lld, %lld), loss %.4f, %lld of %lld parameters have a gradient\n",
                cfg.attention.variant.c_str(), static_cast<long long>(logits.size(0)),
                static_cast<long long>(logits.size(1)), loss.item(), static_cast<long long>(with_grad),
                static_cast<long long>(params));
    const bool listed = sima::config_reference_markdown().find("bias_scale") != std::string::npos;
    std::printf("--config-reference lists it: %s\n", listed ? "yes" : "no");
    return check.ok && with_grad == params && listed && std::isfinite(loss.item()) ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "custom_attention: %s\n", e.what());
    return 1;
  }
}
