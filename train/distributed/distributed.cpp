// comm_single, GradSync (bucketed gradient averaging overlapped with backward) and the small
// helpers of data-parallel training. The MPI side is train/distributed/comm_mpi.cpp.
#include "train/distributed/distributed.h"

#include <omp.h>
#include <sched.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "core/autograd.h"
#include "core/error.h"
#include "core/parallel.h"
#include "nn/normalization.h"

namespace sima {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

class CommSingle final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_size() const override { return 1; }
  void allreduce_sum(float*, int64_t) override {}
  void allreduce_sum(double*, int64_t) override {}
  void broadcast(float*, int64_t, int) override {}
  void barrier() override {}
  int iallreduce_sum(float*, int64_t) override { return 0; }
  bool test(int) override { return true; }
  void wait(int) override {}
  [[noreturn]] void abort(const std::string& message) override {
    std::fprintf(stderr, "sima-train: error: %s\n", message.c_str());
    std::exit(1);
  }
};

}  // namespace

Comm& comm_single() {
  static CommSingle single;
  return single;
}

double mpi_timeout_seconds() {
  const char* v = std::getenv("SIMA_MPI_TIMEOUT");
  if (!v || !*v) return 600.0;
  char* end = nullptr;
  const double t = std::strtod(v, &end);
  check(end && *end == '\0' && std::isfinite(t) && t >= 0, "SIMA_MPI_TIMEOUT: expected seconds >= 0 (0 = no limit), got '",
        v, "'");
  return t;
}

TestFault TestFault::from_env() {
  const char* v = std::getenv("SIMA_TEST_FAULT");
  if (!v || !*v) return {};
  int rank = -1;
  long long at = -1;
  char kind[16] = "";
  const int got = std::sscanf(v, "%d:%lld:%15s", &rank, &at, kind);
  check(got >= 2 && (got == 2 || std::strcmp(kind, "hang") == 0 || std::strcmp(kind, "throw") == 0),
        "SIMA_TEST_FAULT: expected rank:step[:hang|throw], got '", v, "'");
  return {.rank = rank, .step = int64_t(at), .hang = got == 3 && std::strcmp(kind, "hang") == 0};
}

void TestFault::trigger() const {
  if (hang)
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  fail("SIMA_TEST_FAULT: injected failure at step ", step);
}

std::string set_threads_per_rank(const Comm& comm) {
  const int hw = int(std::max(1u, std::thread::hardware_concurrency()));
  cpu_set_t set;
  int allowed = hw;
  if (sched_getaffinity(0, sizeof set, &set) == 0) allowed = std::max(1, CPU_COUNT(&set));
  const int local = std::max(1, comm.local_size());
  const char* env = std::getenv("OMP_NUM_THREADS");
  int threads;
  std::string why;
  if (env && *env) {
    threads = omp_get_max_threads();
    why = "OMP_NUM_THREADS";
    if (threads * local > hw)
      why += "; warning: " + std::to_string(local) + " ranks x " + std::to_string(threads) + " threads oversubscribe the " +
             std::to_string(hw) + " cores";
  } else {
    // Bound to a subset of the cores (mpirun's default binding): use those. Sharing all of
    // them with the other local ranks: an equal part each.
    threads = allowed < hw ? allowed : std::max(1, hw / local);
    set_num_threads(threads);
    why = std::to_string(hw) + " cores, " + std::to_string(allowed) + " allowed to this rank, " + std::to_string(local) +
          " ranks on this machine";
  }
  return std::to_string(threads) + " OpenMP thread" + (threads == 1 ? "" : "s") + " per rank (" + why + ")";
}

// ---- buckets -----------------------------------------------------------------------------

std::vector<std::vector<size_t>> assign_buckets(const std::vector<int64_t>& numels, int64_t bucket_bytes) {
  std::vector<std::vector<size_t>> out;
  int64_t bytes = 0;
  for (size_t k = numels.size(); k-- > 0;) {
    if (out.empty() || (bucket_bytes > 0 && bytes >= bucket_bytes)) {
      out.emplace_back();
      bytes = 0;
    }
    out.back().push_back(k);
    bytes += numels[k] * int64_t(sizeof(float));
  }
  return out;
}

GradSync::GradSync(Comm& comm, std::vector<Tensor> params, double bucket_mb) : comm_(comm), params_(std::move(params)) {
  check(std::isfinite(bucket_mb) && bucket_mb >= 0, "train.allreduce_bucket_mb must be >= 0, got ", bucket_mb);
  std::vector<int64_t> numels;
  for (const Tensor& p : params_) numels.push_back(p.numel());
  buckets_ = assign_buckets(numels, int64_t(bucket_mb * 1024 * 1024));
  where_.resize(params_.size());
  for (size_t b = 0; b < buckets_.size(); ++b) {
    int64_t off = 0;
    for (size_t k : buckets_[b]) {
      where_[k] = {int(b), off};
      off += params_[k].numel();
      index_[params_[k].impl()] = k;
    }
    buffers_.emplace_back(size_t(off), 0.f);
    stats_.bytes_per_step += off * int64_t(sizeof(float));
  }
}

GradSync::~GradSync() { set_grad_ready_hook(nullptr); }

void GradSync::begin() {
  missing_.clear();
  for (const auto& b : buckets_) missing_.push_back(int(b.size()));
  requests_.assign(buckets_.size(), -1);
  ready_.assign(params_.size(), 0);
  had_grad_.assign(params_.size(), 0);
  next_launch_ = 0;
  set_grad_ready_hook([this](TensorImpl& leaf) { on_ready(leaf); });
}

void GradSync::on_ready(TensorImpl& leaf) {
  auto it = index_.find(&leaf);
  if (it == index_.end() || ready_[it->second]) return;  // not one of ours (an input), or seen
  const auto t0 = Clock::now();
  const size_t k = it->second;
  const Tensor& p = params_[k];
  auto [b, off] = where_[k];
  float* dst = buffers_[size_t(b)].data() + off;
  if (p.grad().defined()) {
    std::memcpy(dst, p.grad().data(), size_t(p.numel()) * sizeof(float));
    had_grad_[k] = 1;
  } else {
    std::memset(dst, 0, size_t(p.numel()) * sizeof(float));
  }
  ready_[k] = 1;
  --missing_[size_t(b)];
  launch_ready_buckets();
  for (size_t i = 0; i < next_launch_; ++i) comm_.test(requests_[i]);  // progress the ones in flight
  stats_.comm_seconds += since(t0);
}

void GradSync::launch_ready_buckets() {
  while (next_launch_ < buckets_.size() && missing_[next_launch_] == 0) {
    auto& buf = buffers_[next_launch_];
    requests_[next_launch_] = comm_.iallreduce_sum(buf.data(), int64_t(buf.size()));
    ++next_launch_;
  }
}

void GradSync::finish() {
  set_grad_ready_hook(nullptr);
  const auto t0 = Clock::now();
  // Parameters backward never reached (unused in this step's graph) count as zero gradients.
  for (size_t k = 0; k < params_.size(); ++k)
    if (!ready_[k]) {
      ready_[k] = 1;
      auto [b, off] = where_[k];
      std::memset(buffers_[size_t(b)].data() + off, 0, size_t(params_[k].numel()) * sizeof(float));
      --missing_[size_t(b)];
    }
  launch_ready_buckets();
  const auto t_wait = Clock::now();
  for (int r : requests_) comm_.wait(r);
  stats_.wait_seconds += since(t_wait);
  // The mean over ranks into .grad. A parameter without a gradient here keeps none unless
  // another rank's made the sum non-zero (the optimizer skips parameters without .grad).
  const float inv = 1.0f / float(comm_.size());
  for (size_t k = 0; k < params_.size(); ++k) {
    Tensor& p = params_[k];
    auto [b, off] = where_[k];
    const float* src = buffers_[size_t(b)].data() + off;
    const int64_t n = p.numel();
    if (!had_grad_[k]) {
      bool any = false;
      for (int64_t i = 0; i < n && !any; ++i) any = src[i] != 0.f;
      if (!any) continue;
      p.impl()->grad = zeros(p.shape()).impl_ptr();
    }
    float* dst = p.grad().data();
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i] * inv;
  }
  ++stats_.steps;
  stats_.comm_seconds += since(t0);
}

// ---- helpers -------------------------------------------------------------------------------

void broadcast_module(Comm& comm, Module& module) {
  if (comm.size() == 1) return;
  for (auto& [name, t] : module.named_parameters()) comm.broadcast(t.data(), t.numel(), 0);
  for (auto& [name, t] : module.named_buffers()) comm.broadcast(t.data(), t.numel(), 0);
}

void broadcast_buffers(Comm& comm, Module& module) {
  if (comm.size() == 1) return;
  for (auto& [name, t] : module.named_buffers()) comm.broadcast(t.data(), t.numel(), 0);
}

std::string ranks_banner(const Comm& comm, int64_t global_batch) {
  if (comm.size() <= 1) return "";
  return ", " + std::to_string(comm.size()) + " ranks x " + std::to_string(global_batch / comm.size()) + " images";
}

double mean_over_ranks(Comm& comm, double value) {
  if (comm.size() == 1) return value;
  comm.allreduce_sum(&value, 1);
  return value / double(comm.size());
}

bool any_rank(Comm& comm, bool value) {
  if (comm.size() == 1) return value;
  double v = value ? 1.0 : 0.0;
  comm.allreduce_sum(&v, 1);
  return v > 0.0;
}

void convert_sync_batchnorm(Comm& comm, Module& module) {
  if (comm.size() == 1) return;
  for (auto& [name, m] : module.named_modules())
    if (auto* bn = dynamic_cast<BatchNorm2d*>(m)) bn->sync = [&comm](double* data, int64_t n) { comm.allreduce_sum(data, n); };
}

std::unique_ptr<GradSync> make_grad_sync(Comm& comm, Module& module, double bucket_mb) {
  std::vector<Tensor> trainable;
  for (auto& [name, p] : module.named_parameters())
    if (p.requires_grad()) trainable.push_back(p);
  return std::make_unique<GradSync>(comm, std::move(trainable), bucket_mb);
}

}  // namespace sima
