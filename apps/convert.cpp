// sima-convert: a PyTorch checkpoint (torch.save .pth) of an upstream model -> our model.safetensors.
//
//   build/bin/sima-convert --in xcit_sima_tiny.pth --out model.safetensors
//                          [--from official|timm|cvt] [--model NAME | '{"num_heads": 4}' | config.json]
//
// The layouts, name maps and config inference are models/upstream.h's; the .pth reader
// (a restricted unpickler, nothing in the file is run) is models/pth.h's. The output carries
// the model config and the input normalisation in its metadata like every checkpoint of ours
// (models/checkpoint.h), so sima-eval / sima-heatmap take it as it is.
#include <iostream>

#include "core/error.h"
#include "models/checkpoint.h"
#include "models/upstream.h"
#include "train/cli.h"

using namespace sima;

int main(int argc, char** argv) {
  Cli cli("sima-convert", "Converts a torch.save checkpoint (official SimA, timm DeiT/XCiT, Microsoft CvT) to safetensors.");
  cli.flag("in", "PATH", ".pth file written by torch.save", /*required=*/true);
  cli.flag("out", "PATH", "model.safetensors to write", /*required=*/true);
  cli.flag("from", "official|timm|cvt", "upstream layout (default: detected from the tensor names)");
  cli.flag("model", "NAME|JSON|FILE", "registered model, or config keys overriding the inferred config");
  cli.option("allow-nonfinite", "convert a checkpoint holding NaN or inf (for debugging; refused by default)");
  if (!cli.parse(argc, argv)) return cli.exit_code();
  set_allow_nonfinite_weights(cli.is_set("allow-nonfinite"));
  try {
    const UpstreamModel m = load_upstream_checkpoint(cli.get("in"), cli.get("from"), cli.get("model"));
    check_finite_weights(m.model->state_dict(), cli.get("in"), /*saving=*/false);
    save_checkpoint(cli.get("out"), *m.model, {{"converted_from", m.layout}});
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
