// Paths that are not regular files and files of the wrong kind are refused with a message
// naming the culprit, without blocking: a FIFO given wherever a file is read (open() on a FIFO
// with no writer waits forever), a directory as --config, a train state as a model
// checkpoint, a checkpoint whose normalisation std is 0, a benchmark shape a variant cannot
// run (an error and exit 1, never a row of the table).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <future>
#include <string>

#include "app_testing.h"
#include "core/error.h"
#include "core/file_io.h"
#include "data/image_io.h"
#include "data/temp_dir.h"
#include "models/io/checkpoint.h"
#include "models/io/pth.h"
#include "models/registry.h"
#include "models/io/safetensors.h"
#include "models/io/zip_archive.h"
#include "testing.h"
#include "train/config/experiment_config.h"
#include "train/eval/evaluate.h"

using namespace sima;
using sima::testing::error_message;
using sima::testing::run_app;
using sima::testing::TempDir;

namespace {

bool has(const std::string& s, const std::string& part) {
  INFO("message: " << s);
  return s.find(part) != std::string::npos;
}

// f's error message, or "BLOCKED" when f has not returned after 3 s: then the FIFO at `fifo`
// is opened for writing and closed, again until f returns, so each blocked open() returns
// (reading an empty stream) and the test goes on.
std::string error_without_blocking(const std::string& fifo, const std::function<void()>& f) {
  auto result = std::async(std::launch::async, [&] { return error_message(f); });
  if (result.wait_for(std::chrono::seconds(3)) == std::future_status::ready) return result.get();
  do {
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  } while (result.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready);
  return "BLOCKED: " + result.get();
}

}  // namespace

TEST_CASE("special files: a FIFO is refused by every reader of user files, naming it, without blocking") {
  TempDir tmp;
  const std::string fifo = tmp.file("pipe");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const std::vector<std::pair<std::string, std::function<void()>>> readers = {
      {"read_file", [&] { read_file(fifo); }},
      {"read_image", [&] { read_image(fifo); }},
      {"GzReader", [&] { GzReader r(fifo); }},
      {"load_safetensors", [&] { load_safetensors(fifo); }},
      {"read_safetensors_metadata", [&] { read_safetensors_metadata(fifo); }},
      {"load_checkpoint", [&] { load_checkpoint(fifo); }},
      {"ZipArchive", [&] { ZipArchive z(fifo); }},
      {"load_pth_state_dict", [&] { load_pth_state_dict(fifo); }},
      {"load_checkpoint_for_eval", [&] { load_checkpoint_for_eval(fifo); }},
      {"read_json_file", [&] { read_json_file(fifo); }},
  };
  for (const auto& [name, f] : readers) {
    INFO(name);
    const std::string msg = error_without_blocking(fifo, f);
    CHECK(has(msg, fifo + ": not a regular file: it is a FIFO (named pipe)"));
    CHECK(msg.rfind("BLOCKED", 0) == std::string::npos);  // refused without waiting for a writer
  }
  // Detection by magic bytes must not open it either: false, at once.
  bool pth = true;
  CHECK(error_without_blocking(fifo, [&] { pth = is_pth_path(fifo); }) == "(no error)");
  CHECK(!pth);
}

TEST_CASE("special files: a directory as a config or a checkpoint is named as a directory, not 'not valid JSON'") {
  TempDir tmp;
  const std::string msg = error_message([&] { read_json_file(tmp.str()); });
  CHECK(has(msg, tmp.str() + ": not a regular file: it is a directory (expected a JSON config file)"));
  CHECK(!has(msg, "JSON ("));
  CHECK(has(error_message([&] { load_checkpoint(tmp.str()); }), "it is a directory"));
  const testing::Run r = run_app("sima-train --config " + tmp.str() + " --out " + tmp.file("run"));
  CHECK(r.status != 0);
  CHECK(has(r.err, "it is a directory"));
  CHECK(has(error_message([] { read_file("/dev/null"); }), "/dev/null: not a regular file: it is a character device"));
}

TEST_CASE("wrong kind of file: a train state given as a model checkpoint says so and what to pass") {
  TempDir tmp;
  const std::string state = tmp.file("train_state.safetensors");
  save_safetensors(state, {{"model.w", zeros({2})}},
                   {{"format", "sima.cpp/train_state/1"}, {"config", R"({"name": "quickstart", "model": {}})"}});
  for (const auto& f : std::vector<std::function<void()>>{[&] { load_checkpoint(state); },
                                                          [&] { load_checkpoint_for_eval(state); },
                                                          [&] { read_checkpoint_eval_info(state); }}) {
    const std::string msg = error_message(f);
    CHECK(has(msg, state + ": this is a training state"));
    CHECK(has(msg, "model.safetensors"));
    CHECK(!has(msg, "unknown"));
  }
  const testing::Run r = run_app("sima-eval --checkpoint " + state + " --image x.png");
  CHECK(r.status != 0);
  CHECK(has(r.err, "this is a training state"));
}

TEST_CASE("wrong kind of file: a checkpoint whose normalisation std is 0 or non-finite names the file and key") {
  TempDir tmp;
  auto model = create_model(model_config("deit_tiny_patch4_28"));
  const std::string zero = tmp.file("zero_std.safetensors"), cfg = tmp.file("cfg_std.safetensors");
  save_checkpoint(zero, *model, {{"normalization", R"({"mean": [0.5], "std": [0]})"}});
  for (const auto& f : std::vector<std::function<void()>>{[&] { load_checkpoint(zero); },
                                                          [&] { read_checkpoint_eval_info(zero); }})
    CHECK(has(error_message(f), zero + ": metadata normalization.std[0] = 0 is not a positive finite number"));
  // The std stored in the model config itself.
  ModelConfig c = model->config();
  c.std = {-1.f};
  auto bad = create_model(c);
  save_checkpoint(cfg, *bad, {{"normalization", R"({"mean": [0.5], "std": [0.25]})"}});
  CHECK(has(error_message([&] { load_checkpoint(cfg); }), cfg + ": metadata config.std[0] = -1"));
}

TEST_CASE("sima-bench: a shape a variant cannot run is an error naming it (exit 1), not a table row") {
  // soft needs a token grid: N = 18 is neither a square nor 1 + a square (an 18x1 strip).
  for (const std::string json : {"", " --json"}) {
    const testing::Run r = run_app("sima-bench attention --variants softmax,soft --n 18 --dim 32 --heads 4 --batch 1 "
                                   "--reps 1" + json);
    CHECK(r.status == 1);
    CHECK(has(r.err, "B=1 N=18 C=32 heads=4: variant 'soft' cannot run"));
    CHECK(!has(r.out, "n/a"));
    CHECK(!has(r.out, "error"));
  }
}
