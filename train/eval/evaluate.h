// Classification metrics of a model on a dataset: what `sima-eval` prints and what the
// trainer logs each epoch.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "models/model.h"

namespace sima {

struct EvalResult {
  int64_t count = 0;
  double loss = 0.0;       // mean cross-entropy (no smoothing)
  double top1 = 0.0;       // percent
  double top5 = 0.0;       // percent (top-k with k = min(5, num_classes))
  std::vector<double> per_class_accuracy;             // percent, per true class (NaN-free: 0 for empty classes)
  std::vector<int64_t> per_class_count;
  std::vector<std::vector<int64_t>> confusion;        // [true][predicted]
  std::vector<int32_t> predicted;                     // top-1 class of each image, in the dataset's order
  std::vector<int32_t> labels;                        // its true class (predicted[i] == labels[i]: image i right)
  double images_per_second = 0.0;                     // forward passes only (no data wait)
  double seconds = 0.0;                               // wall time including data loading
};

struct EvalOptions {
  int64_t batch_size = 256;
  int num_workers = 2;
  int64_t limit = 0;  // evaluate the first `limit` samples only (0 = all)
};

// Runs `model` in eval mode under NoGradGuard over `dataset` (already transformed to the
// model's input); restores the model's train/eval mode afterwards. Labels must be in
// [0, num_classes); a sample without a label or out of range is a sima::Error naming its index.
EvalResult evaluate(Model& model, std::shared_ptr<const Dataset> dataset, const EvalOptions& options = {});

// {"count", "loss", "top1", "top5", "per_class_accuracy", "per_class_count", "confusion",
//  "images_per_second", "seconds"} and, when names are given, "classes".
nlohmann::json to_json(const EvalResult& r, const std::vector<std::string>& class_names = {});
// A human-readable report: the summary line
//   "top-1 91.23%  top-5 99.80%  loss 0.2412  10000 images  5231 img/s",
// the per-class table (images, accuracy) and the confusion matrix, columns aligned.
std::string format_report(const EvalResult& r, const std::vector<std::string>& class_names = {});

// ---- single images --------------------------------------------------------------

struct Prediction {
  std::string path;
  std::vector<int64_t> classes;       // top-k, most probable first
  std::vector<double> probabilities;  // softmax probabilities of those classes
  std::vector<float> logits;          // all raw logits
};

// Loads each image (PNG/JPEG/BMP...), applies eval_transform for the model's config and
// returns its top-k classes. Unreadable images are a sima::Error naming the file.
std::vector<Prediction> predict_images(Model& model, const std::vector<std::string>& paths, int64_t topk = 5,
                                       double crop_pct = 0.875);
// The same with a given transform (e.g. eval_transform of a config whose normalisation
// comes from a checkpoint's metadata); topk is clamped to the number of classes.
std::vector<Prediction> predict_images(Model& model, const std::vector<std::string>& paths, const Transform& transform,
                                       int64_t topk = 5);

// ---- what a checkpoint says about its evaluation ----------------------------------

// From a model.safetensors' metadata (models/io/checkpoint.h): the model config with the
// "normalization" mean/std applied, the eval crop_pct ("normalization"."crop_pct", else
// default_crop_pct(img_size)), the training data spec ("data", "" if absent) and the class
// names ("classes", empty if absent). Errors name the file and the metadata key.
struct CheckpointEvalInfo {
  ModelConfig config;
  double crop_pct = 1.0;
  std::string data;
  std::vector<std::string> classes;
  bool head_trained = true;  // false for a DINO backbone (metadata "dino"): its classifier was never trained
};
CheckpointEvalInfo read_checkpoint_eval_info(const std::string& path);

// The model and its eval info from `path`: a model.safetensors of ours (load_checkpoint and
// read_checkpoint_eval_info), or a torch.save file of an upstream model (models/io/pth.h's
// is_pth_path: .pth / .pt / .bin or zip bytes), converted in memory as sima-convert does
// (models/io/upstream.h; `from` and `model_spec` are its --from and --model). An upstream file
// has no data spec or class names; its crop_pct is its upstream's (models/io/upstream.h
// upstream_crop_pct), and `note` may hold a hint for the user (a timm DeiT imported as softmax).
struct LoadedCheckpoint {
  std::shared_ptr<Model> model;
  CheckpointEvalInfo info;
  std::string note;
};
LoadedCheckpoint load_checkpoint_for_eval(const std::string& path, const std::string& from = "",
                                          const std::string& model_spec = "");

}  // namespace sima
