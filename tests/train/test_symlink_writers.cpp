// No writer writes through a symbolic link (core/durable_file.h): for each one, a link planted
// where it writes (run.lock, metrics.jsonl, metrics.csv, curves.png, a checkpoint, a PNG, any
// atomic write, a temporary's name) is refused by name or replaced, and the file the link
// points at is left untouched.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "app_testing.h"
#include "core/durable_file.h"
#include "core/file_io.h"
#include "data/image_io.h"
#include "models/io/pth_writer.h"
#include "models/io/safetensors.h"
#include "testing.h"
#include "train/loop/metrics.h"
#include "train/loop/run_lock.h"
#include "train/viz/curves.h"

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

// A victim file outside the run folder and `link` pointing at it.
struct Planted {
  std::string victim;
  Planted(const TempDir& t, const std::string& link, const std::string& name = "victim.txt")
      : victim(t.file("outside/" + name)) {
    std::ofstream(victim) << "precious\n";
    fs::create_directories(fs::path(link).parent_path());
    fs::create_symlink(victim, link);
  }
  bool untouched() const { return slurp(victim) == "precious\n"; }
};

bool names_link(const std::string& msg, const std::string& link) {
  return msg.starts_with(link + ": ") && msg.find("is a symbolic link (to ") != std::string::npos &&
         msg.find("does not write through a symbolic link: remove the link or choose another path") !=
             std::string::npos;
}

}  // namespace

TEST_CASE("RunLock: a run.lock that is a symbolic link is refused, its target untouched") {
  TempDir t;
  const std::string link = t.file("run/run.lock");
  Planted p(t, link);
  const std::string msg = error_message([&] { RunLock lock(t.file("run")); });
  CHECK(names_link(msg, link));
  CHECK(msg.find("run folder's lock file") != std::string::npos);
  CHECK(p.untouched());
  // A dangling link is refused too (O_CREAT would otherwise create its target).
  fs::remove(link);
  fs::create_symlink(t.file("outside/new.txt"), link);
  CHECK(names_link(error_message([&] { RunLock lock(t.file("run")); }), link));
  CHECK_FALSE(fs::exists(t.file("outside/new.txt")));
}

TEST_CASE("MetricsLog: metrics.jsonl or metrics.csv as a symbolic link is refused, fresh or resumed") {
  for (const char* name : {"metrics.jsonl", "metrics.csv"})
    for (int64_t resume : {int64_t(-1), int64_t(3)}) {
      CAPTURE(name);
      CAPTURE(resume);
      TempDir t;
      const std::string link = t.file(std::string("run/") + name);
      Planted p(t, link);
      MetricsLog log;
      CHECK(names_link(error_message([&] { log.open(t.file("run"), resume); }), link));
      CHECK(p.untouched());
    }
}

TEST_CASE("write_file_atomic and save_safetensors: a link at the target is refused; one at the temporary's name is not followed") {
  TempDir t;
  const std::string text = "new\n";
  {
    const std::string link = t.file("run/config.json");
    Planted p(t, link);
    CHECK(names_link(error_message([&] { write_file_atomic(link, text.data(), text.size()); }), link));
    CHECK(p.untouched());
  }
  {
    const std::string link = t.file("run2/model.safetensors");
    Planted p(t, link);
    const std::string msg = error_message([&] { save_safetensors(link, {{"w", zeros({2})}}); });
    CHECK(names_link(msg, link));
    CHECK(msg.find("the checkpoint is a symbolic link") != std::string::npos);
    CHECK(p.untouched());
  }
  {  // A link planted under the temporary's name: removed, the file written, the target untouched.
    const std::string target = t.file("run3/model.safetensors");
    Planted p(t, temp_path_for(target));
    save_safetensors(target, {{"w", zeros({2})}});
    CHECK(p.untouched());
    CHECK(fs::is_regular_file(fs::symlink_status(target)));
    CHECK_FALSE(fs::exists(fs::symlink_status(temp_path_for(target))));
    const std::string cfg = t.file("run3/config.json");
    Planted q(t, temp_path_for(cfg), "victim2.txt");
    write_file_atomic(cfg, text.data(), text.size());
    CHECK(q.untouched());
    CHECK(slurp(cfg) == text);
  }
}

TEST_CASE("save_pth (sima-convert --to): an output that is a symbolic link is refused") {
  TempDir t;
  const std::string link = t.file("out/model.pth");
  Planted p(t, link);
  CHECK(names_link(error_message([&] { save_pth(link, {{"w", zeros({2})}}); }), link));
  CHECK(p.untouched());
}

TEST_CASE("write_png (heatmaps, examples): an output that is a symbolic link is refused") {
  TempDir t;
  const std::string link = t.file("out/panel.png");
  Planted p(t, link);
  CHECK(names_link(error_message([&] { write_png(link, Image(3, 4, 4, 0.5f)); }), link));
  CHECK(p.untouched());
}

TEST_CASE("render_curves: a curves.png that is a symbolic link is a reason, its target untouched") {
  TempDir t;
  MetricsLog log;
  log.open(t.file("run"));
  log.log({{"kind", "epoch"}, {"epoch", 0}, {"step", 10}, {"train_loss", 2.1}});
  log.log({{"kind", "epoch"}, {"epoch", 1}, {"step", 20}, {"train_loss", 1.1}});
  const std::string link = t.file("run/curves.png");
  Planted p(t, link);
  const std::string reason = render_curves(log.csv_path(), link);
  if (gnuplot_available()) {
    CHECK(reason.starts_with("no curves: " + link + ": the curves image is a symbolic link"));
  } else {
    CHECK(reason == "no curves: gnuplot missing (not found on PATH)");
  }
  CHECK(p.untouched());
}

TEST_CASE("sima-train --resume: a run.lock replaced by a link to a file outside the run is refused, the file intact") {
  // The reported case: cp -r run D; rm D/run.lock; ln -s victim.txt D/run.lock; sima-train --out D --resume
  TempDir t;
  const std::string cfg = t.file("tiny.json");
  std::ofstream(cfg) << R"({"name": "tiny",
    "model": {"name": "deit_tiny_patch4_28_sima", "embed_dim": 16, "depth": 1, "num_heads": 2},
    "data": {"train_subset": 64, "test_subset": 32, "batch_size": 32, "num_workers": 0},
    "schedule": {"warmup_epochs": 0}, "train": {"epochs": 2, "max_steps": 1}})";
  const std::string run = t.dir("run");
  const testing::Run first = testing::run_app("sima-train --config " + cfg + " --out " + run + " --quiet");
  REQUIRE_MESSAGE(first.status == 0, first.err);
  fs::remove(run + "/run.lock");
  Planted p(t, run + "/run.lock");
  const testing::Run again = testing::run_app("sima-train --out " + run + " --resume --quiet");
  CHECK(again.status == 1);
  CHECK(again.err.find(run + "/run.lock: the run folder's lock file is a symbolic link (to " + p.victim + ")") !=
        std::string::npos);
  CHECK(p.untouched());
}
