// Pillow's Image.resize on 8-bit images, pixel for pixel, and the torchvision PIL-path ops
// around it that timm's eval transform uses (Resize(int), CenterCrop). With these an image
// file decoded to 8 bits reaches the model as timm would feed it (train/config/transforms_factory.h).
//
// Sources (the math, transcribed): Pillow src/libImaging/Resample.c (precompute_coeffs,
// normalize_coeffs_8bpc, ImagingResampleHorizontal/Vertical_8bpc, ImagingResampleInner),
// src/libImaging/Geometry.c (ImagingScaleAffine, the NEAREST path of Image.resize);
// torchvision 0.14 transforms/functional.py (_compute_resized_output_size, resize, center_crop).
#pragma once
#include <cstdint>

#include "data/image.h"
#include "data/pil_ops.h"

namespace sima::pil {

// Image.resize((width, height), resample) with the whole image as the box. L and RGB images
// (1 or 3 channels); the same size returns a copy.
//
// Bilinear / Bicubic (Resample.c, separable): along an axis of in → out pixels,
//   scale = in / out, fs = max(scale, 1) (a downscale widens the filter: antialiasing),
//   support = r·fs (r = 1 bilinear, 2 bicubic), for output o: centre = (o + ½)·scale,
//   taps i in [max(int(centre − support + ½), 0), min(int(centre + support + ½), in)),
//   weights w_i = K((i − centre + ½) / fs) / Σ_j K(...), K = triangle (bilinear) or Keys cubic
//   with a = −½ (bicubic), all in double; then fixed point k_i = int(w_i·2²² ± ½) (away from 0).
//   A pass: out = clip(((2²¹ + Σ_i in_i·k_i) >> 22), 0, 255) in 32-bit integers.
//   Horizontal pass first (only if the width changes), then vertical (only if the height
//   changes), each rounded and clipped to 8 bits.
// Nearest (Geometry.c, scale affine): source column of output x = int(s·½ + x·s) with s = in/out,
//   the position accumulated in double by adding s per pixel, as Pillow does.
Image8 resize(const Image8& img, int64_t height, int64_t width, Resample resample);

// torchvision Resize(size) with one int on a PIL image: the shorter side becomes `size`, the
// longer int(size · long / short) (Python float division); no-op when that is the image's size.
Image8 resize_shorter(const Image8& img, int64_t size, Resample resample);

// torchvision CenterCrop((height, width)): a crop larger than the image zero-pads it first
// ((t − s) // 2 before, the rest after); the crop starts at int(round((s − t) / 2.0)) (round
// half to even).
Image8 center_crop(const Image8& img, int64_t height, int64_t width);

// True when every value v of the float image is k / 255 for an integer k in 0..255
// (|255·v − k| <= 1e-3): it came from an 8-bit decode, and to_uint8 recovers the bytes exactly.
bool is_8bit(const Image& img);

}  // namespace sima::pil
