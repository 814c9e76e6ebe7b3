// Data-parallel training across processes with MPI (PyTorch DDP's scheme, on Debian's OpenMPI).
//
//   mpirun -np 2 build/bin/sima-train --config configs/quickstart.json
//
// Every rank holds the whole model. Each step, rank r trains on its slice of the global batch
// (data.batch_size is the GLOBAL batch; the loader shards it, data/loader_pipeline.h), then
// the gradients are summed over the ranks and divided by P, so every rank takes the same
// optimizer step a single process would on the whole batch:
//
//   grad = (1/P) Σ_r ∇ mean-loss(slice r) = ∇ mean-loss(global batch)     (equal slice sizes)
//
// GradSync sends the gradients in buckets of ~train.allreduce_bucket_mb, parameters taken in
// reverse registration order (about the order backward finishes them). A hook in the autograd
// engine (core/autograd.h, set_grad_ready_hook) copies each gradient into its bucket as soon as
// it is final, and a full bucket starts an MPI_Iallreduce while backward goes on; buckets
// start in a fixed order, the same on every rank, as MPI requires of collectives.
//
// Comm is the little of MPI the trainers use: rank, size, allreduce-sum, broadcast, barrier.
// comm_single() is the one-process communicator (a build without MPI, or a plain launch);
// world() is MPI_COMM_WORLD when launched by mpirun in a build with SIMA_MPI.
//
// Failures end the job instead of hanging it: every wait polls its request (MPI_Test) against
// a deadline of SIMA_MPI_TIMEOUT seconds (default 600; 0 = wait forever), and a rank that
// throws or times out prints "sima-train: error: rank r of P: ..." and calls MPI_Abort, which
// makes mpirun stop every rank. SIMA_TEST_FAULT=rank:step[:hang] (tests only) makes one rank
// throw (or hang) at a given step.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"
#include "nn/module.h"
#include "train/eval/evaluate.h"

namespace sima {

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_size() const = 0;  // ranks on this machine
  bool is_main() const { return rank() == 0; }

  // In place, blocking (with the timeout): data = Σ over ranks.
  virtual void allreduce_sum(float* data, int64_t n) = 0;
  virtual void allreduce_sum(double* data, int64_t n) = 0;
  virtual void broadcast(float* data, int64_t n, int root) = 0;
  virtual void barrier() = 0;

  // Non-blocking in-place sum: a request id for test()/wait(). Start them in the same order on
  // every rank.
  virtual int iallreduce_sum(float* data, int64_t n) = 0;
  virtual bool test(int request) = 0;  // done? (also drives MPI's progress)
  virtual void wait(int request) = 0;  // until done, or the timeout ends the job

  // Ends the whole job: prints "sima-train: error: rank r of P: message" and aborts every rank.
  [[noreturn]] virtual void abort(const std::string& message) = 0;
};

Comm& comm_single();
// The process's communicator: MPI's after init_distributed() under mpirun, else comm_single().
Comm& world();

// Call first thing in main(): under mpirun (OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK set)
// initialises MPI, else nothing. A build without MPI launched with more than one rank fails
// (each copy would train alone and write the same run folder). MPI_Finalize runs at exit.
void init_distributed(int* argc, char*** argv);
// The backend init_distributed starts under mpirun: MPI's, registered by use_mpi() from
// libsima_mpi (train/distributed/comm_mpi.h); none by default, so libsima needs no MPI.
using MpiStart = Comm* (*)(int* argc, char*** argv);
void register_mpi_backend(MpiStart start);

// OpenMP threads per rank when OMP_NUM_THREADS is unset: the cores this rank may run on
// (its affinity mask) divided by the ranks on this machine when they share all of them, so
// ranks × threads never oversubscribes the cores. Sets it and returns a line for the log.
std::string set_threads_per_rank(const Comm& comm);

// Seconds from SIMA_MPI_TIMEOUT (default 600, 0 = no limit); an unreadable value is an error.
double mpi_timeout_seconds();

// The failure tests' seam: SIMA_TEST_FAULT=rank:step[:hang|throw], read once when a run is
// set up (an unreadable value is an error then), makes that rank throw (or sleep forever) when
// it starts that global step (1-based). Unset, as in every normal run, the loop's check is an
// integer comparison that never matches (step -1): no environment read per step.
struct TestFault {
  int rank = -1;
  int64_t step = -1;
  bool hang = false;

  static TestFault from_env();
  void at_step(const Comm& comm, int64_t global_step) const {
    if (global_step == step && comm.rank() == rank) trigger();
  }
  [[noreturn]] void trigger() const;
};

// ---- gradient averaging ------------------------------------------------------------------

// Parameter indices (into `numels`, registration order) per bucket: filled from the last
// parameter back, a bucket closed as soon as it holds >= bucket_bytes (float32), as PyTorch's
// compute_bucket_assignment_by_size. bucket_bytes <= 0: one bucket for all.
std::vector<std::vector<size_t>> assign_buckets(const std::vector<int64_t>& numels, int64_t bucket_bytes);

struct GradSyncStats {
  int64_t steps = 0;
  int64_t bytes_per_step = 0;   // float32 bytes all-reduced per step (one copy of every gradient)
  double wait_seconds = 0.0;    // time finish() waited for allreduces after backward, in total
  double comm_seconds = 0.0;    // time inside the hook and finish() (copies, MPI calls), in total
};

class GradSync {
 public:
  // params: the model's trainable parameters in registration order (named_parameters()).
  GradSync(Comm& comm, std::vector<Tensor> params, double bucket_mb);
  ~GradSync();
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  void begin();   // before backward: installs the grad-ready hook
  void finish();  // after backward: starts the buckets left, waits, writes the mean into .grad
  const std::vector<std::vector<size_t>>& buckets() const { return buckets_; }
  const GradSyncStats& stats() const { return stats_; }

 private:
  void on_ready(TensorImpl& leaf);
  void launch_ready_buckets();  // starts full buckets, in bucket order

  Comm& comm_;
  std::vector<Tensor> params_;
  std::vector<std::vector<size_t>> buckets_;
  std::vector<std::vector<float>> buffers_;        // one flat buffer per bucket
  std::vector<std::pair<int, int64_t>> where_;     // param -> (bucket, offset in its buffer)
  std::unordered_map<const TensorImpl*, size_t> index_;
  std::vector<int> missing_;   // per bucket: parameters not ready yet
  std::vector<int> requests_;  // per bucket: request id, -1 before launch
  std::vector<char> ready_, had_grad_;
  size_t next_launch_ = 0;
  GradSyncStats stats_;
};

// Copies rank 0's parameters and buffers to every rank (after init or resume).
void broadcast_module(Comm& comm, Module& module);

// A GradSync over the trainable parameters of `module` (those with requires_grad), in
// registration order: what both trainers build when there is more than one rank.
std::unique_ptr<GradSync> make_grad_sync(Comm& comm, Module& module, double bucket_mb);
// Copies rank 0's buffers only: without SyncBatchNorm each rank's BatchNorm running statistics
// follow its own slices; before an evaluation every rank takes rank 0's, the ones rank 0 saves
// (PyTorch DDP broadcasts them from rank 0 at every forward, to the same effect).
void broadcast_buffers(Comm& comm, Module& module);

// The start-up banner's part about ranks: ", P ranks x B/P images" with P > 1 ranks sharing a
// global batch of B, and "" for one process.
std::string ranks_banner(const Comm& comm, int64_t global_batch);

// Mean of a scalar over the ranks (each rank's value weighs the same: equal slices).
double mean_over_ranks(Comm& comm, double value);
// True on every rank when it is true on any (e.g. a stop signal seen by one rank first).
bool any_rank(Comm& comm, bool value);

// SyncBatchNorm: every BatchNorm2d of `module` takes its batch statistics (and their
// gradients) over all ranks' slices (nn/normalization.h, sync).
void convert_sync_batchnorm(Comm& comm, Module& module);

// ---- evaluation --------------------------------------------------------------------------
// evaluate() (train/eval/evaluate.h) with the test set split among the ranks (rank r takes the
// indices r, r + P, r + 2P, ...: each image exactly once, no padding) and the counts, loss sum
// and confusion matrix summed: every rank gets the result of the whole set.
EvalResult evaluate_sharded(Comm& comm, Model& model, std::shared_ptr<const Dataset> dataset,
                            const EvalOptions& options);

}  // namespace sima
