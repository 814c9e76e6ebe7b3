// Classification metrics of a model on a dataset, their JSON and text forms, and top-k
// predictions for single images (see evaluate.h).
#include "train/eval/evaluate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <sstream>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops/softmax.h"
#include "data/image_io.h"
#include "data/imagenet_classes.h"
#include "data/loader.h"
#include "models/io/checkpoint.h"
#include "models/finite_check.h"
#include "models/io/pth.h"
#include "models/registry.h"
#include "models/io/safetensors.h"
#include "models/io/upstream.h"
#include "train/config/data_spec.h"
#include "train/config/transforms_factory.h"
#include "train/eval/ranking.h"

namespace sima {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The first index of the largest logit (rank_value order: NaN below every number).
int64_t argmax_row(const float* row, int64_t C) {
  int64_t best = 0;
  for (int64_t j = 1; j < C; ++j)
    if (rank_value(row[j]) > rank_value(row[best])) best = j;
  return best;
}

std::string name_of(const std::vector<std::string>& names, size_t i) {
  return i < names.size() ? names[i] : std::to_string(i);
}

std::string format(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

// Every label of `batch` must be a class of the model's C.
void check_batch_labels(const Batch& batch, const Dataset& dataset, int64_t C) {
  for (size_t i = 0; i < batch.labels.size(); ++i) {
    const int64_t y = batch.labels[i];
    check(y >= 0 && y < C, "evaluate: sample ", batch.indices[i], " of ", dataset.describe(),
          y < 0 ? " has no label" : " has label " + std::to_string(y), " (the model has ", C, " classes: 0..",
          C - 1, ")");
  }
}

// A batch's logits (B, C) into the counts: top-k hits, per-class counts, the confusion matrix.
void count_batch(EvalResult& r, const Tensor& logits, const Batch& batch, int64_t C, int64_t k, int64_t& correct_k) {
  const int64_t B = static_cast<int64_t>(batch.labels.size());
  for (int64_t i = 0; i < B; ++i) {
    const float* row = logits.data() + i * C;
    const int64_t y = batch.labels[size_t(i)];
    correct_k += rank_of(row, C, y) < k;
    const int64_t top = argmax_row(row, C);
    r.per_class_count[size_t(y)] += 1;
    r.confusion[size_t(y)][size_t(top)] += 1;  // top-1 hits: its diagonal
    const size_t at = size_t(batch.indices[size_t(i)]);  // the image's index in the evaluated dataset
    r.predicted.at(at) = static_cast<int32_t>(top);
    r.labels.at(at) = static_cast<int32_t>(y);
  }
  r.count += B;
}

// The summary and per-class figures from the counts. One count for both: top-1 is the
// confusion's trace.
void summarize(EvalResult& r, int64_t C, int64_t correct5, double loss_sum, double forward_seconds) {
  int64_t correct1 = 0;
  for (size_t c = 0; c < size_t(C); ++c) correct1 += r.confusion[c][c];
  if (r.count > 0) {
    r.loss = loss_sum / static_cast<double>(r.count);
    r.top1 = 100.0 * static_cast<double>(correct1) / static_cast<double>(r.count);
    r.top5 = 100.0 * static_cast<double>(correct5) / static_cast<double>(r.count);
  }
  r.per_class_accuracy.assign(size_t(C), 0.0);
  for (size_t c = 0; c < size_t(C); ++c)
    if (r.per_class_count[c] > 0)
      r.per_class_accuracy[c] =
          100.0 * static_cast<double>(r.confusion[c][c]) / static_cast<double>(r.per_class_count[c]);
  r.images_per_second = forward_seconds > 0.0 ? static_cast<double>(r.count) / forward_seconds : 0.0;
}

}  // namespace

// ---- dataset evaluation ------------------------------------------------------------

EvalResult evaluate(Model& model, std::shared_ptr<const Dataset> dataset, const EvalOptions& options) {
  check(dataset != nullptr, "evaluate: the dataset is null");
  check(options.batch_size > 0, "evaluate: batch_size ", options.batch_size, " must be positive");
  check(options.num_workers >= 0, "evaluate: num_workers ", options.num_workers, " must be >= 0");
  check(options.limit >= 0, "evaluate: limit ", options.limit, " must be >= 0 (0 = all)");
  const int64_t C = model.config().num_classes;
  check(C > 0, "evaluate: the model has ", C, " classes");
  check(options.limit <= dataset->size(), "--limit is ", options.limit, " but ", dataset->describe(), " has only ",
        dataset->size(), " images: give at most ", dataset->size(), " (0 = all)");
  if (options.limit > 0 && options.limit < dataset->size()) {
    std::vector<int64_t> first(static_cast<size_t>(options.limit));
    std::iota(first.begin(), first.end(), int64_t(0));
    dataset = std::make_shared<SubsetDataset>(dataset, std::move(first));
  }

  EvalResult r;
  r.per_class_count.assign(size_t(C), 0);
  r.confusion.assign(size_t(C), std::vector<int64_t>(size_t(C), 0));
  r.predicted.assign(size_t(dataset->size()), -1);
  r.labels.assign(size_t(dataset->size()), -1);
  const int64_t k = std::min<int64_t>(5, C);
  int64_t correct5 = 0;
  double loss_sum = 0.0, forward_seconds = 0.0;

  const Clock::time_point start = Clock::now();
  EvalModeGuard mode(model);
  NoGradGuard no_grad;
  DataLoader loader(dataset, {.batch_size = options.batch_size, .shuffle = false, .drop_last = false,
                              .num_workers = options.num_workers});
  loader.start_epoch(0);
  Batch batch;
  while (loader.next(batch)) {
    const int64_t B = static_cast<int64_t>(batch.labels.size());
    check_batch_labels(batch, *dataset, C);
    const Clock::time_point t0 = Clock::now();
    const Tensor logits = model.forward(batch.images);  // (B, C)
    forward_seconds += seconds_since(t0);
    check(logits.dim() == 2 && logits.size(0) == B && logits.size(1) == C, "evaluate: the model returned logits ",
          logits.shape(), " for a batch of ", B, " images and ", C, " classes");
    loss_sum += static_cast<double>(cross_entropy(logits, batch.labels, 0.f, Reduction::Sum).item());
    count_batch(r, logits, batch, C, k, correct5);
  }
  r.seconds = seconds_since(start);
  summarize(r, C, correct5, loss_sum, forward_seconds);
  return r;
}

nlohmann::json to_json(const EvalResult& r, const std::vector<std::string>& class_names) {
  nlohmann::json j = {{"count", r.count},
                      {"loss", r.loss},
                      {"top1", r.top1},
                      {"top5", r.top5},
                      {"per_class_accuracy", r.per_class_accuracy},
                      {"per_class_count", r.per_class_count},
                      {"confusion", r.confusion},
                      {"images_per_second", r.images_per_second},
                      {"seconds", r.seconds}};
  if (!class_names.empty()) {
    std::vector<std::string> names;
    for (size_t c = 0; c < r.per_class_count.size(); ++c) names.push_back(name_of(class_names, c));
    j["classes"] = names;
  }
  return j;
}

// The summary line, the per-class table and the confusion matrix ([true][predicted]):
//
//   top-1 91.23%  top-5 99.80%  loss 0.2412  10000 images  5231 img/s
//
//   class          images  accuracy
//   0 T-shirt/top    1000    85.30%
//   ...
//
//   confusion (rows: true class, columns: predicted class)
//                       0    1 ...
//   0 T-shirt/top     853    2 ...
std::string format_report(const EvalResult& r, const std::vector<std::string>& class_names) {
  std::ostringstream os;
  os << "top-1 " << format("%.2f", r.top1) << "%  top-5 " << format("%.2f", r.top5) << "%  loss "
     << format("%.4f", r.loss) << "  " << r.count << " images  " << format("%.0f", r.images_per_second)
     << " img/s\n";
  const size_t C = r.per_class_count.size();
  if (C == 0) return os.str();

  // Row labels "<index> <name>", padded to the longest.
  std::vector<std::string> labels;
  size_t label_width = std::string("class").size();
  for (size_t c = 0; c < C; ++c) {
    std::string name = name_of(class_names, c);
    labels.push_back(name == std::to_string(c) ? name : std::to_string(c) + " " + name);
    label_width = std::max(label_width, labels.back().size());
  }
  auto pad_right = [](const std::string& s, size_t w) { return s + std::string(w > s.size() ? w - s.size() : 0, ' '); };
  auto pad_left = [](const std::string& s, size_t w) { return std::string(w > s.size() ? w - s.size() : 0, ' ') + s; };

  os << "\n" << pad_right("class", label_width) << "  " << pad_left("images", 8) << "  " << pad_left("accuracy", 8)
     << "\n";
  for (size_t c = 0; c < C; ++c)
    os << pad_right(labels[c], label_width) << "  " << pad_left(std::to_string(r.per_class_count[c]), 8) << "  "
       << pad_left(format("%.2f", c < r.per_class_accuracy.size() ? r.per_class_accuracy[c] : 0.0) + "%", 8)
       << "\n";

  if (r.confusion.size() != C) return os.str();
  // Columns as wide as the largest count or class index, plus a space.
  size_t cell = std::to_string(C - 1).size();
  for (const auto& row : r.confusion)
    for (int64_t v : row) cell = std::max(cell, std::to_string(v).size());
  cell += 1;
  os << "\nconfusion (rows: true class, columns: predicted class)\n" << std::string(label_width, ' ') << " ";
  for (size_t p = 0; p < C; ++p) os << pad_left(std::to_string(p), cell);
  os << "\n";
  for (size_t t = 0; t < C; ++t) {
    os << pad_right(labels[t], label_width) << " ";
    for (size_t p = 0; p < C && p < r.confusion[t].size(); ++p) os << pad_left(std::to_string(r.confusion[t][p]), cell);
    os << "\n";
  }
  return os.str();
}

// ---- single images -----------------------------------------------------------------

std::vector<Prediction> predict_images(Model& model, const std::vector<std::string>& paths, int64_t topk,
                                       double crop_pct) {
  return predict_images(model, paths, eval_transform(model.config(), crop_pct), topk);
}

std::vector<Prediction> predict_images(Model& model, const std::vector<std::string>& paths, const Transform& transform,
                                       int64_t topk) {
  check(topk >= 1, "predict_images: topk ", topk, " must be at least 1");
  check(static_cast<bool>(transform), "predict_images: the transform is empty");
  const int64_t C = model.config().num_classes;
  const int64_t k = std::min(topk, C);
  constexpr size_t kBatch = 32;  // images per forward

  EvalModeGuard mode(model);
  NoGradGuard no_grad;
  std::vector<Prediction> out;
  for (size_t begin = 0; begin < paths.size(); begin += kBatch) {
    const size_t end = std::min(paths.size(), begin + kBatch);
    // Decode and transform; the transform gives every image the model's input shape.
    std::vector<Image> images;
    for (size_t i = begin; i < end; ++i) {
      Image img = read_image(paths[i], 0);  // errors name the file
      // Drop an alpha channel (grey + alpha -> grey, RGBA -> RGB): the planes come last in CHW.
      if (img.channels == 2 || img.channels == 4) {
        img.channels -= 1;
        img.data.resize(static_cast<size_t>(img.numel()));
      }
      Generator unused(0);  // the eval transform draws nothing
      try {
        images.push_back(transform(std::move(img), unused));
      } catch (const Error& e) {
        fail("predict_images: ", paths[i], ": ", e.what());
      }
    }
    std::vector<const Image*> ptrs;
    std::vector<int64_t> indices;
    for (size_t i = 0; i < images.size(); ++i) {
      ptrs.push_back(&images[i]);
      indices.push_back(static_cast<int64_t>(begin + i));
    }
    const Tensor x = stack_images(ptrs, indices, "predict_images: image");  // (B, C, H, W)
    const Tensor logits = model.forward(x);                                  // (B, classes)
    check(logits.dim() == 2 && logits.size(0) == int64_t(images.size()) && logits.size(1) == C,
          "predict_images: the model returned logits ", logits.shape(), " for ", images.size(), " images");
    const Tensor probs = softmax(logits, 1);
    for (size_t i = 0; i < images.size(); ++i) {
      const float* z = logits.data() + int64_t(i) * C;
      const float* p = probs.data() + int64_t(i) * C;
      Prediction pred;
      pred.path = paths[begin + i];
      pred.logits.assign(z, z + C);
      std::vector<int64_t> order(static_cast<size_t>(C));
      std::iota(order.begin(), order.end(), int64_t(0));
      // Most probable first, ties by lower class index.
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
      for (int64_t j = 0; j < k; ++j) {
        pred.classes.push_back(order[size_t(j)]);
        pred.probabilities.push_back(static_cast<double>(p[order[size_t(j)]]));
      }
      out.push_back(std::move(pred));
    }
  }
  return out;
}

// ---- checkpoint metadata -----------------------------------------------------------

CheckpointEvalInfo read_checkpoint_eval_info(const std::string& path) {
  const std::map<std::string, std::string> meta = read_safetensors_metadata(path);
  validate_checkpoint_metadata(meta, path);  // a train state, a std of 0: named before use
  auto parse = [&](const std::string& key) {
    try {
      return nlohmann::json::parse(meta.at(key));
    } catch (const nlohmann::json::exception& e) {
      fail(path, ": metadata \"", key, "\" is not valid JSON (", e.what(), ")");
    }
  };
  CheckpointEvalInfo info;
  check(meta.count("config"), path, ": no model config in the metadata (not a sima.cpp model checkpoint?)");
  try {
    info.config = stored_config_from_json(parse("config"), "config");
  } catch (const Error& e) {
    fail(path, ": ", e.what());
  }
  info.crop_pct = default_crop_pct(info.config.img_size);
  if (meta.count("normalization")) {
    const nlohmann::json n = parse("normalization");
    check(n.is_object(), path, ": metadata \"normalization\" is not a JSON object");
    auto floats = [&](const char* key) {
      const nlohmann::json& v = n.at(key);
      check(v.is_array() && !v.empty(), path, ": metadata normalization.", key, " is not a list of numbers");
      std::vector<float> out;
      for (const auto& x : v) {
        check(x.is_number(), path, ": metadata normalization.", key, " is not a list of numbers");
        out.push_back(x.get<float>());
      }
      return out;
    };
    if (n.contains("mean")) info.config.mean = floats("mean");
    if (n.contains("std")) info.config.std = floats("std");
    if (n.contains("crop_pct")) {
      check(n["crop_pct"].is_number(), path, ": metadata normalization.crop_pct is not a number");
      info.crop_pct = n["crop_pct"].get<double>();
      check(info.crop_pct > 0.0 && info.crop_pct <= 1.0, path, ": metadata normalization.crop_pct ", info.crop_pct,
            " is not in (0, 1]");
    }
  }
  if (meta.count("data")) info.data = meta.at("data");
  info.head_trained = !meta.count("dino");
  if (meta.count("classes")) {
    const nlohmann::json c = parse("classes");
    check(c.is_array(), path, ": metadata \"classes\" is not a JSON list");
    for (const auto& name : c) {
      check(name.is_string(), path, ": metadata \"classes\" holds a non-string ", name.dump());
      info.classes.push_back(name.get<std::string>());
    }
    check(int64_t(info.classes.size()) == info.config.num_classes, path, ": metadata \"classes\" names ",
          info.classes.size(), " classes but the model has ", info.config.num_classes,
          " outputs (config num_classes): a class list must name every output, in order");
  }
  return info;
}

LoadedCheckpoint load_checkpoint_for_eval(const std::string& path, const std::string& from,
                                          const std::string& model_spec) {
  LoadedCheckpoint out;
  if (is_pth_path(path)) {
    const UpstreamModel up = load_upstream_checkpoint(path, from, model_spec);
    out.model = up.model;
    out.note = up.note;
    check_finite_weights(out.model->state_dict(), path, /*saving=*/false);
    out.info.config = out.model->config();
    out.info.crop_pct = up.crop_pct;
    // A 1000-class head is ImageNet-1k's: its names, as sima-convert writes them.
    if (out.info.config.num_classes == kImagenetNumClasses) out.info.classes = imagenet_class_names();
    return out;
  }
  check(from.empty() && model_spec.empty(), path, ": --from / --model apply to torch.save (.pth) files only");
  out.info = read_checkpoint_eval_info(path);
  out.model = load_checkpoint(path);
  return out;
}

}  // namespace sima
