// comm_mpi: Comm over MPI_COMM_WORLD (train/distributed/distributed.h), in its own library
// libsima_mpi (comm_mpi.h), so that a program that never runs under mpirun links without MPI.
//
// Every operation is non-blocking underneath (MPI_Iallreduce, MPI_Ibcast, MPI_Ibarrier) and
// waited for by polling MPI_Test against the SIMA_MPI_TIMEOUT deadline, so a rank whose peer
// died or hangs ends the job with an error instead of waiting forever. Polling also drives
// OpenMPI's progress of the outstanding bucket allreduces (it has no progress thread).
#include "train/distributed/comm_mpi.h"

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "core/error.h"
#include "train/distributed/distributed.h"

namespace sima {

namespace {

class CommMpi final : public Comm {
 public:
  CommMpi() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local);
    MPI_Comm_size(local, &local_size_);
    MPI_Comm_free(&local);
    timeout_ = mpi_timeout_seconds();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_size() const override { return local_size_; }

  void allreduce_sum(float* data, int64_t n) override {
    wait(start([&](MPI_Request* r) { MPI_Iallreduce(MPI_IN_PLACE, data, count(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, r); }));
  }
  void allreduce_sum(double* data, int64_t n) override {
    wait(start([&](MPI_Request* r) { MPI_Iallreduce(MPI_IN_PLACE, data, count(n), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, r); }));
  }
  void broadcast(float* data, int64_t n, int root) override {
    wait(start([&](MPI_Request* r) { MPI_Ibcast(data, count(n), MPI_FLOAT, root, MPI_COMM_WORLD, r); }));
  }
  void barrier() override {
    wait(start([&](MPI_Request* r) { MPI_Ibarrier(MPI_COMM_WORLD, r); }));
  }
  int iallreduce_sum(float* data, int64_t n) override {
    return start([&](MPI_Request* r) { MPI_Iallreduce(MPI_IN_PLACE, data, count(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, r); });
  }
  bool test(int id) override {
    MPI_Request& r = requests_.at(size_t(id));
    if (r == MPI_REQUEST_NULL) return true;
    int done = 0;
    MPI_Test(&r, &done, MPI_STATUS_IGNORE);
    return done != 0;  // a completed request is set to MPI_REQUEST_NULL by MPI_Test
  }
  void wait(int id) override {
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    for (int spins = 0; !test(id); ++spins) {
      if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));  // a long wait: yield the core
      if (timeout_ > 0 && (spins & 63) == 0 && std::chrono::duration<double>(Clock::now() - t0).count() > timeout_)
        abort("no answer from the other ranks within SIMA_MPI_TIMEOUT = " + std::to_string(int(timeout_)) +
              " s (another rank failed or hangs; raise SIMA_MPI_TIMEOUT if a step really takes that long)");
    }
    free_.push_back(id);
  }
  [[noreturn]] void abort(const std::string& message) override {
    std::fprintf(stderr, "sima-train: error: rank %d of %d: %s\n", rank_, size_, message.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::_Exit(1);  // not reached
  }

 private:
  static int count(int64_t n) {
    check(n >= 0 && n <= INT32_MAX, "MPI: a message of ", n, " elements is too long");
    return int(n);
  }
  template <class F>
  int start(F&& call) {
    int id;
    if (!free_.empty()) {
      id = free_.back();
      free_.pop_back();
    } else {
      id = int(requests_.size());
      requests_.push_back(MPI_REQUEST_NULL);
    }
    call(&requests_[size_t(id)]);
    return id;
  }

  int rank_ = 0, size_ = 1, local_size_ = 1;
  double timeout_ = 0;
  std::vector<MPI_Request> requests_;  // by id; ids are reused after wait()
  std::vector<int> free_;
};

void finalize_mpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

// MPI_Init_thread and the communicator: the backend init_distributed starts under mpirun.
Comm* start_mpi(int* argc, char*** argv) {
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);  // MPI calls from the main thread only
  std::atexit(finalize_mpi);
  static CommMpi comm;
  return &comm;
}

}  // namespace

void use_mpi() { register_mpi_backend(&start_mpi); }

}  // namespace sima
