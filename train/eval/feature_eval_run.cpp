// sima-eval's frozen-feature evaluation (see feature_eval_run.h).
#include "train/eval/feature_eval_run.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <tuple>

#include "core/error.h"
#include "core/rng.h"

namespace sima {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string format(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

// A split: the seeded subset, then the transform.
std::shared_ptr<const Dataset> subset_then_transform(std::shared_ptr<const Dataset> ds, int64_t limit, uint64_t seed,
                                                     const Transform& transform, const std::string& flag) {
  if (limit > 0) ds = random_subset(ds, limit, seed, flag);
  if (transform) ds = std::make_shared<TransformedDataset>(ds, transform);
  return ds;
}

// The (train, test) splits of a feature evaluation, subset and transformed. With --validation,
// both come from the training split (the rest, and the held-out images) and r.eval_split says so.
std::pair<std::shared_ptr<const Dataset>, std::shared_ptr<const Dataset>> eval_splits(
    const DataSpec& spec, const Transform& transform, const FeatureEvalOptions& options, FeatureEvalResult& r) {
  if (options.validation <= 0)
    return {subset_then_transform(open_dataset(spec, true), options.train_limit, options.seed, transform, "--train-limit"),
            subset_then_transform(open_dataset(spec, false), options.limit, options.seed, transform, "--limit")};
  std::shared_ptr<const Dataset> all = open_dataset(spec, true);
  check(options.validation < all->size(), "--validation: ", options.validation, " must be below the ", all->size(),
        " training images (0 = evaluate the test split)");
  HoldoutSplit h = holdout_split(all, options.validation, options.validation_seed);
  r.eval_split = "validation";
  return {subset_then_transform(h.train, options.train_limit, options.seed, transform, "--train-limit"),
          subset_then_transform(h.validation, options.limit, options.seed, transform, "--limit")};
}

}  // namespace

std::vector<int64_t> parse_int_list(const std::string& text, const std::string& flag) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    check(!item.empty() && item[0] != ' ' && end == item.c_str() + item.size() && errno != ERANGE, flag, ": '", text,
          "' is not a comma-separated list of integers (e.g. 10,20,100,200)");
    out.push_back(v);
  }
  check(!out.empty() && text.back() != ',', flag, ": '", text,
        "' is not a comma-separated list of integers (e.g. 10,20,100,200)");
  return out;
}

FeatureEvalResult run_feature_eval(Model* model, const Transform& transform, const DataSpec& spec,
                                   const FeatureEvalOptions& options) {
  check(options.knn || options.linear_probe, "run_feature_eval: neither knn nor linear_probe is on");
  check(options.train_limit >= 0, "--train-limit: ", options.train_limit, " must be >= 0 (0 = all)");
  check(options.limit >= 0, "--limit: ", options.limit, " must be >= 0 (0 = all)");
  FeatureEvalResult r;
  r.features = model ? "model" : "pixels";
  r.feature_blocks = model ? options.extract.blocks : 1;
  r.data = to_string(spec);

  // Features of both splits, once.
  const Clock::time_point t0 = Clock::now();
  const auto [train, test] = eval_splits(spec, transform, options, r);
  if (options.knn)  // before the (slow) features: every k needs that many train images
    for (int64_t k : options.knn_options.ks)
      check(k <= train->size(), "--k: k = ", k, " is larger than the ", train->size(), " train images",
            options.train_limit > 0 ? " (--train-limit)" : "");
  auto features = [&](std::shared_ptr<const Dataset> ds) {
    return model ? extract_features(*model, ds, options.extract) : extract_pixels(ds, options.extract);
  };
  Features tr = features(train), te = features(test);
  if (!model && !transform && tr.x.size(0) > 0) {
    Generator g(0);
    const int64_t channels = train->get(0, g).image.channels;
    std::tie(r.pixel_mean, r.pixel_std) = standardize_pixels(tr, te, channels);
  }
  r.extract_seconds = seconds_since(t0);
  r.train_count = tr.x.size(0);
  r.test_count = te.x.size(0);
  r.dim = tr.x.size(1);
  r.num_classes = train->num_classes();
  if (r.num_classes <= 0)
    for (const auto* labels : {&tr.labels, &te.labels})
      for (int64_t y : *labels) r.num_classes = std::max(r.num_classes, y + 1);

  if (options.knn) {
    KnnOptions ko = options.knn_options;
    if (ko.num_classes == 0) ko.num_classes = r.num_classes;
    const Clock::time_point t1 = Clock::now();
    r.knn = knn_classify(tr.x, tr.labels, te.x, te.labels, ko);
    r.knn_seconds = seconds_since(t1);
    r.temperature = ko.temperature;
  }
  if (options.linear_probe) {
    r.probe_options = options.probe_options;
    if (r.probe_options.num_classes == 0) r.probe_options.num_classes = r.num_classes;
    r.probe = linear_probe(tr.x, tr.labels, te.x, te.labels, r.probe_options);
  }
  return r;
}

nlohmann::json to_json(const FeatureEvalResult& r) {
  nlohmann::json j{{"features", r.features},       {"feature_blocks", r.feature_blocks},
                   {"data", r.data},               {"eval_split", r.eval_split},
                   {"train_count", r.train_count},
                   {"test_count", r.test_count},   {"dim", r.dim},   {"num_classes", r.num_classes},
                   {"extract_seconds", r.extract_seconds}};
  if (!r.pixel_mean.empty()) {
    j["pixel_mean"] = r.pixel_mean;
    j["pixel_std"] = r.pixel_std;
  }
  if (!r.knn.empty()) {
    nlohmann::json results = nlohmann::json::array();
    for (const KnnResult& k : r.knn) results.push_back({{"k", k.k}, {"top1", k.top1}, {"top5", k.top5}});
    j["knn"] = {{"temperature", r.temperature}, {"seconds", r.knn_seconds}, {"results", results}};
  }
  if (r.probe) {
    const LinearProbeOptions& o = r.probe_options;
    nlohmann::json history = nlohmann::json::array();
    for (const ProbeEpoch& e : r.probe->epochs)
      history.push_back(
          {{"epoch", e.epoch}, {"train_loss", e.train_loss}, {"top1", e.top1}, {"top5", e.top5}, {"lr", e.lr}});
    j["linear_probe"] = {{"epochs", o.epochs},     {"lr", o.lr},
                         {"batch_size", o.batch_size}, {"weight_decay", o.weight_decay},
                         {"momentum", o.momentum}, {"top1", r.probe->top1},
                         {"top5", r.probe->top5},  {"seconds", r.probe->seconds},
                         {"history", history}};
  }
  return j;
}

std::string format_report(const FeatureEvalResult& r) {
  std::ostringstream s;
  s << "features ";
  if (r.features == "model" || r.features == "init") {
    s << r.features << (r.features == "init" ? " (random initialisation) " : " ");
    if (r.feature_blocks == 1)
      s << "(class token after the final norm)";
    else
      s << "(class tokens of the last " << r.feature_blocks << " blocks after the final norm, concatenated)";
  } else if (r.pixel_mean.empty()) {
    s << "pixels (the model's input)";
  } else {
    s << "pixels (standardised with the train split's mean";
    for (double m : r.pixel_mean) s << " " << format("%.4f", m);
    s << ", std";
    for (double v : r.pixel_std) s << " " << format("%.4f", v);
    s << ")";
  }
  s << ", " << r.dim << "-d\ndata " << r.data << ": " << r.train_count << " train / " << r.test_count << " "
    << (r.eval_split == "validation" ? "held-out validation" : "test") << " images, "
    << r.num_classes << " classes; features in " << format("%.1f", r.extract_seconds) << " s\n";
  if (!r.knn.empty()) {
    s << "\nweighted k-NN (cosine, exp(s/T), T = " << r.temperature << "; " << format("%.1f", r.knn_seconds)
      << " s)\n     k   top-1    top-5\n";
    for (const KnnResult& k : r.knn)
      s << format("%6.0f", double(k.k)) << "  " << format("%6.2f%%", k.top1) << "  " << format("%6.2f%%", k.top5)
        << "\n";
  }
  if (r.probe) {
    const LinearProbeOptions& o = r.probe_options;
    s << "\nlinear probe (SGD momentum " << o.momentum << ", lr " << o.lr << " cosine to 0, batch " << o.batch_size
      << ", weight decay " << o.weight_decay << "; " << format("%.1f", r.probe->seconds)
      << " s)\n  epoch  train loss   top-1    top-5\n";
    for (const ProbeEpoch& e : r.probe->epochs)
      s << format("%7.0f", double(e.epoch)) << "  " << format("%10.4f", e.train_loss) << "  "
        << format("%6.2f%%", e.top1) << "  " << format("%6.2f%%", e.top5) << "\n";
    s << "final: top-1 " << format("%.2f%%", r.probe->top1) << "  top-5 " << format("%.2f%%", r.probe->top5) << "\n";
  }
  return s.str();
}

}  // namespace sima
