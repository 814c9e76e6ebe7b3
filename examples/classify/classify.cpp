// classify: the top-k classes of one image under a sima.cpp checkpoint, through the installed
// library (docs/library.md).
//
//   classify model.safetensors image.png [k]
//
// The checkpoint holds the model config, the input normalisation, the eval crop and the class
// names: the model is rebuilt from it, the image goes through its eval transform (resize, centre
// crop, normalise), and the model runs once without autograd.
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <string>

#include "core/autograd.h"                    // NoGradGuard
#include "core/ops.h"                         // softmax
#include "data/image_io.h"                    // read_image
#include "models/io/checkpoint.h"                // load_checkpoint
#include "train/config/transforms_factory.h"  // eval_transform
#include "train/eval/evaluate.h"              // read_checkpoint_eval_info

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s model.safetensors image.png [k]\n", argv[0]);
    return 2;
  }
  try {
    std::shared_ptr<sima::Model> model = sima::load_checkpoint(argv[1]);              // models/io/checkpoint.h
    const sima::CheckpointEvalInfo info = sima::read_checkpoint_eval_info(argv[1]);   // train/eval/evaluate.h
    model->eval();  // dropout and drop-path off

    // (C, H, W) in [0, 1] with the model's channels, then the checkpoint's eval transform.
    sima::Image img = sima::read_image(argv[2], int(info.config.in_chans));           // data/image_io.h
    sima::Generator unused(0);  // the eval transform draws no random numbers
    // train/config/transforms_factory.h
    sima::Image x = sima::eval_transform(info.config, info.crop_pct)(img, unused);
    sima::Tensor input = sima::from_vector(x.data, {1, x.channels, x.height, x.width});

    sima::NoGradGuard no_grad;                                                        // core/autograd.h
    sima::Tensor probs = sima::softmax(model->forward(input), 1);  // (1, num_classes)
    const int64_t n = probs.size(1);
    const int64_t k = std::min<int64_t>(argc > 3 ? std::stoll(argv[3]) : 5, n);
    std::vector<int64_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    const float* p = probs.data();
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
    for (int64_t i = 0; i < k; ++i) {
      const int64_t c = order[i];
      const std::string name = c < int64_t(info.classes.size()) ? info.classes[c] : "class " + std::to_string(c);
      std::printf("%2lld. %-24s %6.2f%%\n", static_cast<long long>(i + 1), name.c_str(), 100.0 * p[c]);
    }
  } catch (const std::exception& e) {  // sima::Error: what went wrong, naming the file or key
    std::fprintf(stderr, "classify: %s\n", e.what());
    return 1;
  }
  return 0;
}
