// NaN / inf in weights, wherever they can appear:
//  - the optimizer's own check (SGD, AdamW) names the first parameter an update left
//    non-finite, and undo_step() puts back the weights and the optimizer state bit for bit;
//    keeping the previous values changes no result;
//  - checkpoints and train states holding NaN are refused on save and on load, naming the
//    file and the tensor, unless allowed (--allow-nonfinite);
//  - sima-train with a step that overflows: on_nonfinite = stop names the parameter and the
//    step, skip undoes the step and saves finite weights;
//  - sima-eval / sima-heatmap refuse a NaN checkpoint; with --allow-nonfinite, evaluation's
//    top-1 is the trace of its own confusion matrix.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "app_testing.h"
#include "data/idx.h"
#include "models/io/checkpoint.h"
#include "models/registry.h"
#include "testing.h"
#include "train/config/transforms_factory.h"
#include "train/eval/evaluate.h"
#include "train/loop/train_state.h"
#include "train/optim/optim.h"

using namespace sima;
using namespace sima::testing;
namespace fs = std::filesystem;

namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();

Tensor param(std::vector<float> values) {
  Tensor t = from_vector(values);
  t.requires_grad_();
  return t;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), sizeof(float) * size_t(a.numel())) == 0;
}

void check_same_state(const std::vector<std::pair<std::string, Tensor>>& a,
                      const std::vector<std::pair<std::string, Tensor>>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].first == b[i].first);
    CHECK_MESSAGE(same_bits(a[i].second, b[i].second), a[i].first);
  }
}

std::shared_ptr<Model> tiny_model() {
  return create_model(
      nlohmann::json{{"name", "deit_tiny_patch4_28"}, {"depth", 1}, {"embed_dim", 16}, {"num_heads", 2}});
}

// A model whose head weight holds a NaN, saved (allowed for the test) with the data it names.
std::string save_nan_checkpoint(const TempDir& dir, Model& model) {
  const std::string path = dir.file("nan.safetensors");
  for (auto& [name, p] : model.named_parameters())
    if (name == "head.weight") p.data()[3] = kNaN;
  set_allow_nonfinite_weights(true);
  save_checkpoint(path, model, {{"data", "fashion_mnist"}});
  set_allow_nonfinite_weights(false);
  return path;
}

// Two optimizers of the same kind over copies of the same two parameters.
template <class Opt, class Options>
void check_overflow_and_undo(const Options& options) {
  Tensor a = param({1, -2, 3}), b = param({0.5f, 0.25f});
  Opt opt({ParamGroup{.params = {{"a", a}, {"b", b}}}}, options);
  opt.set_keep_previous(true);
  // A good step first, so there is optimizer state to restore.
  a.set_grad(from_vector({0.1f, 0.2f, -0.3f}));
  b.set_grad(from_vector({1.f, -1.f}));
  opt.step();
  CHECK(opt.nonfinite_after_step().empty());
  const Tensor a0 = a.detach().clone(), b0 = b.detach().clone();
  const auto state0 = opt.state();
  // An lr beyond float: every updated value overflows.
  opt.set_lr(1e39);
  a.set_grad(from_vector({0.f, 0.f, 0.f}));
  b.set_grad(from_vector({1.f, 1.f}));
  opt.step();
  CHECK(opt.nonfinite_after_step() == "a");  // the first of the two (momentum / moments carry 'a' over too)
  opt.undo_step();
  CHECK(opt.nonfinite_after_step().empty());
  CHECK(same_bits(a, a0));
  CHECK(same_bits(b, b0));
  check_same_state(opt.state(), state0);
  CHECK(opt.step_count() == 1);
}

}  // namespace

TEST_CASE("optimizer: the first parameter an update leaves non-finite is named; undo_step restores it all") {
  check_overflow_and_undo<SGD>(SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
  check_overflow_and_undo<AdamW>(AdamWOptions{.lr = 0.1, .weight_decay = 0.01});
  // A later parameter is named when the earlier ones stay finite.
  Tensor c = param({1, 2}), d = param({3});
  SGD sgd({ParamGroup{.params = {{"c", c}, {"d", d}}}}, SGDOptions{.lr = 1e38});
  c.set_grad(from_vector({0.f, 0.f}));  // c − 1e38·0 = c
  d.set_grad(from_vector({1e10f}));      // 3 − 1e48 = −inf
  sgd.step();
  CHECK(sgd.nonfinite_after_step() == "d");
  CHECK(to_vector(c) == std::vector<float>{1.f, 2.f});
  // A first step undone leaves no state at all (AdamW creates its buffers in the step).
  Tensor p = param({1, 2});
  AdamW opt({ParamGroup{.params = {{"p", p}}}}, AdamWOptions{.lr = 1e39});
  opt.set_keep_previous(true);
  p.set_grad(from_vector({1.f, 1.f}));
  opt.step();
  CHECK(opt.nonfinite_after_step() == "p");
  opt.undo_step();
  CHECK(opt.state().size() == 1);  // "step" only
  CHECK(to_vector(p) == std::vector<float>{1.f, 2.f});
  // Without keep_previous there is nothing to undo.
  AdamW plain({ParamGroup{.params = {{"q", param({1})}}}}, AdamWOptions{});
  CHECK(error_message([&] { plain.undo_step(); }).find("set_keep_previous") != std::string::npos);
}

TEST_CASE("optimizer: keeping the previous values changes no update (same bits over several steps)") {
  for (bool adamw : {false, true}) {
    Tensor x = param({0.3f, -1.2f, 2.5f, 0.f}), y = param({0.3f, -1.2f, 2.5f, 0.f});
    auto make = [&](Tensor t) -> std::unique_ptr<Optimizer> {
      std::vector<ParamGroup> g{ParamGroup{.params = {{"w", t}}}};
      if (adamw) return std::make_unique<AdamW>(g, AdamWOptions{.lr = 0.01, .weight_decay = 0.05});
      return std::make_unique<SGD>(g, SGDOptions{.lr = 0.01, .momentum = 0.9, .nesterov = true});
    };
    auto ox = make(x), oy = make(y);
    oy->set_keep_previous(true);
    for (int s = 0; s < 5; ++s) {
      const std::vector<float> g = {0.1f * float(s), -0.2f, 0.05f, 1.f};
      x.set_grad(from_vector(g));
      y.set_grad(from_vector(g));
      ox->step();
      oy->step();
      CHECK(oy->nonfinite_after_step().empty());
    }
    CHECK(same_bits(x, y));
    check_same_state(ox->state(), oy->state());
  }
}

TEST_CASE("checkpoints and train states with NaN: refused on save and load, naming file and tensor; or allowed") {
  TempDir dir;
  auto model = tiny_model();
  const std::string good = dir.file("good.safetensors");
  save_checkpoint(good, *model);
  const std::string nan_path = save_nan_checkpoint(dir, *model);  // model now holds the NaN
  const std::string want = nan_path + ": tensor 'head.weight' holds a non-finite value (nan at element 3 of ";
  CHECK(error_message([&] { load_checkpoint(nan_path); }).rfind(want, 0) == 0);
  CHECK(error_message([&] { load_weights(*tiny_model(), nan_path); }).rfind(want, 0) == 0);
  CHECK(error_message([&] { load_checkpoint(nan_path); }).find("--allow-nonfinite") != std::string::npos);
  const std::string refused = dir.file("refused.safetensors");
  CHECK(error_message([&] { save_checkpoint(refused, *model); })
            .rfind(refused + ": refusing to write: tensor 'head.weight' holds a non-finite value", 0) == 0);
  CHECK_FALSE(fs::exists(refused));
  // Train states too.
  std::vector<ParamGroup> groups{ParamGroup{.params = model->named_parameters()}};
  SGD opt(groups, SGDOptions{});
  const std::string state = dir.file("train_state.safetensors");
  CHECK(error_message([&] { save_train_state(state, *model, opt, nullptr, {}, nlohmann::json::object()); })
            .find("refusing to write: tensor 'model.head.weight'") != std::string::npos);
  set_allow_nonfinite_weights(true);
  save_train_state(state, *model, opt, nullptr, {}, nlohmann::json::object());
  CHECK(load_checkpoint(nan_path) != nullptr);
  set_allow_nonfinite_weights(false);
  CHECK(error_message([&] { load_train_state(state, *model, opt, nullptr); })
            .rfind(state + ": tensor 'model.head.weight' holds a non-finite value", 0) == 0);
  CHECK(load_checkpoint(good) != nullptr);
}

TEST_CASE("evaluate: top-1 is the trace of the confusion matrix, also when every logit is NaN") {
  auto model = tiny_model();
  for (auto& [name, p] : model->named_parameters())
    if (name == "head.bias") p.data()[0] = kNaN;  // NaN in every row's logits of class 0 only
  auto test = std::make_shared<IdxDataset>(IdxDataset::fashion_mnist(false));
  auto ds = std::make_shared<TransformedDataset>(test, eval_transform(model->config(), 1.0));
  for (int pass = 0; pass < 2; ++pass) {
    const EvalResult e = evaluate(*model, ds, {.batch_size = 50, .num_workers = 0, .limit = 200});
    int64_t trace = 0;
    for (size_t c = 0; c < e.confusion.size(); ++c) trace += e.confusion[c][c];
    CHECK(e.top1 == doctest::Approx(100.0 * double(trace) / double(e.count)));
    CHECK(e.top5 >= e.top1);
    for (auto& [name, p] : model->named_parameters())  // second pass: NaN everywhere
      if (name == "head.weight") p.data()[0] = kNaN, p.data()[17] = kNaN;
    for (auto& [name, p] : model->named_parameters())
      if (name == "norm.weight") p.data()[0] = kNaN;
  }
}

TEST_CASE("sima-train: an update overflowing the weights: stop names parameter and step; skip saves finite weights") {
  TempDir dir;
  const std::string cfg = dir.file("overflow.json");
  std::ofstream(cfg) << R"({"name": "overflow",
    "model": {"name": "deit_tiny_patch4_28_sima", "embed_dim": 16, "depth": 1, "num_heads": 2},
    "data": {"train_subset": 64, "test_subset": 32, "batch_size": 16, "num_workers": 0},
    "optimizer": {"type": "sgd", "lr": 1e39, "weight_decay": 0},
    "schedule": {"warmup_epochs": 0},
    "train": {"epochs": 1, "log_every": 1}})";
  Run stop = run_app("sima-train --config " + cfg + " --out " + dir.file("stop") + " --quiet");
  CHECK(stop.status == 1);
  CHECK(stop.err.find("step 1 (epoch 1, batch 1): the update left a NaN or inf in '") != std::string::npos);
  CHECK_FALSE(fs::exists(dir.file("stop") + "/model.safetensors"));
  CHECK_FALSE(fs::exists(dir.file("stop") + "/train_state.safetensors"));

  Run skip = run_app("sima-train --config " + cfg + " --out " + dir.file("skip") +
                     " --set train.on_nonfinite=skip --set train.eval_every=1");
  INFO(skip.err);
  CHECK(skip.status == 0);
  CHECK(skip.out.find("step 1: the update left a NaN or inf in '") != std::string::npos);
  // Every step was undone: the saved model is the initial one, finite, and loads.
  std::shared_ptr<Model> saved;
  REQUIRE_NOTHROW(saved = load_checkpoint(dir.file("skip") + "/model.safetensors"));
  CHECK(run_app("sima-train --out " + dir.file("skip") + " --resume --quiet").status == 0);  // state loads too
}

TEST_CASE("sima-eval and sima-heatmap refuse a NaN checkpoint; --allow-nonfinite evaluates it consistently") {
  TempDir dir;
  auto model = tiny_model();
  const std::string path = save_nan_checkpoint(dir, *model);
  Run ev = run_app("sima-eval --checkpoint " + path + " --limit 50 --workers 0");
  CHECK(ev.status == 1);
  CHECK(ev.err.find(path + ": tensor 'head.weight' holds a non-finite value") != std::string::npos);
  Run hm = run_app("sima-heatmap --checkpoint " + path + " --image " + path + " --out " + dir.file("maps"));
  CHECK(hm.status == 1);
  CHECK(hm.err.find(path + ": tensor 'head.weight' holds a non-finite value") != std::string::npos);
  Run dbg = run_app("sima-eval --checkpoint " + path + " --limit 50 --workers 0 --json --allow-nonfinite");
  INFO(dbg.err);
  REQUIRE(dbg.status == 0);
  const nlohmann::json j = nlohmann::json::parse(dbg.out);
  int64_t trace = 0;
  for (size_t c = 0; c < j["confusion"].size(); ++c) trace += j["confusion"][c][c].get<int64_t>();
  CHECK(j["top1"].get<double>() == doctest::Approx(100.0 * double(trace) / 50.0));
}
