// Upstream PyTorch checkpoints end to end: tests/models/gen_pth.py (the CTest fixture
// models.gen_pth, Debian's python3-torch) builds each upstream model at a tiny size, trains it
// two steps and torch.saves it as upstream does; here every file is read, converted and run, and
// its logits must match PyTorch's. Then the hostile and malformed files must each end in one
// sima::Error saying what is wrong. SIMA_PTH_DIR names the fixture's folder.
#include "testing.h"
#include "app_testing.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data/image_io.h"
#include "models/io/checkpoint.h"
#include "models/io/pth.h"
#include "models/io/upstream.h"
#include "models/io/zip_archive.h"
#include "train/eval/evaluate.h"
#include "train/objectives/distill.h"

using namespace sima;
using namespace sima::testing;
using json = nlohmann::json;

namespace {

json load_cases() {
  const char* dir = std::getenv("SIMA_PTH_DIR");
  REQUIRE_MESSAGE(dir != nullptr, "SIMA_PTH_DIR is not set (run through ctest: the fixture models.gen_pth makes the files)");
  std::ifstream in(std::string(dir) + "/cases.json");
  REQUIRE(bool(in));
  return json::parse(in);
}

// max |a - b| / max |b|
double relative_error(const Tensor& a, const std::vector<float>& b) {
  REQUIRE(a.numel() == int64_t(b.size()));
  double diff = 0, scale = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, double(sima::testing::abs_diff(a.data()[i], b[i])));
    scale = std::max(scale, double(std::fabs(b[i])));
  }
  return diff / scale;
}

Tensor logits_of(Model& model, const json& c) {
  const Tensor x = from_vector(c["input"].get<std::vector<float>>(), Shape(c["input_shape"].get<std::vector<int64_t>>()));
  NoGradGuard no_grad;
  return model.forward(x);
}

}  // namespace

TEST_CASE("upstream checkpoints convert and give PyTorch's logits (1e-4 relative)") {
  const json cases = load_cases();
  REQUIRE(cases["good"].size() == 5);
  for (const json& c : cases["good"]) {
    CAPTURE(c["name"].get<std::string>());
    const UpstreamModel m = load_upstream_checkpoint(c["file"], c["from"], c["model"]);
    const double err = relative_error(logits_of(*m.model, c), c["logits"].get<std::vector<float>>());
    MESSAGE(c["name"].get<std::string>() << " (" << m.layout << m.where << "): logits relative error " << err);
    CHECK(err < 1e-4);
    // Through our own checkpoint and back: the config and weights survive.
    const std::string out = std::filesystem::temp_directory_path() / ("sima_pth_" + std::to_string(::getpid()) + ".safetensors");
    save_checkpoint(out, *m.model, {{"converted_from", m.layout}});
    std::shared_ptr<Model> back = load_checkpoint(out);
    back->eval();
    CHECK(relative_error(logits_of(*back, c), c["logits"].get<std::vector<float>>()) < 1e-4);
    std::filesystem::remove(out);
  }
}

TEST_CASE("the layouts are detected and the inferred configs are the upstream ones") {
  const json cases = load_cases();
  std::map<std::string, UpstreamModel> m;
  for (const json& c : cases["good"]) m[c["name"]] = load_upstream_checkpoint(c["file"], "", c["model"]);
  CHECK(m["deit_timm_fp16"].layout == "timm");
  const ModelConfig& deit = m["deit_timm_fp16"].model->config();
  CHECK(deit.arch == "deit");
  CHECK(deit.distilled);
  CHECK(deit.img_size == 32);
  CHECK(deit.patch_size == 8);
  CHECK(deit.num_heads == 1);
  CHECK(deit.depth == 2);
  const ModelConfig& xcit = m["xcit_timm_views"].model->config();
  CHECK(m["xcit_timm_views"].where == "['state_dict']['model']");
  CHECK(xcit.arch == "xcit");
  CHECK(xcit.attention.variant == "xca");
  CHECK(xcit.num_heads == 4);  // from attn.temperature
  CHECK(xcit.patch_size == 8);
  CHECK(xcit.tokens_norm);
  CHECK(m["xcit_timm_old_qkv"].layout == "timm");
  CHECK(m["xcit_timm_old_qkv"].model->config().num_heads == 4);
  const UpstreamModel& sima = m["sima_official"];
  CHECK(sima.layout == "official");
  CHECK(sima.where == "['model']");
  CHECK(sima.model->config().attention.variant == "sima");
  CHECK_FALSE(sima.model->config().tokens_norm);  // from --model
  const ModelConfig& cvt = m["cvt_bf16"].model->config();
  CHECK(m["cvt_bf16"].layout == "cvt");
  CHECK(cvt.stage_dims == std::vector<int64_t>{64, 128, 192});
  CHECK(cvt.stage_heads == std::vector<int64_t>{1, 2, 3});
  CHECK(cvt.stage_embed_stride == std::vector<int64_t>{4, 2, 2});
  CHECK(cvt.act == "quick_gelu");
  // The eval crop each upstream evaluates at (models/io/upstream.h upstream_crop_pct), and the note
  // a timm DeiT gets (its tensors fit softmax and SimA alike).
  CHECK(m["deit_timm_fp16"].crop_pct == 0.9);
  CHECK(m["xcit_timm_views"].crop_pct == 1.0);
  CHECK(sima.crop_pct == 0.875);
  CHECK(m["cvt_bf16"].crop_pct == 0.875);
  CHECK(m["deit_timm_fp16"].note.find("timm's DeiT layout has the same tensors for softmax and SimA attention") !=
        std::string::npos);
  CHECK(m["deit_timm_fp16"].note.find("--model '{\"attention\": {\"type\": \"sima\"}}'") != std::string::npos);
  CHECK(m["xcit_timm_views"].note.empty());
  ModelConfig big = deit;
  big.img_size = 384;
  CHECK(upstream_crop_pct("timm", big) == 1.0);
  big.arch = "cvt";
  CHECK(upstream_crop_pct("cvt", big) == 1.0);
}

TEST_CASE("hostile and malformed .pth files each end in one clear error, nothing run") {
  const json cases = load_cases();
  REQUIRE(cases["bad"].size() >= 15);
  for (const json& c : cases["bad"]) {
    CAPTURE(c["name"].get<std::string>());
    std::string what;
    try {
      load_upstream_checkpoint(c["file"], c["from"], c["model"]);
    } catch (const Error& e) {
      what = e.what();
    }
    CAPTURE(what);
    CHECK(what.find(c["expect"].get<std::string>()) != std::string::npos);
    CHECK(what.find(c["file"].get<std::string>()) != std::string::npos);  // names the file
  }
  CHECK_FALSE(std::filesystem::exists(cases["marker"].get<std::string>()));  // os.system never ran
}

TEST_CASE("sima-convert writes a checkpoint of ours; sima-eval's loader takes the .pth itself") {
  const json cases = load_cases();
  const json& c = cases["good"][3];  // the official SimA release layout
  REQUIRE(c["name"] == "sima_official");
  TempDir dir;
  const std::string out = dir.file("sima.safetensors");
  const Run ok = run_app("sima-convert --in " + c["file"].get<std::string>() + " --out " + out + " --model '" +
                         c["model"].get<std::string>() + "'");
  INFO(ok.err);
  REQUIRE(ok.status == 0);
  CHECK(ok.out.find("(official layout) -> ") != std::string::npos);
  std::shared_ptr<Model> model = load_checkpoint(out);
  model->eval();
  CHECK(relative_error(logits_of(*model, c), c["logits"].get<std::vector<float>>()) < 1e-4);
  const LoadedCheckpoint direct = load_checkpoint_for_eval(c["file"], "", c["model"]);
  CHECK(relative_error(logits_of(*direct.model, c), c["logits"].get<std::vector<float>>()) < 1e-4);
  CHECK(direct.info.config.attention.variant == "sima");

  std::string hostile;
  for (const json& b : cases["bad"])
    if (b["name"] == "os_system") hostile = b["file"];
  const Run bad = run_app("sima-convert --in " + hostile + " --out " + out);
  CHECK(bad.status == 1);
  CHECK(bad.err.find("sima-convert: error: ") == 0);
  CHECK(bad.err.find("global 'posix.system'") != std::string::npos);
  const Run missing = run_app("sima-convert --in " + c["file"].get<std::string>() + " --out " + out);
  CHECK(missing.status == 1);
  CHECK(missing.err.find("num_heads: width 32 is none of the official models'") != std::string::npos);
}

TEST_CASE("sima-heatmap runs on an official XCiT-SimA .pth converted by sima-convert: a PNG of the image's size") {
  const json cases = load_cases();
  const json& c = cases["good"][3];
  REQUIRE(c["name"] == "sima_official");
  TempDir dir;
  const std::string ckpt = dir.file("sima.safetensors");
  const Run conv = run_app("sima-convert --in " + c["file"].get<std::string>() + " --out " + ckpt +
                           " --model '{\"num_heads\": 4, \"tokens_norm\": false, \"img_size\": 32}'");
  INFO(conv.err);
  REQUIRE(conv.status == 0);
  Image img(3, 40, 48);  // not square, not the model's 32: the maps come back at the image's size
  Generator g(3);
  g.fill_uniform(img.data.data(), img.numel(), 0.f, 1.f);
  const std::string png = dir.file("cat.png"), out = dir.str() + "/maps";
  write_png(png, img);
  const Run r = run_app("sima-heatmap --checkpoint " + ckpt + " --image " + png + " --out " + out + " --json --scale 1");
  INFO(r.err);
  REQUIRE(r.status == 0);
  const json j = json::parse(r.out);
  CHECK(j["images"][0]["variant"] == "sima");
  CHECK(j["images"][0]["layer_count"] == 2);
  for (const char* name : {"cat_q.png", "cat_k.png"}) {
    CAPTURE(name);
    const std::string bytes = read_file_bytes(out + "/" + name);
    REQUIRE(bytes.size() > 24);
    CHECK(bytes.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0);  // the PNG signature, then IHDR's width, height (big-endian)
    auto be32 = [&](size_t at) { return uint32_t(uint8_t(bytes[at])) << 24 | uint32_t(uint8_t(bytes[at + 1])) << 16 |
                                        uint32_t(uint8_t(bytes[at + 2])) << 8 | uint32_t(uint8_t(bytes[at + 3])); };
    CHECK(bytes.compare(12, 4, "IHDR") == 0);
    CHECK(be32(16) == 48);
    CHECK(be32(20) == 40);
    const Image back = read_image(out + "/" + name);  // decodes (zlib stream and CRCs intact)
    CHECK((back.channels == 3 && back.height == 40 && back.width == 48));
  }
}

TEST_CASE("the crop an import writes, --crop-pct, and a .pth taken by sima-heatmap and distill.teacher directly") {
  const json cases = load_cases();
  const json& c = cases["good"][3];
  REQUIRE(c["name"] == "sima_official");
  const std::string spec = "'{\"num_heads\": 4, \"tokens_norm\": false, \"img_size\": 32}'";
  TempDir dir;
  const std::string ckpt = dir.file("sima.safetensors"), ckpt95 = dir.file("sima95.safetensors");
  REQUIRE(run_app("sima-convert --in " + c["file"].get<std::string>() + " --out " + ckpt + " --model " + spec).status == 0);
  CHECK(read_checkpoint_eval_info(ckpt).crop_pct == 0.875);  // UCDvision/sima's 256 / 224
  REQUIRE(run_app("sima-convert --in " + c["file"].get<std::string>() + " --out " + ckpt95 + " --model " + spec +
                  " --crop-pct 0.95").status == 0);
  CHECK(read_checkpoint_eval_info(ckpt95).crop_pct == 0.95);
  const Run bad = run_app("sima-convert --in " + ckpt + " --out " + ckpt95 + " --to official --crop-pct 0.9");
  CHECK(bad.status == 1);
  CHECK(bad.err.find("--crop-pct is for importing a .pth") != std::string::npos);

  // sima-heatmap takes the .pth itself (before: "the header length ... runs past the end of the file").
  Image img(3, 32, 32, 0.5f);
  const std::string png = dir.file("cat.png");
  write_png(png, img);
  const Run r = run_app("sima-heatmap --checkpoint " + c["file"].get<std::string>() + " --model " + spec +
                        " --image " + png + " --out " + dir.str() + "/maps --json --crop-pct 0.5");
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(json::parse(r.out)["images"][0]["variant"] == "sima");
  const Run e = run_app("sima-eval --checkpoint " + ckpt + " --image " + png + " --crop-pct 1.5");
  CHECK(e.status == 1);
  CHECK(e.err.find("--crop-pct: 1.5 is not in (0, 1]") != std::string::npos);

  // A timm DeiT: the note on how to choose softmax or SimA.
  const json& d = cases["good"][0];
  REQUIRE(d["name"] == "deit_timm_fp16");
  const Run n = run_app("sima-eval --checkpoint " + d["file"].get<std::string>() + " --image " + png);
  CHECK(n.err.find("sima-eval: note: ") != std::string::npos);
  CHECK(n.err.find("For a DeiT-SimA checkpoint give --model") != std::string::npos);

  // distill.teacher: a .pth through the same reader (before: "the header length ... runs past the
  // end of the file"); its logits are the converted model's.
  const LoadedCheckpoint direct = load_checkpoint_for_eval(d["file"]);
  DistillTeacher teacher(d["file"], direct.info.config);
  CHECK(teacher.model().num_parameters() == direct.model->num_parameters());
  CHECK(relative_error(logits_of(teacher.model(), d), d["logits"].get<std::vector<float>>()) < 1e-4);
}
