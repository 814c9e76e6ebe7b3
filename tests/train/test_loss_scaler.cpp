// The loss scaler's rules (train/optim/loss_scaler.h), as torch.cuda.amp.GradScaler's:
// start at 2^16, unscale exactly, an inf or NaN gradient backs the scale off by 0.5, restarts the
// clean-step count and is counted; growth ×2 after growth_interval clean steps in a row; never to inf.
// (The loop's use of it, a skipped step leaving weights and moments: test_train_precision.cpp.)
#include <doctest/doctest.h>

#include <cmath>

#include "core/ops/elementwise.h"
#include "core/ops/reduce.h"
#include "testing.h"
#include "train/optim/loss_scaler.h"

using namespace sima;

namespace {

// A leaf whose gradient is g.
Tensor with_grad(std::vector<float> g) {
  Tensor p = testing::randn_leaf({int64_t(g.size())}, 1);
  Tensor s = testing::randn_leaf({int64_t(g.size())}, 2, false);
  for (size_t i = 0; i < g.size(); ++i) s.data()[i] = g[i];
  sum(p * s).backward();  // dp = s
  return p;
}

}  // namespace

TEST_CASE("loss scaler: initial scale, the seed of the backward, exact unscaling") {
  LossScalerState st;
  LossScaler s(st);
  CHECK(s.scale() == 65536.f);
  CHECK(st.growth_tracker == 0);
  Tensor loss = scalar_tensor(2.5f);
  CHECK(s.seed(loss).item() == 65536.f);
  Tensor p = with_grad({65536.f, -3.f * 65536.f, 1.f});
  CHECK(s.unscale({p}));
  CHECK(p.grad().data()[0] == 1.f);
  CHECK(p.grad().data()[1] == -3.f);
  CHECK(p.grad().data()[2] == 0x1p-16f);
}

TEST_CASE("loss scaler: an inf or NaN gradient is found, left alone, backs the scale off and is counted") {
  for (float bad : {INFINITY, -INFINITY, NAN}) {
    LossScalerState st;
    LossScaler s(st);
    Tensor ok = with_grad({1.f, 2.f});
    Tensor p = with_grad({4.f, bad, 8.f});
    CHECK_FALSE(s.unscale({ok, p}));
    CHECK(ok.grad().data()[0] == 1.f);  // nothing unscaled: the step's gradients are dropped anyway
    CHECK(p.grad().data()[0] == 4.f);
    s.update(true);
    CHECK(st.scale == 32768.f);
    CHECK(st.skipped_steps == 1);
    s.update(true);
    CHECK(st.scale == 16384.f);
    CHECK(st.skipped_steps == 2);
  }
}

TEST_CASE("loss scaler: growth after growth_interval clean steps in a row, restarted by an overflow") {
  LossScalerState st;
  LossScaler s(st, {.init_scale = 8.f, .growth_interval = 3});
  s.update(false);
  s.update(false);
  CHECK(st.scale == 8.f);
  s.update(true);  // the run of clean steps restarts
  CHECK(st.scale == 4.f);
  s.update(false);
  s.update(false);
  CHECK(st.scale == 4.f);
  s.update(false);
  CHECK(st.scale == 8.f);
  CHECK(st.growth_tracker == 0);
  for (int i = 0; i < 3; ++i) s.update(false);
  CHECK(st.scale == 16.f);
  CHECK(st.skipped_steps == 1);
  // The default: 2000 clean steps.
  LossScalerState d;
  LossScaler ds(d);
  for (int i = 0; i < 1999; ++i) ds.update(false);
  CHECK(d.scale == 65536.f);
  ds.update(false);
  CHECK(d.scale == 131072.f);
  // Never grows to inf.
  LossScalerState big{.scale = 0x1p127f};
  LossScaler bs(big, {.growth_interval = 1});
  bs.update(false);
  CHECK(big.scale == 0x1p127f);
}

TEST_CASE("loss scaler: a resumed state is kept, not reset") {
  LossScalerState st{.scale = 1024.f, .growth_tracker = 17, .skipped_steps = 5};
  LossScaler s(st);
  CHECK(s.scale() == 1024.f);
  CHECK(st.growth_tracker == 17);
  CHECK(st.skipped_steps == 5);
}
