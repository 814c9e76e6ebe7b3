// The worked values of docs/derivations.md and docs/derivations/*.md, computed by the library.
// Each test case is named after the section or page that states its numbers; a change to a page's
// example must change the test too (and the other way round).
#include <cmath>

#include "core/ops/activation.h"
#include "core/ops/conv.h"
#include "core/ops/fused_mlp.h"
#include "core/ops/matmul.h"
#include "core/ops/norm.h"
#include "core/ops/softmax.h"
#include "nn/attention/class_attention.h"
#include "nn/attention/linear_attention.h"
#include "nn/attention/relu_attention.h"
#include "nn/attention/sima.h"
#include "nn/attention/softmax_attention.h"
#include "nn/attention/xca.h"
#include "testing.h"

using namespace sima;
using namespace sima::testing;

namespace {

const float kLn2 = std::log(2.f), kLn3 = std::log(3.f);
const float kPhi1 = 0.24197072f;   // φ(1), the standard normal density at 1
const float kCdf1 = 0.84134475f;   // Φ(1)
const float kSig1 = 0.73105858f;   // σ(1) = e / (1 + e)

Tensor leaf(const std::vector<float>& v, const Shape& s) { return from_vector(v, s).requires_grad_(); }

}  // namespace

TEST_CASE("derivations §1 LayerNorm: x = (1, 2, 3), g = (1, 0, 0) gives dx = (1, -2, 1) / (2 sqrt 6)") {
  Tensor x = leaf({1, 2, 3}, {1, 3});
  Tensor y = layer_norm(x, Tensor(), Tensor(), 1e-12f);
  const float r = std::sqrt(1.5f);  // x̂ = (x - 2) / sqrt(2/3)
  check_close(y, {-r, 0.f, r});
  y.backward(from_vector({1, 0, 0}, {1, 3}));
  const float a = 1.f / (2.f * std::sqrt(6.f));
  check_close(x.grad(), {a, -2.f * a, a});
}

TEST_CASE("derivations §1 LayerNorm: with C = 2 every gradient is projected away, dx = 0") {
  Tensor x = leaf({1, 3}, {1, 2});
  layer_norm(x, Tensor(), Tensor(), 1e-12f).backward(from_vector({0.3f, -0.7f}, {1, 2}));
  check_close(x.grad(), {0.f, 0.f}, 1e-6f);
}

TEST_CASE("derivations §2 BatchNorm: a channel (1, 2, 3) in training is LayerNorm's row; eval is affine") {
  Tensor x = leaf({1, 2, 3}, {3, 1});  // (B = 3, C = 1): one channel of three values
  batch_norm2d(x, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1f, 1e-12f)
      .backward(from_vector({1, 0, 0}, {3, 1}));
  const float a = 1.f / (2.f * std::sqrt(6.f));
  check_close(x.grad(), {a, -2.f * a, a});

  // eval: running mean 2, variance 4, weight 3: y = (x - 2) / 2 · 3, dx = 3/2 · g
  Tensor xe = leaf({1, 2, 3}, {3, 1});
  Tensor y = batch_norm2d(xe, from_vector({3.f}, {1}), Tensor(), from_vector({2.f}, {1}),
                          from_vector({4.f}, {1}), false, 0.1f, 1e-12f);
  check_close(y, {-1.5f, 0.f, 1.5f});
  y.backward(from_vector({1, 1, 1}, {3, 1}));
  check_close(xe.grad(), {1.5f, 1.5f, 1.5f});
}

TEST_CASE("derivations §4 cross-entropy: z = 0, C = 3, target 0, smoothing 0.3: loss ln 3, dz = p - q") {
  Tensor z = leaf({0, 0, 0}, {1, 3});
  Tensor loss = cross_entropy(z, std::vector<int64_t>{0}, 0.3f);
  check_close(loss, {kLn3});
  loss.backward();
  // q = 0.7 · (1, 0, 0) + 0.1 = (0.8, 0.1, 0.1), p = 1/3 each
  check_close(z.grad(), {1.f / 3 - 0.8f, 1.f / 3 - 0.1f, 1.f / 3 - 0.1f});
  Tensor z0 = leaf({0, 0, 0}, {1, 3});  // without smoothing the target's gradient is -2/3
  cross_entropy(z0, std::vector<int64_t>{0}).backward();
  check_close(z0.grad(), {-2.f / 3, 1.f / 3, 1.f / 3});
}

TEST_CASE("derivations §5 GELU: gelu'(1) = Φ(1) + φ(1), gelu'(-1) = Φ(-1) - φ(1)") {
  Tensor x = leaf({1, -1}, {2});
  Tensor y = gelu(x);
  check_close(y, {kCdf1, -(1.f - kCdf1)});
  y.backward(from_vector({1, 1}, {2}));
  check_close(x.grad(), {kCdf1 + kPhi1, 1.f - kCdf1 - kPhi1});
  CHECK(x.grad().data()[0] == doctest::Approx(1.0833155).epsilon(1e-5));
  CHECK(x.grad().data()[1] == doctest::Approx(-0.0833155).epsilon(1e-4));
  // not monotone: the slope changes sign near x = -0.75
  Tensor xs = leaf({-0.76f, -0.74f}, {2});
  gelu(xs).backward(from_vector({1, 1}, {2}));
  CHECK(xs.grad().data()[0] < 0.f);
  CHECK(xs.grad().data()[1] > 0.f);
}

TEST_CASE("derivations/sima: N = 2, d = 1, both orders: out = (1/4, 3/4), rows of A sum to 0") {
  for (SimaOrder order : {SimaOrder::QkFirst, SimaOrder::KvFirst}) {
    Tensor q = leaf({1, 3}, {1, 1, 2, 1}), k = leaf({2, -2}, {1, 1, 2, 1}), v = leaf({4, 2}, {1, 1, 2, 1});
    Tensor qh, kh;
    Tensor out = sima_attention(q, k, v, SimaNorm::L1, order, 1e-12f, &qh, &kh);
    check_close(qh, {0.25f, 0.75f});
    check_close(kh, {0.5f, -0.5f});
    check_close(out, {0.25f, 0.75f});
    out.backward(from_vector({1, 0}, {1, 1, 2, 1}));  // L = out_0
    check_close(q.grad(), {3.f / 16, -1.f / 16});
    check_close(k.grad(), {3.f / 16, 3.f / 16});
    check_close(v.grad(), {1.f / 8, -1.f / 8});
  }
  Tensor qh, kh;  // A = q̂ k̂ᵀ
  sima_attention(from_vector({1, 3}, {1, 1, 2, 1}), from_vector({2, -2}, {1, 1, 2, 1}),
                 from_vector({4, 2}, {1, 1, 2, 1}), SimaNorm::L1, SimaOrder::Auto, 1e-12f, &qh, &kh);
  check_close(matmul(qh, kh, false, true), {0.125f, -0.125f, 0.375f, -0.375f});
}

TEST_CASE("derivations/class_attention, softmax form: T = 2, d = 1") {
  // rows t: (q_t, k_t, v_t); q_1 is never used by the softmax form
  Tensor qkv = leaf({kLn3, 1, 1, 5, 0, -1}, {1, 2, 3});
  Tensor attn;
  Tensor out = class_attention(qkv, 1, "softmax", 1e-6f, nullptr, &attn);
  check_close(attn, {0.75f, 0.25f});
  check_close(out, {0.5f});
  out.backward(from_vector({1}, {1, 1, 1}));
  const float a = 0.375f * kLn3;
  check_close(qkv.grad(), {0.375f, a, 0.75f, 0.f, -a, 0.25f});
}

TEST_CASE("derivations/class_attention, SimA form: T = 2, d = 1, weights sum to 1/2") {
  // q = (2, -2), k = (1, 3), v = (1, -1): q̂_0 = 1/2, k̂ = (1/4, 3/4), a = (1/8, 3/8)
  Tensor qkv = leaf({2, 1, 1, -2, 3, -1}, {1, 2, 3});
  Tensor attn;
  Tensor out = class_attention(qkv, 1, "sima", 1e-6f, nullptr, &attn);
  check_close(attn, {0.125f, 0.375f});
  check_close(out, {-0.25f});
  out.backward(from_vector({1}, {1, 1, 1}));
  // dq = (-1/16, -1/16): token 1's query gets a gradient through the norm only
  check_close(qkv.grad(), {-0.0625f, 0.1875f, 0.125f, -0.0625f, -0.0625f, 0.375f});
}

TEST_CASE("derivations/xca: q = k = v = I, tau = 1: out = A, d tau = σ(1)σ(-1)") {
  Tensor q = leaf({1, 0, 0, 1}, {1, 1, 2, 2}), k = leaf({1, 0, 0, 1}, {1, 1, 2, 2});
  Tensor v = leaf({1, 0, 0, 1}, {1, 1, 2, 2}), tau = leaf({1}, {1, 1, 1});
  Tensor out = xca_attention(q, k, v, tau);
  const float s1 = kSig1, s0 = 1.f - kSig1;
  check_close(out, {s1, s0, s0, s1});
  out.backward(from_vector({1, 0, 0, 0}, {1, 1, 2, 2}));  // L = out[0, 0]
  const float s = s1 * s0;                                 // 0.196612
  check_close(tau.grad(), {s});
  CHECK(s == doctest::Approx(0.196612).epsilon(1e-5));
  check_close(v.grad(), {s1, s0, 0.f, 0.f});
  check_close(q.grad(), {0.f, 0.f, -s, 0.f});
}

TEST_CASE("derivations §7 conv2d: x = (1, 2, 3), w = (1, -1): dx = (1, 0, -1), dw = (3, 5)") {
  Tensor x = leaf({1, 2, 3}, {1, 1, 1, 3}), w = leaf({1, -1}, {1, 1, 1, 2}), b = leaf({0.5f}, {1});
  Tensor y = conv2d(x, w, b);
  check_close(y, {-0.5f, -0.5f});
  y.backward(from_vector({1, 1}, {1, 1, 1, 2}));
  check_close(x.grad(), {1, 0, -1});  // the middle pixel is read twice: w_1 + w_0
  check_close(w.grad(), {3, 5});
  check_close(b.grad(), {2});
}

TEST_CASE("derivations §7 depthwise conv2d, NCHW and channels last: the same sums") {
  // channel 0 as above, channel 1: x = (0, 1, -1), w = (2, 1)
  Tensor x = leaf({1, 2, 3, 0, 1, -1}, {1, 2, 1, 3}), w = leaf({1, -1, 2, 1}, {2, 1, 1, 2});
  Tensor y = conv2d(x, w, Tensor(), 1, 0, 2);
  check_close(y, {-1, -1, 1, 1});
  y.backward(from_vector({1, 1, 1, 1}, {1, 2, 1, 2}));
  check_close(x.grad(), {1, 0, -1, 2, 3, 1});
  check_close(w.grad(), {3, 5, 1, 0});

  Tensor xl = leaf({1, 0, 2, 1, 3, -1}, {1, 1, 3, 2}), wl = leaf({1, -1, 2, 1}, {2, 1, 1, 2});
  Tensor yl = conv2d_depthwise_channels_last(xl, wl);
  check_close(yl, {-1, 1, -1, 1});
  yl.backward(from_vector({1, 1, 1, 1}, {1, 1, 2, 2}));
  check_close(xl.grad(), {1, 2, 0, 3, -1, 1});
  check_close(wl.grad(), {3, 5, 1, 0});
}

TEST_CASE("derivations §10 fused MLP: x = 1, W1 = (1, -1), W2 = (1, 1), GELU") {
  Tensor x = leaf({1}, {1, 1}), w1 = leaf({1, -1}, {2, 1}), b1 = leaf({0, 0}, {2});
  Tensor w2 = leaf({1, 1}, {1, 2}), b2 = leaf({0}, {1});
  Tensor y = fused_mlp(x, w1, b1, w2, b2, MlpActivation::Gelu);
  check_close(y, {2.f * kCdf1 - 1.f});  // gelu(1) + gelu(-1) = Φ(1) - Φ(-1)
  y.backward(from_vector({1}, {1, 1}));
  const float d1 = kCdf1 + kPhi1, dm1 = 1.f - kCdf1 - kPhi1;  // gelu'(1), gelu'(-1)
  check_close(w2.grad(), {kCdf1, -(1.f - kCdf1)});
  check_close(b2.grad(), {1});
  check_close(w1.grad(), {d1, dm1});
  check_close(b1.grad(), {d1, dm1});
  check_close(x.grad(), {d1 - dm1});
  CHECK(x.grad().data()[0] == doctest::Approx(1.166630).epsilon(1e-5));
}

TEST_CASE("derivations/softmax_attention: N = 2, d = 1, scale 1: rows of dS sum to 0") {
  Tensor q = leaf({kLn3, 0}, {1, 1, 2, 1}), k = leaf({1, 0}, {1, 1, 2, 1}), v = leaf({1, -1}, {1, 1, 2, 1});
  int64_t exps = 0;
  Tensor o = softmax_attention(q, k, v, 1.f, 0.f, false, rng(RngStream::Dropout), &exps);
  check_close(o, {0.5f, 0.f});
  CHECK(exps == 4);
  o.backward(from_vector({1, 0}, {1, 1, 2, 1}));  // L = o_0
  check_close(v.grad(), {0.75f, 0.25f});
  check_close(q.grad(), {0.375f, 0.f});
  check_close(k.grad(), {0.375f * kLn3, -0.375f * kLn3});
}

TEST_CASE("derivations/relu_attention: N = 2, d = 1, relu, alpha = 1: a row can be all zero") {
  Tensor q = leaf({1, -1}, {1, 1, 2, 1}), k = leaf({2, 1}, {1, 1, 2, 1}), v = leaf({1, 3}, {1, 1, 2, 1});
  Tensor o = relu_attention(q, k, v, ScoreFn::Relu, 1.f);
  check_close(o, {2.5f, 0.f});  // P = [[1, 1/2], [0, 0]]
  o.backward(from_vector({1, 1}, {1, 1, 2, 1}));
  check_close(v.grad(), {1.f, 0.5f});
  check_close(q.grad(), {2.5f, 0.f});
  check_close(k.grad(), {0.5f, 1.5f});
}

TEST_CASE("derivations/linear_elu: N = 2, d = 1: O = K-weighted mean of v, dq = 0") {
  // φ(q) = (1, 2), φ(k) = (1, 1/2)
  Tensor q = leaf({0, 1}, {1, 1, 2, 1}), k = leaf({0, -kLn2}, {1, 1, 2, 1}), v = leaf({1, 4}, {1, 1, 2, 1});
  int64_t exps = 0;
  Tensor o = linear_attention(q, k, v, FeatureMap::EluPlusOne, kLinearAttentionEps, &exps);
  check_close(o, {2.f, 2.f});
  CHECK(exps == 4);
  o.backward(from_vector({1, 0}, {1, 1, 2, 1}));  // L = O_0
  check_close(q.grad(), {0.f, 0.f});
  check_close(k.grad(), {-2.f / 3, 2.f / 3});
  check_close(v.grad(), {2.f / 3, 1.f / 3});
}
