// The non-finite step policy both trainers share (train/loop/loop_common.h): which parameter is
// named when a gradient is not finite, what `train.on_nonfinite = stop` says, and how `skip`
// drops a step's gradients and gives up after 10 bad steps in a row.
#include <limits>
#include <string>
#include <vector>

#include "testing.h"
#include "train/loop/loop_common.h"

using namespace sima;
using sima::testing::error_message;

namespace {

Tensor param(std::vector<float> values) {
  Tensor t = from_vector(values);
  t.requires_grad_();
  return t;
}

struct ThreeParams {
  Tensor a = param({1, 2, 3}), b = param({4, 5, 6, 7}), c = param({8});
  AdamW optim{{ParamGroup{.params = {{"blocks.0.a", a}, {"blocks.0.b", b}}},
               ParamGroup{.params = {{"head.c", c}}, .wd_scale = 0.0}},
              AdamWOptions{}};
};

ExperimentConfig policy(const std::string& on_nonfinite) {
  ExperimentConfig c;
  c.train.on_nonfinite = on_nonfinite;
  return c;
}

}  // namespace

TEST_CASE("first_nonfinite_gradient names the first parameter, in the optimizer's order, with a NaN or inf") {
  ThreeParams p;
  CHECK(first_nonfinite_gradient(p.optim) == "");  // no gradients yet
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  p.a.set_grad(from_vector({0.f, 1.f, -2.f}));
  p.b.set_grad(from_vector({0.f, 0.f, 0.f, 1e30f}));
  p.c.set_grad(from_vector({3.f}));
  CHECK(first_nonfinite_gradient(p.optim) == "");  // large but finite
  p.c.set_grad(from_vector({nan}));
  CHECK(first_nonfinite_gradient(p.optim) == "head.c");  // in the second group
  p.b.set_grad(from_vector({0.f, 0.f, 0.f, -inf}));  // the last element of an earlier parameter
  CHECK(first_nonfinite_gradient(p.optim) == "blocks.0.b");
  p.a.zero_grad();  // a parameter without a gradient is passed over
  CHECK(first_nonfinite_gradient(p.optim) == "blocks.0.b");
}

TEST_CASE("on_nonfinite = stop: the first bad step fails, naming step, epoch, batch, the fault and the advice") {
  ThreeParams p;
  int in_row = 0;
  std::vector<std::string> said;
  const TrainPosition pos{.step = 41, .epoch = 2, .batch = 7};
  const std::string msg = error_message([&] {
    handle_nonfinite_step("the gradient of 'head.c' is not finite", policy("stop"), pos, in_row, p.optim,
                          [&](const std::string& l) { said.push_back(l); }, "lower optimizer.lr");
  });
  CHECK(msg == "step 42 (epoch 3, batch 8): the gradient of 'head.c' is not finite; lower optimizer.lr");
  CHECK(said.empty());
}

TEST_CASE("on_nonfinite = skip: gradients dropped and the step skipped, up to 9 in a row; the 10th fails") {
  ThreeParams p;
  int in_row = 0;
  std::vector<std::string> said;
  auto say = [&](const std::string& l) { said.push_back(l); };
  for (int i = 0; i < 9; ++i) {
    p.a.set_grad(from_vector({1.f, 1.f, 1.f}));
    const TrainPosition pos{.step = 10 + i, .epoch = 0, .batch = 10 + i};
    CHECK_NOTHROW(handle_nonfinite_step("the loss is not finite (nan)", policy("skip"), pos, in_row, p.optim, say, "x"));
    CHECK_FALSE(p.a.grad().defined());  // zero_grad: nothing reaches the optimizer
    CHECK(in_row == i + 1);
  }
  REQUIRE(said.size() == 9);
  CHECK(said[0] == "step 11: the loss is not finite (nan); step skipped (train.on_nonfinite = skip)");
  const std::string msg = error_message([&] {
    handle_nonfinite_step("the loss is not finite (nan)", policy("skip"), {.step = 19, .epoch = 0, .batch = 19},
                          in_row, p.optim, say, "lower optimizer.lr");
  });
  CHECK(msg == "step 20 (epoch 1, batch 20): the loss is not finite (nan) (10 steps in a row); lower optimizer.lr");
  // A good step in between (the caller resets the count) starts the count again.
  in_row = 0;
  CHECK_NOTHROW(handle_nonfinite_step("the loss is not finite (inf)", policy("skip"), {.step = 30}, in_row, p.optim,
                                      say, "x"));
}
