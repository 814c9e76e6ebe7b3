#include "train/objectives/distill.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include "core/autograd.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/ops.h"
#include "models/io/checkpoint.h"
#include "models/io/pth.h"
#include "models/quantized.h"
#include "models/io/safetensors.h"
#include "train/eval/evaluate.h"

namespace sima {

using json = nlohmann::json;

// ---- soft distillation: KL at temperature T ------------------------------------------
// s, t (B, C); per row, log q = log_softmax(s/T), log p = log_softmax(t/T):
//   loss = T²/(B·C) · Σ_b Σ_c p_bc · (log p_bc − log q_bc)
// (F.kl_div(log q, log p, reduction='sum', log_target=True)·T²/numel, DeiT's form).
// Backward, for one row (p does not depend on s; Σ_c p_c = 1):
//   ∂/∂s_j Σ_c p_c (log p_c − log q_c) = −Σ_c p_c ∂ log q_c/∂s_j = −Σ_c p_c (δ_cj − q_j)/T = (q_j − p_j)/T
//   => ds_bj = g · T/(B·C) · (q_bj − p_bj)
Tensor soft_distillation_kl(const Tensor& s, const Tensor& t, float tau) {
  check(s.dim() == 2, "soft_distillation_kl: student logits must be (B, C), got shape ", s.shape());
  check(t.shape() == s.shape(), "soft_distillation_kl: teacher logits of shape ", t.shape(), " for student logits of shape ",
        s.shape(), " (they must match)");
  check(tau > 0.f && std::isfinite(tau), "soft_distillation_kl: tau must be positive, got ", tau);
  const int64_t B = s.size(0), C = s.size(1);
  check(B > 0 && C > 0, "soft_distillation_kl: empty logits ", s.shape());
  Tensor q, p;  // softmax(s/T), softmax(t/T), saved for the backward
  double total = 0.0;  // Σ p·(log p − log q), serial in double: deterministic
  {
    NoGradGuard no_grad;
    Tensor log_q = log_softmax(mul(s, 1.f / tau), 1), log_p = log_softmax(mul(t, 1.f / tau), 1);
    q = exp(log_q);
    p = exp(log_p);
    const float *lq = log_q.data(), *lp = log_p.data(), *pp = p.data();
    for (int64_t i = 0; i < B * C; ++i) total += double(pp[i]) * (double(lp[i]) - double(lq[i]));
  }
  Tensor loss = scalar_tensor(float(total * double(tau) * double(tau) / double(B * C)));
  if (needs_grad(s))
    attach_grad_fn(loss, "soft_distillation_kl", {s}, [q, p, k = tau / float(B * C)](const Tensor& g) -> Grads {
      // g () -> ds (B, C)
      Tensor ds = empty(q.shape());
      const float gk = g.data()[0] * k;
      const float *pq = q.data(), *pp = p.data();
      float* pd = ds.data();
      for (int64_t i = 0; i < q.numel(); ++i) pd[i] = gk * (pq[i] - pp[i]);
      return {ds};
    });
  return loss;
}

std::vector<int64_t> teacher_labels(const Tensor& teacher_logits) {
  check(teacher_logits.dim() == 2, "teacher_labels: teacher logits must be (B, C), got shape ", teacher_logits.shape());
  return argmax(teacher_logits, 1);
}

Tensor distillation_term(const Tensor& dist_logits, const Tensor& teacher_logits, const std::string& type, float tau) {
  check(teacher_logits.shape() == dist_logits.shape(), "distillation: teacher logits of shape ", teacher_logits.shape(),
        " for student logits of shape ", dist_logits.shape(), " (they must match)");
  if (type == "hard") return cross_entropy(dist_logits, teacher_labels(teacher_logits));  // no smoothing
  if (type == "soft") return soft_distillation_kl(dist_logits, teacher_logits, tau);
  fail("distill.type: '", type, "' is not one of: hard, soft");
}

Tensor distillation_loss(const Tensor& base_loss, const Tensor& dist_logits, const Tensor& teacher_logits,
                         const DistillConfig& cfg) {
  check(base_loss.numel() == 1, "distillation_loss: the base loss must be a scalar, got shape ", base_loss.shape());
  const float alpha = float(cfg.alpha);
  Tensor d = distillation_term(dist_logits, teacher_logits, cfg.type, float(cfg.tau));
  return add(mul(base_loss, 1.f - alpha), mul(d, alpha));
}

// ---- the teacher -------------------------------------------------------------------------

std::string file_crc32(const std::string& path) {
  std::vector<uint8_t> bytes = read_file(path);
  uLong crc = crc32(0L, Z_NULL, 0);
  for (size_t done = 0; done < bytes.size();) {  // zlib takes uInt lengths: chunks of 1 GiB
    const size_t n = std::min<size_t>(bytes.size() - done, size_t(1) << 30);
    crc = crc32(crc, bytes.data() + done, uInt(n));
    done += n;
  }
  char hex[16];
  std::snprintf(hex, sizeof hex, "%08lx", static_cast<unsigned long>(crc & 0xffffffffUL));
  return hex;
}

DistillTeacher::DistillTeacher(const std::string& path, const ModelConfig& student,
                               const std::vector<std::string>& classes)
    : path_(path) {
  std::error_code ec;
  check(std::filesystem::is_regular_file(path, ec), "distill.teacher: ", path,
        " does not exist or is not a file (train the teacher first: e.g. build/bin/sima-train --config "
        "configs/quickstart.json writes runs/quickstart/best.safetensors)");
  std::map<std::string, std::string> meta;
  try {
    bytes_ = file_size(path);
    crc32_ = file_crc32(path);
    if (is_pth_path(path)) {  // an upstream torch.save file, through sima-eval's reader and allow-list
      const LoadedCheckpoint loaded = load_checkpoint_for_eval(path);
      model_ = loaded.model;
      if (!loaded.info.classes.empty()) meta["classes"] = json(loaded.info.classes).dump();
    } else {
      check(!is_quantized_checkpoint(read_safetensors_metadata(path)), path,
            " is a quantized checkpoint (int8 weights, sima-convert --quantize): training needs float32 weights; "
            "give the float32 checkpoint it was made from");
      model_ = load_checkpoint(path);
      meta = read_safetensors_metadata(path);
    }
  } catch (const Error& e) {
    fail("distill.teacher: ", e.what());
  }
  const ModelConfig& t = model_->config();
  check(t.num_classes == student.num_classes, "distill.teacher: ", path, " predicts ", t.num_classes,
        " classes but the student has ", student.num_classes, " (model.num_classes)");
  check(t.in_chans == student.in_chans, "distill.teacher: ", path, " takes ", t.in_chans,
        "-channel images but the student's have ", student.in_chans, " (model.in_chans)");
  check(t.img_size == student.img_size, "distill.teacher: ", path, " was trained on ", t.img_size, "x", t.img_size,
        " images but the student's are ", student.img_size, "x", student.img_size,
        " (model.img_size; the teacher must see the student's batch as it is)");
  if (auto it = meta.find("classes"); it != meta.end() && !classes.empty()) {
    std::vector<std::string> names;
    try {
      names = json::parse(it->second).get<std::vector<std::string>>();
    } catch (const json::exception& e) {
      fail("distill.teacher: ", path, ": the class names in the metadata are malformed (", e.what(), ")");
    }
    for (size_t i = 0; i < names.size() && i < classes.size(); ++i)
      check(names[i] == classes[i], "distill.teacher: ", path, " was trained on other classes: class ", i, " is '",
            names[i], "' for the teacher but '", classes[i], "' in the student's data");
  }
  check(t.mean.size() == size_t(t.in_chans) && t.std.size() == size_t(t.in_chans), "distill.teacher: ", path,
        ": its normalisation has ", t.mean.size(), " means and ", t.std.size(), " stds for ", t.in_chans, " channels");
  // Both normalise x_raw per channel: x_s = (x_raw − m_s)/σ_s and x_t = (x_raw − m_t)/σ_t, so
  // x_t = x_s·(σ_s/σ_t) + (m_s − m_t)/σ_t.
  for (int64_t c = 0; c < t.in_chans; ++c) {
    const float ms = student.mean[size_t(c)], ss = student.std[size_t(c)];
    const float mt = t.mean[size_t(c)], st = t.std[size_t(c)];
    scale_.push_back(ss / st);
    shift_.push_back((ms - mt) / st);
    renormalize_ = renormalize_ || ms != mt || ss != st;
  }
  model_->eval();
}

Tensor DistillTeacher::logits(const Tensor& images) {
  const ModelConfig& t = model_->config();
  check(images.dim() == 4 && images.size(1) == t.in_chans, "distill.teacher: the batch ", images.shape(),
        " is not (B, ", t.in_chans, ", H, W)");
  NoGradGuard no_grad;
  Tensor x = images;
  if (renormalize_) {
    x = empty(images.shape());
    const int64_t B = images.size(0), C = images.size(1), HW = images.size(2) * images.size(3);
    const float* src = images.data();
    float* dst = x.data();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t i = 0; i < HW; ++i) {
          const int64_t j = (b * C + c) * HW + i;
          dst[j] = src[j] * scale_[size_t(c)] + shift_[size_t(c)];
        }
  }
  model_->eval();
  return model_->forward(x);
}

json DistillTeacher::describe() const {
  const ModelConfig& t = model_->config();
  return {{"path", path_}, {"bytes", bytes_}, {"crc32", crc32_}, {"arch", t.arch}, {"name", t.name}};
}

}  // namespace sima
