// Nyströmformer (nn/attention/nystromformer.h): segment means (even and uneven segments),
// the iterative pseudo-inverse against hand-worked values, its gradchecks and its
// composition from matmul ops (both initialisations), the token conv, the module against a
// transcription of the official forward from primitive ops, its gradchecks, exp count,
// the m = N softmax case and its errors.
#include "nn/attention/nystromformer.h"

#include <cmath>
#include <string>

#include "attention_testing.h"
#include "nn/attention/softmax_attention.h"

using namespace sima;
using namespace sima::testing;

namespace {

Tensor eye(int64_t m) {
  std::vector<float> e(m * m, 0.f);
  for (int64_t i = 0; i < m; ++i) e[i * m + i] = 1.f;
  return from_vector(e, {m, m});
}

// The official iterative_inv from primitive ops, its scale n differentiated as the rest.
Tensor pinv_composed(const Tensor& A, int64_t iters, bool global) {
  const int64_t m = A.size(-1);
  Tensor colsum = sum(A, {-2});                                               // (B, h, m)
  Tensor n = global ? max(colsum) : unsqueeze(max(colsum, -1, true).values, -1);  // () or (B, h, 1, 1)
  Tensor Z = div(permute(A, {0, 1, 3, 2}), n);
  Tensor I = eye(m);
  for (int64_t k = 0; k < iters; ++k) {
    Tensor P = matmul(A, Z);
    Tensor X = sub(mul(I, 7.f), P);
    X = sub(mul(I, 15.f), matmul(P, X));
    X = sub(mul(I, 13.f), matmul(P, X));
    Z = matmul(mul(Z, 0.25f), X);
  }
  return Z;
}

// Softmax matrices (B, h, m, m) from seeded logits std·N(0, 1) + diag·I, the kind of A the
// module inverts. diag > 0 makes them diagonally dominant, so well-conditioned: then six
// iterations converge and the map is smooth enough for float32 finite differences (with
// near-singular A, 6 iterations stop far from A⁻¹, as upstream's do). Logit j also gets
// 0.4·j, so that the largest column sum (the scale n) is clear of the second: a finite
// difference of 1e-2 must not move n to another column (n is a max, with a kink there).
Tensor softmax_matrices(int64_t B, int64_t h, int64_t m, uint64_t seed, float std = 1.f, float diag = 0.f) {
  std::vector<float> bias(m * m);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < m; ++j) bias[i * m + j] = (i == j ? diag : 0.f) + 0.4f * j;
  return softmax(add(mul(randn_leaf({B, h, m, m}, seed, false), std), from_vector(bias, {m, m})), -1)
      .detach()
      .requires_grad_();
}

AttentionOptions nystrom_options(int64_t C, int64_t h, int64_t m, int64_t conv = 0,
                                 const std::string& init = "original") {
  AttentionOptions o = attention_options("nystromformer", C, h);
  set_unchecked(o, "num_landmarks", m);
  set_unchecked(o, "conv_kernel_size", conv);
  set_unchecked(o, "pinv_init", init);
  return o;
}

// The official forward (code/attention_nystrom.py) from primitive ops on q, k, v (B, h, N, d),
// with the uneven segments of the official ImageNet code.
Tensor nystrom_composed(const NystromAttention& attn, const Tensor& q, const Tensor& k, const Tensor& v) {
  const NystromSettings& o = attn.settings;
  const int64_t B = q.size(0), h = q.size(1), N = q.size(2), d = q.size(3), m = o.num_landmarks;
  const float s = 1.f / std::sqrt(std::sqrt(static_cast<float>(d)));
  Tensor qs = mul(q, s), ks = mul(k, s), x;
  if (m == N) {
    x = matmul(softmax(matmul(qs, ks, false, true), -1), v);
  } else {
    const int64_t seg = N / m, n_short = (seg + 1) * m - N;
    auto landmarks = [&](const Tensor& t) {
      std::vector<Tensor> parts;
      for (int64_t i = 0, start = 0; i < m; ++i) {  // one token segment at a time
        const int64_t len = i < n_short ? seg : seg + 1;
        parts.push_back(mean(narrow(t, 2, start, len), {2}, true));
        start += len;
      }
      return cat(parts, 2);
    };
    Tensor qt = landmarks(qs), kt = landmarks(ks);
    Tensor k1 = softmax(matmul(qs, kt, false, true), -1);
    Tensor k2 = softmax(matmul(qt, kt, false, true), -1);
    Tensor k3 = softmax(matmul(qt, ks, false, true), -1);
    x = matmul(matmul(k1, pinv_composed(k2, o.pinv_iters, o.pinv_init == "original")), matmul(k3, v));
  }
  if (attn.conv) {
    const int64_t ks_ = o.conv_kernel_size;
    x = add(x, conv2d(pad(v, {0, 0, ks_ / 2, ks_ / 2}), attn.conv->weight, Tensor(), 1, 0, static_cast<int>(h)));
  }
  (void)B;
  return x;
}

std::vector<Tensor> core_params(const Module& m) {
  std::vector<Tensor> ps;
  for (auto& [name, p] : m.named_parameters())
    if (name.rfind("qkv", 0) != 0 && name.rfind("proj", 0) != 0) ps.push_back(p);
  return ps;
}

}  // namespace

// ---- segment_means ------------------------------------------------------------------------

TEST_CASE("segment_means: even and uneven segments, hand-worked, and its gradient") {
  // N = 7, m = 3: ⌊7/3⌋ = 2, (2+1)·3 − 7 = 2 segments of 2 tokens, then 1 of 3.
  Tensor x = from_vector({0, 1, 2, 3, 4, 5, 6}, {1, 1, 7, 1});
  check_close(segment_means(x, 3), {0.5f, 2.5f, 5.f});
  // N = 6, m = 3: three segments of 2
  check_close(segment_means(from_vector({0, 1, 2, 3, 4, 5}, {1, 1, 6, 1}), 3), {0.5f, 2.5f, 4.5f});
  check_close(segment_means(x, 7), to_vector(x));  // m = N: the tokens
  check_close(segment_means(x, 1), {3.f});
  Tensor y = randn_leaf({2, 3, 11, 4}, 1);
  CHECK_GRADCHECK([](const std::vector<Tensor>& v) { return segment_means(v[0], 4); }, {y});
}

// ---- nystrom_pinv ---------------------------------------------------------------------------

TEST_CASE("nystrom_pinv: hand-worked inverse, pseudo-inverse and initial scale") {
  // [[3, 1], [1, 3]]/4 has inverse [[3, −1], [−1, 3]]/2 (det 1/2).
  Tensor A = from_vector({0.75f, 0.25f, 0.25f, 0.75f}, {1, 1, 2, 2});
  check_close(nystrom_pinv(A, 6, true), {1.5f, -0.5f, -0.5f, 1.5f}, 1e-5f);
  // J/2 (J all ones) is singular; Z₀ = (J/2)ᵀ/1 = J/2 is already its pseudo-inverse and a fixed
  // point: P = A Z = J/2 is a projection, so X3 = 13I − 9P and ¼ Z X3 = ¼(13 − 9) Z = Z.
  Tensor J = full({1, 1, 2, 2}, 0.5f);
  check_close(nystrom_pinv(J, 6, true), {0.5f, 0.5f, 0.5f, 0.5f}, 1e-6f);
  // No iterations: Z₀ = Aᵀ / n. Two matrices with largest column sums 1.2 and 1.5:
  // global (original) divides both by 1.5, exact each by its own.
  Tensor two = from_vector({0.6f, 0.4f, 0.6f, 0.4f, 0.5f, 0.5f, 1.f, 0.f}, {1, 2, 2, 2});
  check_close(nystrom_pinv(two, 0, false), {0.5f, 0.5f, 1.f / 3, 1.f / 3, 1.f / 3, 2.f / 3, 1.f / 3, 0.f}, 1e-6f);
  check_close(nystrom_pinv(two, 0, true), {0.4f, 0.4f, 4.f / 15, 4.f / 15, 1.f / 3, 2.f / 3, 1.f / 3, 0.f}, 1e-6f);
}

TEST_CASE("nystrom_pinv: six iterations invert well-conditioned softmax matrices") {
  const int64_t m = 5;
  Tensor A = softmax_matrices(2, 3, m, 3, 0.5f, 2.f).detach();
  for (bool global : {true, false}) {
    CAPTURE(global);
    Tensor I = matmul(A, nystrom_pinv(A, 6, global));
    float err = 0.f;
    for (int64_t p = 0; p < 6; ++p)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < m; ++j)
          err = std::fmax(err, std::fabs(I.data()[(p * m + i) * m + j] - (i == j ? 1.f : 0.f)));
    MESSAGE("max |A Z - I| after 6 iterations (global = " << global << "): " << err);
    CHECK(err < 1e-4f);
  }
}

TEST_CASE("nystrom_pinv: gradcheck through the iterations and the scale, both inits") {
  for (bool global : {true, false})
    for (int64_t iters : {0, 1, 2, 6}) {
      CAPTURE(global);
      CAPTURE(iters);
      Tensor A = softmax_matrices(2, 2, 4, 5, 0.5f, 2.f);
      auto r = gradcheck([=](const std::vector<Tensor>& v) { return nystrom_pinv(v[0], iters, global); }, {A});
      MESSAGE("nystrom_pinv gradcheck global=" << global << " iters=" << iters << ": max abs error "
                                               << r.max_abs_error);
      INFO(r.message);
      CHECK(r.ok);
      CHECK(r.checked == A.numel());
    }
}

TEST_CASE("nystrom_pinv == the official iterations composed from matmul ops") {
  for (bool global : {true, false})
    for (int64_t iters : {1, 6}) {
      CAPTURE(global);
      CAPTURE(iters);
      Tensor A = softmax_matrices(2, 3, 6, 7, 2.f);
      check_same([=](auto& v) { return nystrom_pinv(v[0], iters, global); },
                 [=](auto& v) { return pinv_composed(v[0], iters, global); }, {A}, {.atol = 1e-5f, .rtol = 1e-4f});
    }
}

// ---- TokenConv ------------------------------------------------------------------------------

TEST_CASE("TokenConv: hand-worked value, gradcheck, padding keeps N") {
  TokenConv conv(1, 3);
  conv.weight.data()[0] = 1.f, conv.weight.data()[1] = 2.f, conv.weight.data()[2] = 3.f;
  // tokens 1, 2, 3, 4 (d = 1), zero padding: out_n = 1·v_{n−1} + 2·v_n + 3·v_{n+1}
  check_close(conv.forward(from_vector({1, 2, 3, 4}, {1, 1, 4, 1})), {8.f, 14.f, 20.f, 11.f});
  TokenConv conv2(2, 5);
  Tensor v = randn_leaf({2, 2, 6, 3}, 8);
  CHECK(conv2.forward(v).shape() == v.shape());
  CHECK_GRADCHECK([&](const std::vector<Tensor>& x) { return conv2.forward(x[0]); }, {v, conv2.weight});
}

// ---- NystromAttention -----------------------------------------------------------------------

TEST_CASE("NystromAttention core == the official forward composed from primitive ops") {
  struct Case { int64_t h, N, m, conv; const char* init; };
  for (Case c : {Case{1, 12, 4, 0, "original"}, Case{2, 12, 4, 3, "original"}, Case{2, 13, 4, 0, "exact"},
                 Case{2, 13, 5, 5, "original"}, Case{2, 6, 6, 3, "original"}}) {
    CAPTURE(c.h);
    CAPTURE(c.N);
    CAPTURE(c.m);
    CAPTURE(c.conv);
    CAPTURE(c.init);
    const int64_t d = 4;
    NystromAttention attn(nystrom_options(c.h * d, c.h, c.m, c.conv, c.init));
    Tensor q = randn_leaf({2, c.h, c.N, d}, 1), k = randn_leaf({2, c.h, c.N, d}, 2), v = randn_leaf({2, c.h, c.N, d}, 3);
    check_same([&](auto& x) { return attn.core(x[0], x[1], x[2], 0, 0); },
               [&](auto& x) { return nystrom_composed(attn, x[0], x[1], x[2]); }, {q, k, v},
               {.atol = 1e-5f, .rtol = 1e-4f}, core_params(attn));
  }
}

TEST_CASE("NystromAttention: gradcheck w.r.t. x and every parameter") {
  struct Case { int64_t h, N, m, conv; const char* init; };
  for (Case c : {Case{1, 8, 4, 0, "original"}, Case{2, 9, 4, 3, "original"}, Case{2, 7, 3, 0, "exact"}}) {
    CAPTURE(c.h);
    CAPTURE(c.N);
    CAPTURE(c.conv);
    NystromAttention attn(nystrom_options(8, c.h, c.m, c.conv, c.init));
    randomize_parameters(attn, 4, 0.4f);
    gradcheck_module(attn, randn_leaf({2, c.N, 8}, 5));
  }
}

TEST_CASE("NystromAttention: m = N is exact softmax attention; exp count 2 N m + m^2") {
  NystromAttention full(nystrom_options(8, 2, 6));
  Tensor q = randn_leaf({2, 2, 6, 4}, 1, false), k = randn_leaf({2, 2, 6, 4}, 2, false), v = randn_leaf({2, 2, 6, 4}, 3, false);
  check_close(full.core(q, k, v, 0, 0), softmax_attention(q, k, v, 0.5f), 1e-6f, 1e-5f);
  CHECK(full.exp_calls() == 2 * 2 * 6 * 6);
  NystromAttention attn(nystrom_options(8, 2, 4, 3));
  NoGradGuard ng;
  attn.forward(randn({3, 13, 8}));
  CHECK(attn.exp_calls() == 3 * 2 * (2 * 13 * 4 + 4 * 4));
}

TEST_CASE("NystromAttention: parameter names and shapes") {
  NystromAttention attn(nystrom_options(8, 2, 4, 5));
  std::vector<std::string> names;
  for (auto& [name, p] : attn.named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"qkv.weight", "qkv.bias", "proj.weight", "proj.bias", "conv.weight"});
  CHECK(attn.conv->weight.shape() == Shape({2, 1, 5, 1}));
  CHECK(NystromAttention(nystrom_options(8, 2, 4)).named_parameters().size() == 4);
  CHECK(attn.forward(randn({2, 10, 8})).shape() == Shape({2, 10, 8}));
}

TEST_CASE("NystromAttention: errors name the option or shape and what is valid") {
  auto bad = [](AttentionOptions o, const std::string& what) {
    CHECK(error_message([&] { NystromAttention a(o); }).find(what) != std::string::npos);
  };
  bad(nystrom_options(8, 2, 0), "num_landmarks = 0");
  bad(nystrom_options(8, 2, 4, 4), "conv_kernel_size = 4");
  bad(nystrom_options(8, 2, 4, -1), "conv_kernel_size = -1");
  bad(nystrom_options(8, 2, 4, 0, "newton"), "original, exact");
  AttentionOptions o = nystrom_options(8, 2, 4);
  o.own["pinv_iters"] = -1;  // around the row's check: the constructor's own
  bad(o, "pinv_iters = -1");
  o = nystrom_options(8, 2, 4);
  o.attn_drop = 0.1f;
  bad(o, "attn_drop");
  NystromAttention attn(nystrom_options(8, 2, 8));
  {  // more landmarks than tokens: capped at m = N, exactly the module built with m = N
    NystromAttention at_n(nystrom_options(8, 2, 5));
    at_n.load_state_dict(attn.state_dict());
    Tensor x = randn({1, 5, 8});
    CHECK(max_abs_diff(attn.forward(x), at_n.forward(x)) == 0.f);
  }
  Tensor q = randn({1, 2, 8, 4});
  CHECK(error_message([&] { attn.core(q, q, randn({1, 2, 9, 4}), 0, 0); }).find("of one shape") != std::string::npos);
  CHECK(error_message([] { nystrom_pinv(ones({2, 3}), 6, true); }).find("(..., m, m)") != std::string::npos);
  CHECK(error_message([] { segment_means(ones({1, 3, 2}), 4); }).find("1 <= m <= N = 3") != std::string::npos);
}
