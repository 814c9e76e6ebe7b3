// Frozen-feature evaluation: feature extraction, DINO's weighted k-NN, the linear probe
// (see feature_eval.h).
#include "train/eval/feature_eval.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "core/autograd.h"
#include "core/checked.h"
#include "core/error.h"
#include "core/ops/matmul.h"
#include "core/ops/norm.h"
#include "core/ops/shape_ops.h"
#include "core/ops/softmax.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "data/loader.h"
#include "nn/init.h"
#include "train/eval/ranking.h"
#include "train/optim/optim.h"
#include "train/optim/schedule.h"

namespace sima {

namespace {

using Clock = std::chrono::steady_clock;

// Runs `feature` (B, ...) -> (B, D) over the dataset in order and stacks the rows: (N, D).
Features extract(std::shared_ptr<const Dataset> dataset, const FeatureOptions& options, const char* who,
                 const std::function<Tensor(const Tensor&)>& feature) {
  check(dataset != nullptr, who, ": the dataset is null");
  check(options.batch_size > 0, who, ": batch_size ", options.batch_size, " must be positive");
  check(options.num_workers >= 0, who, ": num_workers ", options.num_workers, " must be >= 0");
  const int64_t N = dataset->size();
  Features out;
  out.labels.reserve(size_t(N));
  NoGradGuard no_grad;
  DataLoader loader(dataset, {.batch_size = options.batch_size, .shuffle = false, .drop_last = false,
                              .num_workers = options.num_workers});
  loader.start_epoch(0);
  Batch batch;
  int64_t row = 0, D = 0;
  while (loader.next(batch)) {
    const int64_t B = int64_t(batch.labels.size());
    for (int64_t i = 0; i < B; ++i)
      check(batch.labels[size_t(i)] >= 0, who, ": sample ", batch.indices[size_t(i)], " of ", dataset->describe(),
            " has no label");
    const Tensor f = feature(batch.images);
    check(f.dim() == 2 && f.size(0) == B, who, ": the features of a batch of ", B, " images have shape ", f.shape());
    if (!out.x.defined()) {
      D = f.size(1);
      out.x = empty({N, D});
    }
    check(f.size(1) == D, who, ": a batch gave ", f.size(1), "-d features after ", D, "-d ones");
    std::memcpy(out.x.data() + row * D, f.data(), sizeof(float) * size_t(B * D));
    out.labels.insert(out.labels.end(), batch.labels.begin(), batch.labels.end());
    row += B;
  }
  check(row == N, who, ": read ", row, " of ", N, " samples");
  if (!out.x.defined()) out.x = empty({0, 0});
  return out;
}

// The number of classes: `given`, or 1 + the largest label; every label checked against it.
int64_t class_count(int64_t given, const std::vector<int64_t>& a, const std::vector<int64_t>& b, const char* who) {
  check(given >= 0, who, ": num_classes ", given, " must be >= 0 (0 = from the labels)");
  int64_t C = given;
  if (C == 0) {
    for (int64_t y : a) C = std::max(C, y + 1);
    for (int64_t y : b) C = std::max(C, y + 1);
  }
  for (const auto* labels : {&a, &b})
    for (size_t i = 0; i < labels->size(); ++i)
      check((*labels)[i] >= 0 && (*labels)[i] < C, who, ": ", labels == &a ? "train" : "test", " label ",
            (*labels)[i], " (row ", i, ") is not in [0, ", C, ")");
  check(C > 0, who, ": no labels");
  return C;
}

// Shapes of a (train, test) pair of feature matrices and their labels.
void check_feature_pair(const Tensor& train_x, const std::vector<int64_t>& train_labels, const Tensor& test_x,
                        const std::vector<int64_t>& test_labels, const char* who) {
  check(train_x.defined() && test_x.defined(), who, ": undefined features");
  check(train_x.dim() == 2 && test_x.dim() == 2, who, ": features must be (N, D); got train ", train_x.shape(),
        " and test ", test_x.shape());
  check(train_x.size(1) == test_x.size(1), who, ": train features are ", train_x.size(1), "-d, test features ",
        test_x.size(1), "-d");
  check(int64_t(train_labels.size()) == train_x.size(0), who, ": ", train_labels.size(), " train labels for ",
        train_x.size(0), " rows");
  check(int64_t(test_labels.size()) == test_x.size(0), who, ": ", test_labels.size(), " test labels for ",
        test_x.size(0), " rows");
}

// ---- k-NN search ----------------------------------------------------------------------

struct Hit {
  float sim;
  int64_t index;
};
// a before b: larger similarity, then lower train index.
bool better(const Hit& a, const Hit& b) { return a.sim > b.sim || (a.sim == b.sim && a.index < b.index); }

// The k best of one row of n similarities into out[0..k), best first. A bounded heap whose
// top is the worst hit kept: one comparison rejects most rows, O(n + k log k · log n).
// Rows are visited in index order, so an equal similarity never displaces a kept hit.
void top_k_row(const float* sims, int64_t n, int64_t k, Hit* out) {
  int64_t size = 0;
  for (int64_t j = 0; j < n; ++j) {
    const Hit h{std::isnan(sims[j]) ? -std::numeric_limits<float>::infinity() : sims[j], j};
    if (size < k) {
      out[size++] = h;
      std::push_heap(out, out + size, better);
    } else if (better(h, out[0])) {
      std::pop_heap(out, out + k, better);
      out[k - 1] = h;
      std::push_heap(out, out + k, better);
    }
  }
  std::sort_heap(out, out + k, better);  // best first
}

// Calls visit(first_row, rows, hits) for chunks of the query rows, hits (rows × k) best first.
// train_n and query_n are ℓ2-normalised; the similarities of one chunk are one GEMM:
// (m, D) · (N, D)ᵀ -> (m, N).
template <class Visit>
void search_chunks(const Tensor& train_n, const Tensor& query_n, int64_t k, int64_t max_chunk_floats, Visit&& visit) {
  const int64_t N = train_n.size(0), M = query_n.size(0);
  const int64_t chunk = std::clamp<int64_t>(max_chunk_floats / std::max<int64_t>(1, N), 1, std::max<int64_t>(1, M));
  std::vector<Hit> hits(size_t(chunk * k));
  for (int64_t r0 = 0; r0 < M; r0 += chunk) {
    const int64_t m = std::min(chunk, M - r0);
    const Tensor sims = matmul(narrow(query_n, 0, r0, m), train_n, false, true);  // (m, N)
    parallel_for(m, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) top_k_row(sims.data() + i * N, N, k, hits.data() + i * k);
    });
    visit(r0, m, hits.data());
  }
}

void check_ks(const std::vector<int64_t>& ks, int64_t N, const char* who) {
  check(!ks.empty(), who, ": no k given");
  for (int64_t k : ks) {
    check(k >= 1, who, ": k = ", k, " must be at least 1");
    check(k <= N, who, ": k = ", k, " is larger than the ", N, " train samples");
  }
}

}  // namespace

// ---- features -------------------------------------------------------------------------

Features extract_features(Model& model, std::shared_ptr<const Dataset> dataset, const FeatureOptions& options) {
  EvalModeGuard mode(model);
  check(options.blocks >= 1, "extract_features: blocks ", options.blocks, " must be at least 1");
  return extract(std::move(dataset), options, "extract_features", [&](const Tensor& images) {
    return options.blocks == 1 ? model.forward_features(images)                     // (B, D)
                               : model.forward_block_features(images, options.blocks);  // (B, blocks·D)
  });
}

Features extract_pixels(std::shared_ptr<const Dataset> dataset, const FeatureOptions& options) {
  return extract(std::move(dataset), options, "extract_pixels", [](const Tensor& images) {
    return reshape(images, {images.size(0), images.numel() / std::max<int64_t>(1, images.size(0))});  // (B, C·H·W)
  });
}

std::pair<std::vector<double>, std::vector<double>> standardize_pixels(Features& train, Features& test,
                                                                       int64_t channels) {
  check(train.x.defined() && train.x.dim() == 2 && test.x.defined() && test.x.dim() == 2 &&
            train.x.size(1) == test.x.size(1),
        "standardize_pixels: features must be (N, D) and (M, D)");
  const int64_t N = train.x.size(0), D = train.x.size(1);
  check(channels >= 1 && D % channels == 0, "standardize_pixels: ", D, " values per image are not ", channels,
        " channels");
  const int64_t P = D / channels;  // pixels per channel, stored channel-major (CHW)
  std::vector<double> mean(size_t(channels), 0.0), stdev(size_t(channels), 1.0);
  for (int64_t c = 0; c < channels; ++c) {
    double s = 0.0, s2 = 0.0;
    for (int64_t i = 0; i < N; ++i)
      for (const float* p = train.x.data() + i * D + c * P; p < train.x.data() + i * D + (c + 1) * P; ++p) {
        s += *p;
        s2 += double(*p) * *p;
      }
    const double n = double(std::max<int64_t>(1, N * P));
    mean[size_t(c)] = s / n;
    const double var = std::max(0.0, s2 / n - mean[size_t(c)] * mean[size_t(c)]);
    stdev[size_t(c)] = var > 0.0 ? std::sqrt(var) : 1.0;
  }
  for (Features* f : {&train, &test})
    for (int64_t i = 0; i < f->x.size(0); ++i)
      for (int64_t c = 0; c < channels; ++c) {
        const float m = float(mean[size_t(c)]), inv = float(1.0 / stdev[size_t(c)]);
        float* p = f->x.data() + i * D + c * P;
        for (int64_t j = 0; j < P; ++j) p[j] = (p[j] - m) * inv;
      }
  return {mean, stdev};
}

// ---- k-NN -----------------------------------------------------------------------------

Neighbours knn_search(const Tensor& train_x, const Tensor& query_x, int64_t k, int64_t max_chunk_floats) {
  check(train_x.defined() && query_x.defined() && train_x.dim() == 2 && query_x.dim() == 2 &&
            train_x.size(1) == query_x.size(1),
        "knn_search: features must be (N, D) and (M, D)");
  check_ks({k}, train_x.size(0), "knn_search");
  check(max_chunk_floats > 0, "knn_search: max_chunk_floats must be positive");
  NoGradGuard no_grad;
  const Tensor train_n = normalize(train_x, 2.f, 1), query_n = normalize(query_x, 2.f, 1);
  Neighbours out;
  out.k = k;
  out.index.resize(size_t(query_x.size(0) * k));
  out.similarity.resize(out.index.size());
  search_chunks(train_n, query_n, k, max_chunk_floats, [&](int64_t r0, int64_t m, const Hit* hits) {
    for (int64_t i = 0; i < m * k; ++i) {
      out.index[size_t(r0 * k + i)] = hits[i].index;
      out.similarity[size_t(r0 * k + i)] = hits[i].sim;
    }
  });
  return out;
}

std::vector<double> knn_class_weights(const Neighbours& nb, int64_t row, int64_t k,
                                      const std::vector<int64_t>& train_labels, double temperature,
                                      int64_t num_classes) {
  check(k >= 1 && k <= nb.k, "knn_class_weights: k = ", k, " is not in [1, ", nb.k, "]");
  check(row >= 0 && int64_t(nb.index.size()) >= (row + 1) * nb.k, "knn_class_weights: no row ", row);
  check(temperature > 0.0, "knn_class_weights: temperature ", temperature, " must be positive");
  std::vector<double> w(size_t(num_classes), 0.0);
  for (int64_t j = 0; j < k; ++j) {
    const size_t at = size_t(row * nb.k + j);
    const int64_t y = train_labels.at(size_t(nb.index[at]));
    check(y >= 0 && y < num_classes, "knn_class_weights: label ", y, " is not in [0, ", num_classes, ")");
    w[size_t(y)] += std::exp(double(nb.similarity[at]) / temperature);
  }
  return w;
}

std::vector<KnnResult> knn_classify(const Tensor& train_x, const std::vector<int64_t>& train_labels,
                                    const Tensor& test_x, const std::vector<int64_t>& test_labels,
                                    const KnnOptions& options) {
  const char* who = "knn_classify";
  check_feature_pair(train_x, train_labels, test_x, test_labels, who);
  check_ks(options.ks, train_x.size(0), who);
  check(std::isfinite(options.temperature) && options.temperature > 0.0, who, ": temperature ", options.temperature,
        " must be positive");
  check(options.max_chunk_floats > 0, who, ": max_chunk_floats must be positive");
  const int64_t C = class_count(options.num_classes, train_labels, test_labels, who);

  // Every k from one search with the largest: the first k of the sorted kmax neighbours are
  // the k nearest. Class weights grow neighbour by neighbour; at each k the true class's
  // rank is read off.
  std::vector<int64_t> ks = options.ks;
  std::sort(ks.begin(), ks.end());
  ks.erase(std::unique(ks.begin(), ks.end()), ks.end());
  const int64_t kmax = ks.back(), K = int64_t(ks.size());
  std::vector<int64_t> correct1(size_t(K), 0), correct5(size_t(K), 0);

  NoGradGuard no_grad;
  const Tensor train_n = normalize(train_x, 2.f, 1), test_n = normalize(test_x, 2.f, 1);
  search_chunks(train_n, test_n, kmax, options.max_chunk_floats, [&](int64_t r0, int64_t m, const Hit* hits) {
    std::vector<double> w(static_cast<size_t>(C));
    for (int64_t i = 0; i < m; ++i) {
      const int64_t y = test_labels[size_t(r0 + i)];
      std::fill(w.begin(), w.end(), 0.0);
      int64_t next = 0;  // index into ks
      for (int64_t j = 0; j < kmax; ++j) {
        const Hit& h = hits[i * kmax + j];
        w[size_t(train_labels[size_t(h.index)])] += std::exp(double(h.sim) / options.temperature);
        if (j + 1 == ks[size_t(next)]) {
          const int64_t rank = rank_of(w.data(), C, y);
          correct1[size_t(next)] += rank < 1;
          correct5[size_t(next)] += rank < std::min<int64_t>({5, ks[size_t(next)], C});
          ++next;
        }
      }
    }
  });

  const int64_t M = test_x.size(0);
  std::vector<KnnResult> out;
  for (int64_t k : options.ks) {
    const size_t at = size_t(std::lower_bound(ks.begin(), ks.end(), k) - ks.begin());
    KnnResult r{.k = k, .count = M};
    if (M > 0) {
      r.top1 = 100.0 * double(correct1[at]) / double(M);
      r.top5 = 100.0 * double(correct5[at]) / double(M);
    }
    out.push_back(r);
  }
  return out;
}

// ---- linear probe ---------------------------------------------------------------------

namespace {

void check_probe_options(const LinearProbeOptions& o, const char* who) {
  check(o.epochs >= 1, who, ": epochs ", o.epochs, " must be at least 1");
  check(std::isfinite(o.lr) && o.lr > 0.0, who, ": lr ", o.lr, " must be positive");
  check(o.batch_size >= 1, who, ": batch_size ", o.batch_size, " must be at least 1");
  check(std::isfinite(o.weight_decay) && o.weight_decay >= 0.0, who, ": weight_decay ", o.weight_decay,
        " must be >= 0");
  check(o.momentum >= 0.0 && o.momentum < 1.0, who, ": momentum ", o.momentum, " is not in [0, 1)");
}

// One epoch of SGD on the head over the train rows in `order`, in batches of o.batch_size,
// the lr from `lr_schedule` at each global `step` (advanced); sets e.lr and e.train_loss.
void probe_train_epoch(Linear& head, SGD& sgd, const ScheduleOptions& lr_schedule, const Tensor& train_x,
                       const std::vector<int64_t>& train_labels, const std::vector<int64_t>& order,
                       const LinearProbeOptions& o, int64_t& step, ProbeEpoch& e) {
  const int64_t N = train_x.size(0);
  double loss_sum = 0.0;
  for (int64_t b0 = 0; b0 < N; b0 += o.batch_size, ++step) {
    const std::vector<int64_t> idx(order.begin() + b0, order.begin() + std::min(N, b0 + o.batch_size));
    std::vector<int64_t> y(idx.size());
    for (size_t i = 0; i < idx.size(); ++i) y[i] = train_labels[size_t(idx[i])];
    e.lr = schedule_value(lr_schedule, step);
    sgd.set_lr(e.lr);
    Tensor x;
    {
      NoGradGuard no_grad;
      x = index_select(train_x, 0, idx);  // (B, D), outside the graph
    }
    const Tensor loss = cross_entropy(head.forward(x), y);  // mean over the batch
    check(std::isfinite(loss.item()), "linear_probe: the loss is ", loss.item(), " at epoch ", e.epoch,
          "; lower the lr (--probe-lr)");
    loss_sum += double(loss.item()) * double(idx.size());
    loss.backward();
    sgd.step();
    sgd.zero_grad();
  }
  e.train_loss = loss_sum / double(N);
}

// Test accuracy: one forward of all test rows (M, D) -> e.top1, e.top5 (top-min(5, C)).
void probe_test(Linear& head, const Tensor& test_x, const std::vector<int64_t>& test_labels, int64_t C,
                ProbeEpoch& e) {
  const int64_t M = test_x.size(0);
  if (M == 0) return;
  int64_t c1 = 0, c5 = 0;
  const Tensor logits = head.forward(test_x);  // (M, C)
  for (int64_t i = 0; i < M; ++i) {
    const int64_t rank = rank_of(logits.data() + i * C, C, test_labels[size_t(i)]);
    c1 += rank < 1;
    c5 += rank < std::min<int64_t>(5, C);
  }
  e.top1 = 100.0 * double(c1) / double(M);
  e.top5 = 100.0 * double(c5) / double(M);
}

}  // namespace

LinearProbeResult linear_probe(const Tensor& train_x, const std::vector<int64_t>& train_labels, const Tensor& test_x,
                               const std::vector<int64_t>& test_labels, const LinearProbeOptions& o) {
  const char* who = "linear_probe";
  check_feature_pair(train_x, train_labels, test_x, test_labels, who);
  check_probe_options(o, who);
  const int64_t N = train_x.size(0), D = train_x.size(1);
  check(N > 0, who, ": no train samples");
  const int64_t C = class_count(o.num_classes, train_labels, test_labels, who);
  const Clock::time_point start = Clock::now();

  // DINO's LinearClassifier: weight N(0, 0.01²), bias 0.
  Generator gen(o.seed);
  LinearProbeResult r;
  r.head = std::make_shared<Linear>(D, C);
  normal_(r.head->weight, 0.f, 0.01f, gen);
  zeros_(r.head->bias);
  ParamGroup group;
  group.params = r.head->named_parameters();
  SGD sgd({group}, {.lr = o.lr, .momentum = o.momentum, .weight_decay = o.weight_decay});
  const int64_t steps_per_epoch = (N + o.batch_size - 1) / o.batch_size;
  const ScheduleOptions lr_schedule{
      .type = "cosine", .base = o.lr, .final = 0.0, .warmup_steps = 0, .total_steps = checked_mul(o.epochs, steps_per_epoch, std::string(who) + ": epochs", "steps per epoch")};

  std::vector<int64_t> order(static_cast<size_t>(N));
  std::iota(order.begin(), order.end(), int64_t(0));
  int64_t step = 0;
  for (int64_t epoch = 1; epoch <= o.epochs; ++epoch) {
    // A Fisher–Yates shuffle of the train rows, continuing the seeded stream.
    for (int64_t i = N - 1; i > 0; --i) std::swap(order[size_t(i)], order[gen.randint(uint64_t(i) + 1)]);
    ProbeEpoch e{.epoch = epoch};
    probe_train_epoch(*r.head, sgd, lr_schedule, train_x, train_labels, order, o, step, e);
    NoGradGuard no_grad;
    probe_test(*r.head, test_x, test_labels, C, e);
    r.epochs.push_back(e);
    if (o.on_epoch) o.on_epoch(e);
  }
  r.top1 = r.epochs.back().top1;
  r.top5 = r.epochs.back().top5;
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return r;
}

}  // namespace sima
