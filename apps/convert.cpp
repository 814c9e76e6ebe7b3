// sima-convert: checkpoints between upstream PyTorch and sima.cpp, both ways.
//
// Import (default): a torch.save checkpoint (.pth) of an upstream model -> our model.safetensors.
//   build/bin/sima-convert --in xcit_sima_tiny.pth --out model.safetensors
//                          [--from official|timm|cvt] [--model NAME | '{"num_heads": 4}' | config.json]
// Export (--to): one of our checkpoints (sima-train's best.safetensors, an imported file) -> a
// .pth the upstream model code loads with load_state_dict(strict=True).
//   build/bin/sima-convert --in runs/NAME/best.safetensors --out model.pth --to official|timm|cvt
//                          [--legacy-qkv]
//
// Quantized (--quantize int8, docs/precision.md): every Linear weight stored as int8 with its
// per-output-channel scales (models/quantized.h), from a .pth or from one of our checkpoints:
//   build/bin/sima-convert --in runs/NAME/best.safetensors --out model_int8.safetensors --quantize int8
//
// The layouts, name maps and config inference are models/io/upstream.h's (import) and
// models/io/upstream_export.h's (export, with what each layout can hold); the .pth reader (a
// restricted unpickler, nothing in the file is run) is models/io/pth.h's, the writer (no Python)
// models/io/pth_writer.h's. An imported file carries the model config and the input normalisation
// in its metadata like every checkpoint of ours (models/io/checkpoint.h), so sima-eval /
// sima-heatmap take it as it is.
#include <iostream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/omp_wait.h"
#include "data/imagenet_classes.h"
#include "models/io/checkpoint.h"
#include "models/quantized.h"
#include "models/io/safetensors.h"
#include "models/io/upstream.h"
#include "models/io/upstream_export.h"
#include "train/config/cli.h"
#include "sima_version.h"  // generated at build time: SIMA_VERSION_STRING

using namespace sima;

namespace {

int export_pth(const Cli& cli) {
  check(!cli.has("from") && !cli.has("model"), "--from and --model are for the import direction (without --to)");
  const ExportOptions opt{cli.get("to"), cli.is_set("legacy-qkv")};
  const std::shared_ptr<Model> model = load_checkpoint(cli.get("in"));
  save_upstream_checkpoint(cli.get("out"), *model, opt, cli.get("in"));
  const ModelConfig& c = model->config();
  std::cout << cli.get("in") << " -> " << cli.get("out") << " (" << opt.to << " layout" << (opt.legacy_qkv ? ", legacy qkv" : "")
            << "): " << c.arch << ", " << model->num_parameters() << " parameters, attention " << c.attention.variant
            << ", " << c.num_classes << " classes\n";
  return 0;
}

// --quantize int8 of one of our checkpoints: its metadata (classes, data, normalisation) kept.
int quantize_ours(const Cli& cli) {
  const std::shared_ptr<Model> model = load_checkpoint(cli.get("in"));
  std::map<std::string, std::string> meta = read_safetensors_metadata(cli.get("in"));
  for (const char* key : {"format", "config", "quantization"}) meta.erase(key);
  save_quantized_checkpoint(cli.get("out"), *model, meta);
  std::cout << cli.get("in") << " -> " << cli.get("out") << " (int8 Linear weights, per-channel scales): "
            << model->config().arch << ", " << model->num_parameters() << " parameters\n";
  return 0;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  sima::setup_app_threads();  // the thread governor (core/omp_wait.h)
  Cli cli("sima-convert", "Converts a torch.save checkpoint (official SimA, timm DeiT/XCiT, Microsoft CvT) to safetensors, "
                          "or with --to one of ours back to a .pth.");
  cli.version(SIMA_VERSION_STRING);
  cli.flag("in", "PATH", ".pth file written by torch.save (with --to: our model.safetensors)", /*required=*/true);
  cli.flag("out", "PATH", "model.safetensors to write (with --to: the .pth)", /*required=*/true);
  cli.flag("from", "official|timm|cvt", "upstream layout (default: detected from the tensor names)");
  cli.flag("model", "NAME|JSON|FILE", "registered model, or config keys overriding the inferred config");
  cli.flag("to", "official|timm|cvt", "export: write our checkpoint as this upstream layout's .pth");
  cli.option("legacy-qkv", "with --to timm, an XCiT's class attention as one qkv Linear (timm before the q/k/v split)");
  cli.flag("quantize", "int8",
           "write a quantized checkpoint: Linear weights int8 with per-output-channel scales (docs/precision.md); "
           "--in may also be one of our .safetensors");
  cli.flag("crop-pct", "X",
           "import: the eval crop written into the checkpoint, in (0, 1] (default: the upstream's own: timm DeiT "
           "0.9, timm XCiT 1.0, official SimA and CvT 0.875; 1.0 at 384 px for DeiT and CvT)");
  cli.option("allow-nonfinite", "convert a checkpoint holding NaN or inf (for debugging; refused by default)");
  if (!cli.parse(argc, argv)) return cli.exit_code();
  set_allow_nonfinite_weights(cli.is_set("allow-nonfinite"));
  try {
    check(!cli.has("crop-pct") || (!cli.has("to") && !ends_with(cli.get("in"), ".safetensors")),
          "--crop-pct is for importing a .pth (our checkpoints keep the crop they were trained with)");
    if (cli.has("quantize")) {
      check(cli.get("quantize") == "int8", "--quantize: '", cli.get("quantize"), "' is not supported (int8)");
      check(!cli.has("to"), "--quantize writes our safetensors; it cannot be combined with --to");
      if (ends_with(cli.get("in"), ".safetensors")) return quantize_ours(cli);
    }
    if (cli.has("to")) return export_pth(cli);
    check(!cli.is_set("legacy-qkv"), "--legacy-qkv is for the export direction (with --to timm)");
    const double crop = cli.has("crop-pct") ? cli.get_double("crop-pct") : 0.0;
    check(!cli.has("crop-pct") || (crop > 0.0 && crop <= 1.0), "--crop-pct: ", crop, " is not in (0, 1]");
    const UpstreamModel m = load_upstream_checkpoint(cli.get("in"), cli.get("from"), cli.get("model"));
    check_finite_weights(m.model->state_dict(), cli.get("in"), /*saving=*/false);
    if (!m.note.empty()) std::cerr << "sima-convert: note: " << m.note << "\n";
    // A 1000-class head is ImageNet-1k's: its class names go into "classes" (sima-eval prints them).
    std::map<std::string, std::string> meta = imagenet_classes_metadata(m.model->config().num_classes);
    meta["converted_from"] = m.layout;
    // The eval crop the upstream code uses (models/io/upstream.h upstream_crop_pct), or --crop-pct.
    const ModelConfig& mc = m.model->config();
    meta["normalization"] = nlohmann::json{{"mean", mc.mean}, {"std", mc.std}, {"img_size", mc.img_size},
                                           {"crop_pct", cli.has("crop-pct") ? crop : m.crop_pct}}
                                .dump();
    if (cli.has("quantize")) save_quantized_checkpoint(cli.get("out"), *m.model, meta);
    else save_checkpoint(cli.get("out"), *m.model, meta);
    const ModelConfig& c = m.model->config();
    std::cout << cli.get("in") << m.where << " (" << m.layout << " layout) -> " << cli.get("out") << ": " << c.arch
              << ", " << m.model->num_parameters() << " parameters, attention " << c.attention.variant << ", "
              << c.num_classes << " classes\n";
    return 0;
  } catch (const Error& e) {
    std::cerr << "sima-convert: error: " << e.what() << "\n";
    return 1;
  }
}
