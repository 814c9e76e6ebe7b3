// DINO's loss (facebookresearch/dino main_dino.py, DINOLoss): the student's views predict
// the centred, sharpened teacher distribution of the other global views.
//
//   student_output (V·B, K)  the student head's logits for V = 2 + M crops, view-major
//                            (rows [v·B, (v+1)·B) are view v; views 0 and 1 the global ones)
//   teacher_output (2·B, K)  the teacher head's logits for the 2 global crops, no grad
//
//   q_t = softmax((teacher_output_t − center) / τ_t)          t = 0, 1   (detached)
//   p_v = log_softmax(student_output_v / τ_s)                 v = 0 .. V−1
//   loss = 1/P · Σ_t Σ_{v ≠ t} mean_b Σ_k −q_t[b,k] · p_v[b,k],   P = 2(V − 1) pairs
//   then  center ← m·center + (1 − m)·mean over the 2B rows of teacher_output
//
// τ_t per epoch: np.linspace(warmup_teacher_temp, teacher_temp, W) over the first
// W = warmup_teacher_temp_epochs epochs, then teacher_temp. τ_s = student_temp (0.1).
//
// What shows collapse (the DINO paper's Fig. 7): the teacher's entropy H(q) (→ 0 when each
// image maps to one prototype, → log K when the outputs are uniform) and the KL between
// teacher and student (→ 0 in either collapse). Since every teacher view is paired with
// the same V − 1 student views, mean-over-pairs CE = mean H(q) + mean KL, so KL = loss − H.
#pragma once
#include <cstdint>

#include "core/ops/sync_batch_norm.h"  // SumAcrossFn
#include "nn/module.h"

namespace sima {

// The cross-entropy part as one fused node. student_output (V·B, K) requires grad or not;
// teacher_probs (T·B, K) with T <= V rows of probabilities (no gradient flows to them).
// Returns the 0-d loss above (pairs (t, v) with v ≠ t, P = T·(V − 1)); B is
// teacher_probs.size(0) / T. Backward (z = s/τ_s, p = softmax(z), Q_v = Σ_{t≠v} q_t,
// c_v = Σ_k Q_v,k):   dloss/ds_v,b,k = (c_v,b · p_v,b,k − Q_v,b,k) / (P·B·τ_s).
Tensor dino_cross_entropy(const Tensor& student_output, const Tensor& teacher_probs, int64_t n_teacher_views,
                          float student_temp);

struct DINOLossOptions {
  int64_t out_dim = 65536;  // K
  int64_t ncrops = 10;      // V = 2 global + local_crops_number
  double warmup_teacher_temp = 0.04;
  double teacher_temp = 0.04;
  int64_t warmup_teacher_temp_epochs = 0;
  int64_t nepochs = 100;
  double student_temp = 0.1;
  double center_momentum = 0.9;
};

// Figures of one loss evaluation, for the logs (all computed with the center before its update).
struct DINOLossStats {
  double loss = 0.0;
  double teacher_temp = 0.0;
  double teacher_entropy = 0.0;        // mean over the 2B teacher rows of H(q) (nats)
  double kl = 0.0;                     // mean over pairs and batch of KL(q_t ‖ softmax(s_v/τ_s)) = loss − H
  double teacher_batch_entropy = 0.0;  // H(mean over the 2B rows of q): ~0 when every image
                                       // gets the same distribution
};

// A Module so that its buffer "center" (1, K) is saved and restored with the run, as DINO
// saves dino_loss.state_dict(). The center is updated in place (aliases stay valid).
class DINOLoss : public Module {
 public:
  explicit DINOLoss(const DINOLossOptions& options);
  using Module::forward;
  // The loss (0-d, differentiable w.r.t. student_output); then updates the center from
  // teacher_output, as DINOLoss.forward does. Shapes are checked (errors name them).
  Tensor forward(const Tensor& student_output, const Tensor& teacher_output, int64_t epoch,
                 DINOLossStats* stats = nullptr);
  // τ_t of an epoch (epochs past nepochs keep teacher_temp).
  double teacher_temp(int64_t epoch) const;
  // softmax((teacher_output − center) / τ_t), no graph.
  Tensor teacher_probs(const Tensor& teacher_output, int64_t epoch) const;
  // center ← m·center + (1 − m)·(Σ_rows teacher_output) / rows.
  void update_center(const Tensor& teacher_output);
  const DINOLossOptions& options() const { return options_; }
  Tensor center;  // (1, K), zeros at the start
  // Data-parallel runs (train/distributed/distributed.h): sums the teacher-output column sums and
  // the row count over the ranks, so the center moves by the mean of the GLOBAL batch, as DINO's
  // dist.all_reduce(batch_center). Unset: this process's batch.
  SumAcrossFn sum_across;

 private:
  DINOLossOptions options_;
};

}  // namespace sima
