// evaluate_sharded: the test set split among the ranks, the metrics summed (train/distributed/distributed.h).
#include <algorithm>

#include "core/error.h"
#include "train/distributed/distributed.h"
#include "train/eval/evaluate.h"

namespace sima {

namespace {

// Indices rank, rank + P, rank + 2P, ... of a dataset.
class StridedShard : public Dataset {
 public:
  StridedShard(std::shared_ptr<const Dataset> base, int rank, int size)
      : base_(std::move(base)), rank_(rank), size_(size) {}
  int64_t size() const override {
    const int64_t n = base_->size();
    return n > rank_ ? (n - rank_ + size_ - 1) / size_ : 0;
  }
  Sample get(int64_t i, Generator& rng) const override { return base_->get(rank_ + i * size_, rng); }
  int64_t num_classes() const override { return base_->num_classes(); }
  std::string describe() const override {
    return base_->describe() + " (rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ")";
  }

 private:
  std::shared_ptr<const Dataset> base_;
  int64_t rank_, size_;
};

}  // namespace

EvalResult evaluate_sharded(Comm& comm, Model& model, std::shared_ptr<const Dataset> dataset,
                            const EvalOptions& options) {
  if (comm.size() == 1) return evaluate(model, std::move(dataset), options);
  check(options.limit == 0, "evaluate_sharded: a limit is not supported");
  auto shard = std::make_shared<StridedShard>(dataset, comm.rank(), comm.size());
  EvalResult r = shard->size() > 0 ? evaluate(model, shard, options) : EvalResult{};
  // [count, Σloss, top-1 hits, top-5 hits, seconds (max, below), per-class counts (K), confusion (K·K)]
  const int64_t K = dataset->num_classes() > 0 ? dataset->num_classes() : int64_t(r.per_class_count.size());
  std::vector<double> buf(size_t(4 + K + K * K), 0.0);
  const double n = double(r.count);
  buf[0] = n;
  buf[1] = r.loss * n;
  buf[2] = r.top1 / 100.0 * n;
  buf[3] = r.top5 / 100.0 * n;
  for (int64_t c = 0; c < K && c < int64_t(r.per_class_count.size()); ++c) buf[size_t(4 + c)] = double(r.per_class_count[size_t(c)]);
  for (int64_t t = 0; t < K && t < int64_t(r.confusion.size()); ++t)
    for (int64_t p = 0; p < K && p < int64_t(r.confusion[size_t(t)].size()); ++p)
      buf[size_t(4 + K + t * K + p)] = double(r.confusion[size_t(t)][size_t(p)]);
  comm.allreduce_sum(buf.data(), int64_t(buf.size()));
  double sec = r.seconds;  // the slowest rank's time
  std::vector<double> times(size_t(comm.size()), 0.0);
  times[size_t(comm.rank())] = sec;
  comm.allreduce_sum(times.data(), int64_t(times.size()));
  sec = *std::max_element(times.begin(), times.end());

  EvalResult out;
  out.count = int64_t(std::llround(buf[0]));
  const double N = std::max(1.0, buf[0]);
  out.loss = buf[1] / N;
  out.top1 = 100.0 * std::round(buf[2]) / N;
  out.top5 = 100.0 * std::round(buf[3]) / N;
  out.per_class_count.resize(size_t(K));
  out.per_class_accuracy.resize(size_t(K));
  out.confusion.assign(size_t(K), std::vector<int64_t>(size_t(K), 0));
  for (int64_t t = 0; t < K; ++t) {
    out.per_class_count[size_t(t)] = int64_t(std::llround(buf[size_t(4 + t)]));
    for (int64_t p = 0; p < K; ++p) out.confusion[size_t(t)][size_t(p)] = int64_t(std::llround(buf[size_t(4 + K + t * K + p)]));
    const int64_t cnt = out.per_class_count[size_t(t)];
    out.per_class_accuracy[size_t(t)] = cnt > 0 ? 100.0 * double(out.confusion[size_t(t)][size_t(t)]) / double(cnt) : 0.0;
  }
  out.seconds = sec;
  out.images_per_second = sec > 0 ? double(out.count) / sec : 0.0;
  return out;
}

}  // namespace sima
