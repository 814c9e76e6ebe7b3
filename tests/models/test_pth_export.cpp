// sima-convert --to (models/io/upstream_export.h): our checkpoints -> upstream .pth files.
//
// For each layout a tiny model of ours (the sizes of tests/models/gen_pth.py's transcriptions),
// every parameter and BatchNorm statistic moved off its init, is saved as our checkpoint and
// exported by the sima-convert binary. Here: the .pth reads back through our importer to the
// same logits, bit for bit. Then cases.json (file, layout, the transcription's arguments, an
// input and OUR logits) goes to SIMA_PTH_EXPORT_DIR, where tests/models/check_pth_export.py
// (ctest models.check_pth_export, which needs this test as its fixture) loads each file into
// the upstream PyTorch model with load_state_dict(strict=True) and compares its logits with
// ours. Combinations the upstream code cannot represent must be refused, naming the model, the
// attention and the valid choices, with no file written.
#include "testing.h"
#include "app_testing.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "models/io/checkpoint.h"
#include "models/io/pth.h"
#include "models/registry.h"
#include "models/io/upstream.h"
#include "models/io/upstream_export.h"

using namespace sima;
using namespace sima::testing;
using json = nlohmann::json;

namespace {

struct Case {
  std::string name, to;
  bool legacy_qkv;
  json config;  // ours
  json python;  // the transcription's constructor and arguments (check_pth_export.py)
  json import_spec;  // what our importer cannot infer from the shapes
};

const json kDeit = {{"arch", "deit"}, {"img_size", 32}, {"patch_size", 8}, {"embed_dim", 64}, {"depth", 2},
                    {"num_heads", 2}, {"num_classes", 10}, {"attention", {{"type", "softmax"}}}};
const json kXcit = {{"arch", "xcit"}, {"img_size", 32}, {"patch_size", 8}, {"embed_dim", 32}, {"depth", 2},
                    {"num_heads", 4}, {"num_classes", 10}, {"cls_attn_layers", 2}};
const json kCvt = {{"arch", "cvt"}, {"img_size", 32}, {"num_classes", 10}, {"stage_dims", {64, 128, 192}},
                   {"stage_depths", {1, 1, 1}}, {"stage_heads", {1, 2, 3}}, {"stage_embed_kernel", {7, 3, 3}},
                   {"stage_embed_stride", {4, 2, 2}}, {"stage_embed_padding", {2, 1, 1}},
                   {"stage_drop_path", {0.0, 0.0, 0.0}}, {"stage_stride_kv", {2, 2, 2}}, {"act", "quick_gelu"},
                   {"norm_eps", 1e-5}, {"attention", {{"type", "softmax"}}}};

json with(json base, const json& extra) {
  base.merge_patch(extra);
  return base;
}

std::vector<Case> cases() {
  return {
      {"deit_timm_distilled", "timm", false, with(kDeit, {{"distilled", true}}),
       {{"cls", "DistilledDeit"}, {"dim", 64}, {"depth", 2}, {"heads", 2}, {"patch", 8}, {"distilled", true}},
       {{"num_heads", 2}}},
      {"deit_timm", "timm", false, kDeit,
       {{"cls", "DistilledDeit"}, {"dim", 64}, {"depth", 2}, {"heads", 2}, {"patch", 8}, {"distilled", false}},
       {{"num_heads", 2}}},
      {"xcit_timm", "timm", false, with(kXcit, {{"tokens_norm", true}, {"attention", {{"type", "xca"}}}}),
       {{"cls", "XCiT"}, {"official", false}, {"dim", 32}, {"depth", 2}, {"heads", 4}, {"tokens_norm", true}},
       json::object()},
      {"xcit_timm_legacy_qkv", "timm", true, with(kXcit, {{"tokens_norm", true}, {"attention", {{"type", "xca"}}}}),
       {{"cls", "XCiT"}, {"official", false}, {"dim", 32}, {"depth", 2}, {"heads", 4}, {"tokens_norm", true},
        {"legacy_qkv", true}},
       json::object()},
      {"sima_official", "official", false, with(kXcit, {{"tokens_norm", false}, {"attention", {{"type", "sima"}}}}),
       {{"cls", "XCiT"}, {"official", true}, {"dim", 32}, {"depth", 2}, {"heads", 4}, {"tokens_norm", false}},
       {{"num_heads", 4}, {"tokens_norm", false}}},
      {"cvt", "cvt", false, kCvt,
       {{"cls", "CvT"}, {"dims", {64, 128, 192}}, {"depths", {1, 1, 1}}, {"heads", {1, 2, 3}}}, json::object()},
  };
}

// Every parameter moved off its init, BatchNorm statistics away from 0 / 1, counters nonzero:
// a wrong or missing name map would change the logits.
void perturb(Model& m, uint64_t seed) {
  Generator g(seed);
  for (auto& [name, p] : m.named_parameters())
    for (int64_t i = 0; i < p.numel(); ++i) p.data()[i] += 0.1f * g.normal();
  for (auto& [name, b] : m.named_buffers()) {
    if (name.ends_with("running_var")) g.fill_uniform(b.data(), b.numel(), 0.5f, 2.f);
    else if (name.ends_with("running_mean")) g.fill_normal(b.data(), b.numel(), 0.f, 0.2f);
    else if (name.ends_with("num_batches_tracked")) b.data()[0] = 1234.f;
  }
}

Tensor logits(Model& m, const Tensor& x) {
  NoGradGuard no_grad;
  return m.forward(x);
}

std::string export_dir() {
  const char* dir = std::getenv("SIMA_PTH_EXPORT_DIR");
  REQUIRE_MESSAGE(dir != nullptr, "SIMA_PTH_EXPORT_DIR is not set (run through ctest)");
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("sima-convert --to writes every layout; our importer reads it back to the same logits") {
  const std::string dir = export_dir();
  json out = json::array();
  uint64_t seed = 1;
  for (const Case& c : cases()) {
    CAPTURE(c.name);
    std::shared_ptr<Model> model = create_model(c.config);
    perturb(*model, seed++);
    model->eval();
    const std::string ckpt = dir + "/" + c.name + ".safetensors", pth = dir + "/" + c.name + ".pth";
    std::filesystem::remove(pth);
    save_checkpoint(ckpt, *model);
    const Run r = run_app("sima-convert --in " + ckpt + " --out " + pth + " --to " + c.to + (c.legacy_qkv ? " --legacy-qkv" : ""));
    INFO(r.err);
    REQUIRE(r.status == 0);
    CHECK(r.out.find("(" + c.to + " layout") != std::string::npos);

    Generator g(100 + seed);
    Tensor x = empty(Shape({2, 3, 32, 32}));
    g.fill_normal(x.data(), x.numel());
    const Tensor ours = logits(*model, x);
    const UpstreamModel back = load_upstream_checkpoint(pth, c.to, c.import_spec.dump());
    CHECK(back.where == (c.to == "official" ? "['model']" : ""));
    CHECK(max_abs_diff(logits(*back.model, x), ours) == 0.f);
    out.push_back({{"name", c.name}, {"file", pth}, {"layout", c.to}, {"python", c.python},
                   {"input_shape", {2, 3, 32, 32}}, {"input", to_vector(x)}, {"logits", to_vector(ours)}});
  }
  std::ofstream(dir + "/cases.json") << out.dump();
}

TEST_CASE("the exported names are the upstream ones: pos_embeder, split q/k/v, int64 counters") {
  auto names = [](const std::vector<PthTensor>& sd) {
    std::map<std::string, PthTensor> m;
    for (const PthTensor& t : sd) m[t.name] = t;
    return m;
  };
  const Case xcit = cases()[2], sima = cases()[4];
  auto model = create_model(xcit.config);
  const auto split = names(export_upstream_state_dict(*model, {"timm", false}, "m"));
  CHECK(split.count("cls_attn_blocks.1.attn.q.weight"));
  CHECK(split.at("cls_attn_blocks.1.attn.v.bias").tensor.shape() == Shape({32}));
  CHECK_FALSE(split.count("cls_attn_blocks.1.attn.qkv.weight"));
  CHECK(split.count("blocks.0.attn.qkv.weight"));  // the XCA blocks keep one qkv
  CHECK(split.at("patch_embed.proj.0.1.num_batches_tracked").dtype == StorageDtype::Int64);
  const auto legacy = names(export_upstream_state_dict(*model, {"timm", true}, "m"));
  CHECK(legacy.at("cls_attn_blocks.1.attn.qkv.weight").tensor.shape() == Shape({96, 32}));
  const auto official = names(export_upstream_state_dict(*create_model(sima.config), {"official", false}, "m"));
  CHECK(official.count("pos_embeder.token_projection.weight"));
  CHECK_FALSE(official.count("pos_embed.token_projection.weight"));
  CHECK(official.count("cls_attn_blocks.0.attn.qkv.weight"));
}

TEST_CASE("what the upstream code cannot represent is refused, naming the model, attention and valid choices") {
  auto problems = [](json cfg, const std::string& to, bool legacy = false) {
    return export_problems(config_from_json(cfg), {to, legacy});
  };
  const json deit_sima = with(kDeit, {{"attention", {{"type", "sima"}}}});
  CHECK(problems(deit_sima, "timm").rfind(
            "a deit with sima attention cannot be written in the timm layout: its deit has softmax attention only; "
            "valid: --to official for an xcit with sima attention",
            0) == 0);
  CHECK(problems(deit_sima, "official").find("the official layout, which has no deit model") != std::string::npos);
  CHECK(problems(with(kCvt, {{"attention", {{"type", "sima"}}}}), "cvt")
            .rfind("a cvt with sima attention cannot be written in the cvt layout: its cvt has softmax attention only", 0) == 0);
  CHECK(problems(with(kXcit, {{"attention", {{"type", "xca"}}}}), "official").find("its xcit has sima attention only") !=
        std::string::npos);
  CHECK(problems(kDeit, "onnx") == "layout 'onnx' is unknown (allowed: official, timm, cvt)");
  // Everything that changes the math, listed together.
  const std::string many = problems(with(kXcit, {{"patch_size", 4}, {"act", "relu"}, {"cls_attn_variant", "softmax"},
                                                 {"attention", {{"type", "sima"}, {"norm", "l2"}}}}),
                                    "official");
  CHECK(many == "a xcit with sima attention cannot be written in the official layout:"
                "\n  act relu: the upstream MLP uses GELU"
                "\n  patch_size 4: the upstream ConvPatchEmbed has patch 8 or 16 only"
                "\n  cls_attn_variant softmax: the official class attention is the sima form"
                "\n  attention.norm l2: the official SimA l1-normalises q and k");
  CHECK(problems(with(kCvt, {{"norm_eps", 1e-6}}), "cvt").find("norm_eps 0.000001: the upstream LayerNorms use 1e-5") !=
        std::string::npos);
  CHECK(problems(with(kDeit, {{"patch_embed", "conv_stem"}}), "timm").find("patch_embed conv_stem") != std::string::npos);
  CHECK(problems(kDeit, "timm", true).find("legacy_qkv applies to timm's XCiT only") != std::string::npos);
  for (const Case& c : cases()) CHECK(problems(c.config, c.to, c.legacy_qkv).empty());

  // Through the binary: one line on stderr, exit 1, no file.
  TempDir dir;
  const std::string ckpt = dir.file("deit_sima.safetensors"), pth = dir.file("out.pth");
  save_checkpoint(ckpt, *create_model(deit_sima));
  const Run r = run_app("sima-convert --in " + ckpt + " --out " + pth + " --to timm");
  CHECK(r.status == 1);
  CHECK(r.err.rfind("sima-convert: error: " + ckpt + ": a deit with sima attention cannot be written in the timm layout", 0) == 0);
  CHECK_FALSE(std::filesystem::exists(pth));
  const Run mixed = run_app("sima-convert --in " + ckpt + " --out " + pth + " --to timm --from timm");
  CHECK(mixed.err.find("--from and --model are for the import direction") != std::string::npos);
  const Run legacy = run_app("sima-convert --in " + ckpt + " --out " + pth + " --legacy-qkv");
  CHECK(legacy.err.find("--legacy-qkv is for the export direction") != std::string::npos);
  CHECK(dir.listing() == std::vector<std::string>{"deit_sima.safetensors"});
}
