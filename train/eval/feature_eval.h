// Evaluation of frozen features: what a backbone has learnt, measured without its head.
//
//   Features train = extract_features(model, train_set);          // (N, D) + N labels
//   Features test  = extract_features(model, test_set);
//   std::vector<KnnResult> knn = knn_classify(train.x, train.labels, test.x, test.labels, {.ks = {20}});
//   LinearProbeResult probe = linear_probe(train.x, train.labels, test.x, test.labels, {.epochs = 20});
//
// The feature is what the classifier head sees: Model::forward_features, the class token
// after the final norm (DeiT: the cls token of the final LayerNorm, also for a distilled
// DeiT, whose `head` reads only that token; XCiT: the cls token after the class-attention
// blocks and the final norm; CvT: the stage-3 cls token after the final LayerNorm).
//
// k-NN is DINO's weighted vote (eval_knn.py, knn_classifier):
//   x̂ = x / max(‖x‖₂, 1e-12) for every train and test row (F.normalize);
//   s_ij = x̂_testᵢ · x̂_trainⱼ (cosine similarity, one GEMM per chunk of test rows);
//   the k train rows of largest s_ij, each voting for its label with weight exp(s_ij / T);
//   class weights w_c = Σ over those neighbours with label c; prediction = argmax_c w_c.
//   top-1: the true class has the largest weight; top-5: it is among the min(5, k) largest
//   (DINO's `correct.narrow(1, 0, min(5, k))`), also capped at the number of classes.
// Ties, which DINO leaves to torch.topk / torch.sort: equal similarities prefer the lower
// train index; equal class weights rank the lower class index first (as torch.argmax picks
// the first maximum), so a tie counts as correct only when the true class is the lowest of
// the tied classes. A NaN similarity (a diverged model) ranks below every number.
// k larger than the train set is an error (DINO's topk fails the same way), not a clamp.
//
// Linear probe (DINO's eval_linear.py, simplified): a Linear(D, C) on the precomputed
// features (no BatchNorm, no augmentation: features are extracted once), weight
// N(0, 0.01²), bias 0, SGD momentum 0.9 with weight decay (default 0), cosine lr per step
// from `lr` to 0 without warmup, cross-entropy, a seeded shuffle each epoch.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "data/dataset.h"
#include "models/model.h"
#include "nn/linear.h"

namespace sima {

// ---- features ---------------------------------------------------------------------

struct Features {
  Tensor x;                     // (N, D) float32
  std::vector<int64_t> labels;  // N class indices
};

struct FeatureOptions {
  int64_t batch_size = 256;
  int num_workers = 2;
  // The class tokens of the last `blocks` blocks, concatenated (Model::forward_block_features:
  // DINO's eval_linear.py n_last_blocks); 1 = forward_features. Pixels ignore it.
  int64_t blocks = 1;
};

// The backbone feature (forward_features, or forward_block_features with options.blocks > 1) of every sample of `dataset`, which must already
// be transformed to the model's input (eval_transform: no augmentation), in dataset order.
// Runs in eval mode under NoGradGuard and restores the model's mode. A sample without a
// label (-1) is a sima::Error naming its index.
Features extract_features(Model& model, std::shared_ptr<const Dataset> dataset, const FeatureOptions& options = {});
// The raw-pixel baseline: every image flattened to C·H·W values, exactly as the dataset
// gives it (so pass a TransformedDataset to resize or normalise first). Images of different
// sizes are a sima::Error naming both samples.
Features extract_pixels(std::shared_ptr<const Dataset> dataset, const FeatureOptions& options = {});

// Standardises pixel features of `channels`-channel images in place, train and test alike,
// with the train rows' per-channel mean and standard deviation (population, over every pixel
// of every train image: what torchvision's Normalize is given for a dataset, e.g. 0.2860 /
// 0.3530 for Fashion-MNIST). Returns {mean, std}, one value per channel (std 0 -> 1).
std::pair<std::vector<double>, std::vector<double>> standardize_pixels(Features& train, Features& test,
                                                                       int64_t channels);

// ---- k-NN -------------------------------------------------------------------------

struct KnnOptions {
  std::vector<int64_t> ks = {10, 20, 100, 200};  // DINO's --nb_knn default
  double temperature = 0.07;                     // T in exp(s / T)
  int64_t num_classes = 0;                       // 0: 1 + the largest label of either set
  // Memory bound: the test set is processed in chunks of m rows with m · N_train ≤ this
  // many similarities (2^24 floats = 64 MiB).
  int64_t max_chunk_floats = int64_t(1) << 24;
};

struct KnnResult {
  int64_t k = 0;
  double top1 = 0.0;  // percent
  double top5 = 0.0;  // percent
  int64_t count = 0;  // test rows
};

// One result per entry of options.ks, in that order. Errors: non-2-D or mismatched feature
// shapes, label counts, labels outside [0, num_classes), k < 1 or k > N_train, T ≤ 0.
std::vector<KnnResult> knn_classify(const Tensor& train_x, const std::vector<int64_t>& train_labels,
                                    const Tensor& test_x, const std::vector<int64_t>& test_labels,
                                    const KnnOptions& options = {});

// The k nearest train rows of every query row by cosine similarity, best first:
// index[i·k + j] and similarity[i·k + j] for query i (ties as above). For tests and tools.
struct Neighbours {
  int64_t k = 0;
  std::vector<int64_t> index;
  std::vector<float> similarity;
};
Neighbours knn_search(const Tensor& train_x, const Tensor& query_x, int64_t k,
                      int64_t max_chunk_floats = int64_t(1) << 24);
// The class weights w_c = Σ_{j<k} exp(s_j / T) · [label(j) = c] of query `row` from its
// first k neighbours (k ≤ neighbours.k), as doubles.
std::vector<double> knn_class_weights(const Neighbours& neighbours, int64_t row, int64_t k,
                                      const std::vector<int64_t>& train_labels, double temperature,
                                      int64_t num_classes);

// ---- linear probe -----------------------------------------------------------------

struct ProbeEpoch {
  int64_t epoch = 0;        // 1-based
  double train_loss = 0.0;  // mean cross-entropy over the epoch's batches (per sample)
  double top1 = 0.0;        // test accuracy after the epoch, percent
  double top5 = 0.0;        // top-min(5, C), percent
  double lr = 0.0;          // lr of the epoch's last step
};

struct LinearProbeOptions {
  int64_t epochs = 20;
  double lr = 0.1;
  int64_t batch_size = 256;
  double weight_decay = 0.0;
  double momentum = 0.9;
  uint64_t seed = 0;        // init and the shuffle
  int64_t num_classes = 0;  // 0: 1 + the largest label of either set
  std::function<void(const ProbeEpoch&)> on_epoch = nullptr;  // called after each epoch (progress)
};

struct LinearProbeResult {
  std::vector<ProbeEpoch> epochs;
  double top1 = 0.0, top5 = 0.0;  // after the last epoch
  double seconds = 0.0;
  std::shared_ptr<Linear> head;   // the trained Linear(D, C)
};

// Errors name the option or the mismatched shape, as knn_classify.
LinearProbeResult linear_probe(const Tensor& train_x, const std::vector<int64_t>& train_labels, const Tensor& test_x,
                               const std::vector<int64_t>& test_labels, const LinearProbeOptions& options = {});

}  // namespace sima
