// make_attention: AttentionOptions.variant -> the module. Each variant validates
// its own options in its constructor.
#include "core/error.h"
#include "nn/attention/attention.h"
#include "nn/attention/efficient.h"
#include "nn/attention/linear_attention.h"
#include "nn/attention/nystromformer.h"
#include "nn/attention/performer.h"
#include "nn/attention/linformer.h"
#include "nn/attention/relu_attention.h"
#include "nn/attention/sima.h"
#include "nn/attention/soft.h"
#include "nn/attention/softmax_attention.h"
#include "nn/attention/xca.h"

namespace sima {

std::shared_ptr<Attention> make_attention(const AttentionOptions& opt) {
  const std::string& v = opt.variant;
  if (v == "softmax") return std::make_shared<SoftmaxAttention>(opt);
  if (v == "xca") return std::make_shared<XCAttention>(opt);
  if (v == "sima") return std::make_shared<SimaAttention>(opt);
  if (v == "relu") return std::make_shared<ReluAttention>(opt);
  if (v == "soft") return std::make_shared<SoftAttention>(opt);
  if (v == "linear_elu") return std::make_shared<LinearEluAttention>(opt);
  if (v == "cosformer") return std::make_shared<CosformerAttention>(opt);
  if (v == "performer") return std::make_shared<PerformerAttention>(opt);
  if (v == "nystromformer") return std::make_shared<NystromAttention>(opt);
  if (v == "efficient") return std::make_shared<EfficientAttention>(opt);
  if (v == "linformer") return std::make_shared<LinformerAttention>(opt);
  fail("attention variant '", v,
       "' is unknown (allowed: softmax, xca, sima, relu, soft, linear_elu, cosformer, performer, nystromformer, "
       "efficient, linformer)");
}

}  // namespace sima
