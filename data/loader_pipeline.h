// The machinery behind every loader: options, the epoch order, the per-sample seeds and a
// fixed pool of worker threads that build batches ahead of the caller, in order.
//
// Determinism. Nothing depends on threads or timing:
//   order of epoch e      = Fisher–Yates permutation from Generator(hash(seed, e, "order"))
//   sample i's generator  = Generator(sample_seed(seed, e, i)), i the dataset index
//   batch b's generator   = Generator(batch_seed(seed, e, b)), for the collate
// so a batch is bit-identical whatever num_workers and prefetch are.
//
// Threads. Batch b of the epoch is one job. Workers take jobs in order from a shared
// counter and write batch b into ring slot b % slots; the caller consumes slot after slot.
// A worker may start batch b only once batch b - slots has been consumed, so at most
// `slots` batches are decoded ahead. An exception in a worker is stored in its slot and
// rethrown by the caller when it reaches that batch; the epoch then ends.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace sima {

struct LoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = true;     // false: dataset order 0, 1, 2, ...
  bool drop_last = false;  // drop the last batch when it has fewer than batch_size samples
  int num_workers = 0;     // worker threads; 0 = load in the calling thread, inside next()
  int prefetch = 0;        // batches decoded ahead (ring slots); 0 = 2 · num_workers
  uint64_t seed = 0;       // of the epoch order and every sample's augmentation
  // Sharding for data-parallel training (train/distributed/distributed.h), like PyTorch's
  // DistributedSampler: every replica computes the same seeded epoch order and cuts the same
  // global batches of batch_size; replica `rank` builds the contiguous slice
  // [rank·b, (rank+1)·b) of each, b = batch_size / num_replicas (batch_size must divide;
  // drop_last required, so every global batch is whole and no padding is needed). The
  // replicas' slices of batch k, concatenated in rank order, are batch k of one process.
  int num_replicas = 1;
  int rank = 0;
};

// Seed of dataset index `index`'s generator in epoch `epoch` (splitmix64 chained over the three).
uint64_t sample_seed(uint64_t seed, int64_t epoch, int64_t index);
// Seed of the collate generator of batch `batch` of epoch `epoch`.
uint64_t batch_seed(uint64_t seed, int64_t epoch, int64_t batch);
// The dataset indices in the order epoch `epoch` visits them: 0..n-1, shuffled unless !shuffle.
std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch, bool shuffle);

// One batch to build: batch `batch` of epoch `epoch`, made of these dataset indices.
struct BatchJob {
  int64_t epoch = 0;
  int64_t batch = 0;
  std::vector<int64_t> indices;
};

class BatchPipeline {
 public:
  // produce(job, slot) builds the job's batch into the owner's ring slot `slot`. It runs in
  // a worker thread (or in the caller when num_workers = 0). `owner` names the loader in errors.
  using Produce = std::function<void(const BatchJob& job, int slot)>;

  BatchPipeline(int64_t dataset_size, const LoaderOptions& opt, Produce produce, std::string owner);
  ~BatchPipeline();  // stops the workers after their current batch and joins them
  BatchPipeline(const BatchPipeline&) = delete;
  BatchPipeline& operator=(const BatchPipeline&) = delete;

  int slots() const { return slots_; }
  int64_t batches_per_epoch() const { return num_batches_; }
  int64_t epoch() const { return epoch_; }
  const LoaderOptions& options() const { return opt_; }

  // Starts (or restarts) an epoch; the rest of the current one is abandoned. Batches
  // before `first_batch` are skipped (not built): a resumed run continues mid-epoch with
  // exactly the batches an uninterrupted run would see.
  void start_epoch(int64_t epoch, int64_t first_batch = 0);
  // Waits for the next batch and returns its slot, or -1 at the end of the epoch.
  // Rethrows the exception of a failed batch. Pair every slot with release(slot).
  int acquire();
  void release(int slot);

 private:
  void worker_loop();
  bool job_available() const;  // under mu_
  BatchJob make_job(int64_t batch) const;

  LoaderOptions opt_;
  Produce produce_;
  std::string owner_;
  int64_t dataset_size_ = 0, num_batches_ = 0;
  int slots_ = 1;

  // Epoch state. order_ and epoch_ change only in start_epoch, with no job in flight.
  std::vector<int64_t> order_;
  int64_t epoch_ = -1;
  bool started_ = false;

  std::mutex mu_;
  std::condition_variable work_cv_;  // workers wait here for a job (or stop)
  std::condition_variable done_cv_;  // the caller waits here for a batch (or in-flight jobs)
  int64_t next_job_ = 0;             // next batch a worker will take
  int64_t consumed_ = 0;             // batches released by the caller
  int in_flight_ = 0;                // jobs being built right now
  bool failed_ = false;              // a batch threw: the epoch is over
  bool stop_ = false;
  std::vector<char> ready_;  // per slot: batch built (or failed)
  std::vector<std::exception_ptr> errors_;
  std::vector<std::thread> workers_;  // started at the first start_epoch
};

}  // namespace sima
