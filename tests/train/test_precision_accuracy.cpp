// Reduced precision keeps a trained model's accuracy (docs/precision.md, "Accuracy"):
// a tiny SimA CvT trained one short epoch on a Fashion-MNIST subset, then its test top-1 on
// 2 000 images at fp32, int8 (every Linear; and again with SimA's attention core in int8 too)
// and bf16 (emulated on a CPU without AVX-512): each within 0.3 points of fp32. The int8 run of the quantized
// checkpoint (sima-convert --quantize int8's file) gives the same predictions as in memory.
#include <doctest/doctest.h>

#include <cmath>

#include "data/dataset.h"
#include "data/temp_dir.h"
#include "models/io/checkpoint.h"
#include "models/quantized.h"
#include "train/config/data_spec.h"
#include "train/eval/evaluate.h"
#include "train/objectives/trainer.h"
#include "train/config/transforms_factory.h"

using namespace sima;
using json = nlohmann::json;

namespace {

// tests/train/test_trainer.cpp's tiny SimA CvT, on 3 000 training images.
json tiny_cvt() {
  return json::parse(R"({
    "name": "tiny_precision",
    "model": {"name": "cvt_13_28_sima", "stage_dims": [32, 64, 128], "stage_depths": [1, 1, 1],
              "stage_heads": [1, 2, 4], "stage_drop_path": [0, 0, 0]},
    "data": {"dataset": "fashion_mnist", "batch_size": 32, "train_subset": 3000, "test_subset": 64,
             "num_workers": 2},
    "augment": {"crop": "none", "hflip": 0.0},
    "optimizer": {"type": "adamw", "lr": 2e-3, "weight_decay": 0.05},
    "schedule": {"type": "cosine", "warmup_epochs": 0.1, "min_lr": 1e-5},
    "train": {"epochs": 1, "seed": 3, "label_smoothing": 0.0, "log_every": 50}
  })");
}

EvalResult top1_at(Model& model, Precision p, std::shared_ptr<const Dataset> test, bool int8_attention = false) {
  set_inference_precision(model, p, int8_attention);
  EvalResult r = evaluate(model, test, {.batch_size = 250, .num_workers = 2, .limit = 2000});
  set_inference_precision(model, Precision::F32);
  return r;
}

}  // namespace

TEST_CASE("int8 and bf16 top-1 of a trained SimA CvT within 0.3 points of fp32 (Fashion-MNIST)") {
  sima::testing::TempDir tmp;
  train(experiment_from_json(tiny_cvt()), {.run_dir = tmp.str() + "/run", .quiet = true});
  const std::string ckpt = tmp.str() + "/run/model.safetensors";
  std::shared_ptr<Model> model = load_checkpoint(ckpt);
  auto test = std::make_shared<TransformedDataset>(open_dataset(parse_data_spec("fashion_mnist"), false),
                                                   eval_transform(model->config(), 1.0));
  const EvalResult r32 = top1_at(*model, Precision::F32, test), r8 = top1_at(*model, Precision::Int8, test),
                   r16 = top1_at(*model, Precision::BF16, test),
                   r8a = top1_at(*model, Precision::Int8, test, /*int8_attention=*/true);
  MESSAGE("top-1 on " << r32.count << " test images: fp32 " << r32.top1 << ", int8 " << r8.top1
                      << ", int8 with SimA's core in int8 " << r8a.top1 << ", bf16 " << r16.top1);
  REQUIRE(r32.top1 > 60.0);  // trained (random guessing: 10 %)
  CHECK(std::fabs(r8.top1 - r32.top1) <= 0.3);
  CHECK(std::fabs(r16.top1 - r32.top1) <= 0.3);
  CHECK(std::fabs(r8a.top1 - r32.top1) <= 0.3);

  const std::string q = tmp.file("int8.safetensors");
  save_quantized_checkpoint(q, *model);
  std::shared_ptr<Model> back = load_checkpoint(q);
  const EvalResult rq = top1_at(*back, Precision::Int8, test);
  CHECK(rq.top1 == r8.top1);
  CHECK(rq.confusion == r8.confusion);
}
