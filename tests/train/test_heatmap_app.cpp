// sima-heatmap (apps/heatmap.cpp) end to end: --help, a bad flag, a missing checkpoint; a folder
// of images with the JSON statistics, overlays and raw maps at each image's size, text output, a
// DINO backbone without a predicted class; each error as one line naming what is wrong. The maps'
// numbers (token_maps, upsampling, colour maps) are checked in test_heatmap.cpp.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>

#include "app_testing.h"
#include "data/image_io.h"
#include "data/temp_dir.h"
#include "models/io/checkpoint.h"
#include "models/registry.h"
#include "testing.h"

using namespace sima;
using namespace sima::testing;
using nlohmann::json;

namespace {

std::shared_ptr<Model> small_deit(const std::string& variant, int64_t depth, uint64_t seed) {
  auto m = create_model(json{{"name", "deit_tiny_patch4_28"}, {"depth", depth}, {"embed_dim", 16}, {"num_heads", 2},
                             {"attention", {{"type", variant}}}});
  randomize_parameters(*m, seed, 0.3f);
  return m;
}

Image grey_image(int64_t H, int64_t W, float fill = 0.f) { return Image(1, H, W, fill); }

int count_lines(const std::string& s) { return int(std::count(s.begin(), s.end(), '\n')); }

}  // namespace

TEST_CASE("sima-heatmap: --help, a bad flag, a missing checkpoint") {
  Run help = run_app("sima-heatmap --help");
  CHECK(help.status == 0);
  for (const char* flag : {"--checkpoint", "--image", "--layer", "--which", "--out", "--colormap", "--alpha", "--raw",
                           "--json", "--foreground-above"})
    CHECK_MESSAGE(help.out.find(flag) != std::string::npos, "help lacks " << flag << ":\n" << help.out);
  Run bogus = run_app("sima-heatmap --bogus");
  CHECK(bogus.status == 2);
  CHECK(bogus.err == "sima-heatmap: error: unknown flag --bogus (try --help)\n");
  Run missing = run_app("sima-heatmap --checkpoint /nonexistent/model.safetensors --image x.png");
  CHECK(missing.status == 1);
  CHECK(count_lines(missing.err) == 1);
  CHECK(missing.err.rfind("sima-heatmap: error: /nonexistent/model.safetensors: cannot open", 0) == 0);
}

TEST_CASE("sima-heatmap: a folder of images, JSON statistics, overlays and raw maps at each image's size") {
  TempDir dir;
  auto model = small_deit("sima", 2, 21);
  const std::string ckpt = dir.file("model.safetensors");
  save_checkpoint(ckpt, *model, {{"data", "fashion_mnist"}});
  const std::string images = dir.dir("images");
  Generator g(6);
  Image a(1, 28, 28), b(3, 40, 24);
  g.fill_uniform(a.data.data(), a.numel(), 0.f, 1.f);
  g.fill_uniform(b.data.data(), b.numel(), 0.f, 1.f);
  for (int64_t y = 0; y < 28; ++y)
    for (int64_t x = 0; x < 28; ++x)
      if (y < 6) a.at(0, y, x) = 0.f;  // a black band: background for --foreground-above 0
  write_png(images + "/a.png", a);
  write_png(images + "/b.png", b);
  write_bytes(images + "/notes.txt", {'h', 'i'});  // not an image: skipped in a folder
  const std::string out = dir.str() + "/maps";

  Run r = run_app("sima-heatmap --checkpoint " + ckpt + " --image " + images + " --out " + out +
                  " --json --raw --colormap viridis --alpha 0.6 --foreground-above 0 --scale 1");
  INFO("stderr: " << r.err);
  REQUIRE(r.status == 0);
  CHECK(r.err.empty());
  CHECK(count_lines(r.out) == 1);
  const json j = json::parse(r.out);
  CHECK(j["colormap"] == "viridis");
  REQUIRE(j["images"].size() == 2);
  const json& ja = j["images"][0];
  CHECK(ja["name"] == "a");
  CHECK(ja["image"] == json{28, 28});
  CHECK(ja["input"] == json{28, 28});
  CHECK(ja["layer"] == 1);
  CHECK(ja["layer_count"] == 2);
  CHECK(ja["variant"] == "sima");
  CHECK(ja["maps"]["q"]["grid"] == json{7, 7});
  CHECK(ja["maps"]["q"]["min"].get<double>() <= ja["maps"]["q"]["max"].get<double>());
  CHECK(ja["foreground_share"].get<double>() == doctest::Approx(22.0 / 28).epsilon(0.01));
  CHECK(ja["maps"]["k"]["foreground_mass"].get<double>() > 0.0);
  CHECK(ja["files"].size() == 5);  // q, k, panel, q raw, k raw
  CHECK(ja.contains("predicted"));
  CHECK(j["images"][1]["image"] == json{40, 24});

  for (const auto& [name, H, W] : {std::tuple{std::string("a"), 28, 28}, std::tuple{std::string("b"), 40, 24}}) {
    CAPTURE(name);
    for (const char* suffix : {"_q.png", "_k.png"}) {
      const Image im = read_image(out + "/" + name + suffix);
      CHECK((im.channels == 3 && im.height == H && im.width == W));
    }
    for (const char* suffix : {"_q_raw.png", "_k_raw.png"}) {
      const Image im = read_image(out + "/" + name + suffix);
      CHECK((im.channels == 1 && im.height == H && im.width == W));
      CHECK(*std::max_element(im.data.begin(), im.data.end()) == 1.f);
    }
    const Image panel = read_image(out + "/" + name + "_panel.png");
    CHECK((panel.height == H && panel.width == 3 * W + 4));
  }
  // b.png's top rows were cropped away by the eval transform: the overlay is the image there.
  const Image bq = read_image(out + "/b_q.png");
  for (int64_t x = 0; x < 24; ++x) CHECK(std::fabs(bq.at(1, 0, x) - b.at(1, 0, x)) < 1.f / 254);
  CHECK(read_image(out + "/b_q_raw.png").at(0, 0, 0) == 0.f);
  for (const auto& e : std::filesystem::directory_iterator(out))  // nothing half-written left
    CHECK(e.path().extension() == ".png");

  // By default a small image is drawn about 224 pixels tall: 28 -> x8, 40 -> x5 (the raw maps
  // stay at the image's size); --scale 1 above kept them as they are.
  const std::string auto_out = dir.str() + "/auto";
  Run au = run_app("sima-heatmap --checkpoint " + ckpt + " --image " + images + " --out " + auto_out + " --json");
  REQUIRE(au.status == 0);
  const json ja2 = json::parse(au.out);
  CHECK(ja2["images"][0]["scale"] == 8);
  CHECK(ja2["images"][1]["scale"] == 5);
  for (const auto& [name, H, W] : {std::tuple{std::string("a"), 224, 3 * 224 + 4 * 8},
                                   std::tuple{std::string("b"), 200, 5 * (3 * 24 + 4)}}) {
    CAPTURE(name);
    const Image panel = read_image(auto_out + "/" + name + "_panel.png");
    CHECK((panel.height == H && panel.width == W));
  }

  // Text output: one summary per image and the files it wrote.
  Run text = run_app("sima-heatmap --checkpoint " + ckpt + " --image " + images + "/a.png --out " + out +
                     " --which q --layer 0");
  REQUIRE(text.status == 0);
  CHECK(text.out.rfind(images + "/a.png: layer 0/2 sima (SimaAttention), q 7x7 [", 0) == 0);
  CHECK(text.out.find("wrote " + out + "/a_q.png") != std::string::npos);
  CHECK(text.out.find("a_k.png") == std::string::npos);

  // A DINO backbone's classifier head was never trained: no predicted class.
  const std::string dino = dir.file("dino.safetensors");
  save_checkpoint(dino, *model, {{"data", "fashion_mnist"}, {"dino", "teacher backbone"}});
  Run d = run_app("sima-heatmap --checkpoint " + dino + " --image " + images + "/a.png --out " + out + " --json");
  REQUIRE(d.status == 0);
  const json jd = json::parse(d.out);
  CHECK(!jd["images"][0].contains("predicted"));
  CHECK(jd["images"][0]["maps"].contains("q"));
}

TEST_CASE("sima-heatmap: each error is one line naming what is wrong") {
  TempDir dir;
  auto model = small_deit("sima", 2, 22);
  const std::string ckpt = dir.file("model.safetensors");
  save_checkpoint(ckpt, *model);
  const std::string img = dir.file("x.png");
  write_png(img, grey_image(28, 28, 0.5f));
  const std::string bad = dir.file("bad.png");
  write_bytes(bad, {'n', 'o', 't', ' ', 'a', ' ', 'p', 'n', 'g'});
  const std::string empty = dir.dir("empty");
  const std::string twin = dir.file("other/x.png");
  write_png(twin, grey_image(28, 28, 0.5f));
  const std::string base = "sima-heatmap --checkpoint " + ckpt + " --out " + dir.str() + "/o ";

  const std::pair<std::string, std::string> cases[] = {
      {"--image " + img + " --layer 2",
       "--layer: layer 2 does not exist: the model has 2 self-attention layers (valid: -2 .. 1, negative counts "
       "from the end)"},
      {"--image " + img + " --layer -3", "--layer: layer -3 does not exist"},
      {"--image " + img + " --layer two", "--layer: 'two' is not an integer"},
      {"--image " + bad, "read_image: " + bad + ": cannot decode"},
      {"--image " + dir.str() + "/none.png", dir.str() + "/none.png: no such file or folder"},
      {"--image " + empty, empty + ": the folder holds no .png, .jpg, .jpeg or .bmp image"},
      {"--image " + img + " " + twin, "two images would write the same outputs x_*.png: " + img + " and " + twin},
      {"--image " + img + " --which cls",
       img + ": the class token's attention row (which = cls) needs softmax attention: layer 1 is sima"},
      {"--image " + img + " --which all", "--which: 'all' is not one of: q, k, both, cls"},
      {"--image " + img + " --colormap hot", "--colormap: colormap 'hot' is not one of: jet, viridis, inferno"},
      {"--image " + img + " --alpha 1.5", "--alpha: 1.5 is not in [0, 1]"},
      {"--image " + img + " --foreground-above x", "--foreground-above: 'x' is not a number"},
      {"--image " + img + " --scale 0", "--scale: 0 is not in 1..32 or auto"},
      {"--image " + img + " --scale 33", "--scale: 33 is not in 1..32 or auto"},
      {"", "--image: no image given (files or folders of images)"},
  };
  for (const auto& [args, message] : cases) {
    CAPTURE(args);
    Run r = run_app(base + args);
    CHECK(r.status == 1);
    CHECK(r.out.empty());
    CHECK(count_lines(r.err) == 1);
    CHECK_MESSAGE(r.err.rfind("sima-heatmap: error: " + message, 0) == 0, r.err);
  }
  CHECK(!std::filesystem::exists(dir.str() + "/o/x_q.png"));  // no error wrote anything
}
