// finetune: a few fine-tuning steps of a sima.cpp checkpoint on one labelled image, through the
// installed library (docs/library.md): forward, loss, backward, optimizer step; then it saves
// the model, its metadata (normalisation, classes) kept, so classify reads the result.
//
//   finetune model.safetensors image.png LABEL STEPS out.safetensors
#include <cstdio>
#include <string>

#include "core/ops.h"                         // cross_entropy
#include "data/image_io.h"                    // read_image
#include "models/io/checkpoint.h"                // load_checkpoint, save_checkpoint
#include "models/io/safetensors.h"               // read_safetensors_metadata
#include "train/config/transforms_factory.h"  // eval_transform
#include "train/eval/evaluate.h"              // read_checkpoint_eval_info
#include "train/optim/optim.h"                // AdamW, param_groups_no_decay

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s model.safetensors image.png LABEL STEPS out.safetensors\n", argv[0]);
    return 2;
  }
  try {
    std::shared_ptr<sima::Model> model = sima::load_checkpoint(argv[1]);
    const sima::CheckpointEvalInfo info = sima::read_checkpoint_eval_info(argv[1]);
    sima::Generator unused(0);
    sima::Image x = sima::eval_transform(info.config, info.crop_pct)(
        sima::read_image(argv[2], int(info.config.in_chans)), unused);
    const sima::Tensor input = sima::from_vector(x.data, {1, x.channels, x.height, x.width});
    const std::vector<int64_t> label = {std::stoll(argv[3])};
    const int steps = std::stoi(argv[4]);
    const std::string out_path = argv[5];

    // timm's grouping: no weight decay on biases, norms, pos_embed, cls_token.
    // train/optim/optim.h
    auto groups = sima::param_groups_no_decay(model->named_parameters(), {"pos_embed", "cls_token"});
    sima::AdamW opt(groups, {.lr = 1e-3, .weight_decay = 0.05});
    model->train();
    for (int step = 0; step < steps; ++step) {
      sima::Tensor loss = sima::cross_entropy(model->forward(input), label);  // (1, classes) -> ()
      loss.backward();   // gradients of every parameter
      opt.step();        // AdamW, PyTorch's update rule
      opt.zero_grad();
      std::printf("step %d loss %.6f\n", step, loss.item());
    }
    model->eval();
    auto metadata = sima::read_safetensors_metadata(argv[1]);  // normalisation, classes, data spec
    metadata.erase("format");  // save_checkpoint writes these two itself
    metadata.erase("config");
    sima::save_checkpoint(out_path, *model, metadata);  // models/io/checkpoint.h
  } catch (const std::exception& e) {
    std::fprintf(stderr, "finetune: %s\n", e.what());
    return 1;
  }
  return 0;
}
