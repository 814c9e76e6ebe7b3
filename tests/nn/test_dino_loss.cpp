// DINOLoss: a hand-worked case (same-view pairs skipped, the center update, the logged
// entropy and KL), the fused cross-entropy against DINO's pair loop written with
// primitive ops (values and gradients), gradchecks, the teacher temperature schedule,
// errors.
#include <cmath>
#include <tuple>

#include "nn/dino_loss.h"
#include "testing.h"

using namespace sima;
using namespace sima::testing;

namespace {

using Inputs = std::vector<Tensor>;

// DINO's loop, literally: chunk the student by view, skip v == iq, mean over the batch of
// Σ_k −q·log_softmax(s/τ), averaged over the pairs.
Tensor loop_loss(const Tensor& student, const Tensor& q, int64_t T, float tau) {
  const int64_t B = q.size(0) / T, V = student.size(0) / B;
  std::vector<Tensor> s = chunk(div(student, tau), V, 0), t = chunk(q, T, 0);
  Tensor total;
  int64_t n = 0;
  for (int64_t iq = 0; iq < T; ++iq)
    for (int64_t v = 0; v < V; ++v) {
      if (v == iq) continue;
      Tensor l = mean(sum(mul(neg(t[size_t(iq)]), log_softmax(s[size_t(v)], -1)), {-1}));
      total = total.defined() ? add(total, l) : l;
      ++n;
    }
  return div(total, float(n));
}

// Rows of probabilities (R, K) from a seed.
Tensor random_probs(int64_t R, int64_t K, uint64_t seed) {
  Generator g(seed);
  return softmax(mul(randn({R, K}, g), 2.f), -1);
}

DINOLossOptions unit_temps(int64_t K, int64_t ncrops) {
  return {.out_dim = K, .ncrops = ncrops, .warmup_teacher_temp = 1.0, .teacher_temp = 1.0,
          .warmup_teacher_temp_epochs = 0, .nepochs = 10, .student_temp = 1.0, .center_momentum = 0.9};
}

}  // namespace

TEST_CASE("DINOLoss: a hand-worked case, same-view pairs skipped, center update, stats") {
  // B = 1, K = 2, 3 crops (2 global + 1 local), all temperatures 1, center 0.
  // teacher t0 = (0, 0) -> q0 = (1/2, 1/2);  t1 = (ln 3, 0) -> q1 = (3/4, 1/4)
  // student s0 = (0, 0) -> p0 = (1/2, 1/2);  s1 = (ln 3, 0) -> p1 = (3/4, 1/4);  s2 = (0, ln 3) -> p2 = (1/4, 3/4)
  // pairs (t, v): (0,1) (0,2) (1,0) (1,2); CE(q, p) = −Σ q log p:
  //   CE(q0,p1) = CE(q0,p2) = −½(ln ¾ + ln ¼),  CE(q1,p0) = ln 2,  CE(q1,p2) = −(¾ ln ¼ + ¼ ln ¾)
  const double l3 = std::log(3.0), l34 = std::log(0.75), l14 = std::log(0.25);
  const double ce01 = -0.5 * (l34 + l14), ce10 = std::log(2.0), ce12 = -(0.75 * l14 + 0.25 * l34);
  const double expected = (2 * ce01 + ce10 + ce12) / 4.0;  // 0.869691...
  // With the same-view pairs (0,0) and (1,1) it would be different:
  const double h0 = std::log(2.0), h1 = -(0.75 * l34 + 0.25 * l14);
  const double with_same = (2 * ce01 + ce10 + ce12 + h0 + h1) / 6.0;
  REQUIRE(std::fabs(expected - with_same) > 0.05);

  DINOLoss loss(unit_temps(2, 3));
  Tensor teacher = from_vector({0, 0, float(l3), 0}, {2, 2});
  Tensor student = from_vector({0, 0, float(l3), 0, 0, float(l3)}, {3, 2});
  student.requires_grad_();
  DINOLossStats st;
  Tensor l = loss.forward(student, teacher, 0, &st);
  CHECK(l.item() == doctest::Approx(expected).epsilon(1e-5));
  CHECK(expected == doctest::Approx(0.869691).epsilon(1e-5));
  CHECK(st.loss == doctest::Approx(expected).epsilon(1e-5));
  CHECK(st.teacher_entropy == doctest::Approx((h0 + h1) / 2).epsilon(1e-5));
  // KL(q_t ‖ p_v) averaged over the same 4 pairs, directly:
  const double kl = ((ce01 - h0) * 2 + (ce10 - h1) + (ce12 - h1)) / 4.0;
  CHECK(st.kl == doctest::Approx(kl).epsilon(1e-4));
  // H of the batch-mean teacher distribution (5/8, 3/8)
  CHECK(st.teacher_batch_entropy == doctest::Approx(-(0.625 * std::log(0.625) + 0.375 * std::log(0.375))).epsilon(1e-5));
  CHECK(st.teacher_temp == 1.0);
  // center ← 0.9·0 + 0.1·mean(t0, t1) = (0.1·ln3/2, 0), after the loss (which used center 0)
  check_close(loss.center, {float(0.1 * l3 / 2), 0.f}, 1e-6f);
  // A second step sees the updated center and moves it again: c ← 0.9c + 0.1·mean.
  loss.forward(student.detach(), teacher, 0);
  check_close(loss.center, {float(0.9 * 0.1 * l3 / 2 + 0.1 * l3 / 2), 0.f}, 1e-6f);

  // Gradient by hand: dloss/ds_v = (c_v·p_v − Q_v)/(P·B·τ_s), Q_v = Σ_{t≠v} q_t.
  // v0: Q = q1, c = 1 -> (p0 − q1)/4;  v1: Q = q0 -> (p1 − q0)/4;  v2: Q = q0 + q1, c = 2 -> (2p2 − q0 − q1)/4
  l.backward();
  check_close(student.grad(), {(0.5f - 0.75f) / 4, (0.5f - 0.25f) / 4, (0.75f - 0.5f) / 4, (0.25f - 0.5f) / 4,
                               (0.5f - 0.5f - 0.75f) / 4, (1.5f - 0.5f - 0.25f) / 4},
              1e-6f);
}

TEST_CASE("DINOLoss: centering and both temperatures enter as DINO writes them") {
  // loss = loop over pairs with q = softmax((t − c)/τ_t) and s/τ_s.
  const int64_t K = 7, B = 3, V = 4;
  DINOLossOptions o{.out_dim = K, .ncrops = V, .warmup_teacher_temp = 0.04, .teacher_temp = 0.07,
                    .warmup_teacher_temp_epochs = 3, .nepochs = 5, .student_temp = 0.1, .center_momentum = 0.9};
  DINOLoss loss(o);
  Generator g(3);
  Tensor c0 = randn({1, K}, g);
  std::copy(c0.data(), c0.data() + K, loss.center.data());
  Tensor teacher = randn({2 * B, K}, g), student = randn({V * B, K}, g);
  const int64_t epoch = 1;  // τ_t = 0.055
  Tensor q = softmax(div(sub(teacher, c0), 0.055f), -1);
  Tensor expected = loop_loss(student, q, 2, 0.1f);
  Tensor got = loss.forward(student, teacher, epoch);
  CHECK(got.item() == doctest::Approx(expected.item()).epsilon(1e-5));
  // center ← 0.9·c0 + 0.1·mean over the 2B teacher rows
  Tensor expected_center = add(mul(c0, 0.9f), mul(mean(teacher, {0}, true), 0.1f));
  check_close(loss.center, expected_center, 1e-6f);
}

TEST_CASE("dino_cross_entropy: equals DINO's pair loop (values and gradients)") {
  for (auto [T_, V_, B_, K_, tau_] : std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t, float>>{
           {2, 2, 3, 5, 0.1f}, {2, 6, 4, 9, 0.1f}, {2, 3, 1, 33, 0.5f}, {1, 3, 2, 4, 1.f}}) {
    // clang 14 cannot capture a structured binding
    const auto& T = T_;
    const auto& V = V_;
    const auto& B = B_;
    const auto& K = K_;
    const auto& tau = tau_;
    CAPTURE(V);
    CAPTURE(K);
    Tensor q = random_probs(T * B, K, 100 + uint64_t(V));
    Tensor s = randn_leaf({V * B, K}, 200 + uint64_t(K));
    check_same([q, T, tau](const Inputs& in) { return dino_cross_entropy(in[0], q, T, tau); },
               [q, T, tau](const Inputs& in) { return loop_loss(in[0], q, T, tau); }, {s},
               Tolerance{.atol = 2e-5f, .rtol = 2e-4f});
  }
}

TEST_CASE("dino_cross_entropy: gradcheck") {
  Tensor q = random_probs(2 * 2, 5, 31);
  Tensor s = randn_leaf({4 * 2, 5}, 32);
  CHECK_GRADCHECK([q](const Inputs& in) { return dino_cross_entropy(in[0], q, 2, 0.5f); }, Inputs{s});
  // DINO's τ_s = 0.1 (sharper): smaller logits keep the finite differences in range.
  Tensor s2 = uniform_leaf({3 * 2, 5}, -0.3f, 0.3f, 33);
  GradcheckOptions opt;
  opt.eps = 2e-3;
  opt.atol = 4e-3;
  CHECK_GRADCHECK([q](const Inputs& in) { return dino_cross_entropy(in[0], q, 2, 0.1f); }, Inputs{s2}, opt);
  // through DINOLoss.forward (the center moves on every call, so keep momentum 1 here)
  DINOLossOptions o = unit_temps(5, 4);
  o.student_temp = 0.3;
  o.center_momentum = 1.0;
  DINOLoss loss(o);
  Tensor t = randn({2 * 2, 5});
  CHECK_GRADCHECK([&](const Inputs& in) { return loss.forward(in[0], t, 0); }, Inputs{s});
}

TEST_CASE("DINOLoss: teacher temperature schedule (np.linspace warmup, then constant)") {
  DINOLossOptions o{.out_dim = 4, .ncrops = 3, .warmup_teacher_temp = 0.04, .teacher_temp = 0.07,
                    .warmup_teacher_temp_epochs = 3, .nepochs = 10};
  DINOLoss l(o);
  CHECK(l.teacher_temp(0) == doctest::Approx(0.04));
  CHECK(l.teacher_temp(1) == doctest::Approx(0.055));
  CHECK(l.teacher_temp(2) == 0.07);
  CHECK(l.teacher_temp(3) == 0.07);
  CHECK(l.teacher_temp(9) == 0.07);
  CHECK(l.teacher_temp(50) == 0.07);
  o.warmup_teacher_temp_epochs = 1;  // np.linspace(a, b, 1) = [a]
  CHECK(DINOLoss(o).teacher_temp(0) == 0.04);
  CHECK(DINOLoss(o).teacher_temp(1) == 0.07);
  o.warmup_teacher_temp_epochs = 0;  // DINO's default: no warmup
  CHECK(DINOLoss(o).teacher_temp(0) == 0.07);
}

TEST_CASE("DINOLoss: errors name the shapes") {
  DINOLoss loss(unit_temps(4, 3));
  CHECK(error_message([&] { loss.forward(zeros({6, 4}), zeros({3, 4}), 0); }) ==
        "DINOLoss: teacher output (3, 4) must be (2·B, 4)");
  CHECK(error_message([&] { loss.forward(zeros({5, 4}), zeros({2, 4}), 0); }) ==
        "DINOLoss: student output (5, 4) must be (3·1, 4) for 3 crops of a batch of 1");
  CHECK(error_message([] { DINOLoss l(unit_temps(4, 1)); }).find("ncrops must be >= 2") != std::string::npos);
  DINOLossOptions o = unit_temps(4, 3);
  o.warmup_teacher_temp_epochs = 11;
  CHECK(error_message([&] { DINOLoss l(o); }).find("warmup_teacher_temp_epochs 11") != std::string::npos);
}
