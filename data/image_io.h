// Image files: decode JPEG / PNG / BMP into an Image (float CHW in [0, 1]), write PNG
// (8- and 16-bit), JPEG and BMP.
//
// Decoding is stb_image (this library's copy: data/image_io.cpp defines
// STB_IMAGE_IMPLEMENTATION and STB_IMAGE_WRITE_IMPLEMENTATION; nothing else may). Other
// formats stb knows (GIF, TGA, PSD, ...) are compiled out and report "unknown image type".
//
// `channels` selects the output channels, as PIL's Image.convert does:
//   0 = as stored: 1 grey, 2 grey + alpha, 3 RGB, 4 RGBA
//   1 = grey: from RGB by stb's integer luma  y = (77 r + 150 g + 29 b) >> 8  (alpha dropped)
//   3 = RGB:  grey is replicated into r = g = b, alpha is dropped (not composited)
// Values are sample / 255, or sample / 65535 for a 16-bit PNG (read at full precision).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "data/image.h"

namespace sima {

// Refuse images with more pixels than this before allocating: a few header bytes can claim
// any size (a 64 Mpixel RGB image is already 768 MB of floats).
constexpr int64_t kMaxImagePixels = int64_t(1) << 26;
// The memory one decoded pixel may cost: stb's buffer (up to 4 samples of 16 bits), the float
// Image (up to 4 · 4 bytes) and the copies a transform makes of it, generously.
constexpr int64_t kImageBytesPerPixel = 64;
// The largest pixel count decode_image accepts, checked on the header before decoding:
// min(kMaxImagePixels, memory_limit_bytes() / kImageBytesPerPixel) (SIMA_MEMORY_LIMIT,
// core/memory_limit.h). A PNG must also hold enough compressed data for the pixels its
// header claims (deflate inflates at most 1032:1), and a JPEG W·H / 512 bytes.
// A reader that keeps more per pixel than kImageBytesPerPixel (sima-heatmap: a map, an overlay
// and a panel column of every pixel) passes its own figure, and the limit falls with it.
int64_t image_pixel_limit(int64_t bytes_per_pixel = kImageBytesPerPixel);

// Decodes an image held in memory; `name` is used in error messages. Every decode of the
// library, the apps and examples/ goes through this one function, so the limit holds on each.
Image decode_image(const uint8_t* bytes, size_t size, int channels = 0, const std::string& name = "<memory>",
                   int64_t bytes_per_pixel = kImageBytesPerPixel);
// Reads and decodes the file at `path`. Errors name the path and stb's reason, e.g.
//   "read_image: /data/x.png: cannot decode (bad png sig)".
Image read_image(const std::string& path, int channels = 0, int64_t bytes_per_pixel = kImageBytesPerPixel);

// Writers take an Image with 1–4 channels (grey, grey + alpha, RGB, RGBA); values are
// clamped to [0, 1] and rounded to the nearest level. Each writes a temporary file and
// renames it into place.
void write_png(const std::string& path, const Image& image);                   // 8 bits / sample
void write_png16(const std::string& path, const Image& image);                 // 16 bits / sample
void write_jpeg(const std::string& path, const Image& image, int quality = 95);  // 3 components (YCbCr), alpha dropped
void write_bmp(const std::string& path, const Image& image);  // grey -> 24-bit RGB; RGBA -> 32-bit

}  // namespace sima
