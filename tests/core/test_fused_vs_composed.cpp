// Every fused op must be the same function as its composition of primitive ops:
// same forward values and same gradients for every input. The composition is
// the oracle (each primitive is gradchecked on its own in its family's tests).
#include "testing.h"

using namespace sima;
using namespace sima::testing;

TEST_CASE("layer_norm == (x - mean) / sqrt(var + eps) * w + b") {
  Tensor x = randn_leaf({3, 4, 8}, 1), w = randn_leaf({8}, 2), b = randn_leaf({8}, 3);
  check_same([](auto& v) { return layer_norm(v[0], v[1], v[2], 1e-5f); },
             [](auto& v) {
               Tensor mu = mean(v[0], {-1}, true);
               Tensor var_ = var(v[0], {-1}, /*correction=*/0, true);
               return add(mul(div(sub(v[0], mu), sqrt(add(var_, 1e-5f))), v[1]), v[2]);
             },
             {x, w, b});
}

TEST_CASE("softmax / log_softmax == exp(x - max) / sum, along every dim") {
  Tensor x = mul(randn_leaf({2, 3, 5}, 4), 3.f).detach().requires_grad_();
  for (int d : {0, 1, 2, -1}) {
    CAPTURE(d);
    auto shifted = [d](const Tensor& t) { return sub(t, max(t, d, true).values); };
    check_same([d](auto& v) { return softmax(v[0], d); },
               [&](auto& v) {
                 Tensor e = exp(shifted(v[0]));
                 return div(e, sum(e, {d}, true));
               },
               {x});
    check_same([d](auto& v) { return log_softmax(v[0], d); },
               [&](auto& v) {
                 Tensor s = shifted(v[0]);
                 return sub(s, log(sum(exp(s), {d}, true)));
               },
               {x});
  }
}

TEST_CASE("cross_entropy == -mean(sum(smoothed one-hot * log_softmax))") {
  const int64_t B = 4, C = 6;
  Tensor logits = randn_leaf({B, C}, 5);
  std::vector<int64_t> y{0, 5, 2, 2};
  for (float eps : {0.f, 0.1f}) {
    CAPTURE(eps);
    Tensor target = full({B, C}, eps / C);
    for (int64_t i = 0; i < B; ++i) target.at({i, y[i]}) += 1.f - eps;
    auto composed = [&](const std::vector<Tensor>& v) {
      return neg(mean(sum(mul(target, log_softmax(v[0], 1)), {1})));
    };
    check_same([&](auto& v) { return cross_entropy(v[0], y, eps); }, composed, {logits});
    // soft targets with the same distribution give the same function
    check_same([&](auto& v) { return cross_entropy(v[0], target, 0.f); }, composed, {logits});
    check_same([&](auto& v) { return cross_entropy(v[0], y, eps, Reduction::Sum); },
               [&](auto& v) { return mul(composed(v), float(B)); }, {logits});
  }
}

TEST_CASE("normalize == x / clamp_min(||x||_p, eps), both sides of the clamp") {
  // Column 0 of the (3, 4) input has a tiny norm so that max(n, eps) picks eps.
  Tensor x = randn_leaf({3, 4}, 6);
  for (int64_t i = 0; i < 3; ++i) x.at({i, 0}) = 1e-3f * (i + 1);
  for (float p : {1.f, 2.f}) {
    for (int dim : {0, 1}) {
      CAPTURE(p);
      CAPTURE(dim);
      const float eps = 0.05f;
      check_same([=](auto& v) { return normalize(v[0], p, dim, eps); },
                 [=](auto& v) {
                   Tensor n = p == 1.f ? sum(abs(v[0]), {dim}, true) : sqrt(sum(square(v[0]), {dim}, true));
                   return div(v[0], clamp_min(n, eps));
                 },
                 {x});
    }
  }
}

TEST_CASE("linear == x @ W^T + b, and matmul's transposes == explicit transpose") {
  Tensor x = randn_leaf({2, 3, 5}, 7), w = randn_leaf({4, 5}, 8), b = randn_leaf({4}, 9);
  check_same([](auto& v) { return linear(v[0], v[1], v[2]); },
             [](auto& v) { return add(matmul(v[0], transpose(v[1], 0, 1)), v[2]); }, {x, w, b});
  Tensor p = randn_leaf({2, 5, 3}, 10), q = randn_leaf({2, 4, 5}, 11);
  check_same([](auto& v) { return matmul(v[0], v[1], true, true); },
             [](auto& v) { return matmul(transpose(v[0], -1, -2), transpose(v[1], -1, -2)); }, {p, q});
}

TEST_CASE("batch_norm2d (training) == per-channel batch statistics") {
  Tensor x = randn_leaf({3, 2, 2, 3}, 12), w = randn_leaf({2}, 13), b = randn_leaf({2}, 14);
  check_same([](auto& v) { return batch_norm2d(v[0], v[1], v[2], Tensor(), Tensor(), true, 0.1f, 1e-5f); },
             [](auto& v) {
               Tensor mu = mean(v[0], {0, 2, 3}, true);
               Tensor var_ = var(v[0], {0, 2, 3}, 0, true);
               Tensor xhat = div(sub(v[0], mu), sqrt(add(var_, 1e-5f)));
               return add(mul(xhat, reshape(v[1], {1, 2, 1, 1})), reshape(v[2], {1, 2, 1, 1}));
             },
             {x, w, b});
}

TEST_CASE("quick_gelu == x * sigmoid(1.702 x), elu+1 and softplus against their formulas") {
  Tensor x = away_from_zero_leaf({4, 5}, 0.05f, 3.f, 15);
  check_same([](auto& v) { return quick_gelu(v[0]); },
             [](auto& v) { return mul(v[0], sigmoid(mul(v[0], 1.702f))); }, {x});
  check_same([](auto& v) { return softplus(v[0]); }, [](auto& v) { return log(add(exp(v[0]), 1.f)); },
             {x});
  check_same([](auto& v) { return tanh(v[0]); },
             [](auto& v) { return sub(mul(sigmoid(mul(v[0], 2.f)), 2.f), 1.f); }, {x});
}

TEST_CASE("expand / sum_to round trip and cat == stack of narrows") {
  Tensor x = randn_leaf({3, 1, 4}, 16);
  check_same([](auto& v) { return expand(v[0], {2, 3, 5, 4}); },
             [](auto& v) { return add(v[0], zeros({2, 3, 5, 4})); }, {x});
  Tensor a = randn_leaf({2, 3}, 17), b = randn_leaf({2, 2}, 18);
  check_same([](auto& v) { return cat({v[0], v[1]}, 1); },
             [](auto& v) { return pad(v[0], {0, 2}) + pad(v[1], {3, 0}); }, {a, b});
}
