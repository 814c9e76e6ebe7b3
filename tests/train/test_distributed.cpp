// Data parallelism without mpirun (train/distributed/distributed.h): the loader's shards, the gradient
// buckets, the grad-ready hook, GradSync over a fake communicator, and SyncBatchNorm's op
// run by two threads as two "ranks" against batch_norm2d on the concatenated batch.
// The real multi-process runs are tests/mpi/test_mpi_train.cpp.
#include <doctest/doctest.h>

#include <barrier>
#include <cmath>
#include <set>
#include <thread>

#include "core/autograd.h"
#include "core/gradcheck.h"
#include "core/ops.h"
#include "data/loader_pipeline.h"
#include "testing.h"
#include "train/distributed/distributed.h"

using namespace sima;
using sima::testing::error_message;
using sima::testing::max_abs_diff;

namespace {

// The dataset indices of batch `b` of an epoch, as the loader would build them.
std::vector<int64_t> batch_indices(int64_t n, const LoaderOptions& opt, int64_t epoch, int64_t b) {
  std::vector<int64_t> out;
  BatchPipeline pipe(n, opt, [&](const BatchJob& job, int) { out = job.indices; }, "test");
  pipe.start_epoch(epoch, b);
  const int slot = pipe.acquire();
  REQUIRE(slot >= 0);
  pipe.release(slot);
  return out;
}

// A pretend rank among `size` identical ones: a sum over ranks is `size` times the value.
// Records the order requests start in.
class FakeComm final : public Comm {
 public:
  explicit FakeComm(int size) : size_(size) {}
  int rank() const override { return 0; }
  int size() const override { return size_; }
  int local_size() const override { return size_; }
  void allreduce_sum(float* d, int64_t n) override { scale(d, n); }
  void allreduce_sum(double* d, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) d[i] *= size_;
  }
  void broadcast(float*, int64_t, int) override {}
  void barrier() override {}
  int iallreduce_sum(float* d, int64_t n) override {
    scale(d, n);
    started.push_back(n);
    return int(started.size()) - 1;
  }
  bool test(int) override { return true; }
  void wait(int) override {}
  [[noreturn]] void abort(const std::string& m) override { fail("abort: ", m); }
  std::vector<int64_t> started;  // element counts, in start order

 private:
  void scale(float* d, int64_t n) {
    for (int64_t i = 0; i < n; ++i) d[i] *= float(size_);
  }
  int size_;
};

}  // namespace

TEST_CASE("sharded loader: the ranks' slices of batch k, concatenated, are batch k of one process") {
  const int64_t n = 103;  // 6 whole global batches of 16, 7 images dropped
  LoaderOptions one{.batch_size = 16, .shuffle = true, .drop_last = true, .seed = 5};
  for (int P : {2, 4}) {
    std::set<int64_t> seen;
    for (int64_t b = 0; b < 6; ++b) {
      std::vector<int64_t> cat;
      for (int r = 0; r < P; ++r) {
        LoaderOptions o = one;
        o.num_replicas = P;
        o.rank = r;
        auto part = batch_indices(n, o, 3, b);
        CHECK(int64_t(part.size()) == 16 / P);
        cat.insert(cat.end(), part.begin(), part.end());
      }
      CHECK(cat == batch_indices(n, one, 3, b));
      seen.insert(cat.begin(), cat.end());
    }
    CHECK(seen.size() == 96);  // disjoint: every image of the 6 batches once
  }
  // The same number of steps whatever P; a batch that does not divide is an error.
  LoaderOptions o = one;
  o.num_replicas = 3;
  CHECK(error_message([&] { BatchPipeline(n, o, [](const BatchJob&, int) {}, "L"); })
            .find("global batch_size 16 does not divide among 3 processes") != std::string::npos);
  o.num_replicas = 2;
  o.drop_last = false;
  CHECK(error_message([&] { BatchPipeline(n, o, [](const BatchJob&, int) {}, "L"); }).find("needs drop_last") !=
        std::string::npos);
}

TEST_CASE("assign_buckets: reverse registration order, each closed once it reaches the size") {
  // floats: 10, 300, 20, 20, 5 -> bytes 40, 1200, 80, 80, 20; buckets of >= 100 bytes
  auto b = assign_buckets({10, 300, 20, 20, 5}, 100);
  REQUIRE(b.size() == 3);
  CHECK(b[0] == std::vector<size_t>{4, 3});  // 20 + 80 = 100: closed
  CHECK(b[1] == std::vector<size_t>{2, 1});  // 80 + 1200
  CHECK(b[2] == std::vector<size_t>{0});
  CHECK(assign_buckets({10, 300, 20}, 0) == std::vector<std::vector<size_t>>{{2, 1, 0}});
  CHECK(assign_buckets({}, 100).empty());
}

TEST_CASE("grad-ready hook: once per leaf, after its last contribution") {
  Tensor a = randn({3}).requires_grad_(), b = randn({3}).requires_grad_();
  std::vector<std::pair<TensorImpl*, float>> calls;  // leaf, its grad[0] when called
  set_grad_ready_hook([&](TensorImpl& leaf) { calls.push_back({&leaf, leaf.grad ? leaf.grad->storage->data[leaf.grad->offset] : NAN}); });
  // a is used twice: the hook must see the sum of both contributions.
  Tensor y = sum(add(mul(a, a), mul(a, b)));
  y.backward();
  set_grad_ready_hook(nullptr);
  REQUIRE(calls.size() == 2);
  for (auto& [leaf, g0] : calls) {
    const bool is_a = leaf == a.impl();
    CHECK((is_a || leaf == b.impl()));
    const float want = is_a ? 2 * a.data()[0] + b.data()[0] : a.data()[0];
    CHECK(g0 == doctest::Approx(want));
  }
  CHECK(calls[0].first != calls[1].first);
}

TEST_CASE("GradSync: buckets start during backward, in order; .grad is the mean over ranks") {
  // Four parameters, each used by one op; buckets of one parameter each (tiny size).
  std::vector<Tensor> ps;
  for (int i = 0; i < 4; ++i) ps.push_back(randn({8}).requires_grad_());
  FakeComm comm(2);
  GradSync sync(comm, ps, 1e-6);
  REQUIRE(sync.buckets().size() == 4);
  CHECK(sync.stats().bytes_per_step == 4 * 8 * 4);
  Tensor x = randn({8});
  // loss = Σ_i Σ (p_i · x)·(i + 1): dL/dp_i = (i + 1)·x
  Tensor loss;
  for (int i = 0; i < 4; ++i) {
    Tensor t = mul(sum(mul(ps[size_t(i)], x)), float(i + 1));
    loss = loss.defined() ? add(loss, t) : t;
  }
  sync.begin();
  loss.backward();
  const size_t started_in_backward = comm.started.size();
  sync.finish();
  CHECK(started_in_backward == 4);  // every bucket was full before backward returned
  CHECK(comm.started.size() == 4);
  // FakeComm's other rank has the same gradient: the mean is the local one.
  for (int i = 0; i < 4; ++i)
    for (int64_t k = 0; k < 8; ++k) CHECK(ps[size_t(i)].grad().data()[k] == doctest::Approx((i + 1) * x.data()[k]));
  // A parameter the graph does not reach: its bucket starts in finish(), it keeps no .grad.
  for (auto& p : ps) p.zero_grad();
  sync.begin();
  sum(mul(ps[0], x)).backward();
  sync.finish();
  CHECK(comm.started.size() == 8);
  CHECK(ps[0].grad().defined());
  CHECK(!ps[3].grad().defined());
}

TEST_CASE("sync_batch_norm: one process = batch_norm2d; gradcheck") {
  Tensor x = randn({4, 3, 2, 2}).requires_grad_(), w = randn({3}).requires_grad_(), b = randn({3}).requires_grad_();
  Tensor rm = zeros({3}), rv = ones({3}), rm2 = zeros({3}), rv2 = ones({3});
  SumAcrossFn identity = [](double*, int64_t) {};
  Tensor y1 = sync_batch_norm(x, w, b, rm, rv, 0.1f, 1e-5f, identity);
  Tensor y2 = batch_norm2d(x, w, b, rm2, rv2, true, 0.1f, 1e-5f);
  CHECK(max_abs_diff(y1, y2) < 1e-5);
  CHECK(max_abs_diff(rm, rm2) < 1e-6);
  CHECK(max_abs_diff(rv, rv2) < 1e-6);
  auto f = [&](const std::vector<Tensor>& in) {
    return sync_batch_norm(in[0], in[1], in[2], Tensor(), Tensor(), 0.1f, 1e-5f, identity);
  };
  CHECK_GRADCHECK(f, {x, w, b});
}

TEST_CASE("sync_batch_norm: two ranks (threads) = batch_norm2d on the concatenated batch, forward and backward") {
  const int64_t C = 3;
  Tensor full = randn({6, C, 2, 2}), r = randn({6, C, 2, 2});  // loss = Σ y·r
  Tensor w = randn({C}), bias = randn({C});
  // Reference: one process, the whole batch.
  Tensor xf = full.clone().requires_grad_(), wf = w.clone().requires_grad_(), bf = bias.clone().requires_grad_();
  Tensor rmf = zeros({C}), rvf = ones({C});
  Tensor yf = batch_norm2d(xf, wf, bf, rmf, rvf, true, 0.1f, 1e-5f);
  sum(mul(yf, r)).backward();

  // Two ranks: rank k holds rows [3k, 3k + 3); sum_across adds the two ranks' vectors.
  std::vector<double> slot[2];
  std::barrier sync_point(2);
  auto sum_across_of = [&](int k) {
    return SumAcrossFn([&, k](double* d, int64_t n) {
      slot[k].assign(d, d + n);
      sync_point.arrive_and_wait();
      for (int64_t i = 0; i < n; ++i) d[i] = slot[0][size_t(i)] + slot[1][size_t(i)];
      sync_point.arrive_and_wait();  // both read before the next overwrite
    });
  };
  Tensor y[2], dx[2], dw[2], db[2], rm[2], rv[2];
  auto rank = [&](int k) {
    Tensor x = narrow(full, 0, 3 * k, 3).clone().requires_grad_();
    Tensor wk = w.clone().requires_grad_(), bk = bias.clone().requires_grad_();
    rm[k] = zeros({C});
    rv[k] = ones({C});
    y[k] = sync_batch_norm(x, wk, bk, rm[k], rv[k], 0.1f, 1e-5f, sum_across_of(k));
    sum(mul(y[k], narrow(r, 0, 3 * k, 3).clone())).backward();
    dx[k] = x.grad(), dw[k] = wk.grad(), db[k] = bk.grad();
  };
  std::thread t0(rank, 0), t1(rank, 1);
  t0.join();
  t1.join();
  CHECK(max_abs_diff(cat({y[0], y[1]}, 0), yf) < 1e-5);
  CHECK(max_abs_diff(cat({dx[0], dx[1]}, 0), xf.grad()) < 1e-5);
  CHECK(max_abs_diff(add(dw[0], dw[1]), wf.grad()) < 1e-4);  // summed by the gradient averaging
  CHECK(max_abs_diff(add(db[0], db[1]), bf.grad()) < 1e-4);
  CHECK(max_abs_diff(rm[0], rmf) < 1e-6);
  CHECK(max_abs_diff(rv[1], rvf) < 1e-6);
  // Without the sync the per-rank statistics differ: the test can fail.
  Tensor y0_local = batch_norm2d(narrow(full, 0, 0, 3), w, bias, Tensor(), Tensor(), true, 0.1f, 1e-5f);
  CHECK(max_abs_diff(y0_local, narrow(yf, 0, 0, 3)) > 1e-3);
}

TEST_CASE("ranks_banner: the ranks and the per-rank batch, nothing for one process") {
  CHECK(ranks_banner(FakeComm(1), 128) == "");
  CHECK(ranks_banner(FakeComm(2), 128) == ", 2 ranks x 64 images");
  CHECK(ranks_banner(FakeComm(4), 64) == ", 4 ranks x 16 images");
}

TEST_CASE("SIMA_MPI_TIMEOUT and SIMA_TEST_FAULT: read, checked") {
  setenv("SIMA_MPI_TIMEOUT", "2.5", 1);
  CHECK(mpi_timeout_seconds() == 2.5);
  setenv("SIMA_MPI_TIMEOUT", "soon", 1);
  CHECK(error_message([] { mpi_timeout_seconds(); }).find("SIMA_MPI_TIMEOUT: expected seconds") != std::string::npos);
  unsetenv("SIMA_MPI_TIMEOUT");
  CHECK(mpi_timeout_seconds() == 600.0);
  setenv("SIMA_TEST_FAULT", "0:3", 1);
  const TestFault fault = TestFault::from_env();
  unsetenv("SIMA_TEST_FAULT");  // read once: the plan no longer looks at the environment
  fault.at_step(comm_single(), 2);  // not this step
  CHECK(error_message([&] { fault.at_step(comm_single(), 3); }).find("injected failure at step 3") !=
        std::string::npos);
  setenv("SIMA_TEST_FAULT", "1:3", 1);
  TestFault::from_env().at_step(comm_single(), 3);  // another rank's fault
  setenv("SIMA_TEST_FAULT", "zero", 1);
  CHECK(error_message([] { TestFault::from_env(); }).find("expected rank:step") != std::string::npos);
  unsetenv("SIMA_TEST_FAULT");
  TestFault::from_env().at_step(comm_single(), 3);  // unset: never fires
  CHECK(world().size() == 1);  // not launched by mpirun
}
