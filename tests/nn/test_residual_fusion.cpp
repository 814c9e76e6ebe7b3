// A block's residual added as its branch's last product is stored (docs/precision.md):
// LowpLinear::forward_add and lowp_mlp with a residual at every precision, Linear, Mlp and every
// attention variant's forward_add, against the plain add(residual, forward(x)):
// - with packed or reduced-precision Linears and no gradient, the fused path: the same float32
//   additions, so the same values up to the order of the product's sums;
// - with a gradient, the plain path, bit for bit, and the gradient reaches the residual.
#include <doctest/doctest.h>

#include <string>

#include "core/autograd.h"
#include "core/ops/elementwise.h"
#include "core/ops/lowp_gemm.h"
#include "nn/attention/attention.h"
#include "nn/attention/variants.h"
#include "nn/linear.h"
#include "nn/mlp.h"
#include "testing.h"

using namespace sima;
using sima::testing::error_message;
using sima::testing::max_abs_diff;
using sima::testing::randn_leaf;
using sima::testing::rel_l2_error;

TEST_CASE("LowpLinear::forward_add and lowp_mlp with a residual: the plain sum, at every precision") {
  const Tensor x = randn_leaf({3, 20, 48}, 60, false), r = randn_leaf({3, 20, 24}, 61, false);
  const Tensor w = randn_leaf({24, 48}, 62, false), b = randn_leaf({24}, 63, false);
  const Tensor w1 = randn_leaf({96, 48}, 64, false), b1 = randn_leaf({96}, 65, false);
  const Tensor w2 = randn_leaf({24, 96}, 66, false);
  for (Precision p : {Precision::F32, Precision::BF16, Precision::Int8}) {
    const std::string precision = precision_name(p);  // CAPTURE keeps a reference: a named value
    CAPTURE(precision);
    const LowpLinear lin(p, w, b), fc1(p, w1, b1), fc2(p, w2, Tensor());
    const Tensor fused = lin.forward_add(x, r), plain = add(r, lin.forward(x));
    REQUIRE(fused.shape() == plain.shape());
    CHECK(rel_l2_error(fused, plain) < 1e-6);
    const Tensor mlp_fused = lowp_mlp(fc1, fc2, x, MlpActivation::Gelu, r);
    CHECK(rel_l2_error(mlp_fused, add(r, lowp_mlp(fc1, fc2, x, MlpActivation::Gelu))) < 1e-6);
    // a residual that is not added would be off by all of it
    CHECK(rel_l2_error(fused, lin.forward(x)) > 0.1);
  }
  const LowpLinear lin(Precision::F32, w, b);
  CHECK(error_message([&] { lin.forward_add(x, randn_leaf({3, 20, 23}, 67, false)); })
            .find("residual (3, 20, 23) does not match the output (3, 20, 24)") != std::string::npos);
}

TEST_CASE("Linear and Mlp forward_add: fused with lowp and no gradient, plain bit for bit with one") {
  Linear lin(32, 16);
  Mlp mlp(16, 64, 16, "gelu", 0.f);
  mlp.eval();
  const Tensor x = randn_leaf({2, 10, 32}, 70), r = randn_leaf({2, 10, 16}, 71);
  const Tensor lin_plain = add(r, lin.forward(x));
  const Tensor mlp_plain = add(r, mlp.forward(r));
  CHECK(max_abs_diff(lin.forward_add(x, r), lin_plain) == 0.f);  // a gradient asked for: plain
  CHECK(max_abs_diff(mlp.forward_add(r, r), mlp_plain) == 0.f);
  lin.lowp = std::make_shared<const LowpLinear>(Precision::F32, lin.weight, lin.bias);
  for (auto* l : {mlp.fc1.get(), mlp.fc2.get()}) l->lowp = std::make_shared<const LowpLinear>(Precision::F32, l->weight, l->bias);
  Tensor y = lin.forward_add(x, r);  // lowp set, but a gradient is asked for: still plain
  CHECK(max_abs_diff(y, lin_plain) == 0.f);
  y.backward(randn_leaf(y.shape(), 72, false));
  CHECK(r.grad().defined());
  NoGradGuard ng;
  CHECK(rel_l2_error(lin.forward_add(x.detach(), r.detach()), lin_plain) < 1e-6);
  CHECK(rel_l2_error(mlp.forward_add(r.detach(), r.detach()), mlp_plain) < 1e-6);
}

TEST_CASE("Attention::forward_add equals add(residual, forward) for every variant") {
  for (const std::string& v : attention_variant_names()) {
    CAPTURE(v);
    AttentionOptions opt;
    opt.variant = v;
    opt.dim = 16;
    opt.num_heads = 2;
    if (v == "nystromformer") opt.with("num_landmarks", 4);  // <= N = 16
    opt.num_tokens = 16;                              // linformer's N
    auto attn = make_attention(opt);
    attn->eval();
    const Tensor x = randn_leaf({2, 16, 16}, 80), r = randn_leaf({2, 16, 16}, 81);
    const Tensor plain = add(r, attn->forward(x, 4, 4));
    Tensor with_grad = attn->forward_add(x, r, 4, 4);
    CHECK(max_abs_diff(with_grad, plain) == 0.f);
    with_grad.backward(randn_leaf(with_grad.shape(), 82, false));
    CHECK(r.grad().defined());
    for (auto* lin : {attn->qkv.get(), attn->proj.get()})
      if (lin) lin->lowp = std::make_shared<const LowpLinear>(Precision::F32, lin->weight, lin->bias);
    NoGradGuard ng;
    const Tensor fused = attn->forward_add(x.detach(), r.detach(), 4, 4);
    CHECK(rel_l2_error(fused, plain) < 1e-5);
    CHECK(rel_l2_error(attn->forward_add(x.detach(), r.detach(), 4, 4), fused) == 0.0);  // nothing left pending
  }
}
