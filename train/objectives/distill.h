// DeiT distillation (Touvron et al. 2021, facebookresearch/deit losses.py DistillationLoss).
//
// A distilled DeiT has two heads: head(x[:, 0]) on the class token and head_dist(x[:, 1]) on
// the distillation token. In training the class head learns the labels and the distillation
// head learns a frozen teacher's predictions on the same (augmented, mixed) batch:
//
//   loss = (1 − α)·CE(cls_logits, targets) + α·D(dist_logits, teacher_logits)
//
//   hard:  D = CE(dist_logits, argmax_c teacher_logits)           (batch mean, no smoothing)
//   soft:  D = KL(softmax(t/T) ‖ softmax(s/T))·T² / (B·C)         (s = dist_logits, t = teacher)
//
// `targets` are what the trainer uses without distillation: the labels with label smoothing,
// or mixup/cutmix's soft rows; they enter the base term only (the teacher's argmax is a plain
// hard label). The soft term divides the KL summed over the batch by B·C, the number of
// logits, as DeiT's F.kl_div(..., reduction='sum', log_target=True)·T²/outputs_kd.numel()
// does (not by B: the term is C times smaller than the per-sample KL).
// At inference a distilled DeiT averages its two heads (Model::forward).
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/model.h"
#include "train/config/experiment_config.h"

namespace sima {

// ---- the losses ------------------------------------------------------------------------

// s (B, C) student logits, t (B, C) teacher logits -> () KL(softmax(t/T) ‖ softmax(s/T))·T²/(B·C).
// One node with a hand-derived backward; the gradient flows into s only (t is a target).
Tensor soft_distillation_kl(const Tensor& student_logits, const Tensor& teacher_logits, float tau);

// argmax over classes of each row of teacher logits (B, C) -> (B) labels (the first on ties).
std::vector<int64_t> teacher_labels(const Tensor& teacher_logits);

// The distillation term D for `type` hard or soft (see above).
Tensor distillation_term(const Tensor& dist_logits, const Tensor& teacher_logits, const std::string& type,
                         float tau);

// (1 − α)·base_loss + α·D, base_loss the class head's cross-entropy (a 0-d tensor).
Tensor distillation_loss(const Tensor& base_loss, const Tensor& dist_logits, const Tensor& teacher_logits,
                         const DistillConfig& cfg);

// ---- the teacher -----------------------------------------------------------------------

// A frozen teacher: any checkpoint load_checkpoint rebuilds (DeiT, XCiT, CvT), in eval mode,
// run without a graph. The constructor checks it against the student and fails with one
// line naming distill.teacher: a missing or unreadable file, another number of classes,
// other class names (when both the checkpoint and the student's data have them), another
// channel count or input size. A different input normalisation (mean/std) is converted
// exactly, per channel, from the student's to the teacher's.
class DistillTeacher {
 public:
  // `classes`: the student's class names ({} = do not compare names).
  DistillTeacher(const std::string& path, const ModelConfig& student, const std::vector<std::string>& classes = {});

  // images (B, in_chans, H, W), normalised for the student -> teacher logits (B, num_classes).
  Tensor logits(const Tensor& student_images);

  Model& model() { return *model_; }
  const std::string& path() const { return path_; }
  int64_t bytes() const { return bytes_; }
  const std::string& crc32() const { return crc32_; }  // 8 hex digits (zlib crc32 of the file)
  // {"path": ..., "bytes": ..., "crc32": ..., "arch": ..., "name": ...} for run metadata.
  nlohmann::json describe() const;

 private:
  std::shared_ptr<Model> model_;
  std::string path_, crc32_;
  int64_t bytes_ = 0;
  // x_teacher = x_student·scale_c + shift_c per channel; identity when the normalisations match.
  std::vector<float> scale_, shift_;
  bool renormalize_ = false;
};

// zlib crc32 of a whole file as 8 lower-case hex digits (sima::Error naming the file if unreadable).
std::string file_crc32(const std::string& path);

}  // namespace sima
