// Reduced-precision inference of a whole model, and int8 checkpoints (docs/precision.md).
//
// set_inference_precision gives every nn Linear of the model a LowpLinear (int8 or bf16) and,
// at int8 when asked, switches SimA attention cores to their int8 path (otherwise to their
// float32 inference path, nn/attention/sima_inference.cpp); patch embeddings, CvT's
// depthwise-conv projections, XCiT's LPI convolutions, norms and activations stay float32.
// Training is untouched: a low-precision path runs only when no gradient is asked for.
//
// A quantized checkpoint is a model.safetensors whose Linear weights are I8 (W_q, (out, in))
// with one F32 tensor "<name>.weight_scale" (out) beside each, and the metadata key
//   "quantization": "int8_per_channel_symmetric"
// load_checkpoint (models/io/checkpoint.h) reads it: the weights are dequantized to float32
// (W = W_q s), which the float32 and bf16 paths use, and each such Linear keeps the stored W_q
// and s (Linear::stored_int8), which int8 inference uses: it runs exactly the saved integers.
#pragma once
#include <map>
#include <memory>
#include <string>

#include "core/ops/quantize.h"
#include "models/model.h"
#include "models/io/safetensors.h"

namespace sima {

constexpr const char* kQuantizationInt8 = "int8_per_channel_symmetric";
// The per-channel weight scales a quantized checkpoint may hold (max|w| / 127 of a row).
constexpr float kMinWeightScale = 1e-30f, kMaxWeightScale = 1e6f;

// Applies `p` to `model` (F32 removes every low-precision path and SimA's inference cores: the
// float32 forward, bit for bit). At Int8, a Linear loaded from a quantized checkpoint runs its
// stored integers; the others quantize their weights now. Returns a one-line note for the user
// when the precision runs emulated on this CPU (bf16 without AVX-512), else "".
// int8_attention (with Int8 only): SimA's attention core in int8 too (nn/attention/sima_int8.cpp);
// off by default: at DeiT-Tiny sizes it is slower than the float32 core on AVX2 (docs/precision.md).
std::string set_inference_precision(Module& model, Precision p, bool int8_attention = false);

// Float32 inference with every Linear's weight packed once for oneDNN's GEMM (LowpLinear F32)
// and SimA's inference cores (one scale per channel instead of q̂ and k̂ written out):
// the same float32 numerics up to the order of the sums, and no re-packing of the weights at
// every call, which is most of what a small batch spends beyond the products
// (docs/latency.md). The packed weights are copies: after changing the model's weights,
// call it again (or set_inference_precision(model, F32) for the ordinary Linears).
void pack_fp32_inference(Module& model);

// Writes `model` as a quantized checkpoint: every Linear's weight int8 (per output channel)
// plus its scale; everything else float32; the metadata as save_checkpoint writes it.
void save_quantized_checkpoint(const std::string& path, Model& model,
                               const std::map<std::string, std::string>& extra_metadata = {});

// True when a checkpoint's metadata says it is quantized.
bool is_quantized_checkpoint(const std::map<std::string, std::string>& meta);

// The int8 Linear weights of a quantized file, by module name ("blocks.0.attn.qkv").
using QuantizedLinears = std::map<std::string, std::shared_ptr<const LowpLinear>>;

// For a float32 file: checks that no tensor is I8 and returns nothing. For a quantized file:
// checks every "<name>.weight_scale" (F32, shape (out) of an I8 "<name>.weight" (out, in),
// every value finite and > 0; and every I8 tensor has a scale),
// replaces each weight by W_q s and drops the scales from f.tensors, and returns the int8
// weights to install after the model is loaded. Errors name the file and the tensor.
QuantizedLinears take_quantized_weights(SafetensorsFile& f, const std::string& path);

// Sets those LowpLinears as the model's Linears' stored_int8 (every name must be a Linear of the model).
void install_quantized_weights(Module& model, const QuantizedLinears& q, const std::string& path);

}  // namespace sima
