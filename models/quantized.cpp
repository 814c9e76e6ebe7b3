#include "models/quantized.h"

#include <cmath>
#include <set>

#include "core/error.h"
#include "models/io/checkpoint.h"
#include "models/cvt_attention.h"
#include "nn/attention/sima.h"
#include "nn/conv2d.h"
#include "nn/linear.h"

namespace sima {

namespace {
std::shared_ptr<const LowpConv2d> lowp_conv(Precision p, const Conv2d& c) {
  return std::make_shared<const LowpConv2d>(p, c.weight, c.bias, c.stride, c.padding, c.groups);
}
}  // namespace

std::string set_inference_precision(Module& model, Precision p, bool int8_attention) {
  check(!int8_attention || p == Precision::Int8, "int8 attention needs precision int8 (got ", precision_name(p), ")");
  for (auto& [name, m] : model.named_modules()) {
    if (auto* lin = dynamic_cast<Linear*>(m)) {
      if (p == Precision::F32) lin->lowp.reset();
      else if (p == Precision::Int8 && lin->stored_int8) lin->lowp = lin->stored_int8;
      else lin->lowp = std::make_shared<const LowpLinear>(p, lin->weight, lin->bias);
    }
    if (auto* conv = dynamic_cast<Conv2d*>(m)) {
      if (p == Precision::F32) conv->lowp.reset();
      else conv->lowp = lowp_conv(p, *conv);
    }
    if (auto* proj = dynamic_cast<CvtConvProjection*>(m)) proj->lowp = p == Precision::F32 ? nullptr : proj->folded(p);
    if (auto* sa = dynamic_cast<SimaAttention*>(m)) {
      sa->int8_core = int8_attention;
      sa->inference_core = p != Precision::F32;
    }
  }
  if (p == Precision::BF16 && !bf16_native())
    return std::string("warning: bf16: ") +
           (cpu_features().avx512_core ? "oneDNN has no bf16 GEMM for this CPU"
                                       : "this CPU has no AVX-512 (oneDNN 2.6 has no bf16 GEMM for AVX2)") +
           ": bf16-rounded inputs and weights run through the float32 GEMMs (bf16 accuracy, no speed-up)";
  return "";
}

void pack_fp32_inference(Module& model) {
  set_inference_precision(model, Precision::F32);
  for (auto& [name, m] : model.named_modules())
    if (auto* lin = dynamic_cast<Linear*>(m)) lin->lowp = std::make_shared<const LowpLinear>(Precision::F32, lin->weight, lin->bias);
    else if (auto* conv = dynamic_cast<Conv2d*>(m)) conv->lowp = lowp_conv(Precision::F32, *conv);
    else if (auto* proj = dynamic_cast<CvtConvProjection*>(m)) proj->lowp = proj->folded(Precision::F32);
    else if (auto* sa = dynamic_cast<SimaAttention*>(m)) sa->inference_core = true;
}

bool is_quantized_checkpoint(const std::map<std::string, std::string>& meta) {
  return meta.count("quantization") > 0;
}

void save_quantized_checkpoint(const std::string& path, Model& model,
                               const std::map<std::string, std::string>& extra_metadata) {
  std::map<std::string, std::string> meta = checkpoint_metadata(model, extra_metadata);
  meta["quantization"] = kQuantizationInt8;
  NamedTensors tensors;
  std::set<std::string> int8_names;
  std::map<std::string, Linear*> linears;  // weight name -> its Linear
  for (auto& [name, m] : model.named_modules())
    if (auto* lin = dynamic_cast<Linear*>(m)) linears[name.empty() ? "weight" : name + ".weight"] = lin;
  for (auto& [name, t] : model.state_dict()) {
    auto it = linears.find(name);
    if (it == linears.end()) {
      tensors.emplace_back(name, t);
      continue;
    }
    const Linear& lin = *it->second;
    const LowpLinear q = lin.stored_int8 ? *lin.stored_int8 : LowpLinear(Precision::Int8, lin.weight, lin.bias);
    std::vector<float> wq(q.int8_weight().begin(), q.int8_weight().end());
    tensors.emplace_back(name, from_vector(wq, t.shape()));  // (out, in), integers in [-127, 127]
    tensors.emplace_back(name + "_scale", from_vector(q.weight_scale()));  // (out)
    int8_names.insert(name);
  }
  check_finite_weights(tensors, path, /*saving=*/true);
  save_safetensors(path, tensors, meta, int8_names);
}

namespace {
// Checks "<w>_scale" against the I8 weight w (out, in) and returns the int8 LowpLinear.
std::shared_ptr<const LowpLinear> take_one(const SafetensorsFile& f, const std::string& w, const Tensor& weight,
                                           const Tensor& scale, const Tensor& bias, const std::string& path) {
  const std::string at = path + ": quantized weight '" + w + "': ";
  auto dt = f.dtypes.find(w);
  check(dt != f.dtypes.end() && dt->second == "I8" && weight.dim() == 2, at, "must be a 2-d I8 tensor (out, in)");
  check(f.dtypes.at(w + "_scale") == "F32", at, "its scale must be F32");
  check(scale.dim() == 1 && scale.size(0) == weight.size(0), at, "scale ", scale.shape(), " must be (",
        weight.size(0), "), one per output channel");
  // A scale is its row's max|w| / 127 (1 for a zero row). Outside [1e-30, 1e6] the row's weights
  // would be below 1e-28 or above 1.3e8, no trained model's: a denormal scale makes every product
  // underflow to zero, a huge one overflow to inf (a NaN loss, a chance top-1), so both are refused.
  for (int64_t n = 0; n < scale.numel(); ++n) {
    const float v = scale.data()[n];
    check(std::isfinite(v) && v > 0.f, at, "scale[", n, "] = ", v, " is not a positive finite number");
    check(v >= kMinWeightScale && v <= kMaxWeightScale, at, "scale[", n, "] = ", v, " is outside [",
          kMinWeightScale, ", ", kMaxWeightScale, "] (max|w| / 127 of a trained model's row; ",
          v < kMinWeightScale ? "the products would underflow to zero)" : "the products would overflow to inf)");
  }
  const float* q = weight.data();
  for (int64_t i = 0; i < weight.numel(); ++i)
    check(q[i] >= -127.f, at, "value ", q[i], " is -128 (the symmetric range is [-127, 127])");
  std::vector<int8_t> qi(q, q + weight.numel());
  std::vector<float> s(scale.data(), scale.data() + scale.numel());
  return std::make_shared<const LowpLinear>(std::move(qi), std::move(s), weight.size(0), weight.size(1), bias);
}
}  // namespace

QuantizedLinears take_quantized_weights(SafetensorsFile& f, const std::string& path) {
  auto it = f.metadata.find("quantization");
  if (it == f.metadata.end()) {  // a float32 checkpoint: integers would be read as weights
    for (auto& [name, dtype] : f.dtypes)
      check(dtype != "I8", path, ": tensor '", name, "' is I8 but the metadata has no \"quantization\" (",
            kQuantizationInt8, "): not a quantized sima.cpp checkpoint");
    return {};
  }
  check(it->second == kQuantizationInt8, path, ": metadata quantization '", it->second, "' is not supported (",
        kQuantizationInt8, ")");
  const std::string suffix = ".weight_scale";
  QuantizedLinears out;
  NamedTensors kept;
  for (auto& [name, t] : f.tensors) {
    if (name.size() <= suffix.size() || !name.ends_with(suffix)) continue;
    const std::string module = name.substr(0, name.size() - suffix.size()), w = module + ".weight";
    const Tensor weight = f.get(w);
    check(weight.defined(), path, ": scale '", name, "' has no weight '", w, "'");
    out[module] = take_one(f, w, weight, t, f.get(module + ".bias"), path);
  }
  for (auto& [name, t] : f.tensors) {
    if (f.dtypes[name] == "I8")
      check(out.count(name.substr(0, name.rfind('.'))) && name.ends_with(".weight"), path, ": I8 tensor '", name,
            "' has no '", name, "_scale' (a quantized weight needs its per-channel scales)");
    if (name.ends_with(suffix)) continue;
    if (auto q = out.find(name.substr(0, name.rfind('.'))); q != out.end() && name.ends_with(".weight")) {
      const float* s = q->second->weight_scale().data();  // W = W_q s, row by row
      const int64_t in = t.size(1);
      for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] *= s[i / in];
    }
    kept.emplace_back(name, t);
  }
  f.tensors = std::move(kept);
  return out;
}

void install_quantized_weights(Module& model, const QuantizedLinears& q, const std::string& path) {
  std::map<std::string, Linear*> linears;
  for (auto& [name, m] : model.named_modules())
    if (auto* lin = dynamic_cast<Linear*>(m)) linears[name] = lin;
  for (auto& [name, lowp] : q) {
    auto it = linears.find(name);
    check(it != linears.end(), path, ": quantized weight '", name, ".weight' is not the weight of a Linear layer");
    check(it->second->weight.size(0) == lowp->out_features() && it->second->weight.size(1) == lowp->in_features(),
          path, ": quantized weight '", name, ".weight' does not match the model's ", it->second->weight.shape());
    it->second->stored_int8 = lowp;
  }
}

}  // namespace sima
