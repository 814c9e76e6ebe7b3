// evaluate(): top-1/top-5, loss, per-class accuracy and the confusion matrix of a tiny DeiT on
// an in-memory dataset whose labels are placed at chosen ranks of the model's own logits
// (computed here by a direct forward), batching/workers/limit, mode restore, label errors;
// to_json / format_report; predict_images against a direct forward; checkpoint metadata.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include "core/autograd.h"
#include "core/ops.h"
#include "data/batch.h"
#include "data/image_io.h"
#include "data/temp_dir.h"
#include "models/io/checkpoint.h"
#include "models/registry.h"
#include "testing.h"
#include "train/config/transforms_factory.h"
#include "train/eval/evaluate.h"

using namespace sima;
using namespace sima::testing;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::shared_ptr<Model> tiny_model(uint64_t seed) {
  std::shared_ptr<Model> m =
      create_model(nlohmann::json{{"name", "deit_tiny_patch4_28"}, {"depth", 1}, {"embed_dim", 16}, {"num_heads", 2}});
  randomize_parameters(*m, seed, 0.5f);
  return m;
}

// Fixed images (already the model's input: 1 × 28 × 28) with labels set by the test.
class ListDataset : public Dataset {
 public:
  ListDataset(std::vector<Image> images, std::vector<int64_t> labels)
      : images_(std::move(images)), labels_(std::move(labels)) {}
  int64_t size() const override { return int64_t(images_.size()); }
  Sample get(int64_t i, Generator&) const override { return {images_[size_t(i)], labels_[size_t(i)]}; }
  int64_t num_classes() const override { return 10; }

 private:
  std::vector<Image> images_;
  std::vector<int64_t> labels_;
};

std::vector<Image> random_images(int64_t n, uint64_t seed) {
  Generator g(seed);
  std::vector<Image> out;
  for (int64_t i = 0; i < n; ++i) {
    Image img(1, 28, 28);
    g.fill_normal(img.data.data(), img.numel());
    out.push_back(std::move(img));
  }
  return out;
}

// The model's logits of each image, one forward of all of them in eval mode: (n, 10).
std::vector<std::vector<float>> direct_logits(Model& model, const std::vector<Image>& images) {
  NoGradGuard ng;
  const bool was = model.is_training();
  model.eval();
  std::vector<const Image*> ptrs;
  std::vector<int64_t> idx;
  for (size_t i = 0; i < images.size(); ++i) {
    ptrs.push_back(&images[i]);
    idx.push_back(int64_t(i));
  }
  Tensor z = model.forward(stack_images(ptrs, idx, "test"));
  model.train(was);
  std::vector<std::vector<float>> out;
  for (size_t i = 0; i < images.size(); ++i) out.emplace_back(z.data() + i * 10, z.data() + (i + 1) * 10);
  return out;
}

// Class indices sorted by decreasing logit (stable: ties keep the lower index first).
std::vector<int64_t> by_rank(const std::vector<float>& z) {
  std::vector<int64_t> order(z.size());
  std::iota(order.begin(), order.end(), int64_t(0));
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return z[size_t(a)] > z[size_t(b)]; });
  return order;
}

// −log softmax(z)[y] in double.
double nll(const std::vector<float>& z, int64_t y) {
  double m = *std::max_element(z.begin(), z.end()), s = 0;
  for (float v : z) s += std::exp(double(v) - m);
  return -(double(z[size_t(y)]) - m - std::log(s));
}

}  // namespace

TEST_CASE("evaluate: labels at ranks 0 / 1 / 4 / 5 of the model's logits: exact top-1, top-5, loss, confusion") {
  std::shared_ptr<Model> model = tiny_model(11);
  const int64_t n = 13;
  const std::vector<Image> images = random_images(n, 1);
  const std::vector<std::vector<float>> z = direct_logits(*model, images);
  // Sample i's label is the class at rank {0, 1, 4, 5}[i mod 4] of its logits (the edges of
  // top-1 and top-5): top-1 hits for i mod 4 == 0 (4 of 13), top-5 for i mod 4 <= 2 (10 of 13).
  std::vector<int64_t> labels, predicted;
  const int64_t ranks[4] = {0, 1, 4, 5};
  for (int64_t i = 0; i < n; ++i) {
    const std::vector<int64_t> order = by_rank(z[size_t(i)]);
    labels.push_back(order[size_t(ranks[i % 4])]);
    predicted.push_back(order[0]);
  }
  // The hand-computed expectations.
  double loss = 0;
  std::vector<std::vector<int64_t>> confusion(10, std::vector<int64_t>(10, 0));
  std::vector<int64_t> per_count(10, 0);
  for (int64_t i = 0; i < n; ++i) {
    loss += nll(z[size_t(i)], labels[size_t(i)]);
    confusion[size_t(labels[size_t(i)])][size_t(predicted[size_t(i)])]++;
    per_count[size_t(labels[size_t(i)])]++;
  }
  loss /= double(n);
  auto ds = std::make_shared<ListDataset>(images, labels);

  model->train();
  for (int workers : {0, 2}) {
    for (int64_t batch : {int64_t(4), int64_t(13), int64_t(100)}) {
      CAPTURE(workers);
      CAPTURE(batch);
      const EvalResult r = evaluate(*model, ds, {.batch_size = batch, .num_workers = workers});
      CHECK(model->is_training());  // mode restored
      CHECK(r.count == n);
      CHECK(r.top1 == doctest::Approx(100.0 * 4 / 13).epsilon(1e-12));
      CHECK(r.top5 == doctest::Approx(100.0 * 10 / 13).epsilon(1e-12));
      CHECK(r.loss == doctest::Approx(loss).epsilon(1e-5));
      CHECK(r.confusion == confusion);
      CHECK(r.per_class_count == per_count);
      REQUIRE(r.per_class_accuracy.size() == 10);
      for (size_t c = 0; c < 10; ++c) {
        CAPTURE(c);
        const double expected = per_count[c] ? 100.0 * double(confusion[c][c]) / double(per_count[c]) : 0.0;
        CHECK(r.per_class_accuracy[c] == doctest::Approx(expected).epsilon(1e-12));
      }
      CHECK(r.images_per_second > 0.0);
      CHECK(r.seconds > 0.0);
    }
  }
  // limit: the first 6 samples (top-1 hits i = 0, 4; top-5 i = 0, 1, 2, 4, 5).
  model->eval();
  const EvalResult r6 = evaluate(*model, ds, {.batch_size = 4, .num_workers = 1, .limit = 6});
  CHECK(!model->is_training());
  CHECK(r6.count == 6);
  CHECK(r6.top1 == doctest::Approx(100.0 * 2 / 6).epsilon(1e-12));
  CHECK(r6.top5 == doctest::Approx(100.0 * 5 / 6).epsilon(1e-12));
}

TEST_CASE("evaluate: labels out of range or missing name the sample index; bad options") {
  std::shared_ptr<Model> model = tiny_model(12);
  const std::vector<Image> images = random_images(5, 2);
  auto bad = std::make_shared<ListDataset>(images, std::vector<int64_t>{0, 1, 2, 10, 4});
  model->train();
  const std::string msg = error_message([&] { evaluate(*model, bad, {.batch_size = 2, .num_workers = 0}); });
  CHECK(contains(msg, "evaluate: sample 3 "));
  CHECK(contains(msg, "has label 10 (the model has 10 classes: 0..9)"));
  CHECK(model->is_training());  // restored on the error path too
  auto unlabelled = std::make_shared<ListDataset>(images, std::vector<int64_t>{0, -1, 2, 3, 4});
  const std::string msg2 = error_message([&] { evaluate(*model, unlabelled, {.batch_size = 8, .num_workers = 1}); });
  CHECK(contains(msg2, "evaluate: sample 1 "));
  CHECK(contains(msg2, "has no label"));
  auto good = std::make_shared<ListDataset>(images, std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(error_message([&] { evaluate(*model, good, {.batch_size = 0}); }) ==
        "evaluate: batch_size 0 must be positive");
  CHECK(error_message([&] { evaluate(*model, good, {.limit = -1}); }) ==
        "evaluate: limit -1 must be >= 0 (0 = all)");
}

TEST_CASE("to_json and format_report: values, the summary line, aligned tables") {
  EvalResult r;
  r.count = 10000;
  r.loss = 0.24123;
  r.top1 = 91.234;
  r.top5 = 99.8;
  r.images_per_second = 5231.4;
  r.seconds = 3.5;
  r.per_class_count = {6000, 4000, 0};
  r.per_class_accuracy = {95.0, 85.3, 0.0};
  r.confusion = {{5700, 300, 0}, {588, 3412, 0}, {0, 0, 0}};
  const nlohmann::json j = to_json(r, {"cat", "dog", "bird"});
  CHECK(j["count"] == 10000);
  CHECK(j["loss"] == 0.24123);
  CHECK(j["top1"] == 91.234);
  CHECK(j["top5"] == 99.8);
  CHECK(j["images_per_second"] == 5231.4);
  CHECK(j["seconds"] == 3.5);
  CHECK(j["per_class_accuracy"] == nlohmann::json({95.0, 85.3, 0.0}));
  CHECK(j["per_class_count"] == nlohmann::json({6000, 4000, 0}));
  CHECK(j["confusion"] == nlohmann::json({{5700, 300, 0}, {588, 3412, 0}, {0, 0, 0}}));
  CHECK(j["classes"] == nlohmann::json({"cat", "dog", "bird"}));
  CHECK(!to_json(r).contains("classes"));

  const std::string report = format_report(r, {"cat", "dog", "bird"});
  std::vector<std::string> lines;
  std::istringstream in(report);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  REQUIRE(lines.size() == 12);
  CHECK(lines[0] == "top-1 91.23%  top-5 99.80%  loss 0.2412  10000 images  5231 img/s");
  CHECK(lines[1] == "");
  CHECK(lines[2] == "class     images  accuracy");
  CHECK(lines[3] == "0 cat       6000    95.00%");
  CHECK(lines[4] == "1 dog       4000    85.30%");
  CHECK(lines[5] == "2 bird         0     0.00%");
  CHECK(lines[6] == "");
  CHECK(lines[7] == "confusion (rows: true class, columns: predicted class)");
  CHECK(lines[8] == "           0    1    2");
  CHECK(lines[9] == "0 cat   5700  300    0");
  CHECK(lines[10] == "1 dog    588 3412    0");
  CHECK(lines[11] == "2 bird     0    0    0");
  for (size_t i = 9; i < 12; ++i) CHECK(lines[i].size() == lines[8].size());  // aligned columns
  // Without names: the class indices only.
  const std::string plain = format_report(r);
  CHECK(contains(plain, "\n0          6000    95.00%\n"));
}

TEST_CASE("predict_images: a PNG's top-k equals a direct forward of its eval transform") {
  std::shared_ptr<Model> model = tiny_model(13);
  TempDir dir;
  // A grey 28×28 image (the model's size) and an RGB 40×33 one (resized, cropped, to grey).
  Generator g(4);
  Image grey(1, 28, 28), rgb(3, 40, 33);
  g.fill_uniform(grey.data.data(), grey.numel());
  g.fill_uniform(rgb.data.data(), rgb.numel());
  const std::string p1 = dir.file("grey.png"), p2 = dir.file("rgb.png");
  write_png(p1, grey);
  write_png(p2, rgb);

  model->train();
  const std::vector<Prediction> preds = predict_images(*model, {p1, p2, p1}, 3, 0.875);
  CHECK(model->is_training());
  REQUIRE(preds.size() == 3);
  const Transform t = eval_transform(model->config(), 0.875);
  Generator unused(0);
  const std::vector<Image> inputs = {t(read_image(p1), unused), t(read_image(p2), unused)};
  REQUIRE(inputs[1].channels == 1);
  REQUIRE(inputs[1].height == 28);
  const std::vector<std::vector<float>> z = direct_logits(*model, inputs);
  for (size_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    const std::vector<float>& zi = z[i == 1 ? 1 : 0];
    const Prediction& p = preds[i];
    CHECK(p.path == (i == 1 ? p2 : p1));
    REQUIRE(p.logits.size() == 10);
    for (size_t c = 0; c < 10; ++c) CHECK(p.logits[c] == doctest::Approx(zi[c]).epsilon(1e-5));
    const std::vector<int64_t> order = by_rank(zi);
    REQUIRE(p.classes.size() == 3);
    REQUIRE(p.probabilities.size() == 3);
    for (size_t k = 0; k < 3; ++k) {
      CHECK(p.classes[k] == order[k]);
      CHECK(p.probabilities[k] == doctest::Approx(std::exp(-nll(zi, order[k]))).epsilon(1e-5));
    }
  }
  // topk larger than the class count: every class, probabilities summing to 1.
  const Prediction all = predict_images(*model, {p1}, 50, 0.875)[0];
  CHECK(all.classes.size() == 10);
  CHECK(std::accumulate(all.probabilities.begin(), all.probabilities.end(), 0.0) == doctest::Approx(1.0).epsilon(1e-5));
}

TEST_CASE("predict_images: unreadable images and bad topk are errors naming the file") {
  std::shared_ptr<Model> model = tiny_model(14);
  TempDir dir;
  const std::string junk = dir.file("junk.png");
  write_bytes(junk, {'n', 'o', 't', ' ', 'a', 'n', ' ', 'i', 'm', 'a', 'g', 'e'});
  CHECK(contains(error_message([&] { predict_images(*model, {junk}); }), junk));
  const std::string missing = dir.str() + "/missing.png";
  CHECK(contains(error_message([&] { predict_images(*model, {missing}); }), missing));
  CHECK(error_message([&] { predict_images(*model, {junk}, 0); }) == "predict_images: topk 0 must be at least 1");
}

TEST_CASE("read_checkpoint_eval_info: config, normalisation, crop_pct, data, classes from the metadata") {
  std::shared_ptr<Model> model = tiny_model(15);
  TempDir dir;
  const std::string full = dir.file("full.safetensors");
  save_checkpoint(full, *model,
                  {{"normalization", R"({"mean": [0.5], "std": [0.25], "img_size": 28, "crop_pct": 0.9})"},
                   {"data", "fashion_mnist"},
                   {"classes", R"(["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"])"}});
  const CheckpointEvalInfo info = read_checkpoint_eval_info(full);
  CHECK(info.config.embed_dim == 16);
  CHECK(info.config.depth == 1);
  CHECK(info.config.mean == std::vector<float>{0.5f});
  CHECK(info.config.std == std::vector<float>{0.25f});
  CHECK(info.crop_pct == 0.9);
  CHECK(info.data == "fashion_mnist");
  CHECK(info.classes == std::vector<std::string>{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"});

  const std::string bare = dir.file("bare.safetensors");
  save_checkpoint(bare, *model);
  const CheckpointEvalInfo b = read_checkpoint_eval_info(bare);
  CHECK(b.config.mean == model->config().mean);
  CHECK(b.crop_pct == 1.0);  // default_crop_pct(28)
  CHECK(b.data.empty());
  CHECK(b.classes.empty());

  const std::string bad = dir.file("bad.safetensors");
  save_checkpoint(bad, *model, {{"classes", R"(["a", "b"])"}});  // two names for a 10-class head
  CHECK(error_message([&] { read_checkpoint_eval_info(bad); }) ==
        bad + ": metadata \"classes\" names 2 classes but the model has 10 outputs (config num_classes): a class "
              "list must name every output, in order");
  save_checkpoint(bad, *model, {{"classes", "[1, 2"}});
  CHECK(contains(error_message([&] { read_checkpoint_eval_info(bad); }),
                 bad + ": metadata \"classes\" is not valid JSON"));
  save_checkpoint(bad, *model, {{"normalization", R"({"crop_pct": 2})"}});
  CHECK(error_message([&] { read_checkpoint_eval_info(bad); }) ==
        bad + ": metadata normalization.crop_pct 2 is not in (0, 1]");
}
