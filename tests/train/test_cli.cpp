// Cli: every behaviour of train/config/cli.h (both value forms, repeated flags with several values,
// switches, defaults, --help, each error with its one line and exit code 2, get_int/get_double),
// then the sima-eval binary end to end: --help, a bad flag, a missing checkpoint, and a JSON
// evaluation of a tiny checkpoint on 200 Fashion-MNIST test images checked against evaluate().
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>

#include "app_testing.h"
#include "data/idx.h"
#include "data/image_io.h"
#include "data/temp_dir.h"
#include "models/io/checkpoint.h"
#include "models/registry.h"
#include "testing.h"
#include "train/config/cli.h"
#include "train/config/transforms_factory.h"
#include "train/eval/evaluate.h"

using namespace sima;
using namespace sima::testing;

namespace {

// What parse printed and returned.
struct Parsed {
  bool ok = false;
  int exit_code = -1;
  std::string out, err;
};

// Runs cli.parse on {"prog", args...}, capturing std::cout and stderr.
Parsed parse(Cli& cli, std::vector<std::string> args) {
  args.insert(args.begin(), "prog");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  Parsed p;
  std::ostringstream out;
  std::streambuf* old_out = std::cout.rdbuf(out.rdbuf());
  // stderr (file descriptor 2) goes into a temporary file for the call.
  TempDir dir;
  const std::string err_path = dir.file("stderr.txt");
  std::fflush(stderr);
  const int saved = ::dup(2);
  const int fd = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  REQUIRE(saved >= 0);
  REQUIRE(fd >= 0);
  ::dup2(fd, 2);
  ::close(fd);
  p.ok = cli.parse(int(argv.size()), argv.data());
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  std::cout.rdbuf(old_out);
  p.out = out.str();
  std::ifstream f(err_path);
  std::stringstream ss;
  ss << f.rdbuf();
  p.err = ss.str();
  p.exit_code = cli.exit_code();
  return p;
}

Cli make_cli() {
  Cli cli("prog", "Does things.");
  cli.flag("checkpoint", "PATH", "the checkpoint", /*required=*/true);
  cli.flag("data", "SPEC", "dataset spec");
  cli.flag("batch", "N", "batch size", false, "256");
  cli.flag("lr", "X", "learning rate", false, "0.5");
  cli.repeated("image", "PATH", "images");
  cli.option("json", "print JSON");
  return cli;
}

int count_lines(const std::string& s) { return int(std::count(s.begin(), s.end(), '\n')); }

}  // namespace

TEST_CASE("cli: --name VALUE and --name=VALUE, defaults, switches, has/get/is_set") {
  Cli cli = make_cli();
  Parsed p = parse(cli, {"--checkpoint", "a.safetensors", "--data=folder:/x=y", "--json"});
  REQUIRE(p.ok);
  CHECK(p.exit_code == 0);
  CHECK(p.err.empty());
  CHECK(cli.get("checkpoint") == "a.safetensors");
  CHECK(cli.get("data") == "folder:/x=y");  // split at the first '=' only
  CHECK(cli.is_set("json"));
  CHECK(cli.has("batch"));  // not given, but has a default
  CHECK(cli.get("batch") == "256");
  CHECK(cli.get_int("batch") == 256);
  CHECK(cli.get_double("lr") == 0.5);
  CHECK(cli.get_all("image").empty());

  Cli cli2 = make_cli();
  REQUIRE(parse(cli2, {"--checkpoint=c", "--batch", "-3"}).ok);  // "-3" is a value, not a flag
  CHECK(cli2.get_int("batch") == -3);
  CHECK(!cli2.is_set("json"));
  CHECK(!cli2.has("data"));
  CHECK(cli2.get("data") == "");
}

TEST_CASE("cli: a value flag given twice or empty is refused by name (never the last or the default unseen)") {
  Cli cli = make_cli();
  Parsed p = parse(cli, {"--checkpoint", "a", "--checkpoint=b"});
  CHECK(!p.ok);
  CHECK(p.exit_code == 2);
  CHECK(p.err == "prog: error: --checkpoint is given twice ('a' and 'b'); give it once (try --help)\n");
  Cli cli2 = make_cli();
  p = parse(cli2, {"--checkpoint", "c", "--data", ""});
  CHECK(!p.ok);
  CHECK(p.err == "prog: error: --data is empty; give a SPEC (try --help)\n");
  Cli cli3 = make_cli();
  CHECK(!parse(cli3, {"--checkpoint="}).ok);
  Cli cli4 = make_cli();  // a switch given twice means the same thing: accepted
  CHECK(parse(cli4, {"--checkpoint", "c", "--json", "--json"}).ok);
}

TEST_CASE("cli: a repeated flag collects every value, also several after one flag") {
  Cli cli = make_cli();
  Parsed p =
      parse(cli, {"--image", "a.png", "b.png", "--checkpoint", "c", "--image=c.png", "d.png", "--image", "e.png"});
  REQUIRE(p.ok);
  CHECK(cli.get_all("image") == std::vector<std::string>{"a.png", "b.png", "c.png", "d.png", "e.png"});
  CHECK(cli.get("checkpoint") == "c");
  CHECK(cli.has("image"));
}

TEST_CASE("cli: --help prints every flag to stdout, returns false with exit code 0") {
  Cli cli = make_cli();
  Parsed p = parse(cli, {"--help"});
  CHECK(!p.ok);
  CHECK(p.exit_code == 0);
  CHECK(p.err.empty());
  CHECK(p.out == cli.usage());
  for (const char* s : {"usage: prog", "Does things.", "--checkpoint PATH", "--data SPEC", "--batch N", "--lr X",
                        "--image PATH...", "--json", "--help", "the checkpoint", "(required)", "(default: 256)",
                        "print JSON"})
    CHECK_MESSAGE(p.out.find(s) != std::string::npos, "usage lacks '" << s << "':\n" << p.out);
  // --help wins even when a required flag is missing or after other flags.
  Cli cli2 = make_cli();
  CHECK(parse(cli2, {"--json", "-h"}).exit_code == 0);
}

TEST_CASE("cli: --version prints the program and its version when one is set, else it is unknown") {
  Cli cli = make_cli();
  cli.version("1.2.3 (abc1234)");
  Parsed p = parse(cli, {"--version"});  // even without the required --checkpoint
  CHECK(!p.ok);
  CHECK(p.exit_code == 0);
  CHECK(p.err.empty());
  CHECK(p.out == "prog 1.2.3 (abc1234)\n");
  CHECK(cli.usage().find("  --version   ") != std::string::npos);
  Cli plain = make_cli();
  Parsed q = parse(plain, {"--version"});
  CHECK(q.exit_code == 2);
  CHECK(q.err == "prog: error: unknown flag --version (try --help)\n");
  CHECK(plain.usage().find("--version") == std::string::npos);
}

// "<program> <major.minor.patch> (<7 hex digits>[-dirty] | unknown commit)\n"
static bool is_version_line(const std::string& out, const std::string& program) {
  const std::string head = program + " ";
  if (out.rfind(head, 0) != 0 || out.empty() || out.back() != '\n') return false;
  const std::string rest = out.substr(head.size(), out.size() - head.size() - 1);
  const size_t open = rest.find(" (");
  if (open == std::string::npos || rest.back() != ')') return false;
  const std::string number = rest.substr(0, open), commit = rest.substr(open + 2, rest.size() - open - 3);
  if (std::count(number.begin(), number.end(), '.') != 2 ||
      number.find_first_not_of("0123456789.") != std::string::npos)
    return false;
  if (commit == "unknown commit") return true;
  const std::string hash = commit.size() == 13 && commit.substr(7) == "-dirty" ? commit.substr(0, 7) : commit;
  return hash.size() == 7 && hash.find_first_not_of("0123456789abcdef") == std::string::npos;
}

TEST_CASE("every app answers --version with its version and the commit it was built from") {
  for (const char* app : {"sima-train", "sima-eval", "sima-heatmap", "sima-convert", "sima-bench"}) {
    Run r = run_app(std::string(app) + " --version");
    CAPTURE(app);
    CHECK(r.status == 0);
    CHECK(r.err.empty());
    CHECK_MESSAGE(is_version_line(r.out, app), "not a version line: '" << r.out << "'");
  }
  Run sub = run_app("sima-bench model --version");
  CHECK(sub.status == 0);
  CHECK(is_version_line(sub.out, "sima-bench model"));
  CHECK(is_version_line("sima-x 0.1.0 (8502fc6-dirty)\n", "sima-x"));
  CHECK(is_version_line("sima-x 0.1.0 (unknown commit)\n", "sima-x"));
  CHECK_FALSE(is_version_line("sima-x 0.1.0\n", "sima-x"));
  CHECK_FALSE(is_version_line("sima-x 0.1.0 (85xz)\n", "sima-x"));
}

TEST_CASE("cli: each error is one line naming the flag, parse false, exit code 2") {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--checkpoint", "c", "--bogus"}, "prog: error: unknown flag --bogus (try --help)\n"},
      {{"--checkpoint", "c", "--bogus=1"}, "prog: error: unknown flag --bogus (try --help)\n"},
      {{"--checkpoint"}, "prog: error: --checkpoint needs a value PATH (try --help)\n"},
      {{"--checkpoint", "--json"}, "prog: error: --checkpoint needs a value PATH (try --help)\n"},
      {{"--json"}, "prog: error: --checkpoint PATH is required (try --help)\n"},
      {{"--checkpoint", "c", "--json=yes"}, "prog: error: --json is a switch and takes no value (try --help)\n"},
      {{"--checkpoint", "c", "--image"}, "prog: error: --image needs at least one value PATH (try --help)\n"},
      {{"--checkpoint", "c", "stray"}, "prog: error: unexpected argument 'stray' (try --help)\n"},
  };
  for (const Case& c : cases) {
    Cli cli = make_cli();
    Parsed p = parse(cli, c.args);
    INFO("args: " << c.args.size() << " first " << c.args[0]);
    CHECK(!p.ok);
    CHECK(p.exit_code == 2);
    CHECK(p.out.empty());
    CHECK(p.err == c.message);
    CHECK(count_lines(p.err) == 1);
  }
}

TEST_CASE("cli: get_int and get_double name the flag of a malformed value; undeclared flags") {
  Cli cli = make_cli();
  REQUIRE(parse(cli, {"--checkpoint", "c", "--batch", "12x", "--lr", "fast"}).ok);
  CHECK(error_message([&] { cli.get_int("batch"); }) == "--batch: '12x' is not an integer");
  CHECK(error_message([&] { cli.get_double("lr"); }) == "--lr: 'fast' is not a number");
  CHECK(error_message([&] { cli.get_int("data"); }) == "--data: '' is not an integer");
  Cli cli2 = make_cli();
  REQUIRE(parse(cli2, {"--checkpoint", "c", "--batch=99999999999999999999", "--lr=nan"}).ok);
  CHECK(error_message([&] { cli2.get_int("batch"); }) == "--batch: '99999999999999999999' is not an integer");
  CHECK(error_message([&] { cli2.get_double("lr"); }) == "--lr: 'nan' is not a number");
  Cli cli3 = make_cli();
  REQUIRE(parse(cli3, {"--checkpoint", "c", "--lr=1e-3"}).ok);
  CHECK(cli3.get_double("lr") == 1e-3);
  CHECK(error_message([&] { cli3.get("nope"); }) == "Cli: flag --nope is not declared");
  CHECK(error_message([&] { cli3.flag("data", "X", "again"); }) == "Cli: flag --data is declared twice");
}

// ---- the sima-eval binary -----------------------------------------------------------

TEST_CASE("sima-bench model: an image size or batch that is not positive is one line naming the flag") {
  for (const char* bad : {"--img 0", "--img -5", "--batch 0"}) {
    CAPTURE(bad);
    Run r = run_app(std::string("sima-bench model --model deit_tiny_patch4_32 --reps 1 ") + bad);
    CHECK(r.status == 1);
    CHECK(count_lines(r.err) == 1);
    CHECK(r.err.find(std::string(bad).substr(0, std::string(bad).find(' '))) != std::string::npos);
  }
}

TEST_CASE("sima-eval: --help, a bad flag, a missing checkpoint") {
  Run help = run_app("sima-eval --help");
  CHECK(help.status == 0);
  for (const char* flag : {"--checkpoint", "--data", "--split", "--batch", "--workers", "--limit", "--json", "--image",
                           "--topk", "--help"})
    CHECK_MESSAGE(help.out.find(flag) != std::string::npos, "help lacks " << flag << ":\n" << help.out);

  Run bogus = run_app("sima-eval --bogus");
  CHECK(bogus.status == 2);
  CHECK(bogus.out.empty());
  CHECK(bogus.err == "sima-eval: error: unknown flag --bogus (try --help)\n");

  Run missing = run_app("sima-eval --checkpoint /nonexistent/model.safetensors");
  CHECK(missing.status == 1);
  CHECK(missing.out.empty());
  CHECK(count_lines(missing.err) == 1);
  CHECK(missing.err.rfind("sima-eval: error: /nonexistent/model.safetensors: cannot open", 0) == 0);
}

TEST_CASE("sima-eval: a tiny checkpoint on 200 Fashion-MNIST test images, as JSON, agrees with evaluate()") {
  std::shared_ptr<Model> model =
      create_model(nlohmann::json{{"name", "deit_tiny_patch4_28"}, {"depth", 1}, {"embed_dim", 16}, {"num_heads", 2}});
  randomize_parameters(*model, 5, 0.5f);
  TempDir dir;
  const std::string ckpt = dir.file("model.safetensors");
  const std::vector<std::string> classes = {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"};
  save_checkpoint(ckpt, *model, {{"data", "fashion_mnist"}, {"classes", nlohmann::json(classes).dump()}});

  Run r = run_app("sima-eval --checkpoint " + ckpt + " --limit 200 --json --workers 0 --batch 64");
  INFO("stderr: " << r.err);
  REQUIRE(r.status == 0);
  CHECK(count_lines(r.out) == 1);  // one JSON object
  const nlohmann::json j = nlohmann::json::parse(r.out);
  for (const char* key : {"count", "loss", "top1", "top5", "per_class_accuracy", "per_class_count", "confusion",
                          "images_per_second", "seconds", "classes", "checkpoint", "data", "split"})
    CHECK_MESSAGE(j.contains(key), "no key " << key);
  CHECK(j["count"] == 200);
  CHECK(j["checkpoint"] == ckpt);
  CHECK(j["data"] == "fashion_mnist");
  CHECK(j["split"] == "test");
  CHECK(j["classes"] == nlohmann::json(classes));  // from the metadata, not the dataset's names

  // The same evaluation in this process.
  auto test = std::make_shared<IdxDataset>(IdxDataset::fashion_mnist(false));
  auto ds = std::make_shared<TransformedDataset>(test, eval_transform(model->config(), 1.0));
  const EvalResult e = evaluate(*model, ds, {.batch_size = 50, .num_workers = 0, .limit = 200});
  CHECK(j["top1"].get<double>() == doctest::Approx(e.top1).epsilon(1e-9));
  CHECK(j["top5"].get<double>() == doctest::Approx(e.top5).epsilon(1e-9));
  CHECK(j["loss"].get<double>() == doctest::Approx(e.loss).epsilon(1e-5));
  CHECK(j["confusion"] == nlohmann::json(e.confusion));
  int64_t total = 0;
  for (const auto& row : j["confusion"])
    for (const auto& v : row) total += v.get<int64_t>();
  CHECK(total == 200);

  // The text report, and --data needed when the checkpoint names no data.
  Run text = run_app("sima-eval --checkpoint " + ckpt + " --limit 20 --workers 0");
  REQUIRE(text.status == 0);
  CHECK(text.out.find("20 images") != std::string::npos);
  CHECK(text.out.find("confusion") != std::string::npos);
  const std::string bare = dir.file("bare.safetensors");
  save_checkpoint(bare, *model);
  Run no_data = run_app("sima-eval --checkpoint " + bare + " --limit 20");
  CHECK(no_data.status == 1);
  CHECK(count_lines(no_data.err) == 1);
  CHECK(no_data.err.find("--data is needed") != std::string::npos);
  CHECK(no_data.err.find(bare) != std::string::npos);
}

TEST_CASE("sima-eval --image: top-k with class names, JSON with the raw logits") {
  std::shared_ptr<Model> model =
      create_model(nlohmann::json{{"name", "deit_tiny_patch4_28"}, {"depth", 1}, {"embed_dim", 16}, {"num_heads", 2}});
  randomize_parameters(*model, 6, 0.5f);
  TempDir dir;
  const std::string ckpt = dir.file("model.safetensors");
  save_checkpoint(ckpt, *model, {{"data", "fashion_mnist"}});
  const std::string png = dir.file("x.png");
  Image img(1, 28, 28);
  Generator g(3);
  g.fill_uniform(img.data.data(), img.numel());
  write_png(png, img);

  const std::vector<Prediction> direct = predict_images(*model, {png}, 3, 1.0);
  Run r = run_app("sima-eval --checkpoint " + ckpt + " --image " + png + " --topk 3 --json");
  INFO("stderr: " << r.err);
  REQUIRE(r.status == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  REQUIRE(j["images"].size() == 1);
  const nlohmann::json& im = j["images"][0];
  CHECK(im["path"] == png);
  REQUIRE(im["top"].size() == 3);
  REQUIRE(im["logits"].size() == 10);
  for (size_t c = 0; c < 10; ++c)
    CHECK(im["logits"][c].get<float>() == doctest::Approx(direct[0].logits[c]).epsilon(1e-5));
  const std::vector<std::string> fashion = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                            "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  for (size_t k = 0; k < 3; ++k) {
    CHECK(im["top"][k]["class"] == direct[0].classes[k]);
    CHECK(im["top"][k]["name"] == fashion[size_t(direct[0].classes[k])]);  // the data spec's names
    CHECK(im["top"][k]["probability"].get<double>() == doctest::Approx(direct[0].probabilities[k]).epsilon(1e-5));
  }
  // Text: the path, then one line per class with its name.
  Run text = run_app("sima-eval --checkpoint " + ckpt + " --image " + png + " --topk 2");
  REQUIRE(text.status == 0);
  CHECK(count_lines(text.out) == 3);
  CHECK(text.out.find(fashion[size_t(direct[0].classes[0])]) != std::string::npos);
  // An unreadable image: one error line naming it.
  const std::string bad = dir.file("bad.png");
  write_bytes(bad, {1, 2, 3});
  Run err = run_app("sima-eval --checkpoint " + ckpt + " --image " + bad);
  CHECK(err.status == 1);
  CHECK(count_lines(err.err) == 1);
  CHECK(err.err.find(bad) != std::string::npos);
}

// ---- the sima-train binary ------------------------------------------------------------

TEST_CASE("sima-train: --help, bad flags and configs are one line and a non-zero exit; --check; a run and its resume") {
  Run help = run_app("sima-train --help");
  CHECK(help.status == 0);
  for (const char* flag : {"--config", "--set", "--out", "--resume", "--check", "--quiet", "--config-reference"})
    CHECK_MESSAGE(help.out.find(flag) != std::string::npos, "help lacks " << flag);

  Run bogus = run_app("sima-train --bogus");
  CHECK(bogus.status == 2);
  CHECK(bogus.err == "sima-train: error: unknown flag --bogus (try --help)\n");

  Run missing = run_app("sima-train --config /nonexistent/x.json");
  CHECK(missing.status == 1);
  CHECK(missing.err == "sima-train: error: /nonexistent/x.json: cannot open the config file\n");

  TempDir dir;
  const std::string cfg = dir.file("tiny.json");
  std::ofstream(cfg) << R"({"name": "tiny",
    "model": {"name": "deit_tiny_patch4_28_sima", "embed_dim": 16, "depth": 1, "num_heads": 2},
    "data": {"train_subset": 128, "test_subset": 64, "batch_size": 32, "num_workers": 0},
    "schedule": {"warmup_epochs": 0}, "train": {"epochs": 2}})";

  Run bad_key = run_app("sima-train --config " + cfg + " --set train.epochs=0");
  CHECK(bad_key.status == 1);
  CHECK(count_lines(bad_key.err) == 1);
  CHECK(bad_key.err.find("train.epochs: must be in [1, 100000], got 0") != std::string::npos);

  Run check = run_app("sima-train --config " + cfg + " --set model.depth=2 --check");
  CHECK(check.status == 0);
  nlohmann::json resolved = nlohmann::json::parse(check.out);
  CHECK(resolved["model"]["depth"] == 2);
  CHECK(resolved["optimizer"]["type"] == "adamw");
  // --derived: the same config, and the peak lr the run computes (base_lr · batch / lr_base_batch, or lr)
  Run derived = run_app("sima-train --config " + cfg + " --set model.depth=2 --check --derived");
  CHECK(derived.status == 0);
  nlohmann::json both = nlohmann::json::parse(derived.out);
  CHECK(both["config"] == resolved);
  CHECK(both["derived"]["lr"].get<double>() == doctest::Approx(5e-4 * 32 / 512));
  both = nlohmann::json::parse(run_app("sima-train --config " + cfg + " --set optimizer.lr=0.002 --check --derived").out);
  CHECK(both["derived"]["lr"].get<double>() == 0.002);
  Run alone = run_app("sima-train --config " + cfg + " --derived");
  CHECK(alone.status == 1);
  CHECK(alone.err == "sima-train: error: --derived goes with --check\n");

  // 5 of the 8 steps, then --resume from the run folder alone, then nothing left to do.
  const std::string out = dir.str() + "/run";
  Run part = run_app("sima-train --config " + cfg + " --out " + out + " --quiet --set train.max_steps=5");
  CHECK(part.status == 0);
  CHECK(part.out.find("stopped after 5 steps (train.max_steps)") != std::string::npos);
  Run again = run_app("sima-train --config " + cfg + " --out " + out + " --quiet");
  CHECK(again.status == 1);
  CHECK(again.err.find("already holds a run") != std::string::npos);
  Run rest = run_app("sima-train --out " + out + " --resume --quiet");
  CHECK(rest.status == 0);
  CHECK(rest.out.rfind("done: 8 steps", 0) == 0);
  Run done = run_app("sima-train --out " + out + " --resume --quiet");
  CHECK(done.out.find("nothing to do") != std::string::npos);
  Run eval = run_app("sima-eval --checkpoint " + out + "/model.safetensors --limit 50 --json --workers 0");
  CHECK(eval.status == 0);
  CHECK(nlohmann::json::parse(eval.out)["count"] == 50);
}
