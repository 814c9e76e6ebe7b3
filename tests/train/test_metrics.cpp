// metrics.jsonl / metrics.csv (exact text of both, resume from a step, torn last line, errors
// naming the file) and curves.png (gnuplot found on PATH or not, the PNG's signature and size,
// the reasons returned instead of throwing).
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/temp_dir.h"
#include "testing.h"
#include "train/loop/metrics.h"
#include "train/viz/curves.h"

using namespace sima;
using namespace sima::testing;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

json step_record(int64_t epoch, int64_t step, double loss) {
  return {{"kind", "step"}, {"epoch", epoch}, {"step", step}, {"loss", loss}};
}

// Sets PATH for the scope, restoring it after.
struct ScopedPath {
  std::string saved;
  bool had;
  explicit ScopedPath(const std::string& value) {
    const char* p = std::getenv("PATH");
    had = p != nullptr;
    if (had) saved = p;
    ::setenv("PATH", value.c_str(), 1);
  }
  ~ScopedPath() {
    if (had) ::setenv("PATH", saved.c_str(), 1);
    else ::unsetenv("PATH");
  }
};

// Width and height from a PNG's IHDR chunk (bytes 16..23, big-endian), after checking the
// 8-byte signature and that the first chunk is IHDR.
bool png_size(const std::string& bytes, uint32_t& w, uint32_t& h) {
  const std::string sig = "\x89PNG\r\n\x1a\n";
  if (bytes.size() < 24 || bytes.compare(0, 8, sig) != 0 || bytes.compare(12, 4, "IHDR") != 0) return false;
  auto be32 = [&](size_t i) {
    return (uint32_t(uint8_t(bytes[i])) << 24) | (uint32_t(uint8_t(bytes[i + 1])) << 16) |
           (uint32_t(uint8_t(bytes[i + 2])) << 8) | uint32_t(uint8_t(bytes[i + 3]));
  };
  w = be32(16);
  h = be32(20);
  return true;
}

}  // namespace

// ---- MetricsLog ------------------------------------------------------------------

TEST_CASE("MetricsLog: compact jsonl lines and the epoch records as CSV") {
  TempDir t;
  const std::string dir = t.file("run");  // created by open
  MetricsLog log;
  CHECK_FALSE(log.is_open());
  log.log(step_record(0, 1, 2.0));  // closed: nothing happens
  CHECK_FALSE(fs::exists(dir));

  log.open(dir);
  REQUIRE(log.is_open());
  CHECK(log.jsonl_path() == dir + "/metrics.jsonl");
  CHECK(log.csv_path() == dir + "/metrics.csv");
  CHECK(slurp(log.csv_path()) == "epoch\n");  // header only until the first epoch record
  log.log(step_record(0, 2, 1.5));
  // Each line is on disk as soon as it is logged (flushed).
  CHECK(slurp(log.jsonl_path()) == "{\"epoch\":0,\"kind\":\"step\",\"loss\":1.5,\"step\":2}\n");
  log.log({{"kind", "epoch"}, {"epoch", 0}, {"step", 4}, {"train_loss", 1.25}, {"test_top1", 81.3}, {"note", "a,b"}});
  log.log(step_record(1, 6, 0.75));
  // A later epoch without test_top1 and note, with a new key test_top5.
  log.log({{"kind", "epoch"}, {"epoch", 1}, {"step", 8}, {"train_loss", 0.123456789}, {"test_top5", 99.5}});

  // nlohmann::json keeps object keys sorted, so that is the order within a line.
  CHECK(slurp(log.jsonl_path()) ==
        "{\"epoch\":0,\"kind\":\"step\",\"loss\":1.5,\"step\":2}\n"
        "{\"epoch\":0,\"kind\":\"epoch\",\"note\":\"a,b\",\"step\":4,\"test_top1\":81.3,\"train_loss\":1.25}\n"
        "{\"epoch\":1,\"kind\":\"step\",\"loss\":0.75,\"step\":6}\n"
        "{\"epoch\":1,\"kind\":\"epoch\",\"step\":8,\"test_top5\":99.5,\"train_loss\":0.123456789}\n");
  // Columns: epoch first, then first-seen order; a missing key is an empty cell, a string
  // with a comma is quoted, numbers %.6g.
  CHECK(slurp(log.csv_path()) ==
        "epoch,kind,note,step,test_top1,train_loss,test_top5\n"
        "0,epoch,\"a,b\",4,81.3,1.25,\n"
        "1,epoch,,8,,0.123457,99.5\n");
  CHECK(temp_files_in(fs::path(log.csv_path()).parent_path().string()).empty());
  REQUIRE(log.epoch_records().size() == 2);
  CHECK(log.epoch_records()[1].at("test_top5").get<double>() == 99.5);

  CHECK(error_message([&] { log.log(json::array({1, 2})); }) ==
        dir + "/metrics.jsonl: a metrics record must be a JSON object, got [1,2]");

  // Opening again without resume starts both files afresh.
  MetricsLog again;
  again.open(dir);
  again.log(step_record(0, 1, 3.0));
  CHECK(slurp(again.jsonl_path()) == "{\"epoch\":0,\"kind\":\"step\",\"loss\":3.0,\"step\":1}\n");
  CHECK(slurp(again.csv_path()) == "epoch\n");
  CHECK(again.epoch_records().empty());
}

TEST_CASE("MetricsLog resume: keeps step <= resume_step, drops a torn last line, appends after") {
  TempDir t;
  const std::string dir = t.str();
  const std::string kept =
      "{\"kind\":\"config\",\"name\":\"run\"}\n"  // no step: kept
      "{\"epoch\":0,\"kind\":\"step\",\"loss\":2.0,\"step\":10}\n"
      "\n"  // a blank line: skipped
      "{\"epoch\":0,\"kind\":\"epoch\",\"step\":20,\"train_loss\":1.5}\n"
      "{\"epoch\":1,\"kind\":\"step\",\"loss\":1.25,\"step\":30}\n";
  write_text(dir + "/metrics.jsonl", kept +
                                         "{\"epoch\":1,\"kind\":\"epoch\",\"step\":40,\"train_loss\":1.0}\n"
                                         "{\"epoch\":2,\"kind\":\"step\",\"loss\":0.9,\"step\":50}\n"
                                         "{\"epoch\":2,\"kind\":\"st");  // killed mid-line
  write_text(dir + "/metrics.csv", "stale\n");

  // What read_metrics_jsonl sees: every complete record, in order.
  const std::vector<json> all = read_metrics_jsonl(dir + "/metrics.jsonl");
  REQUIRE(all.size() == 6);
  CHECK(all[0].at("kind") == "config");
  CHECK(all[5].at("step") == 50);

  MetricsLog log;
  log.open(dir, 30);
  // The file now holds the kept records (rewritten compactly, keys sorted), nothing after.
  CHECK(slurp(log.jsonl_path()) ==
        "{\"kind\":\"config\",\"name\":\"run\"}\n"
        "{\"epoch\":0,\"kind\":\"step\",\"loss\":2.0,\"step\":10}\n"
        "{\"epoch\":0,\"kind\":\"epoch\",\"step\":20,\"train_loss\":1.5}\n"
        "{\"epoch\":1,\"kind\":\"step\",\"loss\":1.25,\"step\":30}\n");
  CHECK(slurp(log.csv_path()) == "epoch,kind,step,train_loss\n0,epoch,20,1.5\n");
  REQUIRE(log.epoch_records().size() == 1);
  CHECK(log.epoch_records()[0].at("step") == 20);

  log.log({{"kind", "epoch"}, {"epoch", 1}, {"step", 40}, {"train_loss", 0.5}});
  const std::vector<json> after = read_metrics_jsonl(log.jsonl_path());
  REQUIRE(after.size() == 5);
  CHECK(after[4].at("train_loss") == 0.5);
  CHECK(slurp(log.csv_path()) == "epoch,kind,step,train_loss\n0,epoch,20,1.5\n1,epoch,40,0.5\n");

  // Resuming where nothing was logged yet: an empty log.
  TempDir empty;
  MetricsLog fresh;
  fresh.open(empty.str(), 100);
  CHECK(slurp(fresh.jsonl_path()).empty());
  CHECK(slurp(fresh.csv_path()) == "epoch\n");
}

TEST_CASE("read_metrics_jsonl: a bad line before the last is an error naming the file and line") {
  TempDir t;
  const std::string path = t.file("metrics.jsonl");
  write_text(path, "{\"step\":1}\n{\"step\":2\n{\"step\":3}\n");
  CHECK(error_message([&] { read_metrics_jsonl(path); }) == path + ":2: malformed JSON (a line before the last)");
  write_text(path, "{\"step\":1}\n[1,2]\n{\"step\":3}\n");
  CHECK(error_message([&] { read_metrics_jsonl(path); }) == path + ":2: not a JSON object (a line before the last)");
  // The same faults on the last line (even followed by blank lines) are a torn write: skipped.
  write_text(path, "{\"step\":1}\n{\"step\":2\n\n");
  const std::vector<json> r = read_metrics_jsonl(path);
  REQUIRE(r.size() == 1);
  CHECK(r[0].at("step") == 1);
  CHECK(error_message([&] { read_metrics_jsonl(t.file("missing.jsonl")); })
            .starts_with(t.file("missing.jsonl") + ": cannot open for reading"));
  // A resume over a corrupt log refuses rather than silently dropping records.
  write_text(path, "{\"step\":1}\n{\"step\":2\n{\"step\":3}\n");
  MetricsLog log;
  CHECK(error_message([&] { log.open(t.str(), 5); }) == path + ":2: malformed JSON (a line before the last)");
}

TEST_CASE("MetricsLog errors name the folder or file that cannot be written") {
  TempDir t;
  write_text(t.file("blocker"), "a file, not a folder\n");
  MetricsLog log;
  CHECK(error_message([&] { log.open(t.file("blocker") + "/run"); })
            .starts_with(t.file("blocker") + "/run: cannot create the run folder"));
  // metrics.jsonl taken by a folder
  fs::create_directories(t.file("run/metrics.jsonl"));
  CHECK(error_message([&] { log.open(t.file("run")); })
            .starts_with(t.file("run") + "/metrics.jsonl: cannot open for writing"));
  // metrics.csv taken by a (non-empty) folder: the CSV rename fails
  fs::create_directories(t.file("run2/metrics.csv/x"));
  std::string msg = error_message([&] { log.open(t.file("run2")); });
  CHECK(msg.starts_with(t.file("run2") + "/metrics.csv: "));
}

// ---- curves ------------------------------------------------------------------------

// Alive and not a zombie: /proc/<pid>/stat exists and its state (after "(comm) ") is not Z.
bool running(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(f, stat)) return false;
  const size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

TEST_CASE("render_curves: gnuplot dies with the process that started it (a SIGKILLed run leaves none)") {
  // A fake gnuplot that records its pid and then draws "forever".
  TempDir t;
  const std::string bin = t.dir("bin"), pid_file = t.file("gnuplot.pid");
  write_text(bin + "/gnuplot", "#!/bin/sh\necho $$ > '" + pid_file + ".tmp'\nmv '" + pid_file + ".tmp' '" +
                                   pid_file + "'\nexec sleep 60\n");
  fs::permissions(bin + "/gnuplot", fs::perms::owner_all);
  write_text(t.file("m.csv"), "epoch,train_loss\n0,1.5\n");
  const pid_t run = ::fork();
  REQUIRE(run >= 0);
  if (run == 0) {  // the "training run": blocks in render_curves until killed
    ScopedPath path(bin + ":/usr/bin:/bin");  // the fake first; sh, mv and sleep from the system
    render_curves(t.file("m.csv"), t.file("curves.png"));
    ::_exit(0);
  }
  for (int i = 0; i < 1000 && !fs::exists(pid_file); ++i) ::usleep(10000);
  REQUIRE(fs::exists(pid_file));
  pid_t gnuplot = 0;
  std::ifstream(pid_file) >> gnuplot;
  REQUIRE(gnuplot > 0);
  CHECK(running(gnuplot));
  ::kill(run, SIGKILL);
  ::waitpid(run, nullptr, 0);
  bool gone = false;
  for (int i = 0; i < 500 && !(gone = !running(gnuplot)); ++i) ::usleep(10000);
  CHECK_MESSAGE(gone, "gnuplot (pid ", gnuplot, ") still runs 5 s after its parent was killed");
  if (!gone) ::kill(gnuplot, SIGKILL);
}

TEST_CASE("render_curves: gnuplot starts with no signal blocked, whatever its parent blocks") {
  // sima-train blocks SIGINT/SIGTERM in all its threads (train/loop/stop_signals.h); a fake
  // gnuplot reports the mask it was started with.
  TempDir t;
  const std::string bin = t.dir("bin"), mask_file = t.file("mask.txt");
  // exec: grep reads its own mask, inherited unchanged; the shell's own, read while it waits for a
  // child, may have SIGCHLD blocked (dash blocks it there), which made this test fail at random.
  write_text(bin + "/gnuplot", "#!/bin/sh\nexec grep SigBlk /proc/self/status > '" + mask_file + "'\n");
  fs::permissions(bin + "/gnuplot", fs::perms::owner_all);
  write_text(t.file("m.csv"), "epoch,train_loss\n0,1.5\n");
  sigset_t block, before;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  sigaddset(&block, SIGINT);
  REQUIRE(pthread_sigmask(SIG_BLOCK, &block, &before) == 0);
  {
    ScopedPath path(bin + ":/usr/bin:/bin");
    render_curves(t.file("m.csv"), t.file("curves.png"));  // the fake draws nothing: a reason, no PNG
  }
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  std::ifstream f(mask_file);
  std::string line;
  REQUIRE(std::getline(f, line));
  INFO("the fake gnuplot's mask: " << line);
  CHECK(line.find("0000000000000000") != std::string::npos);
}

TEST_CASE("render_curves without gnuplot on PATH returns the reason, writes nothing") {
  TempDir t;
  write_text(t.file("metrics.csv"), "epoch,train_loss\n0,1.5\n1,1.0\n");
  ScopedPath path(t.file("empty_bin"));
  fs::create_directories(t.file("empty_bin"));
  CHECK_FALSE(gnuplot_available());
  CHECK(render_curves(t.file("metrics.csv"), t.file("curves.png")) == "no curves: gnuplot missing (not found on PATH)");
  CHECK_FALSE(fs::exists(t.file("curves.png")));
  // A non-executable file named gnuplot does not count.
  write_text(t.file("empty_bin/gnuplot"), "#!/bin/sh\n");
  fs::permissions(t.file("empty_bin/gnuplot"), fs::perms::owner_read | fs::perms::owner_write);
  CHECK_FALSE(gnuplot_available());
}

TEST_CASE("render_curves: no rows / no CSV / no plottable columns are reasons, not errors") {
  TempDir t;
  const std::string png = t.file("curves.png");
  write_text(t.file("empty.csv"), "epoch\n");
  CHECK(render_curves(t.file("empty.csv"), png) == "no curves: " + t.file("empty.csv") + " has no rows yet");
  write_text(t.file("nothing.csv"), "");
  CHECK(render_curves(t.file("nothing.csv"), png) == "no curves: " + t.file("nothing.csv") + " has no rows yet");
  CHECK(render_curves(t.file("missing.csv"), png) == "no curves: cannot read " + t.file("missing.csv"));
  write_text(t.file("other.csv"), "epoch,lr\n0,0.1\n");
  CHECK(render_curves(t.file("other.csv"), png) ==
        "no curves: " + t.file("other.csv") + " has no values of train_loss, test_ or val_ loss, top1 or top5");
  // A validation run's columns (data.validation) are curves too: not "no values".
  write_text(t.file("val.csv"), "epoch,val_top1\n1,80.5\n2,85.25\n");
  CHECK(render_curves(t.file("val.csv"), t.file("val.png")).find("has no values") == std::string::npos);
  write_text(t.file("noepoch.csv"), "train_loss\n1.0\n");
  CHECK(render_curves(t.file("noepoch.csv"), png) == "no curves: " + t.file("noepoch.csv") + " has no epoch column");
  CHECK_FALSE(fs::exists(png));
}

TEST_CASE("render_curves draws a 1200x480 PNG from a MetricsLog CSV (when gnuplot is installed)") {
  TempDir t;
  MetricsLog log;
  log.open(t.str());
  // test metrics missing at epoch 1 (evaluated every other epoch): that point is skipped
  log.log({{"kind", "epoch"}, {"epoch", 0}, {"step", 10}, {"train_loss", 2.1}, {"test_loss", 2.0},
           {"test_top1", 35.5}, {"test_top5", 80.25}});
  log.log({{"kind", "epoch"}, {"epoch", 1}, {"step", 20}, {"train_loss", 1.4}});
  log.log({{"kind", "epoch"}, {"epoch", 2}, {"step", 30}, {"train_loss", 0.9}, {"test_loss", 1.1},
           {"test_top1", 61.0}, {"test_top5", 95.0}});
  // An output name with a quote and a space: quoted for gnuplot's script.
  const std::string png = t.file("it's curves.png");
  if (!gnuplot_available()) {
    MESSAGE("gnuplot not on PATH: checked the 'gnuplot missing' reason only");
    CHECK(render_curves(log.csv_path(), png) == "no curves: gnuplot missing (not found on PATH)");
    CHECK_FALSE(fs::exists(png));
    return;
  }
  MESSAGE("gnuplot on PATH: rendering a PNG");
  const std::string reason = render_curves(log.csv_path(), png);
  CHECK(reason == "");
  REQUIRE(fs::exists(png));
  CHECK_FALSE(fs::exists(png + ".tmp.png"));
  uint32_t w = 0, h = 0;
  REQUIRE(png_size(slurp(png), w, h));
  CHECK(w == 1200);
  CHECK(h == 480);

  // Only a loss column: one panel, still the requested size.
  write_text(t.file("loss.csv"), "epoch,train_loss\n0,1.5\n");
  CHECK(render_curves(t.file("loss.csv"), t.file("loss.png")) == "");
  REQUIRE(png_size(slurp(t.file("loss.png")), w, h));
  CHECK(w == 1200);
  CHECK(h == 480);

  // An output folder that does not exist: the temporary (created here, exclusively, for gnuplot
  // to fill) cannot be made, and the reason says so.
  const std::string bad = t.str() + "/no_such_dir/curves.png";
  const std::string failed = render_curves(log.csv_path(), bad);
  CHECK(failed.starts_with("no curves: " + bad + ": cannot open for writing (cannot create the temporary file "));
  CHECK(failed.find("No such file or directory") != std::string::npos);
  CHECK_FALSE(fs::exists(bad));
  CHECK_FALSE(fs::exists(bad + ".tmp.png"));
}
