// The oneDNN engine and stream that the reduced-precision ops share (lowp_gemm.cpp,
// lowp_conv.cpp): one CPU engine, one in-order stream, made on first use. Internal to core/ops.
#pragma once
#include <oneapi/dnnl/dnnl.hpp>

namespace sima {

struct Dnnl {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream st{eng};
};
Dnnl& dnnl_ctx();

}  // namespace sima
