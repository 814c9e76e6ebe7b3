// DeiT distillation (train/objectives/distill.h):
// - the hard and soft losses against values worked out by hand on tiny logits, and the α mix;
// - the soft KL's hand-derived backward against finite differences and against the same
//   function composed of primitive ops; the whole loss's gradients against finite differences;
// - the teacher: argmax of its logits on the mixed batch, eval mode, input re-normalisation,
//   and clear errors (missing file, not a checkpoint, class count, class names, channels,
//   input size; a student without a distillation token);
// - end to end on a 256-image Fashion-MNIST subset: a tiny CvT teacher trained for a few steps,
//   then a tiny distilled SimA DeiT whose loss is finite and falls, whose checkpoint names the
//   teacher, and whose resumed run repeats the uninterrupted one bit for bit.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/file_io.h"
#include "data/loader.h"
#include "data/mixup.h"
#include "data/temp_dir.h"
#include "models/io/checkpoint.h"
#include "models/registry.h"
#include "models/io/safetensors.h"
#include "testing.h"
#include "train/config/data_spec.h"
#include "train/config/transforms_factory.h"
#include "train/objectives/distill.h"
#include "train/objectives/trainer.h"

using namespace sima;
using sima::testing::check_close;
using sima::testing::error_message;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

bool has(const std::string& s, const std::string& part) {
  INFO("message: " << s);
  return s.find(part) != std::string::npos;
}

const float ln2 = std::log(2.f), ln3 = std::log(3.f);

DistillConfig distill(const std::string& type, double alpha, double tau = 1.0) {
  DistillConfig d;
  d.type = type;
  d.alpha = alpha;
  d.tau = tau;
  return d;
}

// A small model for 28×28 grey 10-class inputs, from registry JSON.
std::shared_ptr<Model> small_model(const json& j, uint64_t seed) {
  manual_seed(seed);
  return create_model(config_from_json(j));
}
json tiny_cvt() {
  return {{"name", "cvt_13_28_sima"}, {"stage_dims", {8, 16, 32}},  {"stage_depths", {1, 1, 1}},
          {"stage_heads", {1, 2, 4}},  {"stage_drop_path", {0, 0, 0}}};
}
json tiny_student() {
  return {{"name", "deit_tiny_patch4_28_sima"}, {"embed_dim", 32}, {"depth", 1}, {"num_heads", 4}, {"distilled", true}};
}

}  // namespace

// ---- the losses -------------------------------------------------------------------------

// B = 2, C = 3. Logits written as logs of small integers, so every softmax is a ratio:
//   cls  row 0 = [0, ln 3, 0]  → [1, 3, 1]/5;  label 1 → CE = −ln(3/5) = ln(5/3) = 0.5108256
//   cls  row 1 = [0, 0, ln 2]  → [1, 1, 2]/4;  label 2 → CE = −ln(1/2) = ln 2    = 0.6931472
//   base = (0.5108256 + 0.6931472)/2 = 0.6019864
//   teacher row 0 = [5, 1, 2] → argmax 0;  row 1 = [0, −1, 3] → argmax 2
//   dist row 0 = [ln 2, 0, ln 2] → [2, 1, 2]/5; class 0 → CE = −ln(2/5) = ln 2.5 = 0.9162907
//   dist row 1 = [0, ln 3, 0]    → [1, 3, 1]/5; class 2 → CE = −ln(1/5) = ln 5   = 1.6094379
//   D = (0.9162907 + 1.6094379)/2 = 1.2628643
//   α = 0.5:  0.5·0.6019864 + 0.5·1.2628643  = 0.9324254
//   α = 0.25: 0.75·0.6019864 + 0.25·1.2628643 = 0.4514898 + 0.3157161 = 0.7672059
TEST_CASE("distill: the hard loss on tiny logits, worked out by hand, and the alpha mix") {
  Tensor cls = from_vector({0, ln3, 0, 0, 0, ln2}, {2, 3});
  Tensor dist = from_vector({ln2, 0, ln2, 0, ln3, 0}, {2, 3});
  Tensor teacher = from_vector({5, 1, 2, 0, -1, 3}, {2, 3});
  CHECK(teacher_labels(teacher) == std::vector<int64_t>{0, 2});
  Tensor base = cross_entropy(cls, std::vector<int64_t>{1, 2});
  check_close(base, {0.6019864f}, 1e-6f);
  check_close(distillation_term(dist, teacher, "hard", 1.f), {1.2628643f}, 1e-6f);
  check_close(distillation_loss(base, dist, teacher, distill("hard", 0.5)), {0.9324254f}, 1e-6f);
  check_close(distillation_loss(base, dist, teacher, distill("hard", 0.25)), {0.7672059f}, 1e-6f);
  check_close(distillation_loss(base, dist, teacher, distill("hard", 0.0)), {0.6019864f}, 1e-6f);  // labels only
  check_close(distillation_loss(base, dist, teacher, distill("hard", 1.0)), {1.2628643f}, 1e-6f);  // teacher only
  // The teacher's argmax is a plain label: the label smoothing of the base term does not reach it
  // (with ε = 0.1 row 0 would cost 0.9·ln 2.5 + 0.1·mean(−log p) = 0.9162907·0.9 + 0.1·(3 ln 5 − 2 ln 2)/3).
  Tensor smoothed = cross_entropy(cls, std::vector<int64_t>{1, 2}, 0.1f);
  Tensor with_smoothing = distillation_loss(smoothed, dist, teacher, distill("hard", 0.5));
  check_close(with_smoothing, {0.5f * smoothed.item() + 0.5f * 1.2628643f}, 1e-6f);
}

// B = 2, C = 2, KL(p ‖ q) = Σ p·ln(p/q), q = softmax(s/T) (student), p = softmax(t/T) (teacher):
//   row 0: s = [0, 0] → q = [1/2, 1/2]; t = [ln 3, 0] → p = [3/4, 1/4]
//          KL = 3/4·ln(3/2) + 1/4·ln(1/2) = 0.3040988 − 0.1732868 = 0.1308120
//   row 1: s = [ln 3, 0] → q = [3/4, 1/4]; t = [0, 0] → p = [1/2, 1/2]
//          KL = 1/2·ln(2/3) + 1/2·ln 2 = −0.2027326 + 0.3465736 = 0.1438410
//   T = 1: (0.1308120 + 0.1438410)·1²/(B·C = 4) = 0.0686633   (DeiT divides by numel, not B)
//   T = 2 with every logit doubled: the same q and p, so (0.2746531)·2²/4 = 0.2746531
// Gradient (g = 1, T = 1): ds = T/(B·C)·(q − p) = 1/4·([1/2, 1/2] − [3/4, 1/4]) = [−1/16, 1/16]
//   for row 0 and 1/4·([3/4, 1/4] − [1/2, 1/2]) = [1/16, −1/16] for row 1.
TEST_CASE("distill: the soft loss on tiny logits, worked out by hand (KL summed / numel · T²)") {
  Tensor s = from_vector({0, 0, ln3, 0}, {2, 2}), t = from_vector({ln3, 0, 0, 0}, {2, 2});
  s.requires_grad_(true);
  Tensor kl = soft_distillation_kl(s, t, 1.f);
  check_close(kl, {0.0686633f}, 1e-6f);
  kl.backward();
  check_close(s.grad(), {-0.0625f, 0.0625f, 0.0625f, -0.0625f}, 1e-6f);
  check_close(soft_distillation_kl(mul(s, 2.f), mul(t, 2.f), 2.f), {0.2746531f}, 1e-6f);
  // Equal distributions: KL 0 whatever the logits' offset (softmax is shift-invariant).
  check_close(soft_distillation_kl(from_vector({1, 2, 3, 4}, {2, 2}), from_vector({5, 6, -1, 0}, {2, 2}), 1.f), {0.f},
              1e-7f);
  // Through distillation_loss: α mixes the base CE and the KL term.
  Tensor base = scalar_tensor(0.5f);
  check_close(distillation_loss(base, s.detach(), t, distill("soft", 0.5)), {0.5f * 0.5f + 0.5f * 0.0686633f}, 1e-6f);
  check_close(distillation_loss(base, s.detach(), t, distill("soft", 0.2)), {0.8f * 0.5f + 0.2f * 0.0686633f}, 1e-6f);
}

TEST_CASE("distill: the soft KL's backward matches finite differences and the composed oracle") {
  Tensor t = testing::randn_leaf({3, 5}, 2, /*grad=*/false);
  for (float tau : {0.5f, 1.f, 3.f}) {
    INFO("tau " << tau);
    Tensor s = testing::randn_leaf({3, 5}, 1);
    CHECK_GRADCHECK([&](const std::vector<Tensor>& in) { return soft_distillation_kl(in[0], t, tau); }, {s},
                    GradcheckOptions{.eps = 1e-2, .atol = 1e-4, .rtol = 2e-2});
    // The composition of primitive ops: T²/numel · Σ p·(log p − log_softmax(s/T)).
    auto composed = [&](const std::vector<Tensor>& in) {
      Tensor log_q = log_softmax(mul(in[0], 1.f / tau), 1), log_p = log_softmax(mul(t, 1.f / tau), 1);
      return mul(sum(mul(exp(log_p), sub(log_p, log_q))), tau * tau / float(in[0].numel()));
    };
    testing::check_same([&](const std::vector<Tensor>& in) { return soft_distillation_kl(in[0], t, tau); }, composed,
                        {s}, testing::Tolerance{.atol = 1e-6f, .rtol = 1e-4f});
  }
  CHECK(has(error_message([&] { soft_distillation_kl(testing::randn_leaf({3, 4}, 1), t, 1.f); }), "must match"));
  CHECK(has(error_message([&] { soft_distillation_kl(testing::randn_leaf({3, 5}, 1), t, 0.f); }), "tau must be positive"));
}

TEST_CASE("distill: gradients of the whole loss (hard and soft, mixup targets) match finite differences") {
  // Soft targets as mixup makes them: 0.7·onehot(y) + 0.3·onehot(y'), smoothed.
  Tensor targets = mixup_target({1, 4, 0, 2}, 5, 0.7, 0.1);
  Tensor teacher = testing::randn_leaf({4, 5}, 9, /*grad=*/false);
  for (const char* type : {"hard", "soft"})
    for (double alpha : {0.0, 0.3, 1.0}) {
      INFO(std::string(type) << " alpha " << alpha);
      Tensor cls = testing::randn_leaf({4, 5}, 3), dist = testing::randn_leaf({4, 5}, 4);
      auto fn = [&](const std::vector<Tensor>& in) {
        return distillation_loss(cross_entropy(in[0], targets), in[1], teacher, distill(type, alpha, 2.0));
      };
      CHECK_GRADCHECK(fn, {cls, dist}, GradcheckOptions{.eps = 1e-2, .atol = 1e-4, .rtol = 2e-2});
      // α = 0 leaves the distillation head untaught, α = 1 the class head.
      cls.zero_grad();
      dist.zero_grad();
      fn({cls, dist}).backward();
      float gc = 0.f, gd = 0.f;
      for (float v : to_vector(cls.grad())) gc = std::max(gc, std::fabs(v));
      for (float v : to_vector(dist.grad())) gd = std::max(gd, std::fabs(v));
      CHECK((alpha == 1.0 ? gc == 0.f : gc > 1e-3f));
      CHECK((alpha == 0.0 ? gd == 0.f : gd > 1e-3f));
    }
}

// ---- the teacher ------------------------------------------------------------------------

TEST_CASE("distill: the teacher runs on the mixed batch, in eval mode; its argmax labels the distillation head") {
  testing::TempDir tmp;
  json tj = tiny_cvt();
  tj["drop_rate"] = 0.5;  // dropout would make train-mode logits random
  auto teacher_model = small_model(tj, 5);
  testing::randomize_parameters(*teacher_model, 6, 0.5f);
  const std::string path = tmp.file("teacher.safetensors");
  save_checkpoint(path, *teacher_model);

  const ModelConfig student = config_from_json(tiny_student());
  DistillTeacher teacher(path, student);
  CHECK(teacher.model().config().arch == "cvt");
  CHECK(!teacher.model().is_training());
  CHECK(teacher.bytes() == int64_t(fs::file_size(path)));
  CHECK(teacher.crc32() == file_crc32(path));
  CHECK(teacher.crc32().size() == 8);

  // A batch of 8, mixed as the trainer mixes it.
  Generator g(11);
  Tensor images = randn({8, 1, 28, 28}, g);
  std::vector<int64_t> labels{0, 1, 2, 3, 4, 5, 6, 7};
  Mixup mixup(MixupOptions{.mixup_alpha = 1.0, .cutmix_alpha = 0.0, .label_smoothing = 0.1, .num_classes = 10});
  MixupResult mixed = mixup(images, labels, g);
  Tensor t1 = teacher.logits(mixed.images), t2 = teacher.logits(mixed.images);
  CHECK(testing::max_abs_diff(t1, t2) == 0.f);  // eval mode: no dropout
  // The logits are the checkpoint's model's inference output on the mixed images.
  auto reloaded = load_checkpoint(path);
  reloaded->eval();
  Tensor expected;
  {
    NoGradGuard ng;
    expected = reloaded->forward(mixed.images);
  }
  check_close(t1, expected, 1e-6f, 1e-5f);
  std::vector<int64_t> hard = teacher_labels(t1);
  CHECK(hard == argmax(expected, 1));
  // (The test can tell mixed from clean images: the teacher's logits differ.)
  {
    NoGradGuard ng;
    CHECK(testing::max_abs_diff(t1, reloaded->forward(images)) > 1e-3f);
  }

  // The loss on a student's two heads: base on the mixed soft targets, D on the teacher's argmax.
  auto student_model = small_model(tiny_student(), 7);
  student_model->train();
  std::vector<Tensor> heads = student_model->forward_heads(mixed.images);
  REQUIRE(heads.size() == 2);
  Tensor loss = distillation_loss(cross_entropy(heads[0], mixed.targets), heads[1], t1, distill("hard", 0.5));
  const float by_hand =
      0.5f * cross_entropy(heads[0].detach(), mixed.targets).item() + 0.5f * cross_entropy(heads[1].detach(), hard).item();
  check_close(loss, {by_hand}, 1e-6f);
  loss.backward();
  for (auto& [name, p] : student_model->named_parameters()) CHECK_MESSAGE(p.grad().defined(), name);
  for (auto& [name, p] : teacher.model().named_parameters()) CHECK_MESSAGE(!p.grad().defined(), name);
}

TEST_CASE("distill: a teacher with another normalisation gets the student's images converted exactly") {
  testing::TempDir tmp;
  json tj = tiny_cvt();
  tj["mean"] = {0.5};
  tj["std"] = {0.25};
  auto teacher_model = small_model(tj, 5);
  const std::string path = tmp.file("teacher.safetensors");
  save_checkpoint(path, *teacher_model);
  const ModelConfig student = config_from_json(tiny_student());  // Fashion-MNIST mean 0.2860, std 0.3530
  DistillTeacher teacher(path, student);
  Generator g(3);
  Tensor x = randn({2, 1, 28, 28}, g);
  // x_raw = x·σ_s + m_s; the teacher's input is (x_raw − 0.5)/0.25.
  Tensor x_teacher = div(sub(add(mul(x, student.std[0]), student.mean[0]), 0.5f), 0.25f);
  teacher_model->eval();
  NoGradGuard ng;
  check_close(teacher.logits(x), teacher_model->forward(x_teacher), 1e-5f, 1e-4f);
  CHECK(testing::max_abs_diff(teacher.logits(x), teacher_model->forward(x)) > 1e-3f);
}

TEST_CASE("distill: teacher and student mismatches are one-line errors naming distill.teacher") {
  testing::TempDir tmp;
  const ModelConfig student = config_from_json(tiny_student());
  auto save = [&](json j, const std::string& name, const std::map<std::string, std::string>& meta = {}) {
    const std::string p = tmp.file(name);
    save_checkpoint(p, *small_model(j, 1), meta);
    return p;
  };
  auto load = [&](const std::string& path, const std::vector<std::string>& classes = {}) {
    return error_message([&] { DistillTeacher teacher(path, student, classes); });
  };
  const std::string missing = tmp.str() + "/none.safetensors";
  std::string msg = load(missing);
  CHECK(has(msg, "distill.teacher: " + missing + " does not exist"));
  CHECK(has(msg, "configs/quickstart.json"));
  CHECK(has(load(tmp.str()), "is not a file"));

  const std::string junk = tmp.file("junk.safetensors");
  testing::write_bytes(junk, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(has(load(junk), "distill.teacher: " + junk));

  json five = tiny_cvt();
  five["num_classes"] = 5;
  CHECK(has(load(save(five, "five.safetensors")),
            "predicts 5 classes but the student has 10 (model.num_classes)"));
  json rgb = tiny_cvt();
  rgb["in_chans"] = 3;
  rgb["mean"] = {0.5, 0.5, 0.5};
  rgb["std"] = {0.5, 0.5, 0.5};
  CHECK(has(load(save(rgb, "rgb.safetensors")),
            "takes 3-channel images but the student's have 1"));
  json big = tiny_student();
  big["img_size"] = 32;
  CHECK(has(load(save(big, "big.safetensors")),
            "was trained on 32x32 images but the student's are 28x28"));

  // Class names: compared when the checkpoint records them (the trainer's checkpoints do).
  json names = json::array();
  for (int i = 0; i < 10; ++i) names.push_back(std::to_string(i));
  const std::string digits = save(tiny_cvt(), "digits.safetensors", {{"classes", names.dump()}});
  std::vector<std::string> fmnist{"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                  "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  CHECK(has(load(digits, fmnist),
            "was trained on other classes: class 0 is '0' for the teacher but 'T-shirt/top'"));
  CHECK(load(digits) == "(no error)");

  // A student without a distillation token, or no teacher: config errors before any work.
  auto config_error = [](const std::string& text) {
    return error_message([&] { experiment_from_json(json::parse(text), "cfg.json"); });
  };
  CHECK(has(config_error(R"({"model": {"name": "deit_tiny_patch4_28_sima"},
                             "distill": {"type": "hard", "teacher": "t.safetensors"}})"),
            "cfg.json: distill.type hard needs a student with a distillation token: a DeiT with model.distilled true"));
  CHECK(has(config_error(R"({"model": {"name": "cvt_13_28_sima"},
                             "distill": {"type": "soft", "teacher": "t.safetensors"}})"),
            "model.arch is cvt"));
  CHECK(has(config_error(R"({"model": {"name": "cvt_13_28_sima", "distilled": true},
                             "distill": {"type": "soft", "teacher": "t.safetensors"}})"),
            "model.distilled: arch 'cvt' does not read it (read by: deit;"));
  CHECK(has(config_error(R"({"model": {"name": "deit_tiny_patch4_28_sima", "distilled": true},
                             "distill": {"type": "hard"}})"),
            "distill.type hard needs distill.teacher"));
  CHECK(has(config_error(R"({"distill": {"type": "medium"}})"), "distill.type: 'medium' is not one of: none, hard, soft"));
  CHECK(has(config_error(R"({"distill": {"alpha": 1.5}})"), "distill.alpha: must be in [0, 1]"));
  CHECK(has(config_error(R"({"distill": {"tau": 0}})"), "distill.tau: must be positive"));
  // type none (the default) ignores the rest: a distilled student without a teacher is valid.
  CHECK(config_error(R"({"model": {"name": "deit_tiny_patch4_28_sima", "distilled": true}})") == "(no error)");
}

// ---- end to end -------------------------------------------------------------------------

namespace {

json run_config(const std::string& name, const json& model) {
  return {{"name", name},
          {"model", model},
          {"data", {{"dataset", "fashion_mnist"}, {"batch_size", 32}, {"train_subset", 256}, {"test_subset", 64},
                    {"num_workers", 0}}},
          {"augment", {{"crop", "none"}, {"hflip", 0.0}}},
          {"optimizer", {{"type", "adamw"}, {"lr", 2e-3}, {"weight_decay", 0.05}}},
          {"schedule", {{"type", "cosine"}, {"warmup_epochs", 0.1}, {"min_lr", 1e-5}}},
          {"train", {{"epochs", 1}, {"seed", 1}, {"label_smoothing", 0.1}, {"log_every", 4}}}};
}

TrainResult run(const json& j, const std::string& dir, bool resume = false) {
  return train(experiment_from_json(j), {.run_dir = dir, .resume = resume, .quiet = true});
}

// A tiny CvT teacher trained for one epoch (8 steps) on the 256 images, once per process:
// its model.safetensors (the folder is removed at exit).
std::string trained_teacher() {
  static testing::TempDir tmp;
  static const std::string path = [] {
    TrainResult r = run(run_config("teacher", tiny_cvt()), tmp.str() + "/teacher");
    MESSAGE("teacher: " << r.steps << " steps in " << r.seconds << " s, test top-1 " << r.last_eval.top1 << "%");
    return tmp.str() + "/teacher/model.safetensors";
  }();
  return path;
}

double mean_of(const std::vector<double>& v, size_t from, size_t n) {
  double s = 0;
  for (size_t i = from; i < from + n; ++i) s += v[i] / double(n);
  return s;
}

}  // namespace

TEST_CASE("distill: end to end, a tiny CvT teacher and a tiny distilled SimA DeiT on 256 Fashion-MNIST images") {
  testing::TempDir tmp;
  const std::string teacher = trained_teacher();

  for (std::string type : {"hard", "soft"}) {
    INFO(type);
    json j = run_config("student_" + type, tiny_student());
    j["distill"] = {{"teacher", teacher}, {"type", type}};
    if (type == "hard") {  // 16 steps of 16 images; the soft run only checks the plumbing (8 steps)
      j["data"]["batch_size"] = 16;
      j["optimizer"]["lr"] = 5e-3;
    }
    const std::string dir = tmp.str() + "/" + type;
    TrainResult r = run(j, dir);
    MESSAGE(type << " distillation: " << r.steps << " steps in " << r.seconds << " s, first loss "
                 << r.step_losses.front() << ", last " << r.step_losses.back() << ", test top-1 " << r.last_eval.top1
                 << "%");
    REQUIRE(r.step_losses.size() == (type == "hard" ? 16u : 8u));
    for (double l : r.step_losses) CHECK(std::isfinite(l));
    // The hard loss falls fast (the teacher's argmax is an easy target); the soft loss is mostly
    // the label term (its KL is divided by C), which moves little in 8 steps.
    if (type == "hard") CHECK(mean_of(r.step_losses, 12, 4) < 0.85 * mean_of(r.step_losses, 0, 4));

    // The checkpoint names the teacher, and so does the train state; the student reloads.
    auto meta = read_safetensors_metadata(dir + "/model.safetensors");
    REQUIRE(meta.count("distill"));
    json d = json::parse(meta.at("distill"));
    CHECK(d["type"] == type);
    CHECK(d["alpha"] == 0.5);
    CHECK(d["teacher"]["path"] == teacher);
    CHECK(d["teacher"]["bytes"] == int64_t(fs::file_size(teacher)));
    CHECK(d["teacher"]["crc32"] == file_crc32(teacher));
    CHECK(d["teacher"]["arch"] == "cvt");
    CHECK(json::parse(read_safetensors_metadata(dir + "/train_state.safetensors").at("distill_teacher"))["crc32"] ==
          file_crc32(teacher));
    CHECK(load_checkpoint(dir + "/model.safetensors")->config().distilled);
  }

  // A run without distillation has no "distill" metadata.
  json plain = run_config("plain", tiny_student());
  plain["data"]["train_subset"] = 64;  // 2 steps
  run(plain, tmp.str() + "/plain");
  CHECK(read_safetensors_metadata(tmp.str() + "/plain/model.safetensors").count("distill") == 0);

  // A missing teacher stops the trainer before any step, naming the key and the file.
  json bad = run_config("bad", tiny_student());
  bad["distill"] = {{"teacher", tmp.str() + "/nope.safetensors"}, {"type", "hard"}};
  CHECK(has(error_message([&] { run(bad, tmp.str() + "/bad"); }), "distill.teacher: " + tmp.str() + "/nope.safetensors"));
}

TEST_CASE("distill: the trainer's first step is the DeiT loss with the teacher on the mixed batch") {
  // Rebuild the trainer's first step by hand: its batch (loader seeded by train.seed), its mixup
  // (generator seeded as supervised.cpp's mixup_seed), the student's initial weights (seeded), and
  // compare the loss with the one the trainer reports.
  testing::TempDir tmp;
  const std::string teacher_path = trained_teacher();
  json j = run_config("mixed", tiny_student());
  j["mixup"] = {{"mixup_alpha", 1.0}};
  j["distill"] = {{"teacher", teacher_path}, {"type", "hard"}, {"alpha", 0.5}};
  j["train"]["max_steps"] = 1;
  TrainResult r = run(j, tmp.str() + "/run");
  REQUIRE(r.step_losses.size() == 1);

  const ExperimentConfig c = experiment_from_json(j);
  const uint64_t seed = uint64_t(c.train.seed);
  auto raw = random_subset(open_dataset(parse_data_spec("fashion_mnist"), true), 256, seed);
  DataLoader loader(std::make_shared<TransformedDataset>(raw, train_transform(c.model, c.augment)),
                    LoaderOptions{.batch_size = 32, .shuffle = true, .drop_last = true, .seed = seed});
  loader.start_epoch(0);
  Batch batch;
  REQUIRE(loader.next(batch));
  Generator gen(batch_seed(seed ^ 0x6d69787570ULL, 0, 0));  // supervised.cpp: mixup_seed(seed, 0, 0)
  MixupResult mixed = Mixup(MixupOptions{.mixup_alpha = 1.0, .cutmix_alpha = 0.0, .label_smoothing = 0.1,
                                         .num_classes = 10})(batch.images, batch.labels, gen);
  DistillTeacher teacher(teacher_path, c.model);
  manual_seed(seed);
  auto student = create_model(c.model);
  student->train();
  NoGradGuard ng;
  std::vector<Tensor> heads = student->forward_heads(mixed.images);
  Tensor base = cross_entropy(heads[0], mixed.targets);
  const double on_mixed = distillation_loss(base, heads[1], teacher.logits(mixed.images), c.distill).item();
  const double on_clean = distillation_loss(base, heads[1], teacher.logits(batch.images), c.distill).item();
  MESSAGE("first step: trainer " << r.step_losses[0] << ", by hand " << on_mixed << " (teacher on clean images: "
                                 << on_clean << ")");
  CHECK(r.step_losses[0] == doctest::Approx(on_mixed).epsilon(1e-6));
  CHECK(std::fabs(on_clean - on_mixed) > 1e-4);  // the check can tell the two apart
}

TEST_CASE("distill: a resumed distillation run repeats the uninterrupted one bit for bit; a changed teacher is refused") {
  testing::TempDir tmp;
  const std::string teacher = tmp.file("teacher.safetensors");  // a copy: this test overwrites it
  fs::copy_file(trained_teacher(), teacher);
  json j = run_config("student", tiny_student());
  j["model"]["drop_path_rate"] = 0.1;
  j["augment"] = {{"crop", "random_crop"}, {"padding", 2}, {"hflip", 0.5}};
  j["mixup"] = {{"mixup_alpha", 0.8}, {"cutmix_alpha", 1.0}};  // the teacher sees mixed batches
  j["data"]["train_subset"] = 128;
  j["train"]["epochs"] = 2;  // 8 steps
  j["distill"] = {{"teacher", teacher}, {"type", "soft"}, {"alpha", 0.7}, {"tau", 2.0}};
  TrainResult full = run(j, tmp.str() + "/full");
  REQUIRE(full.step_losses.size() == 8);

  json part = j;
  part["train"]["max_steps"] = 3;
  TrainResult a = run(part, tmp.str() + "/parts");
  CHECK(a.steps == 3);
  part["train"]["max_steps"] = 6;  // across the epoch end
  TrainResult b = run(part, tmp.str() + "/parts", true);
  part["train"]["max_steps"] = 0;
  TrainResult c = run(part, tmp.str() + "/parts", true);
  std::vector<double> losses = a.step_losses;
  losses.insert(losses.end(), b.step_losses.begin(), b.step_losses.end());
  losses.insert(losses.end(), c.step_losses.begin(), c.step_losses.end());
  REQUIRE(losses.size() == full.step_losses.size());
  CHECK(std::memcmp(losses.data(), full.step_losses.data(), losses.size() * sizeof(double)) == 0);
  SafetensorsFile fa = load_safetensors(tmp.str() + "/full/model.safetensors"),
                  fb = load_safetensors(tmp.str() + "/parts/model.safetensors");
  REQUIRE(fa.tensors.size() == fb.tensors.size());
  for (size_t i = 0; i < fa.tensors.size(); ++i) {
    INFO(fa.tensors[i].first);
    std::vector<float> x = to_vector(fa.tensors[i].second), y = to_vector(fb.tensors[i].second);
    CHECK((x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0));
  }

  // Stop again, replace the teacher file by another checkpoint: resuming is refused.
  part["train"]["max_steps"] = 2;
  run(part, tmp.str() + "/changed");
  save_checkpoint(teacher, *small_model(tiny_cvt(), 99));
  part["train"]["max_steps"] = 0;
  CHECK(has(error_message([&] { run(part, tmp.str() + "/changed", true); }), "has changed since the run started"));
}

TEST_CASE("distill: configs/fmnist_distill_deit_sima.json distills from what configs/quickstart.json trains") {
  // The config is valid without the teacher file (validation does not open it; the trainer does).
  const std::string root = std::string(SIMA_SOURCE_DIR) + "/configs/";
  ExperimentConfig student = experiment_from_json(read_json_file(root + "fmnist_distill_deit_sima.json"));
  ExperimentConfig teacher = experiment_from_json(read_json_file(root + "quickstart.json"));
  CHECK(student.distill.type == "hard");
  CHECK(student.model.distilled);
  CHECK(student.distill.teacher == "runs/" + teacher.name + "/best.safetensors");
  // The teacher the quickstart run writes passes DistillTeacher's checks against this student.
  CHECK(teacher.model.num_classes == student.model.num_classes);
  CHECK(teacher.model.in_chans == student.model.in_chans);
  CHECK(teacher.model.img_size == student.model.img_size);
  CHECK(teacher.data.dataset == student.data.dataset);
}
