// Saliency heatmaps from the queries and keys of one attention layer (the SimA paper,
// Section 4.7 and Fig. 3/A2; docs/training.md §6): what `sima-heatmap` draws.
//
//   image file --eval_transform--> input (1, C, S, S) --model.forward--> the layer's core calls
//   Attention::qk_hook(q̂, k̂)       (B, h, N, d): ℓ1-normalised for SimA, ℓ2 for XCA, the plain q, k
//                                    that feed the scores for the other variants
//   per patch token n: ‖q̂_n‖₂ over all heads' channels -> N values -> the token grid (h × w)
//   -> bilinear onto the image's pixels (through the eval crop) -> min-max to [0, 1]
//   -> colour map -> alpha blend over the image; the same for k̂.
// For softmax attention `cls` is the class token's attention row (mean over heads), the map the
// paper compares SimA's with.
//
// Token layout per architecture (which of the N tokens are patches, on which grid):
//   DeiT   cls [+ dist] first, then Hp × Wp patches (q and k alike)
//   XCiT   the self-attention (XCA or its SimA twin) runs before the class token is added:
//          all N = Hp × Wp tokens are patches; the class-attention layers are not self-attention
//          layers and are not offered
//   CvT    each stage on its own grid; the last stage has the cls token in front; k and v of
//          softmax / sima come from a stride-s_kv conv: k has its own, coarser grid
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "data/colormap.h"
#include "data/image.h"
#include "models/model.h"

namespace sima {

// ---- tokens -------------------------------------------------------------------------

// `prefix` non-patch tokens (cls, dist) first, then a height × width grid, row-major.
struct TokenGrid {
  int64_t prefix = 0, height = 0, width = 0;
  int64_t tokens() const { return prefix + height * width; }
};
struct AttentionLayout {
  TokenGrid q, k;
};

// A layer index counted from the end when negative (-1 = last) resolved against `count`
// layers; anything outside [-count, count) is a sima::Error naming the valid range.
int64_t resolve_layer(int64_t layer, int64_t count);
// The token layout of attention_layers()[layer] (already resolved) for a model input of
// height × width pixels. A model type without a known layout is a sima::Error.
AttentionLayout attention_layout(Model& model, int64_t layer, int64_t height, int64_t width);

// One layer's token maps for one image, on their token grids (row-major, patches only).
struct TokenMaps {
  int64_t layer = 0, layer_count = 0;  // the resolved index, out of attention_layers().size()
  std::string attention, variant;      // the core's type name ("SimaAttention"), its variant
  AttentionLayout layout;
  std::vector<float> q, k;  // ‖q̂_n‖₂, ‖k̂_n‖₂ per patch token (q on layout.q, k on layout.k)
  std::vector<float> cls;   // class token's attention over the patch keys (layout.k); if asked
  std::vector<float> logits;  // the model's output for the image
  Tensor q_hat, k_hat;        // as the hook gave them, copied: (1, h, Nq, d), (1, h, Nk, d)
};

// Runs `model` (eval mode, no grad) on `input` (1, C, H, W), capturing q̂ and k̂ of attention
// layer `layer` (negative counts from the end) through its qk_hook (restored afterwards).
// with_cls: also the class token's attention row (softmax attention with a class token only;
// otherwise a sima::Error naming the variant). Errors name the layer and what is missing.
TokenMaps token_maps(Model& model, const Tensor& input, int64_t layer, bool with_cls = false);

// ---- pixels -------------------------------------------------------------------------

// Where the model's S × S input lies in the original image, as eval_transform
// (train/config/transforms_factory.h) puts it there: resize the shorter side to
// floor(S / crop_pct), centre crop.
// A pixel centre at original coordinate y maps to input row (y + 0.5)·scale_y − top.
// `pil`: the image takes eval_transform's Pil path (eval_uses_pil), where an S × S image is
// resized and cropped like any other; the Float path passes it through.
struct InputGeometry {
  int64_t image_height = 0, image_width = 0, size = 0;
  double scale_y = 1.0, scale_x = 1.0;  // resized / original
  int64_t top = 0, left = 0;            // the crop's corner in the resized image
};
InputGeometry eval_geometry(int64_t image_height, int64_t image_width, int64_t size, double crop_pct,
                            bool pil = false);

// A token map (grid h × w over the S × S input) on the original image's pixels: bilinear as
// F.interpolate(align_corners=False) with border clamp. Pixels whose centre falls outside the
// crop the model saw get NaN. With the identity geometry this is exactly a bilinear resize.
std::vector<float> upsample_to_image(const std::vector<float>& grid_map, int64_t h, int64_t w,
                                     const InputGeometry& g);

struct MinMax {
  float min = 0.f, max = 0.f;  // over the finite values, before normalising
};
// v <- (v − min) / (max − min) over the finite values (NaN stays NaN); a constant map becomes 0.
MinMax normalize_min_max(std::vector<float>& v);

// rgb (3, H, W) blended with the colour map of map01: (1 − α)·rgb + α·colour; NaN pixels keep
// the image.
Image overlay(const Image& rgb, const std::vector<float>& map01, Colormap cmap, float alpha);
// Images of the same height side by side, `gap` white columns between them.
Image side_by_side(const std::vector<Image>& images, int64_t gap = 2);
// Any 1–4 channel image as RGB (grey replicated, alpha dropped).
Image to_rgb(const Image& img);
// Per pixel grey level: the value of a grey image, 0.299 R + 0.587 G + 0.114 B of a colour one.
std::vector<float> grey_levels(const Image& img);

// How much of a map's mass lies on pixels whose grey level is above `threshold` (the
// object, for images with a dark background such as Fashion-MNIST): mass = Σ map over those
// pixels / Σ map over all (NaN pixels ignored); share = the fraction of pixels they are.
struct ForegroundMass {
  double mass = 0.0, share = 0.0;
};
ForegroundMass foreground_mass(const std::vector<float>& map, const std::vector<float>& grey, float threshold);

// ---- the whole job for one image file (sima-heatmap) ---------------------------------

struct HeatmapOptions {
  int64_t layer = -1;
  std::string which = "both";  // q | k | both | cls
  Colormap colormap = Colormap::Jet;
  float alpha = 0.5f;
  bool raw = false;             // also <name>_<map>_raw.png, 16-bit grey [0, 1]
  int64_t scale = 0;            // overlays and panel written this many times larger (nearest
                                // neighbour: each pixel a scale x scale block); 0 = auto_scale
  std::string out_dir = ".";
  double crop_pct = 1.0;        // the checkpoint's eval crop
  bool predict = true;          // report the predicted class (not for a DINO backbone's untrained head)
  bool foreground = false;      // report foreground_mass above foreground_threshold
  float foreground_threshold = 0.f;
};

// The default scale (HeatmapOptions::scale 0): small images are drawn about kHeatmapTargetHeight
// pixels tall, so a 28 x 28 Fashion-MNIST panel is 224 pixels tall (factor 8); an image
// kHeatmapTargetHeight / 2 pixels tall or more stays as it is. At most 32.
constexpr int64_t kHeatmapTargetHeight = 224;
int64_t auto_scale(int64_t image_height);

// The memory a heatmap keeps per pixel of its image at `scale` (the decoded image, the RGB and
// grey copies, a map, an overlay and a panel column per map, the enlarged copies written):
// read_image refuses, from the header, an image whose pixels times this exceed the memory
// limit (data/image_io.h image_pixel_limit), as the training and eval readers refuse theirs.
int64_t heatmap_bytes_per_pixel(int64_t scale);

// Reads `path`, makes the model's input with eval_transform(input, options.crop_pct) (`input`:
// the model config with the checkpoint's normalisation, CheckpointEvalInfo.config), runs the
// model, writes <out_dir>/<name>_{q,k,cls}.png overlays, the panel
// <name>_panel.png (image | maps) and, with raw, the 16-bit maps; every file through a
// temporary file and a rename. Returns the statistics sima-heatmap --json prints:
//   {"path", "name", "image": [H, W], "input": [S, S], "layer", "layer_count", "attention",
//    "variant", ["predicted"], "maps": {"q": {"grid": [h, w], "min", "max", "argmax": [r, c],
//    ["foreground_mass", "foreground_mass_raw"]}, ...}, ["foreground_share"], "files": [...]}
nlohmann::json make_heatmaps(Model& model, const ModelConfig& input, const std::string& path, const std::string& name,
                             const HeatmapOptions& options);

// The image files to process: files as given, folders expanded to their .png/.jpg/.jpeg/.bmp
// files (sorted, not recursive). A missing path or an empty folder is a sima::Error.
std::vector<std::string> list_images(const std::vector<std::string>& paths);
// Output names: each file's stem; two inputs with the same stem is a sima::Error naming both.
std::vector<std::string> output_names(const std::vector<std::string>& files);

}  // namespace sima
