// One writer per run folder (train/loop/run_lock.h): a second RunLock on a locked folder fails
// naming the holder's pid; then real sima-train processes: two started together into one
// --out (exactly one refused, naming the other's pid; the other's run intact and resumable),
// a --resume of a running run refused, and a SIGKILLed holder leaving no stale lock.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "app_testing.h"
#include "testing.h"
#include "train/loop/run_lock.h"

using namespace sima;
using namespace sima::testing;
namespace fs = std::filesystem;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// sima-train with stdout/stderr in <log>.out/.err, one thread (runs comparable, cores shared).
pid_t spawn_train(const std::vector<std::string>& args, const std::string& log) {
  const pid_t pid = testing::spawn_sima_train(args, log, 1);
  REQUIRE(pid >= 0);
  return pid;
}

int exit_code_of(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// A tiny DeiT: 2 epochs of 8 steps, a train state after every step.
std::string write_config(const TempDir& dir) {
  const std::string cfg = dir.file("lock.json");
  std::ofstream(cfg) << R"({"name": "lock",
    "model": {"name": "deit_tiny_patch4_28_sima", "embed_dim": 32, "depth": 2, "num_heads": 2},
    "data": {"train_subset": 128, "test_subset": 32, "batch_size": 16, "num_workers": 0},
    "schedule": {"warmup_epochs": 1},
    "train": {"epochs": 2, "log_every": 1, "checkpoint_every": 1}})";
  return cfg;
}

// Every line of metrics.jsonl is one whole JSON object; returns how many step records.
int64_t check_metrics_lines(const std::string& run) {
  std::ifstream f(run + "/metrics.jsonl");
  std::string line;
  int64_t steps = 0, last = 0;
  while (std::getline(f, line)) {
    nlohmann::json j;
    REQUIRE_NOTHROW(j = nlohmann::json::parse(line));
    if (j.value("kind", "") != "step") continue;
    CHECK(j["step"].get<int64_t>() == last + 1);  // no interleaving, no repeat
    last = j["step"].get<int64_t>();
    ++steps;
  }
  return steps;
}

// Waits until the holder has written its note into run.lock.
bool wait_for_lock_note(const std::string& run, pid_t pid) {
  const std::string want = "pid " + std::to_string(pid) + ":";
  for (int i = 0; i < 6000; ++i) {
    if (slurp(run + "/run.lock").rfind(want, 0) == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

}  // namespace

TEST_CASE("RunLock: a second lock on a locked folder fails naming the holder's pid; released on destruction") {
  TempDir dir;
  {
    RunLock first(dir.str());
    CHECK(slurp(first.path()).rfind("pid " + std::to_string(::getpid()) + ": ", 0) == 0);
    const std::string msg = error_message([&] { RunLock second(dir.str()); });
    CHECK(msg.find(dir.str() + " is in use by another run (pid " + std::to_string(::getpid()) + ": ") == 0);
    CHECK(msg.find("choose another --out") != std::string::npos);
  }
  CHECK_NOTHROW(RunLock again(dir.str()));  // released
  CHECK(error_message([&] { RunLock bad(dir.str() + "/no/such/folder"); }).find("cannot open") != std::string::npos);
}

namespace {

// A child that takes the lock of `dir`, writes `note` into it, tells the parent through a pipe, and
// holds it for `hold_ms` before exiting: a stand-in for gnuplot's fork outliving a killed run.
pid_t hold_lock(const std::string& dir, const std::string& note, int hold_ms) {
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t child = ::fork();
  if (child == 0) {  // async-signal-safe calls only
    const int fd = ::open((dir + "/run.lock").c_str(), O_RDWR | O_CREAT, 0644);
    if (fd < 0 || ::flock(fd, LOCK_EX) != 0 || ::pwrite(fd, note.data(), note.size(), 0) < 0) ::_exit(1);
    if (::write(ready[1], "x", 1) != 1) ::_exit(1);
    ::usleep(useconds_t(hold_ms) * 1000);
    ::_exit(0);
  }
  char c = 0;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  ::close(ready[0]);
  ::close(ready[1]);
  return child;
}

}  // namespace

TEST_CASE("RunLock: a lock a dead run's child holds a moment longer is waited for; a live run's is refused at once") {
  TempDir dir;
  const pid_t gone = ::fork();  // a pid that no longer exists: a child that exited and was reaped
  if (gone == 0) ::_exit(0);
  REQUIRE(::waitpid(gone, nullptr, 0) == gone);
  using clock = std::chrono::steady_clock;
  const auto ms_since = [](clock::time_point t) {
    return std::chrono::duration<double, std::milli>(clock::now() - t).count();
  };

  pid_t child = hold_lock(dir.str(), "pid " + std::to_string(gone) + ": sima-train --out x\n", 300);
  auto t0 = clock::now();
  CHECK_NOTHROW(RunLock waited(dir.str()));
  CHECK(ms_since(t0) >= 150.0);  // it waited for the child to let go
  ::waitpid(child, nullptr, 0);

  child = hold_lock(dir.str(), "pid " + std::to_string(::getpid()) + ": sima-train --out y\n", 3000);
  t0 = clock::now();
  const std::string msg = error_message([&] { RunLock refused(dir.str()); });
  CHECK(msg.find("is in use by another run (pid " + std::to_string(::getpid()) + ": sima-train --out y") !=
        std::string::npos);
  CHECK(ms_since(t0) < 1500.0);  // a live holder: no waiting
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
}

TEST_CASE("sima-train: two runs started together into one folder: one refused naming the other, one intact") {
  TempDir dir;
  const std::string cfg = write_config(dir), run = dir.str() + "/run";
  const pid_t a = spawn_train({"--config", cfg, "--out", run, "--quiet", "--set", "train.max_steps=10"}, dir.file("a"));
  const pid_t b = spawn_train({"--config", cfg, "--out", run, "--quiet", "--set", "train.max_steps=10"}, dir.file("b"));
  const int ca = exit_code_of(a), cb = exit_code_of(b);
  INFO("a: " << ca << " " << slurp(dir.file("a.err")) << "\nb: " << cb << " " << slurp(dir.file("b.err")));
  REQUIRE(((ca == 0) != (cb == 0)));  // exactly one ran
  const pid_t winner = ca == 0 ? a : b;
  const std::string loser_err = slurp(dir.file(ca == 0 ? "b.err" : "a.err"));
  CHECK(loser_err.find("is in use by another run (pid " + std::to_string(winner) + ": ") != std::string::npos);
  CHECK(loser_err.find("--out " + run) != std::string::npos);  // the holder's command line
  // The winner's run is whole: 10 step records in order, and it resumes to its end.
  CHECK(check_metrics_lines(run) == 10);
  const pid_t r = spawn_train({"--out", run, "--resume", "--quiet"}, dir.file("r"));
  REQUIRE_MESSAGE(exit_code_of(r) == 0, slurp(dir.file("r.err")));
  CHECK(check_metrics_lines(run) == 16);
  CHECK(fs::exists(run + "/model.safetensors"));
}

TEST_CASE("sima-train: --resume of a running run is refused; a SIGKILLed holder leaves no stale lock") {
  TempDir dir;
  const std::string cfg = write_config(dir), run = dir.str() + "/run";
  const pid_t a = spawn_train({"--config", cfg, "--out", run, "--quiet"}, dir.file("a"));
  REQUIRE(wait_for_lock_note(run, a));
  // Once a train state is saved (a --resume from the folder alone reads its config.json).
  for (int i = 0; i < 6000 && !fs::exists(run + "/train_state.safetensors"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  REQUIRE(fs::exists(run + "/train_state.safetensors"));
  const pid_t b = spawn_train({"--out", run, "--resume", "--quiet"}, dir.file("b"));
  CHECK(exit_code_of(b) == 1);
  CHECK(slurp(dir.file("b.err")).find("is in use by another run (pid " + std::to_string(a) + ": ") !=
        std::string::npos);
  // Kill -9: the kernel drops the lock with the process.
  ::kill(a, SIGKILL);
  CHECK(exit_code_of(a) == 128 + SIGKILL);
  CHECK(slurp(run + "/run.lock").rfind("pid " + std::to_string(a) + ":", 0) == 0);  // the note stays, not the lock
  const pid_t c = spawn_train({"--out", run, "--resume", "--quiet"}, dir.file("c"));
  REQUIRE_MESSAGE(exit_code_of(c) == 0, slurp(dir.file("c.err")));
  CHECK(check_metrics_lines(run) == 16);
}
