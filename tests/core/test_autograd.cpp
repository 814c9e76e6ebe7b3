// The autograd engine: accumulation, topological order, deep graphs, freeing
// saved state, grad mode, and gradcheck itself (it must catch a wrong backward).
#include "testing.h"

using namespace sima;
using namespace sima::testing;

TEST_CASE("a tensor used twice accumulates both contributions: y = x*x + x") {
  Tensor x = from_vector({-1.f, 0.5f, 2.f});
  x.requires_grad_();
  Tensor y = add(mul(x, x), x);
  y.backward(ones({3}));
  check_close(x.grad(), {-1.f, 2.f, 5.f});  // dy/dx = 2x + 1
}

TEST_CASE("a gradient tensor handed to two inputs: each input's sum stays its own") {
  // share(u, w) = u + w, its backward returning the same tensor to both inputs; u then gets a
  // second contribution from mul(u, 5), which must not reach w's pending gradient (an engine
  // summing into the shared tensor in place would). t = 5u + (u + w) = 6·2x + 3x -> dt/dx = 15.
  Tensor x = from_vector({1.f, -2.f});
  x.requires_grad_();
  Tensor u = mul(x, 2.f), w = mul(x, 3.f);
  Tensor sh = add(u.detach(), w.detach());
  attach_grad_fn(sh, "share", {u, w}, [](const Tensor& g) -> Grads { return {g, g}; });
  Tensor t = add(mul(u, 5.f), sh);
  t.backward(ones({2}));
  check_close(x.grad(), {15.f, 15.f});
  // Three contributions to one node: y = 6v + v·v + v, v = z + 1 -> dy/dz = 7 + 2v.
  Tensor z = from_vector({0.5f, 3.f});
  z.requires_grad_();
  Tensor v = add(z, 1.f);
  add(add(mul(v, 6.f), mul(v, v)), v).backward(ones({2}));
  check_close(z.grad(), {10.f, 15.f});
}

TEST_CASE("diamond graph: gradients reach a node only after all its consumers ran") {
  // a = 2x; b = a*a; c = a*3; y = b + c  ->  dy/dx = (2a + 3)·2 = 8x + 6
  Tensor x = from_vector({1.f, -2.f});
  x.requires_grad_();
  Tensor a = mul(x, 2.f);
  Tensor y = add(mul(a, a), mul(a, 3.f));
  y.backward(ones({2}));
  check_close(x.grad(), {14.f, -10.f});
}

TEST_CASE("leaf gradients accumulate across backward calls until zero_grad") {
  Tensor x = from_vector({1.f, 2.f});
  x.requires_grad_();
  mul(x, 3.f).backward(ones({2}));
  mul(x, 3.f).backward(ones({2}));
  check_close(x.grad(), {6.f, 6.f});
  x.zero_grad();
  CHECK_FALSE(x.grad().defined());
  mul(x, 3.f).backward(ones({2}));
  check_close(x.grad(), {3.f, 3.f});
}

TEST_CASE("a 10 000-op chain does not overflow the stack") {
  Tensor x = from_vector({1.f});
  x.requires_grad_();
  Tensor y = x;
  for (int i = 0; i < 10000; ++i) y = add(y, 0.5f);
  CHECK(y.item() == doctest::Approx(5001.f));
  y.backward();
  CHECK(x.grad().item() == 1.f);
}

TEST_CASE("destroying a 300 000-node graph does not recurse") {
  // Node -> Edge -> Node ... would be 300 000 nested destructor calls (a stack overflow
  // at the default 8 MiB stack) without the iterative ~Node. Reaching the end is the test.
  Tensor x = from_vector({1.f});
  x.requires_grad_();
  Tensor y = x;
  for (int i = 0; i < 300000; ++i) y = add(y, 1.f);
  CHECK(y.item() == doctest::Approx(300001.f));
  y = Tensor();
  CHECK_FALSE(y.defined());
}

TEST_CASE("backward on a scalar needs no gradient; a non-scalar does") {
  Tensor x = from_vector({1.f, 2.f});
  x.requires_grad_();
  Tensor y = mul(x, 2.f);
  CHECK_THROWS_WITH_AS(y.backward(), "backward: a gradient must be given for a non-scalar output of shape (2)",
                       Error);
  CHECK_THROWS_AS(y.backward(ones({3})), Error);
  Tensor s = mul(from_vector({5.f}), 1.f);
  CHECK_THROWS_AS(s.backward(), Error);  // does not require grad
}

TEST_CASE("saved state is freed after backward; a second backward is a clear error") {
  Tensor x = from_vector({1.f, 2.f});
  x.requires_grad_();
  Tensor y = exp(mul(x, x));
  y.backward(ones({2}));
  CHECK(y.grad_fn()->released);
  CHECK_FALSE(static_cast<bool>(y.grad_fn()->backward));
  CHECK_THROWS_WITH_AS(y.backward(ones({2})),
                       doctest::Contains("backward through the graph a second time"), Error);
}

TEST_CASE("retain_graph allows a second backward") {
  Tensor x = from_vector({3.f});
  x.requires_grad_();
  Tensor y = mul(x, x);
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  CHECK(x.grad().item() == 12.f);  // 2 · 2x
}

TEST_CASE("saved tensors are released: the op's input storage is freed with the graph") {
  std::weak_ptr<Storage> saved;
  Tensor x = from_vector({1.f, 2.f});
  x.requires_grad_();
  Tensor y;
  {
    Tensor h = mul(x, 3.f);  // exp saves h and exp(h)
    saved = h.impl()->storage;
    y = exp(h);
  }
  CHECK_FALSE(saved.expired());  // kept alive by exp's saved state
  y.backward(ones({2}));
  CHECK(saved.expired());  // freed by backward, while y is still alive
}

TEST_CASE("NoGradGuard: ops record nothing inside, grad mode comes back after") {
  Tensor x = from_vector({1.f});
  x.requires_grad_();
  {
    NoGradGuard g;
    CHECK_FALSE(grad_mode_enabled());
    Tensor y = mul(x, 2.f);
    CHECK_FALSE(y.requires_grad());
    CHECK_FALSE(y.grad_fn());
  }
  CHECK(grad_mode_enabled());
  CHECK(mul(x, 2.f).requires_grad());
}

TEST_CASE("inputs that do not require grad get no gradient and cut the graph") {
  Tensor a = from_vector({1.f, 2.f});
  Tensor b = from_vector({3.f, 4.f});
  b.requires_grad_();
  Tensor y = mul(a, b);
  y.backward(ones({2}));
  CHECK_FALSE(a.grad().defined());
  check_close(b.grad(), {1.f, 2.f});
  CHECK_FALSE(mul(a, a).requires_grad());
}

TEST_CASE("backward from a leaf accumulates into its own grad") {
  Tensor x = from_vector({1.f, 2.f});
  x.requires_grad_();
  x.backward(from_vector({0.5f, 0.25f}));
  check_close(x.grad(), {0.5f, 0.25f});
}

// An op with a deliberately wrong backward (a factor 2 too large): gradcheck must fail.
static Tensor wrong_square(const Tensor& x) {
  Tensor y = empty(x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) y.data()[i] = x.data()[i] * x.data()[i];
  attach_grad_fn(y, "wrong_square", {x}, [xs = x.detach()](const Tensor& g) -> Grads {
    return {mul(mul(g, xs), 4.f)};  // should be 2x
  });
  return y;
}

TEST_CASE("gradcheck catches a deliberately wrong backward and passes the right one") {
  Tensor x = uniform_leaf({2, 3}, 0.5f, 1.5f, 9);
  auto r = gradcheck([](const std::vector<Tensor>& v) { return wrong_square(v[0]); }, {x});
  CHECK_FALSE(r.ok);
  CHECK(r.message.find("input 0") != std::string::npos);
  auto ok = gradcheck([](const std::vector<Tensor>& v) { return square(v[0]); }, {x});
  CHECK(ok.ok);
  CHECK(ok.checked == 6);
  // A backward that forgets one input is caught too.
  Tensor a = uniform_leaf({3}, 0.5f, 1.5f, 1), b = uniform_leaf({3}, 0.5f, 1.5f, 2);
  auto forgot = gradcheck(
      [](const std::vector<Tensor>& v) {
        Tensor y = empty(v[0].shape());
        for (int i = 0; i < 3; ++i) y.data()[i] = v[0].data()[i] * v[1].data()[i];
        attach_grad_fn(y, "forgetful_mul", {v[0], v[1]},
                       [bs = v[1].detach()](const Tensor& g) -> Grads { return {mul(g, bs), Tensor()}; });
        return y;
      },
      {a, b});
  CHECK_FALSE(forgot.ok);
  CHECK(forgot.message.find("input 1") != std::string::npos);
}

TEST_CASE("a backward returning the wrong shape is an internal error, not corruption") {
  Tensor x = from_vector({1.f, 2.f});
  x.requires_grad_();
  Tensor y = x.clone();
  y.grad_fn()->backward = [](const Tensor&) -> Grads { return {zeros({3})}; };
  CHECK_THROWS_WITH_AS(y.backward(ones({2})), doctest::Contains("returned a gradient of shape (3)"), Error);
}
