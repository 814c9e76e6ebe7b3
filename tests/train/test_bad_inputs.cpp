// What a user's bad input does to the apps, end to end: broken configs, missing / truncated /
// lying dataset files, damaged checkpoints and train states, a file that is not an image.
// Every case must end with exit code 1 and exactly one stderr line that names the file or key
// and the fault: never a crash, a hang, an allocation the input asked for, or a silent success.
// (The readers' own tests check each fault in detail; this is the user's view of them.)
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>

#include "app_testing.h"
#include "testing.h"

using namespace sima::testing;
namespace fs = std::filesystem;

namespace {

struct Case {
  std::string what, command;
  std::vector<std::string> expected;  // substrings of the one error line
};

void write_text(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::string be32(uint32_t v) {
  return {char(v >> 24), char(v >> 16), char(v >> 8), char(v)};
}

void check_case(const Case& c) {
  CAPTURE(c.what);
  CAPTURE(c.command);
  Run r = run_app(c.command);
  CAPTURE(r.err);
  CHECK(r.status == 1);  // not 0, not a signal (-1 from run_app), not an uncaught exception
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  for (const std::string& e : c.expected) CHECK_MESSAGE(r.err.find(e) != std::string::npos, "missing: " << e);
}

}  // namespace

TEST_CASE("bad inputs: configs and --set give one line naming the key and what is allowed") {
  TempDir d;
  const std::string good = d.file("good.json");
  write_text(good, R"({"name": "tiny",
    "model": {"name": "deit_tiny_patch4_28_sima", "embed_dim": 16, "depth": 1, "num_heads": 2},
    "data": {"train_subset": 64, "test_subset": 32, "batch_size": 32, "num_workers": 0},
    "schedule": {"warmup_epochs": 0}, "train": {"epochs": 1}})");
  write_text(d.file("trunc.json"), R"({"name": "x", "model": )");
  write_text(d.file("empty.json"), "");
  write_text(d.file("array.json"), "[1, 2]");
  const std::string t = "sima-train --check --config ";
  const std::vector<Case> cases = {
      {"truncated JSON", t + d.file("trunc.json"), {"trunc.json: not valid JSON", "line 1, column 24"}},
      {"empty file", t + d.file("empty.json"), {"empty.json: not valid JSON"}},
      {"not an object", t + d.file("array.json"), {"expected a JSON object at the top level, got array"}},
      {"missing file", t + d.file("nope.json"), {"nope.json: cannot open the config file"}},
      {"unknown section", t + good + " --set trian.epochs=3", {"unknown key 'trian' (known: name, model, data"}},
      {"unknown key", t + good + " --set train.epoch=3", {"unknown key 'train.epoch' (known in train: epochs,"}},
      {"wrong type", t + good + " --set train.epochs='\"3\"'", {"train.epochs: expected an integer, got \"3\""}},
      {"out of range", t + good + " --set optimizer.base_lr=-1", {"optimizer.base_lr: must be positive, got -1"}},
      {"not one of", t + good + " --set optimizer.type=adam", {"optimizer.type: 'adam' is not one of: adamw, sgd"}},
      {"image vs patch size", t + good + " --set model.img_size=30",
       {"model.img_size 30 is not divisible by model.patch_size 4"}},
      {"heads vs width", t + good + " --set model.num_heads=3", {"model.num_heads 3 does not divide model.embed_dim 16"}},
      {"unknown model", t + good + " --set model.name=deit_huge", {"model 'deit_huge' is unknown (known: cvt_13_224"}},
      {"unknown model key", t + good + " --set model.attn=sima", {"model.attn: unknown key (valid keys for arch deit: arch, name, img_size,"}},
      {"attention key the variant does not read", t + good + " --set model.attention.type=softmax --set model.attention.norm=l2",
       {"model.attention.norm: attention variant 'softmax' does not read 'norm' (it reads: type; read by: sima)"}},
      {"attention value out of range", t + good + " --set model.attention.norm=l3",
       {"model.attention.norm: 'l3' is not one of: l1, l2, none"}},
      {"unknown dataset", t + good + " --set data.dataset=imagenet",
       {"unknown kind 'imagenet' (allowed: fashion_mnist[:ROOT]"}},
      {"dino with ema", t + good + " --set dino.enabled=true --set train.ema=true",
       {"train.ema cannot be used with dino.enabled"}},
      {"warmup longer than the run", t + good + " --set schedule.warmup_epochs=5",
       {"schedule.warmup_epochs 5 exceeds train.epochs 1"}},
  };
  for (const Case& c : cases) check_case(c);
}

TEST_CASE("bad inputs: configs accept nothing they ignore, and derived counts do not wrap") {
  TempDir d;
  const std::string good = d.file("good.json");
  write_text(good, R"({"name": "tiny", "model": {"name": "deit_tiny_patch4_28_sima", "depth": 1},
    "data": {"train_subset": 64, "test_subset": 32, "batch_size": 32, "num_workers": 0},
    "schedule": {"warmup_epochs": 0}, "train": {"epochs": 1}})");
  write_text(d.file("dup.json"), "{\"name\": \"tiny\",\n \"model\": {\"name\": \"deit_tiny_patch4_28\"},\n"
                                 " \"train\": {\"epochs\": 2,\n   \"epochs\": 3}}\n");
  write_text(d.file("nomodel.json"), R"({"name": "tiny", "model": {}})");
  const std::string t = "sima-train --check --config ";
  const std::vector<Case> cases = {
      {"key given twice", t + d.file("dup.json"), {"dup.json: key 'epochs' appears twice in one object (lines 3 and 4)"}},
      {"model without arch or name", t + d.file("nomodel.json"),
       {"nomodel.json: model: needs \"arch\" (deit, xcit, cvt) or \"name\""}},
      {"a CvT given a DeiT key", t + good + " --set model.name=cvt_13_28",  // good.json's model.depth
       {"model.depth: arch 'cvt' does not read it (read by: deit, xcit; valid keys for arch cvt:"}},
      {"a DeiT given an XCiT key", t + good + " --set model.cls_attn_layers=1",
       {"model.cls_attn_layers: arch 'deit' does not read it (read by: xcit;"}},
      {"a section given a value", t + good + " --set train=5",
       {"--set train=5: 'train' is a section, not a key; set one of its keys: --set train.epochs=5"}},
      {"a seed beyond int64", t + good + " --set train.seed=18446744073709551615",
       {"train.seed: 18446744073709551615 is too large (the largest allowed is 9223372036854775807)"}},
      {"a batch whose bytes overflow", t + good + " --set data.batch_size=4611686018427387904",
       {"data.batch_size: 4611686018427387904 × 3136 bytes per image overflows a 64-bit count; the largest allowed is"}},
      {"a float beyond float", t + good + " --set model.mlp_ratio=1e300", {"model.mlp_ratio: 1e+300 is beyond a float"}},
      {"a duplicate key in a --set value", t + good + " --set 'model.attention={\"type\": \"sima\", \"type\": \"relu\"}'",
       {"key 'type' appears twice in one object"}},
  };
  for (const Case& c : cases) check_case(c);
}

TEST_CASE("bad inputs: dataset files, checkpoints, train states and images name the file and the fault") {
  TempDir d;
  const std::string cfg = d.file("tiny.json");
  write_text(cfg, R"({"name": "tiny",
    "model": {"name": "deit_tiny_patch4_28_sima", "embed_dim": 16, "depth": 1, "num_heads": 2},
    "data": {"train_subset": 64, "test_subset": 32, "batch_size": 32, "num_workers": 0},
    "schedule": {"warmup_epochs": 0}, "train": {"epochs": 1}})");
  // A good run to damage copies of.
  const std::string run = d.str() + "/run";
  REQUIRE(run_app("sima-train --quiet --config " + cfg + " --out " + run).status == 0);

  // Fashion-MNIST folders with one damaged training-images file each (labels and test files real).
  const std::string real = "/usr/share/datasets/fashion-mnist/";
  auto fmnist_with = [&](const std::string& name, const std::string& file, const std::string& bytes) {
    const std::string root = d.dir(name);
    for (const char* f : {"train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"})
      fs::copy_file(real + f, root + "/" + f);
    write_text(root + "/" + file, bytes);
    return "sima-train --quiet --config " + cfg + " --out " + d.str() + "/out_" + name +
           " --set data.dataset=fashion_mnist:" + root;
  };
  const std::string idx_header = be32(0x803) + be32(60000) + be32(28) + be32(28);
  std::string gz_cut(1000, '\0');  // the first 1000 bytes of the real gzip file
  {
    std::ifstream f(real + "train-images-idx3-ubyte.gz", std::ios::binary);
    f.read(gz_cut.data(), 1000);
  }

  // Damaged copies of the run's files.
  auto damaged = [&](const std::string& name, const std::string& from, size_t keep, const std::string& prefix) {
    std::ifstream f(from, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(f)), {});
    const std::string path = d.file(name);
    write_text(path, prefix + bytes.substr(prefix.size(), keep - prefix.size()));
    return path;
  };
  const std::string model = run + "/model.safetensors";
  const std::string lying_len = std::string("\x00\x00\x00\x00\x00\x01\x00\x00", 8);  // 2^40, little-endian
  const std::string garbage = d.file("garbage.png");
  write_text(garbage, "this is not a PNG\n");
  const std::string broken_run = d.str() + "/broken_run";
  fs::copy(run, broken_run);
  damaged("broken_run/train_state.safetensors", run + "/train_state.safetensors", 200, "");

  const std::vector<Case> cases = {
      {"missing dataset folder", "sima-train --quiet --config " + cfg + " --set data.dataset=mnist:" + d.str() + "/none",
       {"none/train-images-idx3-ubyte.gz nor", "exists"}},
      {"gzip cut short", fmnist_with("cut", "train-images-idx3-ubyte.gz", gz_cut),
       {"train-images-idx3-ubyte.gz: header claims 47040000 bytes of data, more than a gzip file of 1000 bytes"}},
      {"IDX header only", fmnist_with("short", "train-images-idx3-ubyte", idx_header),
       {"train-images-idx3-ubyte: truncated: header claims 47040016 bytes, the file has 16"}},
      {"IDX absurd shape", fmnist_with("huge", "train-images-idx3-ubyte",
                                       be32(0x803) + be32(0x7fffffff) + be32(0x7fffffff) + be32(0x7fffffff)),
       {"train-images-idx3-ubyte: image size 2147483647 x 2147483647 is too large"}},
      {"IDX wrong magic", fmnist_with("magic", "train-images-idx3-ubyte", be32(0x801) + be32(1) + std::string(1, '\0')),
       {"train-images-idx3-ubyte: not an IDX images file: magic number 0x00000801, expected 0x00000803"}},
      {"checkpoint cut short", "sima-eval --checkpoint " + damaged("cut.safetensors", model, 100, ""),
       {"cut.safetensors: the header length", "runs past the end of the file"}},
      {"checkpoint lying header length", "sima-eval --checkpoint " + damaged("lie.safetensors", model, 4000, lying_len),
       {"lie.safetensors: the header length 1099511627776 runs past the end of the file"}},
      {"checkpoint missing", "sima-eval --checkpoint " + d.str() + "/none.safetensors", {"none.safetensors"}},
      {"not an image", "sima-eval --checkpoint " + model + " --image " + garbage,
       {"garbage.png: cannot decode (unknown image type)"}},
      {"train state cut short", "sima-train --quiet --resume --out " + broken_run,
       {"broken_run/train_state.safetensors: the header length", "runs past the end of the file"}},
      {"resume without a state", "sima-train --quiet --resume --config " + cfg + " --out " + d.str() + "/fresh",
       {"nothing to resume (no train_state.safetensors); start without --resume"}},
  };
  for (const Case& c : cases) check_case(c);
}
