#include "data/loader_pipeline.h"

#include <omp.h>

#include <algorithm>
#include <numeric>
#include <utility>

#include "core/error.h"
#include "core/parallel.h"
#include "core/rng.h"

namespace sima {
namespace {

constexpr int kMaxWorkers = 256;
constexpr int kMaxPrefetch = 1024;

// Domain tags, so the order, sample and batch seeds never coincide.
constexpr uint64_t kOrderTag = 0x6f72646572ull;   // "order"
constexpr uint64_t kSampleTag = 0x73616d706cull;  // "sampl"
constexpr uint64_t kBatchTag = 0x6261746368ull;   // "batch"

// splitmix64's finaliser (Steele, Lea & Flood 2014): a bijection that mixes every bit.
uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// h = mix(mix(mix(seed ^ tag) ^ epoch) ^ i): every input changes every bit of the result.
uint64_t hash_seed(uint64_t seed, uint64_t tag, int64_t epoch, int64_t i) {
  uint64_t h = splitmix64(seed ^ splitmix64(tag));
  h = splitmix64(h ^ static_cast<uint64_t>(epoch));
  return splitmix64(h ^ static_cast<uint64_t>(i));
}

}  // namespace

uint64_t sample_seed(uint64_t seed, int64_t epoch, int64_t index) {
  return hash_seed(seed, kSampleTag, epoch, index);
}

uint64_t batch_seed(uint64_t seed, int64_t epoch, int64_t batch) {
  return hash_seed(seed, kBatchTag, epoch, batch);
}

std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch, bool shuffle) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t(0));
  if (!shuffle) return order;
  // Fisher–Yates: for i = n-1 .. 1, swap order[i] with order[j], j uniform in [0, i].
  Generator g(hash_seed(seed, kOrderTag, epoch, 0));
  for (int64_t i = n - 1; i > 0; --i) {
    int64_t j = static_cast<int64_t>(g.randint(static_cast<uint64_t>(i + 1)));
    std::swap(order[i], order[j]);
  }
  return order;
}

BatchPipeline::BatchPipeline(int64_t dataset_size, const LoaderOptions& opt, Produce produce,
                             std::string owner)
    : opt_(opt), produce_(std::move(produce)), owner_(std::move(owner)), dataset_size_(dataset_size) {
  check(dataset_size >= 0, owner_, ": the dataset reports a negative size (", dataset_size, ")");
  check(opt.batch_size >= 1, owner_, ": batch_size must be >= 1, got ", opt.batch_size);
  check(opt.num_workers >= 0 && opt.num_workers <= kMaxWorkers, owner_,
        ": num_workers must be in [0, ", kMaxWorkers, "], got ", opt.num_workers);
  check(opt.prefetch >= 0 && opt.prefetch <= kMaxPrefetch, owner_, ": prefetch must be in [0, ",
        kMaxPrefetch, "] (0 = 2 * num_workers), got ", opt.prefetch);
  check(opt.num_replicas >= 1 && opt.rank >= 0 && opt.rank < opt.num_replicas, owner_, ": rank ", opt.rank,
        " is outside [0, num_replicas = ", opt.num_replicas, ")");
  check(opt.num_replicas == 1 || opt.batch_size % opt.num_replicas == 0, owner_, ": the global batch_size ",
        opt.batch_size, " does not divide among ", opt.num_replicas, " processes (make it a multiple of ",
        opt.num_replicas, ")");
  check(opt.num_replicas == 1 || opt.drop_last, owner_, ": sharding among ", opt.num_replicas,
        " processes needs drop_last (every global batch whole)");
  const int64_t B = opt.batch_size, n = dataset_size;
  num_batches_ = n / B + (!opt.drop_last && n % B != 0 ? 1 : 0);
  // Without workers the caller builds each batch itself: one slot is all it needs.
  if (opt.num_workers == 0) slots_ = 1;
  else slots_ = opt.prefetch > 0 ? opt.prefetch : 2 * opt.num_workers;
  ready_.assign(slots_, 0);
  errors_.assign(slots_, nullptr);
}

BatchPipeline::~BatchPipeline() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

BatchJob BatchPipeline::make_job(int64_t batch) const {
  // Batch b holds positions [b·B, min((b+1)·B, n)) of the epoch order; a shard (rank r of P)
  // takes its slice [b·B + r·B/P, b·B + (r+1)·B/P) (whole batches only: drop_last).
  const int64_t local = opt_.batch_size / opt_.num_replicas;
  const int64_t begin = batch * opt_.batch_size + opt_.rank * local;
  const int64_t end = std::min(dataset_size_, begin + (opt_.num_replicas == 1 ? opt_.batch_size : local));
  return BatchJob{epoch_, batch, std::vector<int64_t>(order_.begin() + begin, order_.begin() + end)};
}

void BatchPipeline::start_epoch(int64_t epoch, int64_t first_batch) {
  check(first_batch >= 0 && first_batch <= num_batches_, owner_, ": start_epoch: first batch ", first_batch,
        " is outside the epoch's ", num_batches_, " batches");
  std::vector<int64_t> order = epoch_order(dataset_size_, opt_.seed, epoch, opt_.shuffle);
  {
    std::unique_lock<std::mutex> lock(mu_);
    // Abandon the current epoch: no new jobs, and wait out the ones being built (their
    // results are dropped below).
    next_job_ = num_batches_;
    done_cv_.wait(lock, [&] { return in_flight_ == 0; });
    order_ = std::move(order);
    epoch_ = epoch;
    next_job_ = consumed_ = first_batch;
    failed_ = false;
    started_ = true;
    std::fill(ready_.begin(), ready_.end(), 0);
    std::fill(errors_.begin(), errors_.end(), nullptr);
    if (workers_.empty())
      for (int w = 0; w < opt_.num_workers; ++w) workers_.emplace_back([this] { worker_loop(); });
  }
  work_cv_.notify_all();
}

bool BatchPipeline::job_available() const {
  // Batch b goes to slot b % slots, free once batch b - slots has been consumed.
  return started_ && !failed_ && next_job_ < num_batches_ && next_job_ < consumed_ + slots_;
}

void BatchPipeline::worker_loop() {
  // OpenMP's thread count is per thread: ops called by the dataset or collate run serially
  // here, so N workers use N cores instead of N · OMP_NUM_THREADS threads.
  set_num_threads(1);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stop_ || job_available(); });
    if (stop_) return;
    BatchJob job = make_job(next_job_++);
    const int slot = static_cast<int>(job.batch % slots_);
    ++in_flight_;
    lock.unlock();
    std::exception_ptr error;
    try {
      produce_(job, slot);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    --in_flight_;
    errors_[slot] = error;
    ready_[slot] = 1;
    done_cv_.notify_all();
  }
}

int BatchPipeline::acquire() {
  check(started_, owner_, ": call start_epoch(epoch) before next()");
  if (workers_.empty()) {  // num_workers = 0: build the batch here
    if (failed_ || consumed_ >= num_batches_) return -1;
    try {
      produce_(make_job(consumed_), 0);
    } catch (...) {
      failed_ = true;
      throw;
    }
    return 0;
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (failed_ || consumed_ >= num_batches_) return -1;
  const int slot = static_cast<int>(consumed_ % slots_);
  done_cv_.wait(lock, [&] { return ready_[slot] != 0; });
  if (errors_[slot]) {
    std::exception_ptr error = std::exchange(errors_[slot], nullptr);
    ready_[slot] = 0;
    failed_ = true;  // the epoch ends here: no new jobs, next() returns false
    lock.unlock();
    std::rethrow_exception(error);
  }
  return slot;
}

void BatchPipeline::release(int slot) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ready_[slot] = 0;
    ++consumed_;
  }
  work_cv_.notify_all();
}

}  // namespace sima
