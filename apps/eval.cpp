// sima-eval: evaluates a checkpoint on a dataset split, or classifies single images.
//
//   build/bin/sima-eval --checkpoint runs/NAME/model.safetensors [--data SPEC] [--split test|train]
//                       [--batch N] [--workers N] [--limit N] [--json]
//   build/bin/sima-eval --checkpoint CKPT --image a.png b.jpg [--topk K] [--json]
//
// The model, its input normalisation, the eval crop, the training data spec and the class
// names all come from the checkpoint's metadata (train/evaluate.h, read_checkpoint_eval_info).
// Output: train/evaluate.h format_report (text) or one JSON object on stdout (--json).
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/dataset.h"
#include "models/checkpoint.h"
#include "train/cli.h"
#include "train/data_spec.h"
#include "train/evaluate.h"
#include "train/transforms.h"

namespace {

using namespace sima;

std::string percent(double p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%6.2f%%", p);
  return buf;
}

int classify_images(Model& model, const CheckpointEvalInfo& info, const std::vector<std::string>& names,
                    const Cli& cli) {
  const long long topk = cli.get_int("topk");
  check(topk >= 1, "--topk: ", topk, " must be at least 1");
  const std::vector<Prediction> preds =
      predict_images(model, cli.get_all("image"), eval_transform(info.config, info.crop_pct), topk);
  if (cli.is_set("json")) {
    nlohmann::json images = nlohmann::json::array();
    for (const Prediction& p : preds) {
      nlohmann::json top = nlohmann::json::array();
      for (size_t j = 0; j < p.classes.size(); ++j)
        top.push_back({{"class", p.classes[j]},
                       {"name", names[size_t(p.classes[j])]},
                       {"probability", p.probabilities[j]}});
      images.push_back({{"path", p.path}, {"top", top}, {"logits", p.logits}});
    }
    std::cout << nlohmann::json{{"checkpoint", cli.get("checkpoint")}, {"classes", names}, {"images", images}}.dump()
              << "\n";
    return 0;
  }
  for (const Prediction& p : preds) {
    std::cout << p.path << "\n";
    for (size_t j = 0; j < p.classes.size(); ++j)
      std::cout << "  " << percent(100.0 * p.probabilities[j]) << "  " << p.classes[j] << " "
                << names[size_t(p.classes[j])] << "\n";
  }
  return 0;
}

int evaluate_split(Model& model, const CheckpointEvalInfo& info, const std::string& data,
                   const std::vector<std::string>& names, const Cli& cli) {
  const std::string split = cli.get("split");
  check(split == "test" || split == "train", "--split: '", split, "' is not one of: test, train");
  check(!data.empty(), cli.get("checkpoint"),
        ": the checkpoint does not name its training data (no \"data\" in its metadata); --data is needed, e.g. "
        "--data fashion_mnist");
  const DataSpec spec = parse_data_spec(data);
  EvalOptions opt;
  opt.batch_size = cli.get_int("batch");
  opt.num_workers = static_cast<int>(cli.get_int("workers"));
  opt.limit = cli.get_int("limit");
  check(opt.batch_size > 0, "--batch: ", opt.batch_size, " must be positive");
  check(opt.num_workers >= 0 && opt.num_workers <= 256, "--workers: ", opt.num_workers, " is not in 0..256");
  check(opt.limit >= 0, "--limit: ", opt.limit, " must be >= 0 (0 = all)");

  std::shared_ptr<const Dataset> raw = open_dataset(spec, split == "train");
  auto ds = std::make_shared<TransformedDataset>(raw, eval_transform(info.config, info.crop_pct));
  const EvalResult r = evaluate(model, ds, opt);
  if (cli.is_set("json")) {
    nlohmann::json j = to_json(r, names);
    j["checkpoint"] = cli.get("checkpoint");
    j["data"] = to_string(spec);
    j["split"] = split;
    std::cout << j.dump() << "\n";
  } else {
    std::cout << "checkpoint " << cli.get("checkpoint") << "\ndata " << to_string(spec) << " (" << split << " split, "
              << raw->size() << " images)\n\n"
              << format_report(r, names);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Cli cli("sima-eval", "Evaluates a checkpoint on a dataset split, or classifies images with it.");
  cli.flag("checkpoint", "PATH", "model.safetensors to evaluate", /*required=*/true);
  cli.flag("data", "SPEC",
           "dataset spec: fashion_mnist[:ROOT], mnist:ROOT, cifar10:ROOT, cifar100:ROOT, folder:ROOT "
           "(default: the checkpoint's training data)");
  cli.flag("split", "test|train", "which split to evaluate", false, "test");
  cli.flag("batch", "N", "images per forward pass", false, "256");
  cli.flag("workers", "N", "data loader threads", false, "2");
  cli.flag("limit", "N", "evaluate the first N images only; 0 = all", false, "0");
  cli.option("json", "print one JSON object instead of the report");
  cli.repeated("image", "PATH", "classify these images instead (repeatable; also takes several paths)");
  cli.flag("topk", "K", "classes to show per image", false, "5");
  if (!cli.parse(argc, argv)) return cli.exit_code();
  try {
    const std::string path = cli.get("checkpoint");
    const CheckpointEvalInfo info = read_checkpoint_eval_info(path);
    std::shared_ptr<Model> model = load_checkpoint(path);
    // The data: --data, else the checkpoint's training data spec.
    const std::string data = cli.get("data").empty() ? info.data : cli.get("data");
    // Class names: the checkpoint's, else the dataset's, numbers for the rest.
    std::vector<std::string> names = info.classes;
    if (names.empty() && !data.empty()) names = class_names(parse_data_spec(data), info.config.num_classes);
    for (size_t c = names.size(); c < size_t(info.config.num_classes); ++c) names.push_back(std::to_string(c));
    if (cli.is_set("image")) return classify_images(*model, info, names, cli);
    return evaluate_split(*model, info, data, names, cli);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sima-eval: error: %s\n", e.what());
    return 1;
  }
}
