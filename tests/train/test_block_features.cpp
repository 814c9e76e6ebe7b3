// The class tokens of the last N blocks as frozen features (Model::forward_block_features,
// FeatureOptions::blocks, sima-eval --feature-blocks): DINO's eval_linear.py n_last_blocks.
// Each block's token is checked against a shallower twin of the model holding the same weights
// (its forward_features is that block's class token after the final norm); the errors name the
// valid range of each architecture.
#include <memory>

#include "app_testing.h"
#include "core/autograd.h"
#include "core/ops.h"
#include "data/temp_dir.h"
#include "models/io/checkpoint.h"
#include "models/registry.h"
#include "testing.h"
#include "train/eval/feature_eval.h"

using namespace sima;
using namespace sima::testing;

namespace {

// `dst` takes `src`'s value of every tensor name it has (a shallower twin of `src`).
void load_shared(Module& dst, const Module& src) {
  const StateDict from = src.state_dict();
  StateDict sub;
  for (const auto& [name, t] : dst.state_dict()) sub[name] = from.at(name);
  dst.load_state_dict(sub);
}

Tensor images(int64_t B, uint64_t seed) {
  Tensor x = empty({B, 1, 28, 28});
  Generator g(seed);
  g.fill_normal(x.data(), x.numel());
  return x;
}

// Columns [c0, c0 + n) of a 2-D tensor.
Tensor columns(const Tensor& t, int64_t c0, int64_t n) { return contiguous(narrow(t, 1, c0, n)); }

// Checks forward_block_features(x, n) of `model` against twins made by `twin(k)`, whose
// forward_features is the class token after block k (counting the blocks that carry one).
void check_against_twins(Model& model, int64_t n_blocks, const std::function<std::shared_ptr<Model>(int64_t)>& twin) {
  NoGradGuard ng;
  model.eval();
  const Tensor x = images(3, 7);
  const int64_t D = model.config().embed_dim;
  CHECK(max_abs_diff(model.forward_block_features(x, 1), model.forward_features(x)) == 0.f);
  const Tensor all = model.forward_block_features(x, n_blocks);
  REQUIRE(all.shape() == Shape({3, n_blocks * D}));
  for (int64_t k = 1; k <= n_blocks; ++k) {
    CAPTURE(k);
    std::shared_ptr<Model> shallow = twin(k);
    load_shared(*shallow, model);
    shallow->eval();
    CHECK(max_abs_diff(columns(all, (k - 1) * D, D), shallow->forward_features(x)) < 1e-5f);
  }
  // fewer blocks: the last ones, earliest first
  const Tensor last2 = model.forward_block_features(x, 2);
  CHECK(max_abs_diff(last2, columns(all, (n_blocks - 2) * D, 2 * D)) < 1e-6f);
}

}  // namespace

TEST_CASE("DeiT: the class tokens of the last n blocks, each after the final norm, earliest first") {
  const nlohmann::json cfg{{"name", "deit_tiny_patch4_28"}, {"depth", 3}, {"embed_dim", 16}, {"num_heads", 2}};
  std::shared_ptr<Model> model = create_model(cfg);
  randomize_parameters(*model, 3, 0.3f);
  check_against_twins(*model, 3, [&](int64_t k) {
    nlohmann::json c = cfg;
    c["depth"] = k;
    return create_model(c);
  });
  CHECK(error_message([&] { model->forward_block_features(images(1, 1), 4); }) ==
        "deit: feature blocks 4 is not in 1..3 (the model's depth)");
  CHECK(error_message([&] { model->forward_block_features(images(1, 1), 0); }) ==
        "deit: feature blocks 0 is not in 1..3 (the model's depth)");
}

TEST_CASE("XCiT: the class tokens of its class-attention blocks; the XCA blocks have none") {
  const nlohmann::json cfg{{"name", "xcit_nano_12_p4_28"}, {"depth", 1},           {"embed_dim", 16},
                           {"num_heads", 2},                {"cls_attn_layers", 3}};
  std::shared_ptr<Model> model = create_model(cfg);
  randomize_parameters(*model, 4, 0.3f);
  check_against_twins(*model, 3, [&](int64_t k) {
    nlohmann::json c = cfg;
    c["cls_attn_layers"] = k;
    return create_model(c);
  });
  CHECK(error_message([&] { model->forward_block_features(images(1, 1), 4); })
            .rfind("xcit: feature blocks 4 is not in 1..3 (its class-attention blocks", 0) == 0);
}

TEST_CASE("CvT: the last block only; extract_features with blocks concatenates") {
  std::shared_ptr<Model> cvt = create_model(nlohmann::json{
      {"name", "cvt_13_28_sima"}, {"stage_dims", {8, 16, 16}}, {"stage_depths", {1, 1, 1}}, {"stage_heads", {1, 2, 2}}});
  CHECK(error_message([&] { cvt->forward_block_features(images(1, 1), 2); }).rfind("CvT: feature blocks 2", 0) == 0);

  std::shared_ptr<Model> deit =
      create_model(nlohmann::json{{"name", "deit_tiny_patch4_28"}, {"depth", 2}, {"embed_dim", 16}, {"num_heads", 2}});
  randomize_parameters(*deit, 5, 0.3f);
  TempDir dir;
  const std::string ckpt = dir.file("model.safetensors");
  save_checkpoint(ckpt, *deit, {{"data", "fashion_mnist"}});
  auto eval = [&](const std::string& extra) {
    return run_app("sima-eval --checkpoint " + ckpt + " --knn --k 5 --train-limit 200 --limit 40 --workers 0 --json" +
                   extra);
  };
  Run two = eval(" --feature-blocks 2");
  INFO("stderr: " << two.err);
  REQUIRE(two.status == 0);
  const nlohmann::json j = nlohmann::json::parse(two.out);
  CHECK(j["dim"] == 32);
  CHECK(j["feature_blocks"] == 2);
  Run one = eval("");
  REQUIRE(one.status == 0);
  CHECK(nlohmann::json::parse(one.out)["dim"] == 16);
  CHECK(nlohmann::json::parse(one.out)["feature_blocks"] == 1);
  Run three = eval(" --feature-blocks 3");
  CHECK(three.status == 1);
  CHECK(three.err.find("deit: feature blocks 3 is not in 1..2 (the model's depth)") != std::string::npos);
  Run zero = eval(" --feature-blocks 0");
  CHECK(zero.status == 1);
  CHECK(zero.err.find("--feature-blocks: 0 is not in 1..64") != std::string::npos);
  Run px = run_app("sima-eval --features pixels --data fashion_mnist --knn --feature-blocks 2");
  CHECK(px.status == 2);
  CHECK(px.err.find("--feature-blocks does not apply to --features pixels") != std::string::npos);
}
