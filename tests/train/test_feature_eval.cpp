// Frozen-feature evaluation (train/eval/feature_eval.h, train/eval/feature_eval_run.h, sima-eval --knn /
// --linear-probe): DINO's weighted k-NN on 2-D points with hand-worked weights, the temperature
// flipping a vote, ties, ℓ2-normalisation, k > N_train, chunking, a brute-force oracle on random
// clusters; the linear probe on a separable set; feature extraction (shape, determinism, equal to
// what the head sees for DeiT, XCiT and CvT); the sima-eval flags, --features pixels on a
// Fashion-MNIST subset checked against the library, and every bad flag combination.
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <sstream>

#include "app_testing.h"
#include "core/autograd.h"
#include "core/ops.h"
#include "data/batch.h"
#include "data/temp_dir.h"
#include "models/io/checkpoint.h"
#include "models/registry.h"
#include "testing.h"
#include "train/config/data_spec.h"
#include "train/config/transforms_factory.h"
#include "train/eval/evaluate.h"
#include "train/eval/feature_eval.h"
#include "train/eval/feature_eval_run.h"

using namespace sima;
using namespace sima::testing;

namespace {

constexpr double kPi = 3.14159265358979323846;

// Unit 2-D points at the given angles (degrees), scaled by `scale`: (n, 2).
Tensor at_angles(const std::vector<double>& degrees, const std::vector<float>& scale = {}) {
  Tensor t = empty({int64_t(degrees.size()), 2});
  for (size_t i = 0; i < degrees.size(); ++i) {
    const float s = scale.empty() ? 1.f : scale[i];
    t.data()[2 * i] = s * float(std::cos(degrees[i] * kPi / 180.0));
    t.data()[2 * i + 1] = s * float(std::sin(degrees[i] * kPi / 180.0));
  }
  return t;
}

double cosd(double degrees) { return std::cos(degrees * kPi / 180.0); }

// The number of correct top-1 / top-min(5, k, C) of a brute-force DINO k-NN: full sort of every
// similarity (ties by lower index), class weights Σ exp(s/T), rank of the true class (ties by
// lower class index), all in double.
std::pair<int64_t, int64_t> brute_force_knn(const Tensor& train, const std::vector<int64_t>& train_y,
                                            const Tensor& test, const std::vector<int64_t>& test_y, int64_t k,
                                            double T, int64_t C) {
  const int64_t N = train.size(0), M = test.size(0), D = train.size(1);
  auto norm = [&](const float* x) {
    double s = 0;
    for (int64_t d = 0; d < D; ++d) s += double(x[d]) * x[d];
    return std::max(std::sqrt(s), 1e-12);
  };
  int64_t c1 = 0, c5 = 0;
  for (int64_t i = 0; i < M; ++i) {
    const float* q = test.data() + i * D;
    std::vector<std::pair<double, int64_t>> sims;
    for (int64_t j = 0; j < N; ++j) {
      const float* t = train.data() + j * D;
      double dot = 0;
      for (int64_t d = 0; d < D; ++d) dot += double(q[d]) * t[d];
      sims.push_back({dot / (norm(q) * norm(t)), j});
    }
    std::sort(sims.begin(), sims.end(), [](auto& a, auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
    std::vector<double> w(size_t(C), 0.0);
    for (int64_t j = 0; j < k; ++j) w[size_t(train_y[size_t(sims[size_t(j)].second)])] += std::exp(sims[size_t(j)].first / T);
    const int64_t y = test_y[size_t(i)];
    int64_t rank = 0;
    for (int64_t c = 0; c < C; ++c) rank += w[size_t(c)] > w[size_t(y)] || (w[size_t(c)] == w[size_t(y)] && c < y);
    c1 += rank < 1;
    c5 += rank < std::min<int64_t>({5, k, C});
  }
  return {c1, c5};
}

// n points per class around well-separated random centres in D dims: (C·n, D) and labels.
Features clusters(int64_t C, int64_t n, int64_t D, float spread, uint64_t seed) {
  Generator g(seed);
  std::vector<float> centres(size_t(C * D));
  g.fill_normal(centres.data(), C * D);
  Features f;
  f.x = empty({C * n, D});
  for (int64_t i = 0; i < C * n; ++i) {
    const int64_t c = i % C;
    f.labels.push_back(c);
    for (int64_t d = 0; d < D; ++d) f.x.data()[i * D + d] = centres[size_t(c * D + d)] + spread * g.normal();
  }
  return f;
}

}  // namespace

// ---- k-NN ---------------------------------------------------------------------------------

TEST_CASE("knn: hand-worked neighbours and weights of 2-D points; ℓ2-normalisation makes the scale irrelevant") {
  // Train: class 0 at 0° and 10°, class 1 at 80° and 90°, class 2 at 180°. Query at 30°.
  const std::vector<int64_t> labels = {0, 0, 1, 1, 2};
  const Tensor train = at_angles({0, 10, 80, 90, 180});
  const Tensor query = at_angles({30});
  const Neighbours nb = knn_search(train, query, 3);
  // Nearest by cosine: 10° (cos 20°), 0° (cos 30°), 80° (cos 50°).
  CHECK(nb.index == std::vector<int64_t>{1, 0, 2});
  CHECK(nb.similarity[0] == doctest::Approx(cosd(20)).epsilon(1e-6));
  CHECK(nb.similarity[1] == doctest::Approx(cosd(30)).epsilon(1e-6));
  CHECK(nb.similarity[2] == doctest::Approx(cosd(50)).epsilon(1e-6));
  const double T = 0.07;
  std::vector<double> w = knn_class_weights(nb, 0, 3, labels, T, 3);
  CHECK(w[0] == doctest::Approx(std::exp(cosd(20) / T) + std::exp(cosd(30) / T)).epsilon(1e-5));
  CHECK(w[1] == doctest::Approx(std::exp(cosd(50) / T)).epsilon(1e-5));
  CHECK(w[2] == 0.0);
  // k = 1: only the nearest votes.
  w = knn_class_weights(nb, 0, 1, labels, T, 3);
  CHECK(w[0] == doctest::Approx(std::exp(cosd(20) / T)).epsilon(1e-5));
  CHECK(w[1] == 0.0);

  // Scaling the rows (train and query) by positive factors changes nothing: cosine similarity.
  const Tensor scaled = at_angles({0, 10, 80, 90, 180}, {7.f, 0.01f, 3.f, 100.f, 0.5f});
  const Neighbours nb2 = knn_search(scaled, at_angles({30}, {42.f}), 3);
  CHECK(nb2.index == nb.index);
  for (size_t j = 0; j < 3; ++j) CHECK(nb2.similarity[j] == doctest::Approx(nb.similarity[j]).epsilon(1e-6));
  // Without the normalisation the 100× point at 90° would win a dot product; it does not.
  CHECK(nb2.index[0] == 1);

  // Classification: queries at 30° (class 0), 70° (class 1), 200° (class 2); k = 1 and 3.
  const std::vector<KnnResult> r =
      knn_classify(train, labels, at_angles({30, 70, 200}), {0, 1, 2}, {.ks = {1, 3}, .temperature = T});
  REQUIRE(r.size() == 2);
  CHECK(r[0].k == 1);
  CHECK(r[0].top1 == doctest::Approx(100.0));
  CHECK(r[0].count == 3);
  // k = 3: 30° -> 10°, 0°, 80° (class 0 wins); 70° -> 80°, 90°, 10° (class 1); 200° -> 180°
  // (s = cos 20°), then 90° and 80° (s < 0): class 2's e^{cos 20°/T} wins.
  CHECK(r[1].k == 3);
  CHECK(r[1].top1 == doctest::Approx(100.0));
}

TEST_CASE("knn: the temperature changes the vote (one close neighbour against two farther ones)") {
  // Query at 0°, class 0. Train: one class-0 point at 0° (s = 1), two class-1 points at ±40°
  // (s = cos 40° = 0.766 each), k = 3.
  //   T = 0.07: w0 = e^{14.29} = 1.6e6  >  w1 = 2·e^{10.94} = 1.1e5   -> class 0 (correct)
  //   T = 1:    w0 = e^{1} = 2.72       <  w1 = 2·e^{0.766} = 4.30    -> class 1 (wrong)
  const Tensor train = at_angles({0, 40, -40});
  const std::vector<int64_t> labels = {0, 1, 1};
  const Tensor query = at_angles({0});
  auto top1 = [&](double T) { return knn_classify(train, labels, query, {0}, {.ks = {3}, .temperature = T})[0].top1; };
  CHECK(top1(0.07) == 100.0);
  CHECK(top1(1.0) == 0.0);
  // The crossover: e^{1/T} = 2·e^{cos40/T}  <=>  T = (1 − cos 40°) / ln 2 = 0.3376.
  CHECK(top1(0.33) == 100.0);
  CHECK(top1(0.35) == 0.0);
  // The weights themselves.
  const Neighbours nb = knn_search(train, query, 3);
  const std::vector<double> w = knn_class_weights(nb, 0, 3, labels, 1.0, 2);
  CHECK(w[0] == doctest::Approx(std::exp(1.0)).epsilon(1e-6));
  CHECK(w[1] == doctest::Approx(2 * std::exp(cosd(40))).epsilon(1e-6));
}

TEST_CASE("knn: ties (equal similarities -> lower train index; equal weights -> lower class), top-5 = top-min(5, k)") {
  // Two train points in the same direction with labels 1 (index 0) and 0 (index 1).
  const Tensor train = at_angles({45, 45, 180});
  const std::vector<int64_t> labels = {1, 0, 2};
  const Neighbours nb = knn_search(train, at_angles({45}), 2);
  CHECK(nb.index == std::vector<int64_t>{0, 1});  // same similarity: lower index first
  // k = 1: the first of the tied points (label 1) votes alone.
  std::vector<KnnResult> r = knn_classify(train, labels, at_angles({45}), {1}, {.ks = {1}});
  CHECK(r[0].top1 == 100.0);
  r = knn_classify(train, labels, at_angles({45}), {0}, {.ks = {1}});
  CHECK(r[0].top1 == 0.0);
  CHECK(r[0].top5 == 0.0);  // top-5 with k = 1 is top-1 (DINO: min(5, k)), though class 0 ranks second
  // k = 2: w0 = w1 -> the lower class (0) ranks first.
  r = knn_classify(train, labels, at_angles({45, 45}), {1, 0}, {.ks = {2}});
  CHECK(r[0].top1 == 50.0);  // class 0 right, class 1 second
  CHECK(r[0].top5 == 100.0);
  // A class-2 query at 45°: with k = 2 classes 0 and 1 have weight e^{1/T} and class 2 has 0
  // (rank 2, outside min(5, k) = 2); with k = 3 the point at 180° (s = cos 135°) gives class 2
  // a small weight e^{-10.1}, still rank 2, now inside min(5, 3) = 3.
  r = knn_classify(train, labels, at_angles({45}), {2}, {.ks = {2, 3}});
  CHECK(r[0].top5 == 0.0);    // k = 2: class 2 ranks third, outside min(5, 2)
  CHECK(r[1].top5 == 100.0);  // k = 3: class 2 at 180° is the third neighbour, rank 2 < 3
}

TEST_CASE("knn: errors; k larger than the train set is an error, not a clamp") {
  const Tensor train = at_angles({0, 90, 180});
  const std::vector<int64_t> labels = {0, 1, 2};
  const Tensor q = at_angles({10});
  CHECK(error_message([&] { knn_classify(train, labels, q, {0}, {.ks = {4}}); }) ==
        "knn_classify: k = 4 is larger than the 3 train samples");
  CHECK(error_message([&] { knn_classify(train, labels, q, {0}, {.ks = {0}}); }) ==
        "knn_classify: k = 0 must be at least 1");
  CHECK(error_message([&] { knn_classify(train, labels, q, {0}, {.ks = {1}, .temperature = 0.0}); })
            .find("temperature 0 must be positive") != std::string::npos);
  CHECK(error_message([&] { knn_classify(train, {0, 1}, q, {0}, {.ks = {1}}); }) ==
        "knn_classify: 2 train labels for 3 rows");
  CHECK(error_message([&] { knn_classify(train, labels, empty({1, 3}), {0}, {.ks = {1}}); }) ==
        "knn_classify: train features are 2-d, test features 3-d");
  CHECK(error_message([&] { knn_classify(train, labels, q, {5}, {.ks = {1}, .num_classes = 3}); }) ==
        "knn_classify: test label 5 (row 0) is not in [0, 3)");
  CHECK(error_message([&] { knn_search(train, q, 9); }) == "knn_search: k = 9 is larger than the 3 train samples");
}

TEST_CASE("knn: random clusters agree with a brute-force oracle for every k, whatever the chunk size") {
  // 330 points around 6 centres: the first 240 for training, the other 90 as queries.
  const Features all = clusters(6, 55, 12, 1.2f, 1);
  const Tensor train = narrow(all.x, 0, 0, 240), test = narrow(all.x, 0, 240, 90);
  const std::vector<int64_t> train_y(all.labels.begin(), all.labels.begin() + 240),
      test_y(all.labels.begin() + 240, all.labels.end());
  const std::vector<int64_t> ks = {20, 1, 7, 240, 20};  // any order, duplicates, k = N
  const std::vector<KnnResult> whole = knn_classify(train, train_y, test, test_y, {.ks = ks});
  const std::vector<KnnResult> one_row = knn_classify(train, train_y, test, test_y, {.ks = ks, .max_chunk_floats = 1});
  const std::vector<KnnResult> odd = knn_classify(train, train_y, test, test_y, {.ks = ks, .max_chunk_floats = 240 * 7});
  REQUIRE(whole.size() == ks.size());
  for (size_t i = 0; i < ks.size(); ++i) {
    CAPTURE(ks[i]);
    CHECK(whole[i].k == ks[i]);
    const auto [c1, c5] = brute_force_knn(train, train_y, test, test_y, ks[i], 0.07, 6);
    CHECK(whole[i].top1 == doctest::Approx(100.0 * double(c1) / 90.0));
    CHECK(whole[i].top5 == doctest::Approx(100.0 * double(c5) / 90.0));
    CHECK(one_row[i].top1 == whole[i].top1);
    CHECK(odd[i].top5 == whole[i].top5);
  }
  // The clusters are separable enough that 20-NN is good but not perfect, and the full-set
  // vote (k = N) is still dominated by the nearest neighbours at T = 0.07.
  CHECK(whole[0].top1 > 80.0);
  CHECK(whole[3].top1 > 50.0);
}

TEST_CASE("knn: a NaN feature row is never a neighbour while finite rows remain") {
  Tensor train = at_angles({0, 10, 90});
  train.data()[2] = std::nanf("");  // row 1 (10°) becomes NaN
  const Neighbours nb = knn_search(train, at_angles({10}), 2);
  CHECK(nb.index == std::vector<int64_t>{0, 2});
}

// ---- linear probe -------------------------------------------------------------------------

TEST_CASE("linear probe: ~100% on a linearly separable set, deterministic by seed, cosine lr to 0") {
  const Features all = clusters(4, 150, 16, 0.3f, 3);
  const Tensor train = narrow(all.x, 0, 0, 400), test = narrow(all.x, 0, 400, 200);
  const std::vector<int64_t> train_y(all.labels.begin(), all.labels.begin() + 400),
      test_y(all.labels.begin() + 400, all.labels.end());
  int64_t calls = 0;
  LinearProbeOptions o{.epochs = 10, .lr = 0.1, .batch_size = 32, .seed = 5};
  o.on_epoch = [&](const ProbeEpoch& e) { CHECK(e.epoch == ++calls); };
  const LinearProbeResult r = linear_probe(train, train_y, test, test_y, o);
  CHECK(calls == 10);
  REQUIRE(r.epochs.size() == 10);
  CHECK(r.top1 == 100.0);
  CHECK(r.top5 == 100.0);  // top-min(5, 4)
  CHECK(r.epochs.back().train_loss < 0.05);
  CHECK(r.epochs.back().train_loss < r.epochs.front().train_loss);
  // Cosine per step from 0.1 to 0 over 10 · 13 steps: the last step's lr is tiny.
  CHECK(r.epochs.front().lr < 0.1);
  CHECK(r.epochs.front().lr > 0.09);
  CHECK(r.epochs.back().lr < 1e-3);
  CHECK(r.head->weight.shape() == Shape({4, 16}));

  // The same seed gives the same head, another seed another one.
  const LinearProbeResult again = linear_probe(train, train_y, test, test_y, {.epochs = 10, .lr = 0.1, .batch_size = 32, .seed = 5});
  CHECK(to_vector(again.head->weight) == to_vector(r.head->weight));
  const LinearProbeResult other = linear_probe(train, train_y, test, test_y, {.epochs = 10, .lr = 0.1, .batch_size = 32, .seed = 6});
  CHECK(to_vector(other.head->weight) != to_vector(r.head->weight));

  // Labels shuffled at random: nothing to learn, test accuracy near chance (25%).
  std::vector<int64_t> shuffled = train_y;
  Generator g(9);
  for (size_t i = shuffled.size() - 1; i > 0; --i) std::swap(shuffled[i], shuffled[g.randint(i + 1)]);
  CHECK(linear_probe(train, shuffled, test, test_y, {.epochs = 3, .lr = 0.1, .batch_size = 32}).top1 < 60.0);
}

TEST_CASE("linear probe: errors name the option") {
  const Tensor x = at_angles({0, 90});
  const std::vector<int64_t> y = {0, 1};
  CHECK(error_message([&] { linear_probe(x, y, x, y, {.epochs = 0}); }) == "linear_probe: epochs 0 must be at least 1");
  CHECK(error_message([&] { linear_probe(x, y, x, y, {.lr = -1.0}); }) == "linear_probe: lr -1 must be positive");
  CHECK(error_message([&] { linear_probe(x, y, x, y, {.batch_size = 0}); }) ==
        "linear_probe: batch_size 0 must be at least 1");
  CHECK(error_message([&] { linear_probe(x, y, empty({2, 3}), y); }) ==
        "linear_probe: train features are 2-d, test features 3-d");
  CHECK(error_message([&] { linear_probe(x, {0, -1}, x, y); }) == "linear_probe: train label -1 (row 1) is not in [0, 2)");
}

// ---- feature extraction -----------------------------------------------------------------

namespace {

// Fixed 1 × 28 × 28 images with labels.
class ListDataset : public Dataset {
 public:
  ListDataset(int64_t n, uint64_t seed, bool labelled = true) {
    Generator g(seed);
    for (int64_t i = 0; i < n; ++i) {
      Image img(1, 28, 28);
      g.fill_normal(img.data.data(), img.numel());
      images_.push_back(std::move(img));
      labels_.push_back(labelled || i != n - 1 ? i % 10 : -1);
    }
  }
  int64_t size() const override { return int64_t(images_.size()); }
  Sample get(int64_t i, Generator&) const override { return {images_[size_t(i)], labels_[size_t(i)]}; }
  int64_t num_classes() const override { return 10; }
  std::string describe() const override { return "list"; }
  const std::vector<Image>& images() const { return images_; }

 private:
  std::vector<Image> images_;
  std::vector<int64_t> labels_;
};

Tensor stack_all(const ListDataset& ds) {
  std::vector<const Image*> ptrs;
  std::vector<int64_t> idx;
  for (size_t i = 0; i < ds.images().size(); ++i) {
    ptrs.push_back(&ds.images()[i]);
    idx.push_back(int64_t(i));
  }
  return stack_images(ptrs, idx, "test");
}

}  // namespace

TEST_CASE("extract_features: (N, D) in dataset order, deterministic, what the head sees, for DeiT, XCiT and CvT") {
  auto ds = std::make_shared<ListDataset>(10, 1);
  const nlohmann::json configs[] = {
      {{"name", "deit_tiny_patch4_28"}, {"depth", 1}, {"embed_dim", 16}, {"num_heads", 2}},
      {{"name", "xcit_nano_12_p4_28"}, {"depth", 1}, {"embed_dim", 16}, {"num_heads", 2}},
      {{"name", "cvt_13_28_sima"}, {"stage_dims", {8, 16, 16}}, {"stage_depths", {1, 1, 1}}, {"stage_heads", {1, 2, 2}}},
  };
  for (const nlohmann::json& cfg : configs) {
    CAPTURE(cfg.dump());
    std::shared_ptr<Model> model = create_model(cfg);
    randomize_parameters(*model, 3, 0.3f);
    model->train();
    const Features f = extract_features(*model, ds, {.batch_size = 3, .num_workers = 0});
    CHECK(model->is_training());  // mode restored
    REQUIRE(f.x.shape() == Shape({10, 16}));  // embed_dim / the last stage's width
    CHECK(f.labels == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
    // Bit for bit the same a second time, with workers and another batch size close.
    const Features again = extract_features(*model, ds, {.batch_size = 3, .num_workers = 2});
    CHECK(to_vector(again.x) == to_vector(f.x));
    const Features other = extract_features(*model, ds, {.batch_size = 10, .num_workers = 0});
    CHECK(max_abs_diff(other.x, f.x) < 1e-4f);
    // The features are exactly the head's input: head(features) = the eval-mode logits.
    NoGradGuard ng;
    model->eval();
    const Tensor logits = model->forward(stack_all(*ds));
    const Tensor from_features = model->heads(f.x)[0];
    CHECK(max_abs_diff(from_features, logits) < 1e-4f);
    CHECK(max_abs_diff(model->forward_features(stack_all(*ds)), f.x) < 1e-4f);
  }
}

TEST_CASE("extract_pixels: the images flattened; unlabelled samples are an error") {
  auto ds = std::make_shared<ListDataset>(5, 2);
  const Features f = extract_pixels(ds, {.batch_size = 2, .num_workers = 0});
  REQUIRE(f.x.shape() == Shape({5, 784}));
  for (int64_t i = 0; i < 5; ++i)
    CHECK(std::equal(ds->images()[size_t(i)].data.begin(), ds->images()[size_t(i)].data.end(), f.x.data() + i * 784));
  auto unlabelled = std::make_shared<ListDataset>(4, 2, /*labelled=*/false);
  CHECK(error_message([&] { extract_pixels(unlabelled, {.num_workers = 0}); }) ==
        "extract_pixels: sample 3 of list has no label");
}

TEST_CASE("standardize_pixels: per-channel train statistics applied to train and test") {
  // Two 2-channel "images" of 2 pixels each (CHW): channel 0 = {0, 2} and {4, 6}, channel 1 = {1, 1}, {1, 1}.
  Features train{from_vector({0, 2, 1, 1, 4, 6, 1, 1}, Shape({2, 4})), {0, 1}};
  Features test{from_vector({3, 3, 5, 1}, Shape({1, 4})), {0}};
  const auto [mean, stdev] = standardize_pixels(train, test, 2);
  CHECK(mean == std::vector<double>{3.0, 1.0});
  CHECK(stdev[0] == doctest::Approx(std::sqrt(5.0)));  // population variance of {0, 2, 4, 6}
  CHECK(stdev[1] == 1.0);                              // constant channel: std 0 -> 1
  const float s5 = float(std::sqrt(5.0));
  check_close(train.x, {-3 / s5, -1 / s5, 0, 0, 1 / s5, 3 / s5, 0, 0}, 1e-6f);
  check_close(test.x, {0, 0, 4, 0}, 1e-6f);
  CHECK(error_message([&] { standardize_pixels(train, test, 3); }) ==
        "standardize_pixels: 4 values per image are not 3 channels");
}

TEST_CASE("parse_int_list") {
  CHECK(parse_int_list("20", "--k") == std::vector<int64_t>{20});
  CHECK(parse_int_list("10,20,100,200", "--k") == std::vector<int64_t>{10, 20, 100, 200});
  for (const char* bad : {"", "10,", ",10", "10,,20", "ten", "10 20", "1e2"})
    CHECK_MESSAGE(error_message([&] { parse_int_list(bad, "--k"); }).rfind("--k: '", 0) == 0, bad);
}

// ---- sima-eval --knn / --linear-probe -------------------------------------------------------

namespace {

// sima-eval's --json output of a run that must succeed (its stderr shown when it does not).
nlohmann::json eval_json(const std::string& command) {
  Run r = run_app(command);
  INFO("stderr: " << r.err);
  REQUIRE(r.status == 0);
  return nlohmann::json::parse(r.out);
}

}  // namespace

TEST_CASE("sima-eval --features pixels --knn --linear-probe on a Fashion-MNIST subset agrees with the library") {
  const nlohmann::json j = eval_json(
      "sima-eval --features pixels --data fashion_mnist --knn --k 1,20 --train-limit 2000 --limit 300 --linear-probe "
      "--probe-epochs 3 --probe-lr 0.05 --seed 4 --workers 0 --json");
  CHECK(j["features"] == "pixels");
  CHECK(j["data"] == "fashion_mnist");
  CHECK(j["train_count"] == 2000);
  CHECK(j["test_count"] == 300);
  CHECK(j["dim"] == 784);
  CHECK(j["num_classes"] == 10);
  REQUIRE(j["knn"]["results"].size() == 2);
  CHECK(j["knn"]["temperature"] == 0.07);
  CHECK(j["linear_probe"]["history"].size() == 3);
  CHECK(j["linear_probe"]["epochs"] == 3);

  // Standardised with the subset's own statistics, close to Fashion-MNIST's 0.2860 / 0.3530.
  REQUIRE(j["pixel_mean"].size() == 1);
  CHECK(j["pixel_mean"][0].get<double>() == doctest::Approx(0.2860).epsilon(0.03));
  CHECK(j["pixel_std"][0].get<double>() == doctest::Approx(0.3530).epsilon(0.03));

  // The same in this process: seeded random subsets of both splits, standardised pixels.
  const DataSpec spec = parse_data_spec("fashion_mnist");
  Features tr = extract_pixels(random_subset(open_dataset(spec, true), 2000, 4), {.num_workers = 0});
  Features te = extract_pixels(random_subset(open_dataset(spec, false), 300, 4), {.num_workers = 0});
  const auto [mean, stdev] = standardize_pixels(tr, te, 1);
  CHECK(j["pixel_mean"][0].get<double>() == doctest::Approx(mean[0]));
  const std::vector<KnnResult> knn = knn_classify(tr.x, tr.labels, te.x, te.labels, {.ks = {1, 20}});
  for (size_t i = 0; i < 2; ++i) {
    CHECK(j["knn"]["results"][i]["k"] == knn[i].k);
    CHECK(j["knn"]["results"][i]["top1"].get<double>() == doctest::Approx(knn[i].top1));
    CHECK(j["knn"]["results"][i]["top5"].get<double>() == doctest::Approx(knn[i].top5));
  }
  // Raw pixels with 2000 train images: 20-NN is far above chance (the full set gives ~85%).
  CHECK(knn[1].top1 > 65.0);
  const LinearProbeResult p =
      linear_probe(tr.x, tr.labels, te.x, te.labels, {.epochs = 3, .lr = 0.05, .seed = 4, .num_classes = 10});
  CHECK(j["linear_probe"]["top1"].get<double>() == doctest::Approx(p.top1));
  CHECK(p.top1 > 60.0);

  // The text report.
  Run text = run_app("sima-eval --features pixels --data fashion_mnist --knn --train-limit 500 --limit 50 --workers 0");
  REQUIRE(text.status == 0);
  CHECK(text.out.find("weighted k-NN") != std::string::npos);
  CHECK(text.out.find("500 train / 50 test") != std::string::npos);
}

TEST_CASE("sima-eval --validation: the held-out training images are the queries, the rest the bank; no test image") {
  const nlohmann::json j = eval_json(
      "sima-eval --features pixels --data fashion_mnist --knn --k 1,20 --validation 10000 --validation-seed 3 "
      "--train-limit 1500 --limit 200 --seed 4 --workers 0 --json");
  CHECK(j["eval_split"] == "validation");
  CHECK(j["train_count"] == 1500);
  CHECK(j["test_count"] == 200);
  // The same in this process: sima-train's split (holdout_split), then the seeded subsets.
  const DataSpec spec = parse_data_spec("fashion_mnist");
  const HoldoutSplit h = holdout_split(open_dataset(spec, true), 10000, 3);
  Features tr = extract_pixels(random_subset(h.train, 1500, 4), {.num_workers = 0});
  Features va = extract_pixels(random_subset(h.validation, 200, 4), {.num_workers = 0});
  standardize_pixels(tr, va, 1);
  const std::vector<KnnResult> knn = knn_classify(tr.x, tr.labels, va.x, va.labels, {.ks = {1, 20}});
  for (size_t i = 0; i < 2; ++i) CHECK(j["knn"]["results"][i]["top1"].get<double>() == doctest::Approx(knn[i].top1));
  CHECK(knn[1].top1 > 65.0);
  // Without --validation the same flags read the test split.
  Run t = run_app("sima-eval --features pixels --data fashion_mnist --knn --train-limit 300 --limit 50 --workers 0 --json");
  REQUIRE(t.status == 0);
  CHECK(nlohmann::json::parse(t.out)["eval_split"] == "test");
  Run text = run_app(
      "sima-eval --features pixels --data fashion_mnist --knn --validation 100 --train-limit 300 --limit 50 --workers 0");
  REQUIRE(text.status == 0);
  CHECK(text.out.find("300 train / 50 held-out validation images") != std::string::npos);
  // Bad values name the flag; --validation alone needs a feature evaluation.
  Run neg = run_app("sima-eval --features pixels --data fashion_mnist --knn --validation -1 --workers 0");
  CHECK(neg.status != 0);
  CHECK(neg.err.find("--validation") != std::string::npos);
  Run big = run_app("sima-eval --features pixels --data fashion_mnist --knn --validation 60000 --workers 0");
  CHECK(big.status != 0);
  CHECK(big.err.find("--validation: 60000 must be below the 60000 training images") != std::string::npos);
  Run alone = run_app("sima-eval --checkpoint x.safetensors --validation 100");
  CHECK(alone.status == 2);
  CHECK(alone.err.find("--validation needs --knn or --linear-probe") != std::string::npos);
}

TEST_CASE("sima-eval --knn --linear-probe on a tiny checkpoint's features") {
  std::shared_ptr<Model> model =
      create_model(nlohmann::json{{"name", "deit_tiny_patch4_28"}, {"depth", 1}, {"embed_dim", 16}, {"num_heads", 2}});
  randomize_parameters(*model, 5, 0.5f);
  TempDir dir;
  const std::string ckpt = dir.file("model.safetensors");
  save_checkpoint(ckpt, *model, {{"data", "fashion_mnist"}});
  const nlohmann::json j = eval_json("sima-eval --checkpoint " + ckpt +
                                     " --knn --k 5 --linear-probe --probe-epochs 2 --train-limit 300 --limit 60 --workers 0 --json");
  CHECK(j["features"] == "model");
  CHECK(j["checkpoint"] == ckpt);
  CHECK(j["dim"] == 16);
  CHECK(j["train_count"] == 300);
  CHECK(j["knn"]["results"][0]["k"] == 5);
  CHECK(j["linear_probe"]["history"].size() == 2);
  // --features pixels with the checkpoint: its eval transform, no model (28·28 values).
  Run px = run_app("sima-eval --checkpoint " + ckpt + " --features pixels --knn --train-limit 100 --limit 10 --json");
  REQUIRE(px.status == 0);
  CHECK(nlohmann::json::parse(px.out)["dim"] == 784);

  // --features init: the checkpoint's architecture freshly initialised with --seed, as the
  // trainers build it (manual_seed, then create_model), not the checkpoint's weights.
  Run in = run_app("sima-eval --checkpoint " + ckpt + " --features init --seed 3 --knn --k 1 --train-limit 200 "
                   "--limit 40 --workers 0 --json");
  INFO("stderr: " << in.err);
  REQUIRE(in.status == 0);
  const nlohmann::json ji = nlohmann::json::parse(in.out);
  CHECK(ji["features"] == "init");
  CHECK(ji["dim"] == 16);
  manual_seed(3);
  std::shared_ptr<Model> fresh =
      create_model(nlohmann::json{{"name", "deit_tiny_patch4_28"}, {"depth", 1}, {"embed_dim", 16}, {"num_heads", 2}});
  fresh->eval();
  const DataSpec spec = parse_data_spec("fashion_mnist");
  const Transform t = eval_transform(read_checkpoint_eval_info(ckpt).config, read_checkpoint_eval_info(ckpt).crop_pct);
  auto features = [&](Model& m, bool train, int64_t n) {
    auto ds = std::make_shared<TransformedDataset>(random_subset(open_dataset(spec, train), n, 3), t);
    return extract_features(m, ds, {.num_workers = 0});
  };
  const Features tr = features(*fresh, true, 200), te = features(*fresh, false, 40);
  const std::vector<KnnResult> knn = knn_classify(tr.x, tr.labels, te.x, te.labels, {.ks = {1}});
  CHECK(ji["knn"]["results"][0]["top1"].get<double>() == doctest::Approx(knn[0].top1));
  const Features trained = features(*model, false, 40);
  CHECK(max_abs_diff(trained.x, te.x) > 1e-2f);  // really not the checkpoint's weights
}

TEST_CASE("sima-eval: bad flag combinations are one line and exit 2; k above the train subset exits 1") {
  struct Case {
    std::string args, error;
  };
  const Case cases[] = {
      {"", "--checkpoint PATH is required (or --features pixels --data SPEC --knn)"},
      {"--checkpoint c --k 20", "--k needs --knn"},
      {"--checkpoint c --linear-probe --temperature 0.1", "--temperature needs --knn"},
      {"--checkpoint c --knn --probe-lr 0.1", "--probe-lr needs --linear-probe"},
      {"--checkpoint c --train-limit 5", "--train-limit needs --knn or --linear-probe"},
      {"--checkpoint c --features pixels", "--features needs --knn or --linear-probe"},
      {"--knn", "--features model needs --checkpoint PATH (the raw-pixel baseline is --features pixels --data SPEC)"},
      {"--knn --features init --data fashion_mnist",
       "--features init needs --checkpoint PATH (the raw-pixel baseline is --features pixels --data SPEC)"},
      {"--knn --features pixels", "--features pixels needs --data SPEC"},
      {"--knn --features bogus --data fashion_mnist", "--features: 'bogus' is not one of: model, init, pixels"},
      {"--checkpoint c --knn --image a.png", "--image cannot be combined with --knn or --linear-probe"},
      {"--checkpoint c --knn --split train",
       "--split does not apply to --knn or --linear-probe (they fit on the train split and score the test split)"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.args);
    Run r = run_app("sima-eval " + c.args);
    CHECK(r.status == 2);
    CHECK(r.out.empty());
    CHECK(r.err == "sima-eval: error: " + c.error + " (try --help)\n");
  }
  const std::string px = "sima-eval --features pixels --data fashion_mnist --knn --workers 0 ";
  const Case runtime[] = {
      {px + "--k 10,x", "sima-eval: error: --k: '10,x' is not a comma-separated list of integers (e.g. 10,20,100,200)\n"},
      {px + "--k 0", "sima-eval: error: --k: 0 must be at least 1\n"},
      {px + "--temperature -1", "sima-eval: error: --temperature: -1 must be positive\n"},
      {px + "--k 200 --train-limit 100 --limit 5",
       "sima-eval: error: --k: k = 200 is larger than the 100 train images (--train-limit)\n"},
      {px + "--linear-probe --probe-epochs 0", "sima-eval: error: --probe-epochs: 0 must be at least 1\n"},
      {"sima-eval --features pixels --data nope --knn", ""},
  };
  for (const Case& c : runtime) {
    CAPTURE(c.args);
    Run r = run_app(c.args);
    CHECK(r.status == 1);
    CHECK(r.out.empty());
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    if (!c.error.empty()) CHECK(r.err == c.error);
  }
  Run help = run_app("sima-eval --help");
  for (const char* flag : {"--knn", "--k ", "--temperature", "--linear-probe", "--probe-epochs", "--probe-lr",
                           "--probe-batch", "--probe-wd", "--features", "--train-limit", "--seed"})
    CHECK_MESSAGE(help.out.find(flag) != std::string::npos, "help lacks " << flag);
}
