// sima-train under signals, as a user's machine delivers them:
//  - SIGTERM mid-run: the step finishes, the train state is saved, the exit code is 130 and
//    stderr names the --resume command; the resumed run then completes.
//  - SIGTERM at random moments, most of them inside a GEMM: the run always exits 130 (or 0 when it
//    had finished), never with a crash (train/loop/stop_signals.h: a signal handler on a thread in
//    oneDNN's kernels corrupted the heap in 4 of 10 such runs).
//  - SIGKILL at random moments (with a checkpoint after every step, so many kills land inside a
//    checkpoint write), resumed each time until the run finishes. The run must end exactly where an
//    uninterrupted run ends: the same loss at every step of metrics.jsonl (no gap, no repeat) and
//    the same final weights, bit for bit (resume is exact at a fixed thread count).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "app_testing.h"
#include "models/io/checkpoint.h"
#include "models/io/safetensors.h"
#include "testing.h"
#include "train/loop/metrics.h"

using namespace sima;
using namespace sima::testing;
namespace fs = std::filesystem;

namespace {

// A sima-train process with stdout/stderr in files; fixed thread count so runs are comparable.
class TrainProcess {
 public:
  TrainProcess(const std::vector<std::string>& args, const std::string& log_prefix) {
    pid_ = testing::spawn_sima_train(args, log_prefix, 2);
    REQUIRE(pid_ >= 0);
  }
  // Polls every 50 µs until `ready()` holds (true) or the process ends (false, with its status).
  template <class F>
  bool wait_until(F ready, int& status) {
    for (int i = 0;; ++i) {
      if (ready()) return true;
      if (i % 20 == 0 && ::waitpid(pid_, &status, WNOHANG) == pid_) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  // Waits up to `timeout`; true with the raw wait status when the process ended.
  bool wait_for(std::chrono::milliseconds timeout, int& status) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return false;
  }
  // Polls until the process has blocked SIGTERM (sima-train's first act in main(): from then on the
  // signal thread takes it); false with its status if it ended first. Before that moment a SIGTERM
  // ends any program by the default action: a loaded machine can stretch process start-up past the
  // test's shortest delay, so the delays count from here.
  bool wait_signals_blocked(int& status) {
    const std::string path = "/proc/" + std::to_string(pid_) + "/status";
    return wait_until([&] {
      std::ifstream in(path);
      for (std::string line; std::getline(in, line);)
        if (line.rfind("SigBlk:", 0) == 0) return ((std::stoull(line.substr(7), nullptr, 16) >> (SIGTERM - 1)) & 1) != 0;
      return false;
    }, status);
  }
  int finish(int sig) {  // sends `sig` (if still running) and reaps; the raw wait status
    ::kill(pid_, sig);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    return status;
  }

 private:
  pid_t pid_ = -1;
};

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A tiny DeiT: 3 epochs of 16 steps, a train state after every step, a record every step.
std::string write_config(const TempDir& dir) {
  const std::string cfg = dir.file("kill.json");
  std::ofstream(cfg) << R"({"name": "kill",
    "model": {"name": "deit_tiny_patch4_28_sima", "embed_dim": 32, "depth": 2, "num_heads": 2},
    "data": {"train_subset": 256, "test_subset": 64, "batch_size": 16, "num_workers": 0},
    "schedule": {"warmup_epochs": 1},
    "train": {"epochs": 3, "log_every": 1, "checkpoint_every": 1, "eval_every": 1}})";
  return cfg;
}

// step -> loss of the step records of metrics.jsonl; fails on a repeated step.
std::map<int64_t, double> step_losses(const std::string& run_dir) {
  std::map<int64_t, double> losses;
  for (const nlohmann::json& r : read_metrics_jsonl(run_dir + "/metrics.jsonl")) {
    if (r.value("kind", "") != "step") continue;
    const int64_t step = r["step"].get<int64_t>();
    CHECK_MESSAGE(!losses.count(step), "step " << step << " is logged twice");
    losses[step] = r["loss"].get<double>();
  }
  return losses;
}

void check_same_weights(const std::string& a, const std::string& b) {
  const SafetensorsFile fa = load_safetensors(a), fb = load_safetensors(b);
  REQUIRE(fa.tensors.size() == fb.tensors.size());
  for (const auto& [name, t] : fa.tensors) {
    const Tensor u = fb.get(name);
    REQUIRE_MESSAGE(u.defined(), name);
    REQUIRE(t.numel() == u.numel());
    CHECK_MESSAGE(std::memcmp(t.data(), u.data(), sizeof(float) * t.numel()) == 0, name << " differs");
  }
}

}  // namespace

TEST_CASE("sima-train: SIGTERM finishes the step, saves, exits 130 with the resume command; the resume completes") {
  TempDir dir;
  const std::string cfg = write_config(dir), out = dir.str() + "/run";
  TrainProcess p({"--config", cfg, "--out", out, "--quiet"}, dir.file("term"));
  // Wait until training has saved a state, then ask it to stop.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!fs::exists(out + "/train_state.safetensors") && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  REQUIRE(fs::exists(out + "/train_state.safetensors"));
  const int status = p.finish(SIGTERM);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 130);
  const std::string err = slurp(dir.file("term.err"));
  CHECK(err.find("interrupted at step") != std::string::npos);
  CHECK(err.find("--out " + out + " --resume") != std::string::npos);
  CHECK(temp_files_in(out).empty());

  Run rest = run_app("sima-train --out " + out + " --resume --quiet");
  CHECK(rest.status == 0);
  CHECK(rest.out.rfind("done: 48 steps", 0) == 0);
}

TEST_CASE("sima-train: SIGTERM at random moments inside the first epoch never crashes the run") {
  TempDir dir;
  const std::string cfg = dir.file("term.json");
  // Wide enough that most of a step is GEMM time: 32 steps of about 40 ms at 2 threads.
  std::ofstream(cfg) << R"({"name": "term",
    "model": {"name": "deit_tiny_patch4_28_sima", "embed_dim": 64, "depth": 4, "num_heads": 4},
    "data": {"train_subset": 2048, "test_subset": 64, "batch_size": 64, "num_workers": 1},
    "schedule": {"warmup_epochs": 0}, "train": {"epochs": 1, "log_every": 100}})";
  std::mt19937 rng(7);
  int interrupted = 0;
  for (int i = 0; i < 8; ++i) {
    const std::string out = dir.str() + "/run" + std::to_string(i);
    TrainProcess p({"--config", cfg, "--out", out, "--quiet"}, dir.file("term" + std::to_string(i)));
    int early = 0;
    REQUIRE_MESSAGE(p.wait_signals_blocked(early), "sima-train ended before blocking SIGTERM, status " << early);
    std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(150, 900)(rng)));
    const int status = p.finish(SIGTERM);
    INFO("run " << i << " stderr: " << slurp(dir.file("term" + std::to_string(i) + ".err")));
    REQUIRE_MESSAGE(WIFEXITED(status), "killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0));
    CHECK((WEXITSTATUS(status) == 130 || WEXITSTATUS(status) == 0));
    interrupted += WEXITSTATUS(status) == 130;
  }
  CHECK(interrupted >= 4);  // most signals land mid-run, not after it ended
}

TEST_CASE("sima-train: SIGKILL at random moments, resumed each time, ends bit-identical to an uninterrupted run") {
  TempDir dir;
  const std::string cfg = write_config(dir);

  // The uninterrupted reference, and its wall time to spread the kills over.
  const std::string ref = dir.str() + "/ref";
  const auto t0 = std::chrono::steady_clock::now();
  TrainProcess r({"--config", cfg, "--out", ref, "--quiet"}, dir.file("ref"));
  int status = 0;
  REQUIRE(r.wait_for(std::chrono::seconds(120), status));
  const bool ref_ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  REQUIRE_MESSAGE(ref_ok, slurp(dir.file("ref.err")));
  const double run_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  const std::string out = dir.str() + "/killed";
  std::mt19937 gen(1234);
  std::uniform_real_distribution<double> when(0.0, 0.1 * run_ms);
  int kills = 0, kills_in_write = 0, kills_with_state = 0, attempts = 0;
  bool finished = false;
  while (!finished) {
    REQUIRE_MESSAGE(++attempts <= 60, "the run did not finish after 60 starts");
    const bool resume = fs::exists(out + "/train_state.safetensors");
    std::vector<std::string> args = resume ? std::vector<std::string>{"--out", out, "--resume", "--quiet"}
                                           : std::vector<std::string>{"--config", cfg, "--out", out, "--quiet"};
    TrainProcess p(args, dir.file("run" + std::to_string(attempts)));
    // Each start first makes progress (metrics.jsonl grows past its size before the start, so at
    // least one step is logged), then odd kills come at a random moment and even ones as soon as
    // a save has begun (its temporary file exists). A kill before the first save is whole leaves
    // no train state, and the next start begins afresh: on a loaded machine several kills in a row
    // can land there (a random moment before the end of the first epoch, or a save killed before
    // its train state is renamed into place). So the kills go on until 7 of them found a train
    // state to resume from (and 8 in all); then the run may end.
    const auto size_of = [&](const std::string& f) { return fs::exists(f) ? int64_t(fs::file_size(f)) : int64_t(0); };
    const int64_t logged_before = size_of(out + "/metrics.jsonl");
    bool ended = false;
    if (kills >= 8 && kills_with_state >= 7)
      ended = p.wait_for(std::chrono::milliseconds(120000), status);
    else if (!p.wait_until([&] { return size_of(out + "/metrics.jsonl") > logged_before; }, status))
      ended = true;
    else if (kills % 2 == 1)
      ended = p.wait_for(std::chrono::milliseconds(int64_t(when(gen))), status);
    else
      ended = !p.wait_until([&] { return !temp_files_in(out).empty(); }, status);
    if (ended) {
      const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      REQUIRE_MESSAGE(ok, "start " << attempts << ": " << slurp(dir.file("run" + std::to_string(attempts) + ".err")));
      if (kills >= 8 && kills_with_state >= 7) {
        finished = true;
        break;
      }
      // A start outran its kill (resumed near the end, it finished before the random moment or
      // before another save began) while kills are still owed: begin the run afresh, so the
      // remaining kills land mid-run; the run that ends the loop is still compared below.
      fs::remove_all(out);
      continue;
    }
    p.finish(SIGKILL);
    ++kills;
    kills_in_write += temp_files_in(out).empty() ? 0 : 1;
    // Whatever moment the kill hit, the last train state on disk is whole.
    if (fs::exists(out + "/train_state.safetensors")) {
      ++kills_with_state;
      CHECK_NOTHROW(load_safetensors(out + "/train_state.safetensors"));
    }
  }
  MESSAGE(kills << " SIGKILLs (" << kills_with_state << " after a train state existed, " << kills_in_write
                << " inside a checkpoint write), " << attempts << " starts; reference run " << run_ms << " ms");
  CHECK(kills >= 8);
  CHECK(kills_with_state >= 7);  // resumed from a state killed at every kind of moment
  CHECK(kills_in_write >= 3);

  // No gap, no repeat, and the same loss at every step as the uninterrupted run.
  const std::map<int64_t, double> want = step_losses(ref), got = step_losses(out);
  REQUIRE(want.size() == 48);
  CHECK(want.begin()->first == 1);
  CHECK(want.rbegin()->first == 48);
  CHECK(got == want);
  check_same_weights(ref + "/model.safetensors", out + "/model.safetensors");
  for (const std::string& n : temp_files_in(out)) FAIL_CHECK("left behind: " << n);  // resumes remove them
  CHECK_NOTHROW(load_checkpoint(out + "/model.safetensors"));
}
