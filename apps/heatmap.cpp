// sima-heatmap: Q̂ / K̂ norm saliency maps of one attention layer, as in the SimA paper (Fig. 3).
//
//   build/bin/sima-heatmap --checkpoint runs/NAME/best.safetensors --image a.png dir/ ...
//                          [--layer L] [--which q|k|both|cls] [--out DIR]
//                          [--colormap jet|viridis|inferno] [--alpha A] [--raw] [--json]
//                          [--foreground-above T] [--scale K]
//
// Per image: <out>/<name>_q.png, <name>_k.png (overlays at the image's size, times K with --scale;
// by default images under 112 pixels tall about 224 tall), <name>_panel.png
// (image | maps), with --raw <name>_q_raw.png ... (the [0, 1] map, 16-bit grey). --which cls:
// the class token's attention row of a softmax model instead. The model, its input
// normalisation and the eval crop come from the checkpoint (train/eval/evaluate.h,
// read_checkpoint_eval_info); the work is train/viz/attention_heatmap.h's.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_schema.h"
#include "core/omp_wait.h"
#include "models/io/checkpoint.h"
#include "models/quantized.h"
#include "train/config/cli.h"
#include "train/eval/evaluate.h"
#include "train/viz/attention_heatmap.h"
#include "sima_version.h"  // generated at build time: SIMA_VERSION_STRING

using namespace sima;

namespace {

// One line per image: "a.png: layer 3/4 sima (SimaAttention), q 4x4 [0.12, 0.87], k 2x2 [...] -> out/a_panel.png"
std::string summary(const nlohmann::json& j) {
  std::string s = j["path"].get<std::string>() + ": layer " + std::to_string(j["layer"].get<int64_t>()) + "/" +
                  std::to_string(j["layer_count"].get<int64_t>()) + " " + j["variant"].get<std::string>() + " (" +
                  j["attention"].get<std::string>() + ")";
  for (const char* m : {"q", "k", "cls"}) {  // in this order (JSON objects sort their keys)
    if (!j["maps"].contains(m)) continue;
    const nlohmann::json& v = j["maps"][m];
    char buf[128];
    std::snprintf(buf, sizeof buf, ", %s %lldx%lld [%.4g, %.4g]", m, (long long)v["grid"][0].get<int64_t>(),
                  (long long)v["grid"][1].get<int64_t>(), v["min"].get<double>(), v["max"].get<double>());
    s += buf;
    if (v.contains("foreground_mass")) {
      std::snprintf(buf, sizeof buf, " mass on object %.3f", v["foreground_mass"].get<double>());
      s += buf;
    }
  }
  if (j.contains("foreground_share")) {
    char buf[64];
    std::snprintf(buf, sizeof buf, ", object share %.3f", j["foreground_share"].get<double>());
    s += buf;
  }
  for (const auto& f : j["files"]) s += "\n  wrote " + f.get<std::string>();
  return s;
}

// The flags (--help prints them). The drawing defaults are HeatmapOptions' (train/viz/attention_heatmap.h).
void declare_flags(Cli& cli) {
  const HeatmapOptions def;
  cli.flag("checkpoint", "PATH", "model.safetensors to explain, or an upstream torch.save .pth", /*required=*/true);
  cli.flag("from", "official|timm|cvt", "a .pth checkpoint's layout (default: detected; see sima-convert)");
  cli.flag("model", "NAME|JSON|FILE", "a .pth checkpoint's config overrides (see sima-convert)");
  cli.repeated("image", "PATH", "images or folders of images (.png .jpg .jpeg .bmp); repeatable");
  cli.flag("layer", "L", "self-attention layer, 0-based; negative counts from the end", false,
           std::to_string(def.layer));
  cli.flag("which", "q|k|both|cls", "maps to draw; cls: the class token's attention row (softmax models)", false,
           def.which);
  cli.flag("out", "DIR", "output folder (created if missing)", false, def.out_dir);
  cli.flag("colormap", "jet|viridis|inferno", "colour map (matplotlib's colours)", false,
           colormap_name(def.colormap));
  cli.flag("alpha", "A", "weight of the colour map over the image, in [0, 1]", false,
           json_of(def.alpha).dump());
  cli.option("raw", "also write each [0, 1] map as a 16-bit grey PNG (<name>_<map>_raw.png)");
  cli.flag("scale", "K|auto",
           "write the overlays and the panel K times larger (nearest neighbour; 1..32); auto: images under 112 "
           "pixels tall are drawn about 224 pixels tall (a 28x28 image 8 times larger), others as they are",
           false, "auto");
  cli.flag("crop-pct", "X", "eval crop in (0, 1] (default: the checkpoint's; an upstream .pth: its upstream's)");
  cli.option("json", "print one JSON object with per-image statistics");
  cli.flag("foreground-above", "T",
           "also report the share of each map's mass on pixels whose grey level (0..1) is above T, "
           "and those pixels' share of the image (the object, on a dark background)");
  cli.flag("precision", "fp32|bf16|int8",
           "inference precision of every Linear; the attention core the maps are read from stays float32 "
           "(docs/precision.md)",
           false, "fp32");
  cli.option("allow-nonfinite", "load a checkpoint holding NaN or inf (for debugging; refused by default)");
}

// The drawing options from the flags, each checked (the layer is resolved once the model is loaded).
HeatmapOptions options_from(const Cli& cli) {
  HeatmapOptions opt;
  opt.layer = cli.get_int("layer");
  opt.which = cli.get("which");
  check(opt.which == "q" || opt.which == "k" || opt.which == "both" || opt.which == "cls", "--which: '", opt.which,
        "' is not one of: q, k, both, cls");
  try {
    opt.colormap = parse_colormap(cli.get("colormap"));
  } catch (const Error& e) {
    fail("--colormap: ", e.what());
  }
  const double alpha = cli.get_double("alpha");
  check(alpha >= 0.0 && alpha <= 1.0, "--alpha: ", alpha, " is not in [0, 1]");
  opt.alpha = static_cast<float>(alpha);
  opt.raw = cli.is_set("raw");
  opt.scale = cli.get("scale") == "auto" ? 0 : cli.get_int("scale");  // 0: auto_scale
  check(opt.scale >= 0 && opt.scale <= 32 && (opt.scale > 0 || cli.get("scale") == "auto"), "--scale: ",
        cli.get("scale"), " is not in 1..32 or auto");
  opt.out_dir = cli.get("out");
  check(!opt.out_dir.empty(), "--out: empty folder name");
  if (!cli.get("foreground-above").empty()) {
    opt.foreground = true;
    opt.foreground_threshold = static_cast<float>(cli.get_double("foreground-above"));
  }
  return opt;
}

}  // namespace

int main(int argc, char** argv) {
  sima::setup_app_threads();  // the thread governor (core/omp_wait.h)
  Cli cli("sima-heatmap", "Q̂/K̂ norm saliency maps of an attention layer (SimA paper, Fig. 3), per image.");
  cli.version(SIMA_VERSION_STRING);
  declare_flags(cli);
  if (!cli.parse(argc, argv)) return cli.exit_code();
  set_allow_nonfinite_weights(cli.is_set("allow-nonfinite"));
  try {
    check(cli.is_set("image"), "--image: no image given (files or folders of images)");
    HeatmapOptions opt = options_from(cli);

    const std::string path = cli.get("checkpoint");
    const Precision precision = parse_precision(cli.get("precision"), "--precision");
    // Our safetensors or an upstream .pth, through sima-eval's reader (train/eval/evaluate.h).
    const LoadedCheckpoint loaded = load_checkpoint_for_eval(path, cli.get("from"), cli.get("model"));
    const CheckpointEvalInfo& info = loaded.info;
    std::shared_ptr<Model> model = loaded.model;
    if (const std::string note = set_inference_precision(*model, precision); !note.empty())
      std::fprintf(stderr, "sima-heatmap: %s\n", note.c_str());
    if (!loaded.note.empty()) std::fprintf(stderr, "sima-heatmap: note: %s\n", loaded.note.c_str());
    opt.crop_pct = info.crop_pct;
    if (cli.has("crop-pct")) {
      opt.crop_pct = cli.get_double("crop-pct");
      check(opt.crop_pct > 0.0 && opt.crop_pct <= 1.0, "--crop-pct: ", opt.crop_pct, " is not in (0, 1]");
    }
    opt.predict = info.head_trained;
    try {
      resolve_layer(opt.layer, static_cast<int64_t>(model->attention_layers().size()));
    } catch (const Error& e) {
      fail("--layer: ", e.what());
    }
    const std::vector<std::string> files = list_images(cli.get_all("image"));
    const std::vector<std::string> names = output_names(files);

    nlohmann::json images = nlohmann::json::array();
    for (size_t i = 0; i < files.size(); ++i) {
      nlohmann::json j = make_heatmaps(*model, info.config, files[i], names[i], opt);
      if (cli.is_set("json"))
        images.push_back(j);
      else
        std::cout << summary(j) << std::endl;
    }
    if (cli.is_set("json"))
      std::cout << nlohmann::json{{"checkpoint", path}, {"colormap", colormap_name(opt.colormap)}, {"images", images}}
                       .dump()
                << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sima-heatmap: error: %s\n", e.what());
    return 1;
  }
}
