// Saliency heatmaps, the pixel side: where the model's input lies in the image, token maps
// upsampled onto the image, min-max, colours, overlays, the panel and the files (attention_heatmap.h).
#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>

#include "core/error.h"
#include "core/memory_limit.h"
#include "core/rng.h"
#include "data/functional.h"
#include "data/image_io.h"
#include "train/config/transforms_factory.h"
#include "train/viz/attention_heatmap.h"

namespace sima {

namespace fs = std::filesystem;

namespace {
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
}

// ---- geometry -----------------------------------------------------------------------

// The same numbers eval_transform computes (train/config/transforms_factory.cpp,
// data/functional_geometry.cpp): scale_size = floor(S / crop_pct); resize_shorter: the shorter
// side becomes scale_size, the longer int(scale_size · long / short); centre crop S at
// round-half-even((side − S) / 2).
// On the Float path an image that is already S × S is passed through (scale 1, no crop).
InputGeometry eval_geometry(int64_t H, int64_t W, int64_t S, double crop_pct, bool pil) {
  check(H > 0 && W > 0 && S > 0, "eval_geometry: image ", H, "x", W, " and input size ", S, " must be positive");
  check(std::isfinite(crop_pct) && crop_pct > 0.0 && crop_pct <= 1.0, "eval_geometry: crop_pct ", crop_pct,
        " is not in (0, 1]");
  InputGeometry g{H, W, S};
  if (!pil && H == S && W == S) return g;
  const auto scale_size = static_cast<int64_t>(std::floor(static_cast<double>(S) / crop_pct));
  const int64_t s = std::min(H, W), l = std::max(H, W);
  const auto new_long = static_cast<int64_t>(static_cast<double>(scale_size) * l / s);
  const int64_t Hr = H <= W ? scale_size : new_long, Wr = H <= W ? new_long : scale_size;
  g.scale_y = static_cast<double>(Hr) / static_cast<double>(H);
  g.scale_x = static_cast<double>(Wr) / static_cast<double>(W);
  g.top = static_cast<int64_t>(std::nearbyint((Hr - S) / 2.0));
  g.left = static_cast<int64_t>(std::nearbyint((Wr - S) / 2.0));
  return g;
}

// Pixel centre (y + 0.5) of the image -> input coordinate u = (y + 0.5)·scale − top (pixel
// edges at integers, inside iff 0 <= u < S) -> grid sample position u·h/S − 0.5, as
// F.interpolate(align_corners=False) places output pixel centres; two border-clamped taps.
std::vector<float> upsample_to_image(const std::vector<float>& grid, int64_t h, int64_t w, const InputGeometry& g) {
  check(h > 0 && w > 0 && static_cast<int64_t>(grid.size()) == h * w, "upsample_to_image: ", grid.size(),
        " values for a ", h, "x", w, " grid");
  struct Tap {
    int64_t i0, i1;
    float f;  // weight of i1
    bool inside;
  };
  auto taps = [&](int64_t n, double scale, int64_t offset, int64_t cells) {
    std::vector<Tap> t(static_cast<size_t>(n));
    for (int64_t o = 0; o < n; ++o) {
      const double u = (o + 0.5) * scale - static_cast<double>(offset);
      const double pos = u * static_cast<double>(cells) / static_cast<double>(g.size) - 0.5;
      const auto i = static_cast<int64_t>(std::floor(pos));
      t[size_t(o)] = {std::clamp<int64_t>(i, 0, cells - 1), std::clamp<int64_t>(i + 1, 0, cells - 1),
                      static_cast<float>(pos - static_cast<double>(i)), u >= 0.0 && u < static_cast<double>(g.size)};
    }
    return t;
  };
  const std::vector<Tap> ty = taps(g.image_height, g.scale_y, g.top, h), tx = taps(g.image_width, g.scale_x, g.left, w);
  std::vector<float> out(static_cast<size_t>(g.image_height * g.image_width));
  for (int64_t y = 0; y < g.image_height; ++y) {
    const Tap& a = ty[size_t(y)];
    for (int64_t x = 0; x < g.image_width; ++x) {
      const Tap& b = tx[size_t(x)];
      float& o = out[size_t(y * g.image_width + x)];
      if (!a.inside || !b.inside) {
        o = kNaN;
        continue;
      }
      const float top = (1.f - b.f) * grid[size_t(a.i0 * w + b.i0)] + b.f * grid[size_t(a.i0 * w + b.i1)];
      const float bottom = (1.f - b.f) * grid[size_t(a.i1 * w + b.i0)] + b.f * grid[size_t(a.i1 * w + b.i1)];
      o = (1.f - a.f) * top + a.f * bottom;
    }
  }
  return out;
}

MinMax normalize_min_max(std::vector<float>& v) {
  MinMax r{std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
  for (float x : v)
    if (std::isfinite(x)) r.min = std::min(r.min, x), r.max = std::max(r.max, x);
  if (r.min > r.max) return MinMax{};  // no finite value
  const float range = r.max - r.min;
  for (float& x : v)
    if (std::isfinite(x)) x = range > 0.f ? (x - r.min) / range : 0.f;
  return r;
}

// ---- colours and images -----------------------------------------------------------------

Image to_rgb(const Image& img) {
  check(img.channels >= 1 && img.channels <= 4 && !img.empty(), "to_rgb: an image of ", img.channels,
        " channels (1-4 expected)");
  Image out(3, img.height, img.width);
  const int64_t P = img.height * img.width;
  for (int64_t c = 0; c < 3; ++c) {
    const int64_t src = img.channels >= 3 ? c : 0;  // grey (+ alpha): replicate; RGB(A): as is
    std::copy_n(img.data.begin() + src * P, P, out.data.begin() + c * P);
  }
  return out;
}

std::vector<float> grey_levels(const Image& img) {
  const int64_t P = img.height * img.width;
  std::vector<float> g(static_cast<size_t>(P));
  for (int64_t i = 0; i < P; ++i)
    g[size_t(i)] = img.channels >= 3 ? 0.299f * img.data[size_t(i)] + 0.587f * img.data[size_t(P + i)] +
                                           0.114f * img.data[size_t(2 * P + i)]
                                     : img.data[size_t(i)];
  return g;
}

Image overlay(const Image& rgb, const std::vector<float>& map01, Colormap cmap, float alpha) {
  check(rgb.channels == 3 && static_cast<int64_t>(map01.size()) == rgb.height * rgb.width, "overlay: a ",
        map01.size(), "-pixel map over a ", rgb.channels, "x", rgb.height, "x", rgb.width, " image (3 channels)");
  check(alpha >= 0.f && alpha <= 1.f, "overlay: alpha ", alpha, " is not in [0, 1]");
  Image out = rgb;
  const int64_t P = rgb.height * rgb.width;
  for (int64_t i = 0; i < P; ++i) {
    const float t = map01[size_t(i)];
    if (!std::isfinite(t)) continue;  // outside what the model saw: the image alone
    const std::array<float, 3> c = colormap_rgb(cmap, t);
    for (int64_t ch = 0; ch < 3; ++ch) {
      float& o = out.data[size_t(ch * P + i)];
      o = (1.f - alpha) * o + alpha * c[size_t(ch)];
    }
  }
  return out;
}

Image side_by_side(const std::vector<Image>& images, int64_t gap) {
  check(!images.empty(), "side_by_side: no images");
  const int64_t H = images[0].height, C = images[0].channels;
  int64_t W = gap * static_cast<int64_t>(images.size() - 1);
  for (const Image& im : images) {
    check(im.height == H && im.channels == C, "side_by_side: images of different heights or channels");
    W += im.width;
  }
  Image out(C, H, W, 1.f);
  int64_t x0 = 0;
  for (const Image& im : images) {
    for (int64_t c = 0; c < C; ++c)
      for (int64_t y = 0; y < H; ++y)
        std::copy_n(im.data.begin() + (c * H + y) * im.width, im.width, out.data.begin() + (c * H + y) * W + x0);
    x0 += im.width + gap;
  }
  return out;
}

ForegroundMass foreground_mass(const std::vector<float>& map, const std::vector<float>& grey, float threshold) {
  check(map.size() == grey.size(), "foreground_mass: a map of ", map.size(), " pixels for ", grey.size());
  double all = 0.0, on = 0.0;
  int64_t pixels = 0, object = 0;
  for (size_t i = 0; i < map.size(); ++i) {
    if (!std::isfinite(map[i])) continue;
    const bool fg = grey[i] > threshold;
    all += map[i];
    on += fg ? map[i] : 0.0;
    ++pixels;
    object += fg;
  }
  return {all > 0.0 ? on / all : 0.0, pixels > 0 ? double(object) / double(pixels) : 0.0};
}

// ---- one image file -----------------------------------------------------------------

namespace {

// Nearest-neighbour resize by an integer factor: each pixel becomes a k x k block.
Image enlarged(const Image& img, int64_t k) {
  if (k == 1) return img;
  return transforms::functional::resize(img, img.height * k, img.width * k, transforms::Interpolation::Nearest);
}

// The image file as read (errors name the file), without its alpha plane.
Image read_without_alpha(const std::string& path, int64_t bytes_per_pixel) {
  Image img = read_image(path, 0, bytes_per_pixel);
  if (img.channels == 2 || img.channels == 4) {  // drop alpha (the planes come last in CHW)
    img.channels -= 1;
    img.data.resize(static_cast<size_t>(img.numel()));
  }
  return img;
}

// The files of one image, all made before the first is written: (file name, image) of the
// 8-bit overlays and panel, and of the 16-bit raw maps.
struct HeatmapImages {
  std::vector<std::pair<std::string, Image>> pngs, pngs16;
};

// Map `m` ("q", "k" or "cls") on its token grid, upsampled onto the image (`rgb`, `g`): its
// statistics (returned; with opt.foreground also j["foreground_share"]), its overlay appended
// to `panel` and `images`, and with opt.raw its 16-bit map.
nlohmann::json draw_map(const std::string& m, const std::vector<float>& grid, const TokenGrid& tg,
                        const InputGeometry& g, const Image& rgb, const std::vector<float>& grey,
                        const std::string& name, const HeatmapOptions& opt, nlohmann::json& j,
                        std::vector<Image>& panel, HeatmapImages& images) {
  const auto peak = std::max_element(grid.begin(), grid.end()) - grid.begin();
  nlohmann::json s = {{"grid", {tg.height, tg.width}},
                      {"min", *std::min_element(grid.begin(), grid.end())},
                      {"max", grid[size_t(peak)]},
                      {"argmax", {peak / tg.width, peak % tg.width}}};
  std::vector<float> pix = upsample_to_image(grid, tg.height, tg.width, g);
  if (opt.foreground) s["foreground_mass_raw"] = foreground_mass(pix, grey, opt.foreground_threshold).mass;
  normalize_min_max(pix);
  if (opt.foreground) {
    const ForegroundMass f = foreground_mass(pix, grey, opt.foreground_threshold);
    s["foreground_mass"] = f.mass;
    j["foreground_share"] = f.share;
  }
  Image ov = overlay(rgb, pix, opt.colormap, opt.alpha);
  panel.push_back(ov);
  images.pngs.emplace_back(name + "_" + m + ".png", std::move(ov));
  if (opt.raw) {
    Image r(1, rgb.height, rgb.width);
    for (size_t i = 0; i < pix.size(); ++i) r.data[i] = std::isfinite(pix[i]) ? pix[i] : 0.f;
    images.pngs16.emplace_back(name + "_" + m + "_raw.png", std::move(r));
  }
  return s;
}

// Writes every image into opt.out_dir (the 8-bit ones opt.scale times larger), each file
// atomically; returns their paths.
nlohmann::json write_heatmap_images(const HeatmapImages& images, const HeatmapOptions& opt, int64_t scale) {
  check(scale >= 1, "heatmap scale must be at least 1, got ", scale);
  std::error_code ec;
  fs::create_directories(opt.out_dir, ec);
  check(fs::is_directory(opt.out_dir), "cannot create the output folder ", opt.out_dir,
        ec ? " (" + ec.message() + ")" : std::string());
  nlohmann::json files = nlohmann::json::array();
  for (auto& [file, im] : images.pngs) {
    const std::string out = (fs::path(opt.out_dir) / file).string();
    write_png(out, enlarged(im, scale));
    files.push_back(out);
  }
  for (auto& [file, im] : images.pngs16) {
    const std::string out = (fs::path(opt.out_dir) / file).string();
    write_png16(out, im);
    files.push_back(out);
  }
  return files;
}

}  // namespace

nlohmann::json make_heatmaps(Model& model, const ModelConfig& input, const std::string& path, const std::string& name,
                             const HeatmapOptions& opt) {
  const std::string& which = opt.which;
  check(which == "q" || which == "k" || which == "both" || which == "cls", "heatmaps: which '", which,
        "' is not one of: q, k, both, cls");
  check(opt.alpha >= 0.f && opt.alpha <= 1.f, "heatmaps: alpha ", opt.alpha, " is not in [0, 1]");
  check(opt.scale >= 0 && opt.scale <= 32, "heatmaps: scale ", opt.scale, " is not in 0..32 (0 = auto)");
  // With the auto scale the header is checked at factor 1 (what an image kHeatmapTargetHeight / 2
  // pixels tall or more gets); a smaller image is checked again below at its own factor.
  const Image img = read_without_alpha(path, heatmap_bytes_per_pixel(opt.scale > 0 ? opt.scale : 1));
  const int64_t scale = opt.scale > 0 ? opt.scale : auto_scale(img.height);
  check(img.numel() / img.channels * heatmap_bytes_per_pixel(scale) <= memory_limit_bytes(), path, ": ", img.width, "x",
        img.height, " pixels drawn ", scale, " times larger need more than the memory limit ",
        memory_limit_description(), "; give a smaller --scale");
  Image x_img;
  try {
    Generator unused(0);  // the eval transform draws nothing
    x_img = eval_transform(input, opt.crop_pct)(img, unused);
  } catch (const Error& e) {
    fail(path, ": ", e.what());
  }
  const Tensor x = from_vector(x_img.data, {1, x_img.channels, x_img.height, x_img.width});
  TokenMaps tm;
  try {
    tm = token_maps(model, x, opt.layer, which == "cls");
  } catch (const Error& e) {
    fail(path, ": ", e.what());
  }
  const InputGeometry g =
      eval_geometry(img.height, img.width, input.img_size, opt.crop_pct, eval_uses_pil(img, EvalResize::Auto, input.img_size));

  nlohmann::json j = {{"path", path},
                      {"name", name},
                      {"image", {img.height, img.width}},
                      {"input", {x_img.height, x_img.width}},
                      {"layer", tm.layer},
                      {"layer_count", tm.layer_count},
                      {"attention", tm.attention},
                      {"variant", tm.variant}};
  if (opt.predict && !tm.logits.empty())
    j["predicted"] = std::max_element(tm.logits.begin(), tm.logits.end()) - tm.logits.begin();

  const Image rgb = to_rgb(img);
  const std::vector<float> grey = opt.foreground ? grey_levels(img) : std::vector<float>{};
  std::vector<std::string> maps;
  if (which == "q" || which == "both") maps.push_back("q");
  if (which == "k" || which == "both") maps.push_back("k");
  if (which == "cls") maps.push_back("cls");
  HeatmapImages images;
  std::vector<Image> panel{rgb};
  for (const std::string& m : maps) {
    const std::vector<float>& grid = m == "q" ? tm.q : m == "k" ? tm.k : tm.cls;
    const TokenGrid& tg = m == "q" ? tm.layout.q : tm.layout.k;
    j["maps"][m] = draw_map(m, grid, tg, g, rgb, grey, name, opt, j, panel, images);
  }
  images.pngs.emplace_back(name + "_panel.png", side_by_side(panel));
  j["scale"] = scale;
  j["files"] = write_heatmap_images(images, opt, scale);
  return j;
}

int64_t auto_scale(int64_t image_height) {
  return std::clamp<int64_t>(kHeatmapTargetHeight / std::max<int64_t>(1, image_height), 1, 32);
}

int64_t heatmap_bytes_per_pixel(int64_t scale) {
  // 160: the image and its copies (up to 16 + 12 + 4 bytes), per map 4 (map) + 12 (overlay) +
  // 12 (panel) + 4 (raw), the panel's own 12 per column, stb's buffer; 48 per enlarged pixel:
  // the enlarged panel (36: three columns of RGB floats) and its 8-bit PNG rows.
  return 160 + 48 * scale * scale;
}

// ---- which files ----------------------------------------------------------------------

std::vector<std::string> list_images(const std::vector<std::string>& paths) {
  check(!paths.empty(), "no image given");
  std::vector<std::string> out;
  for (const std::string& p : paths) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      std::vector<std::string> found;
      for (const auto& e : fs::directory_iterator(p, ec)) {
        std::string ext = e.path().extension().string();
        std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
        if (e.is_regular_file() && (ext == ".png" || ext == ".jpg" || ext == ".jpeg" || ext == ".bmp"))
          found.push_back(e.path().string());
      }
      check(!ec, p, ": cannot list the folder (", ec.message(), ")");
      check(!found.empty(), p, ": the folder holds no .png, .jpg, .jpeg or .bmp image");
      std::sort(found.begin(), found.end());
      out.insert(out.end(), found.begin(), found.end());
    } else {
      check(fs::exists(p, ec), p, ": no such file or folder");
      out.push_back(p);
    }
  }
  return out;
}

std::vector<std::string> output_names(const std::vector<std::string>& files) {
  std::vector<std::string> names;
  std::map<std::string, std::string> seen;  // stem -> first file
  for (const std::string& f : files) {
    const std::string stem = fs::path(f).stem().string();
    check(!stem.empty(), f, ": no file name to name the outputs after");
    auto [it, fresh] = seen.emplace(stem, f);
    check(fresh, "two images would write the same outputs ", stem, "_*.png: ", it->second, " and ", f,
          " (rename one or run them separately)");
    names.push_back(stem);
  }
  return names;
}

}  // namespace sima
