// The frozen-feature evaluation `sima-eval --knn / --linear-probe` runs: features of the
// train and test splits of one data spec (computed once), then k-NN and/or a linear probe
// on them (train/eval/feature_eval.h), as a result with JSON and text forms.
//
//   FeatureEvalOptions o;  o.knn = true;  o.knn_options.ks = {20};
//   FeatureEvalResult r = run_feature_eval(&model, eval_transform(cfg, crop_pct), parse_data_spec("fashion_mnist"), o);
//   std::cout << format_report(r);
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "models/model.h"
#include "train/config/data_spec.h"
#include "train/eval/feature_eval.h"

namespace sima {

struct FeatureEvalOptions {
  // Subsets: a seeded random `train_limit` / `limit` samples of the train / test split
  // (random_subset: a uniform sample without replacement, not class-balanced); 0 = all.
  int64_t train_limit = 0;
  int64_t limit = 0;
  uint64_t seed = 0;  // of the subsets (and of the probe: linear_probe.seed)
  // validation > 0: hold out that many training images (holdout_split with validation_seed, the
  // split sima-train's data.validation makes) and evaluate on them instead of the test split,
  // with the rest of the training images as the k-NN bank / probe set. The test split is not read.
  int64_t validation = 0;
  uint64_t validation_seed = 0;
  FeatureOptions extract;
  bool knn = false;
  KnnOptions knn_options;
  bool linear_probe = false;
  LinearProbeOptions probe_options;
};

struct FeatureEvalResult {
  std::string features;  // "model" (forward_features), "init" (the same, a freshly initialised model) or "pixels"
  // Pixels without a transform: the train split's per-channel mean / std they were
  // standardised with (standardize_pixels); empty otherwise.
  std::vector<double> pixel_mean, pixel_std;
  int64_t feature_blocks = 1;  // class tokens of the last N blocks (FeatureOptions::blocks); 1 for pixels
  std::string data;      // the data spec
  std::string eval_split = "test";  // "test", or "validation" (options.validation > 0)
  int64_t train_count = 0, test_count = 0, dim = 0, num_classes = 0;
  double extract_seconds = 0.0;  // both splits
  std::vector<KnnResult> knn;    // empty unless options.knn
  double temperature = 0.0;
  double knn_seconds = 0.0;
  std::optional<LinearProbeResult> probe;
  LinearProbeOptions probe_options;  // what the probe ran with (for the report)
};

// `model` null: the pixels (extract_pixels) of the transformed images. `transform` maps
// the raw dataset images to the model's input (eval_transform; no augmentation). Pixels
// with an empty `transform` are standardised with the train split's per-channel mean and
// std (standardize_pixels), the raw-pixel baseline as a model would see them; a model
// with an empty `transform` gets the dataset's images as they are, in [0, 1].
FeatureEvalResult run_feature_eval(Model* model, const Transform& transform, const DataSpec& spec,
                                   const FeatureEvalOptions& options);

// {"features", "feature_blocks", "data", "train_count", "test_count", "dim", "num_classes", "extract_seconds",
//  "pixel_mean", "pixel_std" (standardised pixels only),
//  "knn": {"temperature", "seconds", "results": [{"k", "top1", "top5"}...]} (with --knn),
//  "linear_probe": {"epochs", "lr", "batch_size", "weight_decay", "momentum", "top1", "top5",
//                   "seconds", "history": [{"epoch", "train_loss", "top1", "top5", "lr"}...]}}
nlohmann::json to_json(const FeatureEvalResult& r);
// The report: the data line, then a k-NN table (k, top-1, top-5) and the probe's epochs.
std::string format_report(const FeatureEvalResult& r);

// "10,20,100,200" -> {10, 20, 100, 200}; anything else is a sima::Error naming `flag`.
std::vector<int64_t> parse_int_list(const std::string& text, const std::string& flag);

}  // namespace sima
