// SGD / AdamW against values worked out by hand and against torch.optim (bit for bit), the
// per-parameter state (undefined grads, late first updates), state save/load round trips and
// errors, gradient clipping against torch.nn.utils.clip_grad_norm_, no-decay groups.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "core/error.h"
#include "testing.h"
#include "train/optim/optim.h"

using namespace sima;
using namespace sima::testing;

namespace {

// A named leaf parameter with the given values (and shape).
std::pair<std::string, Tensor> param(const std::string& name, const std::vector<float>& v, const Shape& s) {
  Tensor t = from_vector(v, s);
  t.requires_grad_(true);
  return {name, t};
}
std::pair<std::string, Tensor> param(const std::string& name, const std::vector<float>& v) {
  return param(name, v, Shape{static_cast<int64_t>(v.size())});
}
void set_grad(const Tensor& p, const std::vector<float>& g) { p.set_grad(from_vector(g, p.shape())); }
std::vector<ParamGroup> one_group(std::vector<std::pair<std::string, Tensor>> params) {
  ParamGroup g;
  g.params = std::move(params);
  return {g};
}
// Every element equal, bit for bit.
void check_exact(const Tensor& got, const std::vector<float>& want) {
  REQUIRE(got.numel() == static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("element " << i << ": got " << got.data()[i] << ", want " << want[i]);
    CHECK(got.data()[i] == want[i]);
  }
}
Tensor find_state(const std::vector<std::pair<std::string, Tensor>>& st, const std::string& name) {
  for (auto& [n, t] : st)
    if (n == name) return t;
  return Tensor();
}

}  // namespace

// ---- SGD by hand ----------------------------------------------------------------------

TEST_CASE("SGD: plain, momentum, nesterov, dampening, weight decay by hand") {
  SUBCASE("plain: p ← p − lr·g") {
    auto w = param("w", {1.f, -2.f});
    SGD opt(one_group({w}), {.lr = 0.1});
    set_grad(w.second, {0.5f, 0.25f});
    opt.step();  // 1 − 0.05 = 0.95, −2 − 0.025 = −2.025
    check_close(w.second, {0.95f, -2.025f}, 1e-6f, 0.f);
    opt.step();  // same gradient again: 0.9, −2.05
    check_close(w.second, {0.9f, -2.05f}, 1e-6f, 0.f);
    CHECK(opt.step_count() == 2);
    CHECK(opt.state().size() == 1);  // only "step": no momentum buffer without momentum
  }
  SUBCASE("momentum 0.9") {
    auto w = param("w", {1.f});
    SGD opt(one_group({w}), {.lr = 0.1, .momentum = 0.9});
    set_grad(w.second, {1.f});
    opt.step();  // b = g = 1; p = 1 − 0.1 = 0.9
    check_close(w.second, {0.9f}, 1e-6f, 0.f);
    set_grad(w.second, {0.5f});
    opt.step();  // b = 0.9·1 + 0.5 = 1.4; p = 0.9 − 0.14 = 0.76
    check_close(w.second, {0.76f}, 1e-6f, 0.f);
    check_close(find_state(opt.state(), "momentum_buffer.w"), {1.4f}, 1e-6f, 0.f);
  }
  SUBCASE("nesterov") {
    auto w = param("w", {1.f});
    SGD opt(one_group({w}), {.lr = 0.1, .momentum = 0.9, .nesterov = true});
    set_grad(w.second, {1.f});
    opt.step();  // b = 1; d = g + 0.9·b = 1.9; p = 1 − 0.19 = 0.81
    check_close(w.second, {0.81f}, 1e-6f, 0.f);
    set_grad(w.second, {0.5f});
    opt.step();  // b = 1.4; d = 0.5 + 0.9·1.4 = 1.76; p = 0.81 − 0.176 = 0.634
    check_close(w.second, {0.634f}, 1e-6f, 0.f);
  }
  SUBCASE("dampening 0.5: not applied to the first step") {
    auto w = param("w", {1.f});
    SGD opt(one_group({w}), {.lr = 0.1, .momentum = 0.9, .dampening = 0.5});
    set_grad(w.second, {1.f});
    opt.step();  // b = g = 1 (undamped); p = 0.9
    check_close(w.second, {0.9f}, 1e-6f, 0.f);
    set_grad(w.second, {0.5f});
    opt.step();  // b = 0.9·1 + 0.5·0.5 = 1.15; p = 0.9 − 0.115 = 0.785
    check_close(w.second, {0.785f}, 1e-6f, 0.f);
  }
  SUBCASE("weight decay 0.1, and a group with wd_scale 0") {
    auto w = param("w", {1.f}), b = param("b", {1.f});
    auto groups = one_group({w});
    ParamGroup nd;
    nd.params = {b};
    nd.wd_scale = 0.0;
    groups.push_back(nd);
    SGD opt(groups, {.lr = 0.1, .weight_decay = 0.1});
    CHECK(opt.param_groups()[0].weight_decay == 0.1);
    CHECK(opt.param_groups()[1].weight_decay == 0.0);
    set_grad(w.second, {1.f});
    set_grad(b.second, {1.f});
    opt.step();  // w: d = 1 + 0.1·1 = 1.1 → 0.89; b: d = 1 → 0.9
    check_close(w.second, {0.89f}, 1e-6f, 0.f);
    check_close(b.second, {0.9f}, 1e-6f, 0.f);
    set_grad(w.second, {0.f});
    set_grad(b.second, {0.f});
    opt.step();  // w: d = 0.1·0.89 = 0.089 → 0.8811; b unchanged
    check_close(w.second, {0.8811f}, 1e-6f, 0.f);
    check_close(b.second, {0.9f}, 1e-6f, 0.f);
  }
  CHECK(error_message([] {
          SGD(one_group({param("w", {1.f})}), {.momentum = 0.9, .dampening = 0.1, .nesterov = true});
        }) ==
        "SGD: nesterov momentum requires momentum > 0 and dampening = 0");
  CHECK(error_message([] { SGD(one_group({param("w", {1.f})}), {.lr = -1.0}); }) == "SGD: lr -1 must be >= 0");
}

// ---- SGD against torch ------------------------------------------------------------------

// Reference values printed by torch 1.13 (Debian python3-torch) on CPU:
//   W0 = [[0.5, -1.0], [1.5, 0.25]]
//   G = [[[0.1, 0.2], [-0.3, 0.4]], [[0.05, -0.1], [0.2, 0.3]], [[-0.2, 0.1], [0.1, -0.05]]]
//   for cfg in [dict(momentum=0.9, dampening=0.25, weight_decay=0.01, nesterov=False),
//               dict(momentum=0.9, dampening=0.0, weight_decay=0.01, nesterov=True)]:
//       w = torch.tensor(W0, requires_grad=True)
//       opt = torch.optim.SGD([w], lr=0.1, foreach=False, **cfg)
//       for k in range(3):
//           if k == 2: opt.param_groups[0]['lr'] = 0.05
//           w.grad = torch.tensor(G[k]); opt.step()
//       print(w, opt.state[w]['momentum_buffer'])      # as '%.9g'
TEST_CASE("SGD matches torch.optim.SGD bit for bit (3 steps, lr changed before the third)") {
  const std::vector<std::vector<float>> G = {
      {0.1f, 0.2f, -0.3f, 0.4f}, {0.05f, -0.1f, 0.2f, 0.3f}, {-0.2f, 0.1f, 0.1f, -0.05f}};
  auto run = [&](const SGDOptions& o) {
    auto w = param("w", {0.5f, -1.f, 1.5f, 0.25f}, Shape{2, 2});
    SGD opt(one_group({w}), o);
    for (int k = 0; k < 3; ++k) {
      if (k == 2) opt.set_lr(0.05);
      set_grad(w.second, G[k]);
      opt.step();
    }
    return std::pair{w.second, find_state(opt.state(), "momentum_buffer.w")};
  };
  SUBCASE("momentum 0.9, dampening 0.25, weight decay 0.01") {
    auto [w, buf] = run({.lr = 0.1, .momentum = 0.9, .dampening = 0.25, .weight_decay = 0.01});
    check_exact(w, {0.477149189f, -1.03517652f, 1.5379535f, 0.126189068f});
    check_exact(buf, {-0.0243263915f, 0.146812975f, 0.00100239739f, 0.493572295f});
  }
  SUBCASE("nesterov, weight decay 0.01") {
    auto [w, buf] = run({.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
    check_exact(w, {0.473648161f, -1.0414983f, 1.52698147f, 0.061371997f});
    check_exact(buf, {-0.0610182285f, 0.144269884f, 0.0785001665f, 0.548422635f});
  }
}

// ---- AdamW --------------------------------------------------------------------------------

TEST_CASE("AdamW by hand: bias-corrected first steps move by lr, decoupled weight decay") {
  // p = 1, g = 0.5 every step, lr 0.1, wd 0.1 (group 0) / wd_scale 0 (group 1).
  // step 1: p·(1 − 0.1·0.1) = 0.99; m = 0.1·0.5 = 0.05, v = 0.001·0.25 = 0.00025;
  //         m̂ = m / 0.1 = 0.5, √v̂ = √(v / 0.001) = 0.5 → p = 0.99 − 0.1·0.5/(0.5 + 1e-8) ≈ 0.89
  // step 2: m = 0.9·0.05 + 0.05 = 0.095, m̂ = 0.095/0.19 = 0.5; v = 0.999·0.00025 + 0.00025
  //         = 0.00049975, v̂ = v/0.001999 = 0.25 → p = 0.89·0.99 − 0.1 = 0.7811
  auto w = param("w", {1.f}), b = param("b", {1.f});
  auto groups = one_group({w});
  ParamGroup nd;
  nd.params = {b};
  nd.wd_scale = 0.0;
  groups.push_back(nd);
  AdamW opt(groups, {.lr = 0.1, .weight_decay = 0.1});
  for (int k = 0; k < 2; ++k) {
    set_grad(w.second, {0.5f});
    set_grad(b.second, {0.5f});
    opt.step();
  }
  check_close(w.second, {0.7811f}, 1e-6f, 0.f);
  check_close(b.second, {0.8f}, 1e-6f, 0.f);  // 1 − 0.1 − 0.1
  const auto st = opt.state();
  check_close(find_state(st, "exp_avg.w"), {0.095f}, 1e-8f, 0.f);
  check_close(find_state(st, "exp_avg_sq.w"), {0.00049975f}, 1e-10f, 0.f);
  check_exact(find_state(st, "step.w"), {2.f});
  check_exact(find_state(st, "step"), {2.f});
}

// Reference values printed by torch 1.13 (Debian python3-torch) on CPU:
//   w = torch.tensor([[0.5, -0.25, 1.0], [2.0, -1.5, 0.125]], requires_grad=True)
//   late = torch.tensor([1.0, -1.0], requires_grad=True)
//   b = torch.tensor([0.1, -0.2, 0.3], requires_grad=True)
//   opt = torch.optim.AdamW([{'params': [w, late], 'weight_decay': 0.1},
//                            {'params': [b], 'weight_decay': 0.0}],
//                           lr=0.01, betas=(0.9, 0.999), eps=1e-8, foreach=False)
//   for k, lr in enumerate([0.01, 0.005, 0.02]):
//       for g in opt.param_groups: g['lr'] = lr
//       w.grad, b.grad = torch.tensor(GW[k]), torch.tensor(GB[k])
//       late.grad = None if GL[k] is None else torch.tensor(GL[k])
//       opt.step()
//   print each tensor and opt.state[t]['exp_avg'], ['exp_avg_sq'], ['step']   # as '%.9g'
// with GW, GL, GB the gradients below. `late` has no gradient at step 1, so its own step
// count is 2 at the end and its first update is bias-corrected as t = 1.
TEST_CASE("AdamW matches torch.optim.AdamW bit for bit (3 steps, 2 groups, lr changed, a late parameter)") {
  const std::vector<std::vector<float>> GW = {{0.1f, -0.2f, 0.3f, 0.05f, 0.f, -0.4f},
                                              {-0.1f, 0.1f, 0.2f, 0.3f, -0.05f, 0.1f},
                                              {0.2f, 0.3f, -0.1f, 0.f, 0.1f, 0.2f}};
  const std::vector<std::vector<float>> GL = {{}, {0.5f, -0.25f}, {0.125f, 0.75f}};
  const std::vector<std::vector<float>> GB = {{1.f, -2.f, 0.5f}, {0.5f, 0.25f, -1.f}, {-0.5f, 1.f, 0.f}};
  auto w = param("w", {0.5f, -0.25f, 1.f, 2.f, -1.5f, 0.125f}, Shape{2, 3});
  auto late = param("late", {1.f, -1.f});
  auto b = param("b", {0.1f, -0.2f, 0.3f});
  auto groups = one_group({w, late});
  ParamGroup nd;
  nd.params = {b};
  nd.wd_scale = 0.0;
  groups.push_back(nd);
  AdamW opt(groups, {.lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1});
  const double lrs[3] = {0.01, 0.005, 0.02};
  for (int k = 0; k < 3; ++k) {
    opt.set_lr(lrs[k]);
    set_grad(w.second, GW[k]);
    set_grad(b.second, GB[k]);
    if (GL[k].empty()) late.second.zero_grad();
    else set_grad(late.second, GL[k]);
    opt.step();
    if (k == 0) {
      check_exact(late.second, {1.f, -1.f});  // no gradient: untouched
      CHECK_FALSE(find_state(opt.state(), "exp_avg.late").defined());
    }
  }
  check_exact(w.second, {0.478574514f, -0.245609641f, 0.970648587f, 1.96576965f, -1.4973278f, 0.137829259f});
  check_exact(late.second, {0.9758991f, -1.0023948f});
  check_exact(b.second, {0.0774050057f, -0.184892595f, 0.297490507f});
  const auto st = opt.state();
  check_exact(find_state(st, "exp_avg.w"),
              {0.0191000011f, 0.0228000004f, 0.0322999991f, 0.0310500022f, 0.00549999997f, -0.00340000074f});
  check_exact(find_state(st, "exp_avg_sq.w"), {5.99700143e-05f, 0.000139910044f, 0.00013978011f, 9.24050109e-05f,
                                               1.24975004e-05f, 0.000209670179f});
  check_exact(find_state(st, "exp_avg.late"), {0.0574999973f, 0.0525000021f});
  check_exact(find_state(st, "exp_avg_sq.late"), {0.000265375013f, 0.000624937529f});
  check_exact(find_state(st, "exp_avg.b"), {0.076000005f, -0.0394999757f, -0.0495000035f});
  check_exact(find_state(st, "exp_avg_sq.b"), {0.0014977511f, 0.00505444221f, 0.00124850031f});
  check_exact(find_state(st, "step.w"), {3.f});
  check_exact(find_state(st, "step.late"), {2.f});
  check_exact(find_state(st, "step"), {3.f});
}

TEST_CASE("AdamW on a large tensor (parallel loop) equals the small-tensor result element by element") {
  // 100 003 elements run through parallel_for in chunks; each element must still get exactly
  // the update it gets alone (the loop has no cross-element arithmetic).
  const int64_t n = 100003;
  Tensor big = uniform_leaf(Shape{n}, -1.f, 1.f, 5);
  Tensor g = uniform_leaf(Shape{n}, -0.1f, 0.1f, 6, false);
  AdamW opt(one_group({{"big", big}}), {.lr = 0.01, .weight_decay = 0.05});
  const std::vector<int64_t> probe = {0, 1, 4097, 50001, n - 1};
  std::vector<Tensor> small;
  std::vector<std::unique_ptr<AdamW>> small_opts;
  for (int64_t i : probe) {
    auto p = param("p", {big.data()[i]});
    small.push_back(p.second);
    small_opts.push_back(std::make_unique<AdamW>(one_group({p}), AdamWOptions{.lr = 0.01, .weight_decay = 0.05}));
  }
  for (int k = 0; k < 2; ++k) {
    big.set_grad(g);
    opt.step();
    for (size_t j = 0; j < probe.size(); ++j) {
      set_grad(small[j], {g.data()[probe[j]]});
      small_opts[j]->step();
    }
  }
  for (size_t j = 0; j < probe.size(); ++j) CHECK(big.data()[probe[j]] == small[j].data()[0]);
}

// ---- per-parameter state ------------------------------------------------------------------

TEST_CASE("a parameter without a gradient is untouched and has no state") {
  auto w = param("w", {1.f, 2.f}), frozen = param("frozen", {3.f, 4.f});
  SGD opt(one_group({w, frozen}), {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.1});
  set_grad(w.second, {1.f, 1.f});
  opt.step();
  opt.step();
  check_exact(frozen.second, {3.f, 4.f});
  const auto st = opt.state();
  CHECK(find_state(st, "momentum_buffer.w").defined());
  CHECK_FALSE(find_state(st, "momentum_buffer.frozen").defined());
  CHECK(st.size() == 2);  // step + momentum_buffer.w
  opt.zero_grad();
  CHECK_FALSE(w.second.grad().defined());
}

namespace {

// Three parameters; "c" gets a gradient only from step 3 on. Gradients depend on the values
// and the step, so any difference in state shows up in the parameters.
struct Problem {
  std::vector<std::pair<std::string, Tensor>> params = {param("a", {0.5f, -1.f, 2.f, 0.25f}, Shape{2, 2}),
                                                        param("b", {0.1f, -0.3f}), param("c", {1.f, 1.5f})};
  void grads(int step) {
    for (size_t i = 0; i < params.size(); ++i) {
      const Tensor& p = params[i].second;
      if (i == 2 && step < 3) {
        p.zero_grad();
        continue;
      }
      Tensor g = empty(p.shape());
      for (int64_t j = 0; j < p.numel(); ++j) g.data()[j] = std::sin(3.f * p.data()[j] + step) + 0.1f * j;
      p.set_grad(g);
    }
  }
  std::vector<ParamGroup> groups() {
    ParamGroup g0, g1;
    g0.params = {params[0], params[2]};
    g1.params = {params[1]};
    g1.wd_scale = 0.0;
    g1.lr_scale = 0.5;
    return {g0, g1};
  }
  Problem clone_values() const {
    Problem q;
    for (size_t i = 0; i < params.size(); ++i)
      std::copy(params[i].second.data(), params[i].second.data() + params[i].second.numel(), q.params[i].second.data());
    return q;
  }
};

template <class Opt, class Options>
void check_round_trip(const Options& o) {
  Problem p;
  Opt opt(p.groups(), o);
  for (int s = 1; s <= 2; ++s) {
    opt.set_lr(0.1 / s);
    p.grads(s);
    opt.step();
  }
  const auto saved = opt.state();
  CHECK(find_state(saved, "step").item() == 2.f);
  for (auto& [n, t] : saved) CHECK_FALSE(n.ends_with(".c"));  // c has had no gradient yet
  Problem q = p.clone_values();
  // Continue the first run for two steps.
  for (int s = 3; s <= 4; ++s) {
    opt.set_lr(0.1 / s);
    p.grads(s);
    opt.step();
  }
  // Restore into a fresh optimizer and take the same two steps.
  Opt fresh(q.groups(), o);
  fresh.load_state(saved);
  CHECK(fresh.step_count() == 2);
  for (int s = 3; s <= 4; ++s) {
    fresh.set_lr(0.1 / s);
    q.grads(s);
    fresh.step();
  }
  for (size_t i = 0; i < p.params.size(); ++i) {
    INFO(p.params[i].first);
    check_exact(q.params[i].second, to_vector(p.params[i].second));
  }
  const auto a = opt.state(), b = fresh.state();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].first);
    CHECK(a[i].first == b[i].first);
    check_exact(b[i].second, to_vector(a[i].second));
  }
}

}  // namespace

TEST_CASE("state save/load round trip: the restored optimizer continues bit-identically") {
  SUBCASE("AdamW") { check_round_trip<AdamW>(AdamWOptions{.lr = 0.1, .weight_decay = 0.05}); }
  SUBCASE("SGD nesterov") {
    check_round_trip<SGD>(SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-4, .nesterov = true});
  }
}

TEST_CASE("state is a snapshot; load_state copies") {
  auto w = param("w", {1.f});
  AdamW opt(one_group({w}), {.lr = 0.1});
  set_grad(w.second, {1.f});
  opt.step();
  const auto st = opt.state();
  const float m1 = find_state(st, "exp_avg.w").item();
  opt.step();
  CHECK(find_state(st, "exp_avg.w").item() == m1);  // not moved on by the second step
  opt.load_state(st);
  find_state(st, "exp_avg.w").data()[0] = 123.f;  // the caller's tensor is not the optimizer's
  CHECK(find_state(opt.state(), "exp_avg.w").item() == m1);
}

TEST_CASE("load_state errors name the entry and change nothing") {
  auto w = param("w", {1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, Shape{2, 3}), b = param("b", {1.f, 2.f});
  AdamW opt(one_group({w, b}), {.lr = 0.1});
  set_grad(w.second, std::vector<float>(6, 0.5f));
  set_grad(b.second, {0.5f, 0.5f});
  opt.step();
  const auto good = opt.state();
  auto with = [&](const std::string& name, const Tensor& t) {
    auto st = good;
    bool replaced = false;
    for (auto& [n, v] : st)
      if (n == name) {
        v = t;
        replaced = true;
      }
    if (!replaced) st.emplace_back(name, t);
    return st;
  };
  auto without = [&](const std::string& name) {
    std::vector<std::pair<std::string, Tensor>> st;
    for (auto& e : good)
      if (e.first != name) st.push_back(e);
    return st;
  };
  const std::vector<std::pair<std::string, std::vector<std::pair<std::string, Tensor>>>> cases = {
      {"optimizer state: entry 'exp_avg.w' has shape (3, 2), expected (2, 3)", with("exp_avg.w", zeros(Shape{3, 2}))},
      {"optimizer state: entry 'step.b' has shape (2), expected (1)", with("step.b", zeros(Shape{2}))},
      {"optimizer state: entry 'exp_avg.head.weight' names no parameter of the optimizer",
       with("exp_avg.head.weight", zeros(Shape{2}))},
      {"optimizer state: unknown entry 'momentum_buffer.w' (expected 'step' or '<kind>.<parameter>' with kind one "
       "of: step, exp_avg, exp_avg_sq)",
       with("momentum_buffer.w", zeros(Shape{2, 3}))},
      {"optimizer state: missing entry 'step'", without("step")},
      {"optimizer state: entry 'step' holds 1.5, not a step count", with("step", from_vector({1.5f}))},
      {"optimizer state: missing entry 'exp_avg_sq.w' (exp_avg.w is present)", without("exp_avg_sq.w")},
  };
  for (auto& [msg, st] : cases) {
    CHECK(error_message([&] { opt.load_state(st); }) == msg);
    const auto now = opt.state();
    REQUIRE(now.size() == good.size());
    for (size_t i = 0; i < now.size(); ++i) check_exact(now[i].second, to_vector(good[i].second));
  }
  // A state without any entry for b: loads, and b's buffers are undefined again.
  auto st = good;
  std::erase_if(st, [](auto& e) { return e.first.ends_with(".b"); });
  opt.load_state(st);
  CHECK_FALSE(find_state(opt.state(), "exp_avg.b").defined());
  CHECK(find_state(opt.state(), "exp_avg.w").defined());
}

TEST_CASE("optimizer construction errors") {
  auto w = param("w", {1.f});
  ParamGroup g0, g1;
  g0.params = {w};
  g1.params = {{"w2", w.second}};
  CHECK(error_message([&] { SGD({g0, g1}, {}); }) ==
        "optimizer: parameter 'w2' is the same tensor as an earlier parameter (in more than one group?)");
  g1.params = {param("w", {2.f})};
  CHECK(error_message([&] { AdamW({g0, g1}, {}); }) == "optimizer: parameter name 'w' appears twice");
  CHECK(error_message([&] { AdamW({g0}, {.beta2 = 1.0}); }) == "AdamW: beta2 1 is not in [0, 1)");
}

// ---- gradient clipping ----------------------------------------------------------------------

// torch 1.13: a.grad = [3, 4], c.grad = [[12]] (total norm 13);
//   torch.nn.utils.clip_grad_norm_([a, c], 6.5) -> 13.0, a.grad = [1.49999988, 1.99999988],
//   c.grad = [[5.99999952]];  clip_grad_norm_([a, c], 20.0) -> 13.0, grads unchanged.
TEST_CASE("clip_grad_norm / grad_norm / clip_grad_per_param") {
  Tensor a = from_vector({0.f, 0.f}), c = from_vector({0.f}, Shape{1, 1}), none = from_vector({1.f});
  a.requires_grad_(true);
  c.requires_grad_(true);
  none.requires_grad_(true);
  auto reset = [&] {
    set_grad(a, {3.f, 4.f});
    set_grad(c, {12.f});
  };
  reset();
  CHECK(grad_norm({a, c, none}) == 13.0);  // √(9 + 16 + 144); no gradient counts as zero
  CHECK(clip_grad_norm({a, c, none}, 6.5) == 13.0);
  // scale 6.5 / (13 + 1e-6) = 0.49999996…
  check_close(a.grad(), {1.49999988f, 1.99999988f}, 1e-7f, 0.f);
  check_close(c.grad(), {5.99999952f}, 1e-7f, 0.f);
  CHECK_FALSE(none.grad().defined());
  CHECK(std::fabs(grad_norm({a, c}) - 6.5) < 1e-5);

  reset();
  CHECK(clip_grad_norm({a, c}, 20.0) == 13.0);  // below max_norm: unchanged, bit for bit
  check_exact(a.grad(), {3.f, 4.f});
  check_exact(c.grad(), {12.f});

  set_grad(a, {std::numeric_limits<float>::infinity(), 1.f});
  CHECK(std::isinf(clip_grad_norm({a, c}, 1.0)));  // non-finite: reported, nothing scaled
  check_exact(c.grad(), {12.f});
  CHECK(error_message([&] { clip_grad_norm({a}, 0.0); }) == "clip_grad_norm: max_norm 0 must be positive");

  // DINO's per-parameter clipping at 6: a (norm 5) stays, c (norm 12) → 12·6/(12 + 1e-6) ≈ 6
  reset();
  const std::vector<double> norms = clip_grad_per_param({a, c, none}, 6.0);
  REQUIRE(norms.size() == 3);
  CHECK(norms[0] == 5.0);
  CHECK(norms[1] == 12.0);
  CHECK(norms[2] == 0.0);
  check_exact(a.grad(), {3.f, 4.f});
  check_close(c.grad(), {5.9999995f}, 1e-6f, 0.f);
}

TEST_CASE("grad_norm of a large gradient (blocked, parallel sum) against a serial double sum") {
  Tensor p = uniform_leaf(Shape{300001}, -1.f, 1.f, 9);
  p.set_grad(uniform_leaf(Shape{300001}, -1.f, 1.f, 10, false));
  double s = 0.0;
  for (int64_t i = 0; i < p.numel(); ++i) s += double(p.grad().data()[i]) * p.grad().data()[i];
  CHECK(std::fabs(grad_norm({p}) - std::sqrt(s)) < 1e-9 * std::sqrt(s));
}

// ---- no-decay groups ------------------------------------------------------------------------

TEST_CASE("param_groups_no_decay: 1-D parameters and the no-decay names go to a wd_scale 0 group") {
  const std::vector<std::string> no_decay = {"pos_embed", "cls_token", "dist_token", "temperature"};
  std::vector<std::pair<std::string, Tensor>> named = {
      {"pos_embed", zeros(Shape{1, 5, 4})},
      {"cls_token", zeros(Shape{1, 1, 4})},
      {"blocks.0.attn.temperature", zeros(Shape{2, 1, 1})},
      {"blocks.0.norm1.weight", zeros(Shape{4})},
      {"head.bias", zeros(Shape{3})},
      {"blocks.0.mlp.fc1.weight", zeros(Shape{8, 4})},
      {"cls_token_proj.weight", zeros(Shape{4, 4})},  // "cls_token" is not a component of it
      {"frozen.weight", zeros(Shape{4, 4})},          // does not require grad: left out
  };
  for (size_t i = 0; i + 1 < named.size(); ++i) named[i].second.requires_grad_(true);
  const auto groups = param_groups_no_decay(named, no_decay);
  REQUIRE(groups.size() == 2);
  CHECK(groups[0].wd_scale == 1.0);
  CHECK(groups[1].wd_scale == 0.0);
  auto names = [](const ParamGroup& g) {
    std::vector<std::string> n;
    for (auto& [name, t] : g.params) n.push_back(name);
    return n;
  };
  CHECK(names(groups[0]) == std::vector<std::string>{"blocks.0.mlp.fc1.weight", "cls_token_proj.weight"});
  CHECK(names(groups[1]) == std::vector<std::string>{"pos_embed", "cls_token", "blocks.0.attn.temperature",
                                                     "blocks.0.norm1.weight", "head.bias"});
  // The groups alias the parameters (the optimizer updates the model's own tensors).
  CHECK(groups[0].params[0].second.impl() == named[5].second.impl());

  CHECK(is_no_decay_name("blocks.0.attn.temperature", no_decay));
  CHECK(is_no_decay_name("stage0.pos_embed", no_decay));
  CHECK(is_no_decay_name("blocks.0.attn.temperature", {"attn.temperature"}));  // a dotted suffix
  CHECK_FALSE(is_no_decay_name("pos_embed_proj.weight", no_decay));
  CHECK_FALSE(is_no_decay_name("blocks.0.attn.qkv.weight", no_decay));

  // Only decayed (or only no-decay) parameters: one group, the empty one dropped.
  const auto only = param_groups_no_decay({named[5]}, no_decay);
  REQUIRE(only.size() == 1);
  CHECK(only[0].wd_scale == 1.0);

  // With AdamW: set_weight_decay reaches group 0 only.
  AdamW opt(groups, {.lr = 1e-3, .weight_decay = 0.05});
  opt.set_weight_decay(0.2);
  CHECK(opt.param_groups()[0].weight_decay == 0.2);
  CHECK(opt.param_groups()[1].weight_decay == 0.0);
}
