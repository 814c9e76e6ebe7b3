// sima-eval: evaluates a checkpoint on a dataset split, classifies single images, or
// evaluates frozen features with k-NN and a linear probe.
//
//   build/bin/sima-eval --checkpoint runs/NAME/model.safetensors [--data SPEC] [--split test|train]
//                       (or --checkpoint upstream.pth [--from official|timm|cvt] [--model ...], models/io/upstream.h)
//                       [--batch N] [--workers N] [--limit N] [--json]
//   build/bin/sima-eval --checkpoint CKPT --image a.png b.jpg [--topk K] [--json]
//   build/bin/sima-eval --checkpoint CKPT --knn [--k 10,20,100,200] [--temperature 0.07]
//                       [--linear-probe [--probe-epochs N] [--probe-lr LR] [--probe-batch N] [--probe-wd WD]]
//                       [--train-limit N] [--limit N] [--seed S] [--json]
//   build/bin/sima-eval --features pixels --data fashion_mnist --knn       (the raw-pixel baseline)
//
// --resize auto|pil|float: how the eval transform resizes (EvalResize in
// train/config/transforms_factory.h; auto: timm's PIL resize on 8-bit images). The model, its input
// normalisation, the eval crop, the training data spec and the class names all come from the
// checkpoint's metadata (train/eval/evaluate.h, read_checkpoint_eval_info).
// Output: train/eval/evaluate.h format_report (text) or one JSON object on stdout (--json);
// --knn / --linear-probe: train/eval/feature_eval_run.h.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_schema.h"
#include "core/omp_wait.h"
#include "core/rng.h"
#include "data/dataset.h"
#include "models/io/checkpoint.h"
#include "models/quantized.h"
#include "models/registry.h"
#include "train/config/cli.h"
#include "train/config/data_spec.h"
#include "train/config/transforms_factory.h"
#include "train/eval/evaluate.h"
#include "train/eval/feature_eval_run.h"
#include "sima_version.h"  // generated at build time: SIMA_VERSION_STRING

namespace {

using namespace sima;

std::string percent(double p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%6.2f%%", p);
  return buf;
}

// --crop-pct, else the checkpoint's eval crop (its metadata; an upstream .pth: its upstream's).
double crop_pct_of(const CheckpointEvalInfo& info, const Cli& cli) {
  if (!cli.has("crop-pct")) return info.crop_pct;
  const double c = cli.get_double("crop-pct");
  check(c > 0.0 && c <= 1.0, "--crop-pct: ", c, " is not in (0, 1]");
  return c;
}

// --precision: every Linear (and at int8 SimA's core) in reduced precision (models/quantized.h).
void apply_precision(Model& model, const Cli& cli) {
  const std::string note = set_inference_precision(model, parse_precision(cli.get("precision"), "--precision"),
                                                   cli.is_set("int8-attention"));
  if (!note.empty()) std::fprintf(stderr, "sima-eval: %s\n", note.c_str());
}

// The model's input transform: the checkpoint's config and crop (or --crop-pct), resized as
// --resize says.
Transform eval_input(const CheckpointEvalInfo& info, const Cli& cli) {
  return eval_transform(info.config, crop_pct_of(info, cli), parse_eval_resize(cli.get("resize")));
}

int classify_images(Model& model, const CheckpointEvalInfo& info, const std::vector<std::string>& names,
                    const Cli& cli) {
  const long long topk = cli.get_int("topk");
  check(topk >= 1 && topk <= info.config.num_classes, "--topk: ", topk, " is not in [1, ", info.config.num_classes,
        "] (the model has ", info.config.num_classes, " classes)");
  const std::vector<Prediction> preds =
      predict_images(model, cli.get_all("image"), eval_input(info, cli), topk);
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

// --per-image: image i's top-1 right or wrong as bit i, four images a hex digit, image 4j the most
// significant bit of digit j (2500 digits for 10 000 images; the last digit padded with 0 bits).
std::string correct_hex(const EvalResult& r) {
  std::string hex;
  for (size_t i = 0; i < r.predicted.size(); i += 4) {
    int digit = 0;
    for (size_t b = 0; b < 4; ++b)
      digit = digit * 2 + (i + b < r.predicted.size() && r.predicted[i + b] == r.labels[i + b] ? 1 : 0);
    hex.push_back("0123456789abcdef"[digit]);
  }
  return hex;
}

// A checkpoint trained here (it names its training data and classes) evaluated on data that
// carries other class names (an ImageFolder's folder names, CIFAR's meta file): every label would be compared with the
// wrong output. Refused, naming the first class that differs. An imported checkpoint has no
// training data: its names (ImageNet's) are display names, and a folder of synset ids in the
// same order is its data.
void check_same_classes(const CheckpointEvalInfo& info, const DataSpec& spec, const std::string& path) {
  if (info.classes.empty() || info.data.empty() || (spec.kind != "folder" && spec.kind != "cifar10" && spec.kind != "cifar100"))
    return;  // only these data carry their own class names (folder names, CIFAR's meta file)
  const std::vector<std::string> data = class_names(spec, info.config.num_classes);
  for (size_t c = 0; c < info.classes.size() && c < data.size(); ++c)
    check(info.classes[c] == data[c], to_string(spec), ": class ", c, " is '", data[c], "' but ", path,
          " was trained with class ", c, " = '", info.classes[c],
          "': the labels would not match the model's outputs; evaluate on data with the checkpoint's classes");
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
  check_same_classes(info, spec, cli.get("checkpoint"));
  auto ds = std::make_shared<TransformedDataset>(raw, eval_input(info, cli));
  const EvalResult r = evaluate(model, ds, opt);
  if (cli.is_set("json")) {
    nlohmann::json j = to_json(r, names);
    j["checkpoint"] = cli.get("checkpoint");
    j["data"] = to_string(spec);
    j["split"] = split;
    j["precision"] = cli.get("precision");
    if (cli.is_set("per-image")) j["correct_hex"] = correct_hex(r);
    std::cout << j.dump() << "\n";
  } else {
    std::cout << "checkpoint " << cli.get("checkpoint") << "\ndata " << to_string(spec) << " (" << split << " split, "
              << raw->size() << " images)\nprecision " << cli.get("precision") << "\n\n"
              << format_report(r, names);
  }
  return 0;
}

// --knn / --linear-probe: features of the train and test splits, then k-NN and/or a probe.
int evaluate_features(const Cli& cli) {
  const std::string path = cli.get("checkpoint");
  std::string data = cli.get("data");
  std::shared_ptr<Model> model;
  Transform transform;  // pixels without a checkpoint: standardised with the train split's mean/std
  if (!path.empty()) {
    const LoadedCheckpoint loaded = load_checkpoint_for_eval(path, cli.get("from"), cli.get("model"));
    const CheckpointEvalInfo& info = loaded.info;
    transform = eval_input(info, cli);
    if (data.empty()) data = info.data;
    if (cli.get("features") == "model") {
      model = loaded.model;
    } else if (cli.get("features") == "init") {
      // The random-initialisation baseline: the same architecture, weights as a run seeded
      // with --seed creates them before its first step (the trainers seed, then build the model).
      manual_seed(static_cast<uint64_t>(cli.get_int("seed")));
      model = create_model(info.config);
    }
  }
  check(!data.empty(), path,
        ": the checkpoint does not name its training data (no \"data\" in its metadata); --data is needed, e.g. "
        "--data fashion_mnist");
  if (model) apply_precision(*model, cli);
  FeatureEvalOptions o;
  o.extract.batch_size = cli.get_int("batch");
  o.extract.num_workers = static_cast<int>(cli.get_int("workers"));
  o.extract.blocks = cli.get_int("feature-blocks");
  o.train_limit = cli.get_int("train-limit");
  o.limit = cli.get_int("limit");
  o.validation = cli.get_int("validation");
  const long long vseed = cli.get_int("validation-seed");
  check(o.validation >= 0, "--validation: ", o.validation, " must be >= 0 (0 = evaluate the test split)");
  check(vseed >= 0, "--validation-seed: ", vseed, " must be >= 0");
  o.validation_seed = static_cast<uint64_t>(vseed);
  const long long seed = cli.get_int("seed");
  check(o.extract.batch_size > 0, "--batch: ", o.extract.batch_size, " must be positive");
  check(o.extract.blocks >= 1 && o.extract.blocks <= 64, "--feature-blocks: ", o.extract.blocks,
        " is not in 1..64 (the class tokens of the last N blocks)");
  check(o.extract.num_workers >= 0 && o.extract.num_workers <= 256, "--workers: ", o.extract.num_workers,
        " is not in 0..256");
  check(o.train_limit >= 0, "--train-limit: ", o.train_limit, " must be >= 0 (0 = all)");
  check(o.limit >= 0, "--limit: ", o.limit, " must be >= 0 (0 = all)");
  check(seed >= 0, "--seed: ", seed, " must be >= 0");
  o.seed = static_cast<uint64_t>(seed);
  o.knn = cli.is_set("knn");
  o.knn_options.ks = parse_int_list(cli.get("k"), "--k");
  for (int64_t k : o.knn_options.ks) check(k >= 1, "--k: ", k, " must be at least 1");
  o.knn_options.temperature = cli.get_double("temperature");
  check(o.knn_options.temperature > 0.0, "--temperature: ", o.knn_options.temperature, " must be positive");
  o.linear_probe = cli.is_set("linear-probe");
  LinearProbeOptions& p = o.probe_options;
  p.epochs = cli.get_int("probe-epochs");
  p.lr = cli.get_double("probe-lr");
  p.batch_size = cli.get_int("probe-batch");
  p.weight_decay = cli.get_double("probe-wd");
  p.seed = o.seed;
  check(p.epochs >= 1, "--probe-epochs: ", p.epochs, " must be at least 1");
  check(p.lr > 0.0, "--probe-lr: ", p.lr, " must be positive");
  check(p.batch_size >= 1, "--probe-batch: ", p.batch_size, " must be at least 1");
  check(p.weight_decay >= 0.0, "--probe-wd: ", p.weight_decay, " must be >= 0");

  FeatureEvalResult r = run_feature_eval(model.get(), transform, parse_data_spec(data), o);
  r.features = cli.get("features");
  if (cli.is_set("json")) {
    nlohmann::json j = to_json(r);
    j["checkpoint"] = path;
    std::cout << j.dump() << "\n";
  } else {
    if (!path.empty()) std::cout << "checkpoint " << path << "\n";
    std::cout << format_report(r);
  }
  return 0;
}

// A flag combination that cannot work, as one line ("" when the flags are fine).
std::string flag_conflict(const Cli& cli) {
  const bool knn = cli.is_set("knn"), probe = cli.is_set("linear-probe");
  if (cli.is_set("crop-pct") && !cli.is_set("checkpoint")) return "--crop-pct needs --checkpoint (the pixels have no crop)";
  if (const std::string r = cli.get("resize"); r != "auto" && r != "pil" && r != "float")
    return "--resize: '" + r + "' is not one of: auto, pil, float";
  if (cli.is_set("per-image") && !cli.is_set("json")) return "--per-image needs --json";
  if (cli.is_set("per-image") && (knn || probe || cli.is_set("image")))
    return "--per-image applies to a split's evaluation, not to --knn, --linear-probe or --image";
  for (const char* f : {"k", "temperature"})
    if (cli.is_set(f) && !knn) return std::string("--") + f + " needs --knn";
  for (const char* f : {"probe-epochs", "probe-lr", "probe-batch", "probe-wd"})
    if (cli.is_set(f) && !probe) return std::string("--") + f + " needs --linear-probe";
  if (!knn && !probe) {
    for (const char* f : {"features", "feature-blocks", "train-limit", "seed", "validation", "validation-seed"})
      if (cli.is_set(f)) return std::string("--") + f + " needs --knn or --linear-probe";
    if (!cli.is_set("checkpoint")) return "--checkpoint PATH is required (or --features pixels --data SPEC --knn)";
    return "";
  }
  if (cli.is_set("image")) return "--image cannot be combined with --knn or --linear-probe";
  if (cli.is_set("topk")) return "--topk (for --image) cannot be combined with --knn or --linear-probe";
  if (cli.is_set("split"))
    return "--split does not apply to --knn or --linear-probe (they fit on the train split and score the test split)";
  const std::string f = cli.get("features");
  if (f != "model" && f != "init" && f != "pixels") return "--features: '" + f + "' is not one of: model, init, pixels";
  if (f != "pixels" && !cli.is_set("checkpoint"))
    return "--features " + f + " needs --checkpoint PATH (the raw-pixel baseline is --features pixels --data SPEC)";
  if (f == "pixels" && !cli.is_set("checkpoint") && !cli.is_set("data")) return "--features pixels needs --data SPEC";
  if (f == "pixels" && cli.is_set("feature-blocks")) return "--feature-blocks does not apply to --features pixels";
  return "";
}

// A library default as a flag's default text: numbers as the shortest decimal that reads back
// (json_of, core/json_schema.h), so --help shows the value the library would use.
template <class T>
std::string default_text(const T& x) {
  return json_of(x).dump();
}

// sima-eval --knn scores one k unless told: the 20-NN the paper and DINO report (the library's
// KnnOptions lists DINO's 10, 20, 100, 200 for programs that want them all).
constexpr int64_t kEvalKnnK = 20;

// The flags (--help prints them). Every default is the library's (EvalOptions, FeatureEvalOptions,
// KnnOptions, LinearProbeOptions), read from the structs, so the two cannot drift apart.
void declare_flags(Cli& cli) {
  const EvalOptions eval;
  const FeatureEvalOptions feat;
  const LinearProbeOptions probe;
  cli.flag("checkpoint", "PATH",
           "model.safetensors to evaluate, or an upstream torch.save .pth (not needed for --features pixels with --data)");
  cli.flag("from", "official|timm|cvt", "a .pth checkpoint's layout (default: detected; see sima-convert)");
  cli.flag("model", "NAME|JSON|FILE", "a .pth checkpoint's config overrides (see sima-convert)");
  cli.flag("data", "SPEC",
           "dataset spec: fashion_mnist[:ROOT], mnist:ROOT, cifar10:ROOT, cifar100:ROOT, folder:ROOT "
           "(default: the checkpoint's training data)");
  cli.flag("split", "test|train", "which split to evaluate", false, "test");
  cli.flag("batch", "N", "images per forward pass", false, default_text(eval.batch_size));
  cli.flag("workers", "N", "data loader threads", false, default_text(eval.num_workers));
  cli.flag("limit", "N",
           "evaluate N test images only: the first N, or with --knn/--linear-probe a seeded random N; 0 = all",
           false, default_text(eval.limit));
  cli.flag("resize", "auto|pil|float",
           "eval resize: pil = timm's exactly (Pillow's antialiased bicubic on 8-bit pixels), float = bicubic on "
           "float pixels without antialiasing, auto = pil for 8-bit images "
           "(train/config/transforms_factory.h)",
           false, "auto");
  cli.flag("crop-pct", "X",
           "eval crop in (0, 1]: resize the shorter side to img_size / X, centre crop (default: the checkpoint's; "
           "an upstream .pth: its upstream's, models/io/upstream.h)");
  cli.option("json", "print one JSON object instead of the report");
  cli.option("per-image",
             "with --json on a split: add \"correct_hex\", image i's top-1 right (1) or wrong (0) as bit i, four "
             "images a hex digit, most significant bit first (for paired statistics between models)");
  cli.repeated("image", "PATH", "classify these images instead (repeatable; also takes several paths)");
  cli.flag("topk", "K", "classes to show per image", false, "5");
  cli.option("knn", "weighted k-NN on frozen features (DINO): train-split features vote for each test image");
  cli.flag("k", "LIST", "--knn: neighbours, one k or a comma-separated list (DINO's: 10,20,100,200)",
           false, default_text(kEvalKnnK));
  cli.flag("temperature", "T", "--knn: each neighbour votes with weight exp(cosine similarity / T)",
           false, default_text(feat.knn_options.temperature));
  cli.option("linear-probe", "train a Linear on frozen train-split features; report test accuracy per epoch");
  cli.flag("probe-epochs", "N", "--linear-probe: epochs over the train features", false, default_text(probe.epochs));
  cli.flag("probe-lr", "LR", "--linear-probe: SGD lr (momentum 0.9, cosine to 0 per step)",
           false, default_text(probe.lr));
  cli.flag("probe-batch", "N", "--linear-probe: batch size", false, default_text(probe.batch_size));
  cli.flag("probe-wd", "WD", "--linear-probe: weight decay", false, default_text(probe.weight_decay));
  cli.flag("features", "model|init|pixels",
           "--knn/--linear-probe: the backbone's class token after the final norm; the same for the checkpoint's "
           "architecture freshly initialised with --seed (the random-init baseline); or the pixels (standardised "
           "with the train split's mean/std; with --checkpoint, its input transform)",
           false, "model");
  cli.flag("feature-blocks", "N",
           "--knn/--linear-probe: the class tokens of the last N blocks, each after the final norm, concatenated "
           "(DINO's eval_linear n_last_blocks; ViT-S uses 4). DeiT: 1..depth; XCiT: 1..cls_attn_layers (its "
           "class-attention blocks); CvT: 1",
           false, default_text(feat.extract.blocks));
  cli.flag("train-limit", "N", "--knn/--linear-probe: a seeded random N train images; 0 = all",
           false, default_text(feat.train_limit));
  cli.flag("seed", "S", "--knn/--linear-probe: seed of the random subsets and of the probe",
           false, default_text(feat.seed));
  cli.flag("validation", "N",
           "--knn/--linear-probe: hold out N training images (the split sima-train's data.validation makes with the "
           "same seed) and evaluate on them, with the other training images as the bank / probe set; the test split "
           "is not read (0 = evaluate the test split)",
           false, default_text(feat.validation));
  cli.flag("validation-seed", "S", "--validation: the split's seed (sima-train's data.validation_seed)",
           false, default_text(feat.validation_seed));
  cli.flag("precision", "fp32|bf16|int8",
           "inference precision of every Linear (int8: also SimA's attention core); bf16 is emulated without "
           "AVX-512 (docs/precision.md)",
           false, "fp32");
  cli.option("int8-attention", "with --precision int8: SimA's attention core in int8 too (slower on AVX2)");
  cli.option("allow-nonfinite", "load a checkpoint holding NaN or inf (for debugging; refused by default)");
}

}  // namespace

int main(int argc, char** argv) {
  sima::setup_app_threads();  // the thread governor (core/omp_wait.h)
  Cli cli("sima-eval",
          "Evaluates a checkpoint on a dataset split, classifies images with it, or evaluates its frozen features "
          "(--knn, --linear-probe).");
  cli.version(SIMA_VERSION_STRING);
  declare_flags(cli);
  if (!cli.parse(argc, argv)) return cli.exit_code();
  set_allow_nonfinite_weights(cli.is_set("allow-nonfinite"));
  if (const std::string why = flag_conflict(cli); !why.empty()) {
    std::fprintf(stderr, "sima-eval: error: %s (try --help)\n", why.c_str());
    return 2;
  }
  try {
    // bad values named before any loading
    const Precision precision = parse_precision(cli.get("precision"), "--precision");
    check(!cli.is_set("int8-attention") || precision == Precision::Int8, "--int8-attention needs --precision int8");
    if (cli.is_set("knn") || cli.is_set("linear-probe")) return evaluate_features(cli);
    const std::string path = cli.get("checkpoint");
    const LoadedCheckpoint loaded = load_checkpoint_for_eval(path, cli.get("from"), cli.get("model"));
    if (!loaded.note.empty()) std::fprintf(stderr, "sima-eval: note: %s\n", loaded.note.c_str());
    const CheckpointEvalInfo& info = loaded.info;
    std::shared_ptr<Model> model = loaded.model;
    check(info.head_trained, path,
          " is a DINO backbone: its classifier head was never trained, so its predictions mean nothing; evaluate "
          "its features with --knn or --linear-probe, or fine-tune it first");
    apply_precision(*model, cli);
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
