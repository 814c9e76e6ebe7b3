// DINO's loss: the fused cross-entropy over view pairs, the teacher temperature
// schedule and the center (see dino_loss.h).
#include "nn/dino_loss.h"

#include <cmath>
#include <limits>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops/elementwise.h"
#include "core/ops/softmax.h"
#include "core/ops/vmath.h"
#include "core/parallel.h"

namespace sima {

namespace {

// Q = Σ_{t < T, t ≠ v} q_t[b] into `out` (K values); returns how many teacher views were summed.
int64_t summed_targets(const float* q, int64_t T, int64_t B, int64_t K, int64_t v, int64_t b, float* out) {
  for (int64_t k = 0; k < K; ++k) out[k] = 0.f;
  int64_t n = 0;
  for (int64_t t = 0; t < T; ++t) {
    if (t == v) continue;  // DINO skips the pairs where student and teacher see the same view
    const float* qt = q + (t * B + b) * K;
    for (int64_t k = 0; k < K; ++k) out[k] += qt[k];
    ++n;
  }
  return n;
}

// One student row r = (v, b) of the forward: z = s_r / τ_s into `z`, Q = Σ_{t≠v} q_t into `Q`
// (K values each), lse = log Σ_k exp(z_k) into `lse`; returns c·lse − Σ_k Q_k z_k.
double dino_row_loss(const float* sr, const float* pq, int64_t T, int64_t B, int64_t K, int64_t r, float tau,
                     float* z, float* Q, float& lse) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t k = 0; k < K; ++k) {
    z[k] = sr[k] / tau;
    m = std::max(m, z[k]);
  }
  double se = 0.0;
  for (int64_t k = 0; k < K; ++k) se += exp_fast(z[k] - m);
  const double l = double(m) + std::log(se);
  lse = static_cast<float>(l);
  summed_targets(pq, T, B, K, r / B, r % B, Q);
  double c = 0.0, qz = 0.0;
  for (int64_t k = 0; k < K; ++k) {
    c += Q[k];
    qz += double(Q[k]) * z[k];
  }
  return c * l - qz;
}

// The backward for the incoming gradient g: dloss/dz_k = (c·softmax(z)_k − Q_k)/(P·B), and
// dz/ds = 1/τ_s. s (V·B, K), q (T·B, K), lse (V·B) as saved by the forward.
Tensor dino_cross_entropy_backward(const Tensor& s, const Tensor& q, const Tensor& lse, int64_t T, int64_t B,
                                   int64_t P, float tau, float g) {
  const int64_t rows = s.size(0), K = s.size(1);
  Tensor ds = empty(s.shape());
  const float scale = g / (float(P * B) * tau);
  const float *ps = s.data(), *pq = q.data(), *pl = lse.data();
  float* pd = ds.data();
  parallel_for(rows, std::max<int64_t>(1, kGrainTranscendental / K), [&](int64_t r0, int64_t r1) {
    std::vector<float> Q(static_cast<size_t>(K));
    for (int64_t r = r0; r < r1; ++r) {
      summed_targets(pq, T, B, K, r / B, r % B, Q.data());
      float c = 0.f;
      for (int64_t k = 0; k < K; ++k) c += Q[size_t(k)];
      const float* sr = ps + r * K;
      float* dr = pd + r * K;
      for (int64_t k = 0; k < K; ++k) dr[k] = scale * (c * exp_fast(sr[k] / tau - pl[r]) - Q[size_t(k)]);
    }
  });
  return ds;
}

}  // namespace

// Forward, per student row r = (v, b) with z = s_r / τ_s and lse = log Σ_k exp(z_k):
//   Σ_{t≠v} Σ_k −q_t,k (z_k − lse) = c·lse − Σ_k Q_k z_k,   Q = Σ_{t≠v} q_t, c = Σ_k Q_k
// (c = the number of teacher views paired with v, as each q_t sums to 1); the loss is the
// sum over rows / (P·B). Saved for backward: s, q and lse per row.
Tensor dino_cross_entropy(const Tensor& student_output, const Tensor& teacher_probs, int64_t T, float tau) {
  check(student_output.dim() == 2 && teacher_probs.dim() == 2 && student_output.size(1) == teacher_probs.size(1),
        "dino_cross_entropy: student output ", student_output.shape(), " and teacher probabilities ",
        teacher_probs.shape(), " must be (V·B, K) and (T·B, K)");
  check(T >= 1 && teacher_probs.size(0) % T == 0 && teacher_probs.size(0) > 0, "dino_cross_entropy: ",
        teacher_probs.size(0), " teacher rows are not ", T, " views of a batch");
  const int64_t B = teacher_probs.size(0) / T, K = student_output.size(1), rows = student_output.size(0);
  check(rows % B == 0 && rows / B >= T && rows / B >= 2, "dino_cross_entropy: ", rows,
        " student rows are not V >= max(2, ", T, ") views of the batch of ", B);
  check(tau > 0.f, "dino_cross_entropy: student_temp must be positive, got ", tau);
  const int64_t V = rows / B, P = T * (V - 1);

  Tensor lse = empty({rows});
  std::vector<double> contrib(size_t(rows), 0.0);
  const float *ps = student_output.data(), *pq = teacher_probs.data();
  float* pl = lse.data();
  parallel_for(rows, std::max<int64_t>(1, kGrainTranscendental / K), [&](int64_t r0, int64_t r1) {
    std::vector<float> z(static_cast<size_t>(K)), Q(static_cast<size_t>(K));
    for (int64_t r = r0; r < r1; ++r)
      contrib[size_t(r)] = dino_row_loss(ps + r * K, pq, T, B, K, r, tau, z.data(), Q.data(), pl[r]);
  });
  double total = 0.0;
  for (double x : contrib) total += x;  // in row order: deterministic at any thread count
  Tensor loss = scalar_tensor(static_cast<float>(total / double(P * B)));

  if (needs_grad(student_output))
    attach_grad_fn(loss, "dino_cross_entropy", {student_output, teacher_probs},
                   [s = student_output.detach(), q = teacher_probs.detach(), lse, T, B, P, tau](const Tensor& g) -> Grads {
                     return {dino_cross_entropy_backward(s, q, lse, T, B, P, tau, g.item()), Tensor()};
                   });
  return loss;
}

// ---- DINOLoss -------------------------------------------------------------------

DINOLoss::DINOLoss(const DINOLossOptions& o) : Module("DINOLoss"), options_(o) {
  check(o.out_dim > 0, "DINOLoss: out_dim must be positive, got ", o.out_dim);
  check(o.ncrops >= 2, "DINOLoss: ncrops must be >= 2 (the two global crops), got ", o.ncrops);
  check(o.warmup_teacher_temp > 0 && o.teacher_temp > 0 && o.student_temp > 0,
        "DINOLoss: temperatures must be positive (warmup_teacher_temp ", o.warmup_teacher_temp, ", teacher_temp ",
        o.teacher_temp, ", student_temp ", o.student_temp, ")");
  check(o.warmup_teacher_temp_epochs >= 0 && o.warmup_teacher_temp_epochs <= o.nepochs,
        "DINOLoss: warmup_teacher_temp_epochs ", o.warmup_teacher_temp_epochs, " must be in [0, nepochs ", o.nepochs,
        "]");
  check(o.center_momentum >= 0 && o.center_momentum <= 1, "DINOLoss: center_momentum ", o.center_momentum,
        " is not in [0, 1]");
  center = register_buffer("center", zeros({1, o.out_dim}));
}

double DINOLoss::teacher_temp(int64_t epoch) const {
  check(epoch >= 0, "DINOLoss: epoch ", epoch, " is negative");
  const int64_t W = options_.warmup_teacher_temp_epochs;
  const double a = options_.warmup_teacher_temp, b = options_.teacher_temp;
  if (epoch >= W) return b;
  // np.linspace(a, b, W)[epoch]: a + epoch·(b − a)/(W − 1), the last one exactly b;
  // np.linspace(a, b, 1) is [a].
  if (W == 1) return a;
  if (epoch == W - 1) return b;
  return a + double(epoch) * ((b - a) / double(W - 1));
}

Tensor DINOLoss::teacher_probs(const Tensor& teacher_output, int64_t epoch) const {
  NoGradGuard no_grad;
  return softmax(div(sub(teacher_output.detach(), center), static_cast<float>(teacher_temp(epoch))), -1);
}

void DINOLoss::update_center(const Tensor& teacher_output) {
  const int64_t R = teacher_output.size(0), K = options_.out_dim;
  const float m = static_cast<float>(options_.center_momentum), one_minus_m = static_cast<float>(1.0 - options_.center_momentum);
  const float* pt = teacher_output.data();
  float* pc = center.data();
  std::vector<double> sums(size_t(K) + 1, 0.0);  // [Σ_rows teacher_output (K), rows]
  for (int64_t k = 0; k < K; ++k) {
    double s = 0.0;
    for (int64_t r = 0; r < R; ++r) s += pt[r * K + k];
    sums[size_t(k)] = s;
  }
  sums[size_t(K)] = double(R);
  if (sum_across) sum_across(sums.data(), K + 1);  // over the ranks' batches
  for (int64_t k = 0; k < K; ++k) {
    const float batch_center = static_cast<float>(sums[size_t(k)] / sums[size_t(K)]);
    pc[k] = pc[k] * m + batch_center * one_minus_m;
  }
}

Tensor DINOLoss::forward(const Tensor& student_output, const Tensor& teacher_output, int64_t epoch,
                         DINOLossStats* stats) {
  const int64_t K = options_.out_dim, V = options_.ncrops;
  check(teacher_output.defined() && teacher_output.dim() == 2 && teacher_output.size(1) == K &&
            teacher_output.size(0) % 2 == 0 && teacher_output.size(0) > 0,
        "DINOLoss: teacher output ", teacher_output.defined() ? teacher_output.shape().str() : "(undefined)",
        " must be (2·B, ", K, ")");
  const int64_t B = teacher_output.size(0) / 2;
  check(student_output.defined() && student_output.shape() == Shape{V * B, K}, "DINOLoss: student output ",
        student_output.defined() ? student_output.shape().str() : "(undefined)", " must be (", V, "·", B, ", ", K,
        ") for ", V, " crops of a batch of ", B);
  const double tau_t = teacher_temp(epoch);
  Tensor q = teacher_probs(teacher_output, epoch);  // (2B, K)
  Tensor loss = dino_cross_entropy(student_output, q, 2, static_cast<float>(options_.student_temp));
  if (stats) {
    // H(q) per row and H of the batch-mean distribution, in double (0·log 0 = 0).
    const float* pq = q.data();
    const int64_t R = 2 * B;
    std::vector<double> mean_q(size_t(K), 0.0);
    double h = 0.0;
    for (int64_t r = 0; r < R; ++r)
      for (int64_t k = 0; k < K; ++k) {
        const double p = pq[r * K + k];
        if (p > 0) h -= p * std::log(p);
        mean_q[size_t(k)] += p / double(R);
      }
    double hb = 0.0;
    for (double p : mean_q)
      if (p > 0) hb -= p * std::log(p);
    stats->loss = loss.item();
    stats->teacher_temp = tau_t;
    stats->teacher_entropy = h / double(R);
    stats->kl = stats->loss - stats->teacher_entropy;
    stats->teacher_batch_entropy = hb;
  }
  update_center(teacher_output);
  return loss;
}

}  // namespace sima
