// A converted upstream model with an ImageNet-1k head (1000 classes; tests/models/gen_pth.py's
// "imagenet" case, fixture models.gen_pth) carries the ImageNet class names: sima-convert writes
// them into the checkpoint's "classes" (sima-eval's .pth loader names them too), and
// sima-eval --image prints the top-5 by name.
// SIMA_PTH_DIR names the fixture's folder.
#include "app_testing.h"
#include "testing.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data/image_io.h"
#include "data/imagenet_classes.h"
#include "train/eval/evaluate.h"

using namespace sima;
using namespace sima::testing;
using json = nlohmann::json;

namespace {

json imagenet_case() {
  const char* dir = std::getenv("SIMA_PTH_DIR");
  REQUIRE_MESSAGE(dir != nullptr,
                  "SIMA_PTH_DIR is not set (run through ctest: the fixture models.gen_pth makes the files)");
  std::ifstream in(std::string(dir) + "/cases.json");
  REQUIRE(bool(in));
  const json cases = json::parse(in);
  REQUIRE(cases["imagenet"].size() == 1);
  return cases["imagenet"][0];
}

// A 45 × 60 RGB "photo": smooth colour fields with an edge, written as JPEG.
std::string write_photo(const TempDir& dir) {
  Image img(3, 45, 60);
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t y = 0; y < 45; ++y)
      for (int64_t x = 0; x < 60; ++x)
        img.at(c, y, x) = 0.5f + 0.4f * std::sin(0.1f * float(x * (c + 1)) + 0.07f * float(y)) * (x > 20 ? 1.f : -0.5f);
  const std::string path = dir.file("photo.jpg");
  write_jpeg(path, img);
  return path;
}

}  // namespace

TEST_CASE("sima-convert names a 1000-class model's classes; sima-eval --image prints the top-5 ImageNet names") {
  const json c = imagenet_case();
  REQUIRE(c["num_classes"] == 1000);
  TempDir dir;
  const std::string out = dir.file("imagenet.safetensors");
  const Run conv = run_app("sima-convert --in " + c["file"].get<std::string>() + " --out " + out);
  INFO(conv.err);
  REQUIRE(conv.status == 0);
  CHECK(conv.out.find("1000 classes") != std::string::npos);

  // The metadata: "classes" is the JSON list of the 1000 names (imagenet_class_names, which
  // tests/parity/test_pil_resize.cpp checks against torchvision's list).
  const LoadedCheckpoint loaded = load_checkpoint_for_eval(out, "", "");
  REQUIRE(loaded.info.classes.size() == 1000);
  CHECK(loaded.info.classes == imagenet_class_names());
  CHECK(loaded.info.classes[0] == "tench");
  CHECK(loaded.info.classes[999] == "toilet tissue");

  // sima-eval --image: the top 5 of the model's logits on the eval transform of the photo, by name.
  const std::string photo = write_photo(dir);
  const std::vector<Prediction> direct = predict_images(*loaded.model, {photo}, 5, loaded.info.crop_pct);
  REQUIRE(direct.size() == 1);
  REQUIRE(direct[0].classes.size() == 5);
  const Run js = run_app("sima-eval --checkpoint " + out + " --image " + photo + " --json");
  INFO(js.err);
  REQUIRE(js.status == 0);
  const json im = json::parse(js.out)["images"][0];
  REQUIRE(im["top"].size() == 5);  // --topk defaults to 5
  REQUIRE(im["logits"].size() == 1000);
  for (size_t k = 0; k < 5; ++k) {
    const auto cls = size_t(direct[0].classes[k]);
    CHECK(im["top"][k]["class"] == cls);
    CHECK(im["top"][k]["name"] == imagenet_class_names()[cls]);
  }
  const Run text = run_app("sima-eval --checkpoint " + out + " --image " + photo);
  REQUIRE(text.status == 0);
  for (size_t k = 0; k < 5; ++k) {
    const auto cls = size_t(direct[0].classes[k]);
    CHECK(text.out.find(std::to_string(cls) + " " + imagenet_class_names()[cls] + "\n") != std::string::npos);
  }

  // sima-eval's loader takes the .pth itself: the same names.
  CHECK(load_checkpoint_for_eval(c["file"], "", "").info.classes == imagenet_class_names());
  // Another class count gets no names from us: a 10-class conversion has no "classes".
  CHECK(imagenet_classes_metadata(10).empty());
  CHECK(imagenet_classes_metadata(1000).count("classes") == 1);
}
