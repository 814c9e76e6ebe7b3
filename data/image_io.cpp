// Image decoding through stb_image, PNG encoding through zlib, JPEG / BMP through
// stb_image_write. This file owns both stb implementations.
#include "data/image_io.h"

#include <zlib.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/error.h"
#include "core/memory_limit.h"
#include "core/file_io.h"

// stb_image, restricted to the formats we promise; its failure reason is thread-local
// (STBI_THREAD_LOCAL), so loader threads may decode concurrently.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wall"
#pragma GCC diagnostic ignored "-Wextra"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#define STB_IMAGE_IMPLEMENTATION
#define STBI_ONLY_JPEG
#define STBI_ONLY_PNG
#define STBI_ONLY_BMP
#define STBI_NO_STDIO  // we read files ourselves, to name the path and check the size
// stb's JPEG decoder state comes from malloc uninitialised, and a scan that uses a Huffman
// table no DHT defined decodes through garbage (a symbol index of 649 into a 257-entry array:
// fuzz finding, tests/fuzz/regressions/image). Zeroed, an undefined table decodes as empty
// codes, which stb reports as a corrupt JPEG. (Large blocks come from mmap, already zero.)
#define STBI_MALLOC(size) std::calloc(1, size)
#define STBI_REALLOC(p, size) std::realloc(p, size)
#define STBI_FREE(p) std::free(p)
#include <stb/stb_image.h>
#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STBI_WRITE_NO_STDIO
#include <stb/stb_image_write.h>
#pragma GCC diagnostic pop

namespace sima {

// ---- decoding ------------------------------------------------------------------------

namespace {

uint32_t le32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

// stb_image decodes a truncated BMP without complaint (missing pixels read as 0), so a few
// header bytes could make it decode a 30-Mpixel image of zeros: an uncompressed BMP must hold
// its pixel array, offset + rows · stride, stride = 4·ceil(bits·width / 32). Uncompressed as
// stb reads it: the OS/2 header (12 bytes, 16-bit sizes), or a 40+ byte header whose
// compression, read as a signed int, is not 1, 2 (RLE) or >= 4 (all refused by stb): 0, 3
// and every negative value (fuzz finding, tests/fuzz/regressions/image: 0x92244912 passed
// this check and stb decoded it as BI_RGB).
void check_bmp_size(const uint8_t* b, size_t size, const std::string& name) {
  if (size < 26 || b[0] != 'B' || b[1] != 'M') return;
  const uint32_t header = le32(b + 14);
  int64_t width = 0, height = 0, bits = 0;
  if (header == 12) {
    width = b[18] | (b[19] << 8), height = b[20] | (b[21] << 8), bits = b[24] | (b[25] << 8);
  } else {
    if (header < 40 || size < 54) return;  // stb refuses other header sizes; reads 0 past the end
    const int32_t compression = int32_t(le32(b + 30));
    if (compression == 1 || compression == 2 || compression >= 4) return;  // stb refuses these
    width = int32_t(le32(b + 18)), height = int32_t(le32(b + 22)), bits = b[28] | (b[29] << 8);
  }
  if (width <= 0 || width > (int64_t(1) << 24) || height == 0 || height == INT32_MIN) return;  // stb rejects these
  const int64_t stride = (bits * width + 31) / 32 * 4;  // < 2^16 · 2^24
  int64_t need = 0;
  const bool overflow = __builtin_mul_overflow(stride, height < 0 ? -height : height, &need) ||
                        __builtin_add_overflow(need, int64_t(le32(b + 10)), &need);
  check(!overflow && int64_t(size) >= need, "read_image: ", name, ": truncated BMP (pixel data needs ", need,
        " bytes, the file has ", size, ")");
}

// Debian's stb_image (git 2022-09-08) builds the Huffman table of a JPEG DHT segment without
// checking that its 16 code counts sum to at most 256: a 500-byte file overflows its
// 257-entry size table and 256-entry value table (fuzz finding, tests/fuzz/regressions/image;
// upstream stb later added the same check). Every DHT segment is checked here, before stb
// sees the file: the header segments and those between the scans of a progressive JPEG.
// The walk follows stb's: segments are 0xFF, marker, 16-bit length; fill bytes 0xFF and bytes
// that are not a marker are skipped; after a scan header, entropy-coded data runs to the next
// 0xFF that is not followed by 0x00 (a stuffed byte) or a restart marker. A DHT is read as
// stb reads it: tables until its length is used up, each 1 + 16 + sum(counts) bytes.
// Index just past the SOI marker of a JPEG (stb takes any number of 0xFF before it), or 0.
size_t jpeg_start(const uint8_t* b, size_t size) {
  size_t i = 0;
  while (i < size && b[i] == 0xFF) ++i;
  return i == 0 || i >= size || b[i] != 0xD8 ? 0 : i + 1;
}

void check_jpeg_huffman_tables(const uint8_t* b, size_t size, const std::string& name) {
  size_t i = jpeg_start(b, size);
  if (i == 0) return;  // not a JPEG
  auto byte = [&](size_t k) -> int { return k < size ? b[k] : 0; };  // stb reads 0 past the end
  while (i + 1 < size) {
    const int m = b[i + 1];
    if (b[i] != 0xFF || m == 0xFF || m == 0x00 || (m >= 0xD0 && m <= 0xD7) || m == 0x01) {
      i += b[i] != 0xFF || m == 0xFF ? 1 : 2;  // data, fill byte, stuffed zero, RSTn, TEM
      continue;
    }
    if (m == 0xD9) return;  // EOI
    const size_t len = size_t(byte(i + 2) << 8 | byte(i + 3));
    if (m == 0xC4) {
      int64_t left = int64_t(len) - 2;
      for (size_t at = i + 4; left > 0;) {
        int n = 0;
        for (int k = 1; k <= 16; ++k) n += byte(at + k);
        check(n <= 256, "read_image: ", name, ": corrupt JPEG: a Huffman table (DHT at byte ", i, ") declares ", n,
              " codes, at most 256");
        at += size_t(17 + n);
        left -= 17 + n;
        if (at >= size) return;
      }
    }
    i += 2 + len;
  }
}

// A few hundred bytes of PNG whose IHDR claims 8000 x 8000 pixels made stb allocate and
// inflate the whole image before finding the data short (10 GB, two minutes with the float
// copy). Deflate (RFC 1951) codes at most 258 bytes per length/distance pair, and each pair
// takes at least 2 bits, so a stream of T bytes inflates to at most 1032 · T bytes: the
// IDAT chunks must hold at least W · H · bits_per_pixel / 8 / 1032 bytes (the filter bytes
// and Adam7's padding only add to the pixel bytes). Colour types (PNG spec 11.2.2):
// 0 grey, 2 RGB, 3 palette, 4 grey + alpha, 6 RGBA.
// Called after check_png_chunks (every chunk lies inside the file).
void check_png_compression(const uint8_t* b, size_t size, const std::string& name) {
  if (size < 8 + 8 + 13 || b[1] != 'P' || std::string(reinterpret_cast<const char*>(b + 12), 4) != "IHDR") return;
  uint64_t idat_bytes = 0;
  for (size_t at = 8; at + 8 <= size;) {
    const uint64_t len = uint64_t(b[at]) << 24 | uint64_t(b[at + 1]) << 16 | uint64_t(b[at + 2]) << 8 | b[at + 3];
    const std::string type(reinterpret_cast<const char*>(b + at + 4), 4);
    if (type == "IEND") break;
    if (type == "IDAT") idat_bytes += len;
    at += size_t(len) + 12;
  }
  const double w = double(uint32_t(b[16]) << 24 | uint32_t(b[17]) << 16 | uint32_t(b[18]) << 8 | b[19]);
  const double h = double(uint32_t(b[20]) << 24 | uint32_t(b[21]) << 16 | uint32_t(b[22]) << 8 | b[23]);
  static const int kSamples[7] = {1, 0, 3, 1, 2, 0, 4};  // by colour type; 0: invalid (stb refuses)
  const int depth = b[24], colour = b[25];
  const int samples = colour <= 6 ? kSamples[colour] : 0;
  const double pixel_bytes = w * h * double(depth * samples) / 8.0;
  check(pixel_bytes <= 1032.0 * double(idat_bytes) + 1032.0, "read_image: ", name, ": truncated or corrupt PNG (",
        uint64_t(w), "x", uint64_t(h), " pixels of ", depth * samples, " bits need at least ",
        uint64_t(pixel_bytes / 1032.0), " bytes of compressed data, the IDAT chunks hold ", idat_bytes, ")");
}

// "0x1234abcd".
std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

// stb_image reallocates its buffer for a PNG IDAT chunk to the length the chunk claims before
// reading it: a 57-byte file claiming a 1.4 GB chunk made it allocate 1.4 GB (fuzz finding,
// tests/fuzz/regressions/image). Every chunk up to IEND must lie inside the file.
// A zero-length IDAT before any image data is legal PNG, but stb then copies 0 bytes into its
// still-null buffer, memcpy(NULL, src, 0), undefined behaviour UBSan reports (fuzz finding,
// tests/fuzz/regressions/image/fuzzer_found_png_empty_first_idat). Returns the byte offsets of
// such chunks, which decode_image drops before stb sees the file.
std::vector<size_t> check_png_chunks(const uint8_t* b, size_t size, const std::string& name) {
  static const uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  std::vector<size_t> empty_leading_idat;
  if (size < 8 || !std::equal(kSignature, kSignature + 8, b)) return empty_leading_idat;
  bool seen_data = false;
  for (size_t at = 8; at + 8 <= size;) {
    const uint64_t len = uint64_t(b[at]) << 24 | uint64_t(b[at + 1]) << 16 | uint64_t(b[at + 2]) << 8 | b[at + 3];
    const std::string type(reinterpret_cast<const char*>(b + at + 4), 4);
    check(len + 12 <= size - at, "read_image: ", name, ": truncated PNG (chunk at byte ", at, " claims ", len,
          " bytes of data, the file has ", size - at, " bytes from there)");
    // stb_image does not check chunk CRCs (PNG spec 5.3: over the type and the data), so a
    // flipped bit in the pixel data decoded as a good image: every chunk's CRC is checked here.
    const uint8_t* c = b + at + 8 + len;
    const uint32_t stored = uint32_t(c[0]) << 24 | uint32_t(c[1]) << 16 | uint32_t(c[2]) << 8 | c[3];
    const uint32_t computed = uint32_t(crc32(crc32(0, nullptr, 0), b + at + 4, uInt(len + 4)));
    check(stored == computed, "read_image: ", name, ": corrupt PNG (chunk ", type, " at byte ", at,
          " fails its CRC check: stored ", hex32(stored), ", computed ", hex32(computed), ")");
    if (type == "IEND") break;
    if (type == "IDAT" && len == 0 && !seen_data) empty_leading_idat.push_back(at);
    if (type == "IDAT" && len > 0) seen_data = true;
    at += size_t(len) + 12;  // length, type, data, CRC
  }
  return empty_leading_idat;
}

// The file without the 12-byte chunks starting at `drop` (sorted offsets).
std::vector<uint8_t> without_chunks(const uint8_t* b, size_t size, const std::vector<size_t>& drop) {
  std::vector<uint8_t> out;
  out.reserve(size);
  size_t from = 0;
  for (size_t at : drop) {
    out.insert(out.end(), b + from, b + at);
    from = at + 12;
  }
  out.insert(out.end(), b + from, b + size);
  return out;
}

}  // namespace

int64_t image_pixel_limit(int64_t bytes_per_pixel) {
  return std::min(kMaxImagePixels, memory_limit_bytes() / std::max<int64_t>(1, bytes_per_pixel));
}

Image decode_image(const uint8_t* bytes, size_t size, int channels, const std::string& name,
                   int64_t bytes_per_pixel) {
  check(channels == 0 || channels == 1 || channels == 3, "read_image: ", name, ": channels must be 0 (as stored), ",
        "1 (grey) or 3 (RGB), got ", channels);
  check(size > 0, "read_image: ", name, ": empty file");
  check(size <= size_t(INT_MAX), "read_image: ", name, ": file too large (", size, " bytes)");
  const int len = static_cast<int>(size);
  check_bmp_size(bytes, size, name);
  check_jpeg_huffman_tables(bytes, size, name);  // before stbi_info: it reads the DHTs before SOF
  if (const std::vector<size_t> drop = check_png_chunks(bytes, size, name); !drop.empty()) {
    const std::vector<uint8_t> cleaned = without_chunks(bytes, size, drop);
    return decode_image(cleaned.data(), cleaned.size(), channels, name, bytes_per_pixel);
  }

  // Header first: reject bad files and huge dimensions before stb allocates the pixels.
  int w = 0, h = 0, stored = 0;
  if (!stbi_info_from_memory(bytes, len, &w, &h, &stored))
    fail("read_image: ", name, ": cannot decode (", stbi_failure_reason(), ")");
  const int64_t limit = image_pixel_limit(bytes_per_pixel);
  check(w > 0 && h > 0 && int64_t(w) * h <= limit, "read_image: ", name, ": image size ", w, "x", h,
        " exceeds the limit of ", limit, " pixels (", int64_t(w) * h, " pixels; the limit is the smaller of ", kMaxImagePixels,
        " and the memory limit ", memory_limit_description(), " / ", bytes_per_pixel, " bytes per pixel)");

  check_png_compression(bytes, size, name);

  // stb decodes a JPEG whose entropy-coded data ends early as if zeros followed, so 672 bytes
  // claiming 1280 x 32809 pixels decoded (slowly) into 500 MB of floats (fuzz finding,
  // tests/fuzz/regressions/image). Every 8 x 8 block of the full-resolution component takes at
  // least one bit (its DC difference, baseline or progressive; stb has no arithmetic coding),
  // so a whole file holds at least W·H / 512 bytes.
  if (jpeg_start(bytes, size) != 0)
    check(int64_t(w) * h <= 512 * int64_t(size), "read_image: ", name, ": truncated or corrupt JPEG (", w, "x", h,
          " pixels need at least ", (int64_t(w) * h + 511) / 512, " bytes of coded data, the file has ", size, ")");

  const int want = channels == 0 ? stored : channels;
  const bool sixteen = stbi_is_16_bit_from_memory(bytes, len);
  int x = 0, y = 0, comp = 0;
  void* pixels = sixteen ? static_cast<void*>(stbi_load_16_from_memory(bytes, len, &x, &y, &comp, want))
                         : static_cast<void*>(stbi_load_from_memory(bytes, len, &x, &y, &comp, want));
  if (!pixels) fail("read_image: ", name, ": cannot decode (", stbi_failure_reason(), ")");

  // stb gives interleaved HWC samples; Image is planar CHW:  out[c][y][x] = in[(y·W + x)·C + c] / max.
  Image img(want, y, x);
  const int64_t hw = int64_t(x) * y;
  if (sixteen) {
    const auto* in = static_cast<const uint16_t*>(pixels);
    for (int64_t c = 0; c < want; ++c)
      for (int64_t i = 0; i < hw; ++i) img.data[c * hw + i] = float(in[i * want + c]) / 65535.f;
  } else {
    const auto* in = static_cast<const uint8_t*>(pixels);
    for (int64_t c = 0; c < want; ++c)
      for (int64_t i = 0; i < hw; ++i) img.data[c * hw + i] = float(in[i * want + c]) / 255.f;
  }
  stbi_image_free(pixels);
  return img;
}

Image read_image(const std::string& path, int channels, int64_t bytes_per_pixel) {
  check(channels == 0 || channels == 1 || channels == 3, "read_image: ", path, ": channels must be 0 (as stored), ",
        "1 (grey) or 3 (RGB), got ", channels);
  std::vector<uint8_t> bytes;
  try {
    bytes = read_file(path, "image");
  } catch (const Error& e) {
    fail("read_image: ", e.what());
  }
  return decode_image(bytes.data(), bytes.size(), channels, path, bytes_per_pixel);
}

// ---- encoding ------------------------------------------------------------------------

namespace {

void check_writable(const char* fn, const std::string& path, const Image& image) {
  check(image.channels >= 1 && image.channels <= 4, fn, ": ", path, ": need 1-4 channels, got ", image.channels);
  check(image.height > 0 && image.width > 0, fn, ": ", path, ": empty image (", image.height, "x", image.width, ")");
  check(image.height <= 65535 && image.width <= 65535, fn, ": ", path, ": image too large to write (",
        image.height, "x", image.width, ")");
  check(int64_t(image.data.size()) == image.numel(), fn, ": ", path, ": data holds ", image.data.size(),
        " values, shape needs ", image.numel());
}

// Quantise [0, 1] to 0..max, round half up; NaN becomes 0.
uint32_t quantize(float v, uint32_t max) {
  if (!(v > 0.f)) return 0;
  if (v >= 1.f) return max;
  return static_cast<uint32_t>(v * float(max) + 0.5f);
}

// CHW floats -> HWC bytes, the layout stb_image_write wants.
std::vector<uint8_t> to_hwc_u8(const Image& im) {
  const int64_t hw = im.height * im.width, C = im.channels;
  std::vector<uint8_t> out(static_cast<size_t>(hw * C));
  for (int64_t c = 0; c < C; ++c)
    for (int64_t i = 0; i < hw; ++i) out[i * C + c] = static_cast<uint8_t>(quantize(im.data[c * hw + i], 255));
  return out;
}

void put_u32be(std::vector<uint8_t>& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(v >> s));
}

// A PNG chunk: length (4 bytes, big-endian), type, data, CRC-32 of type + data.
void put_chunk(std::vector<uint8_t>& out, const char type[4], const std::vector<uint8_t>& data) {
  put_u32be(out, static_cast<uint32_t>(data.size()));
  const size_t start = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data.begin(), data.end());
  uLong crc = crc32(0L, Z_NULL, 0);
  crc = crc32(crc, out.data() + start, static_cast<uInt>(out.size() - start));
  put_u32be(out, static_cast<uint32_t>(crc));
}

// PNG (ISO/IEC 15948) with bit depth 8 or 16: signature, IHDR, one IDAT holding the zlib
// stream of the scanlines (each prefixed by filter type 0 = None; 16-bit samples
// big-endian), IEND. Colour types: 0 grey, 4 grey + alpha, 2 RGB, 6 RGBA.
std::vector<uint8_t> encode_png(const std::string& path, const Image& im, int bits) {
  const int64_t H = im.height, W = im.width, C = im.channels, hw = H * W;
  const int bytes_per_sample = bits / 8;
  const uint32_t max = bits == 16 ? 65535 : 255;
  const size_t row_bytes = 1 + size_t(W * C * bytes_per_sample);
  std::vector<uint8_t> raw(row_bytes * size_t(H));
  for (int64_t y = 0; y < H; ++y) {
    uint8_t* row = raw.data() + size_t(y) * row_bytes;
    row[0] = 0;  // filter: None
    uint8_t* p = row + 1;
    for (int64_t x = 0; x < W; ++x)
      for (int64_t c = 0; c < C; ++c) {
        uint32_t v = quantize(im.data[c * hw + y * W + x], max);
        if (bits == 16) *p++ = static_cast<uint8_t>(v >> 8);
        *p++ = static_cast<uint8_t>(v);
      }
  }
  uLongf zlen = compressBound(static_cast<uLong>(raw.size()));
  std::vector<uint8_t> idat(zlen);
  int rc = compress2(idat.data(), &zlen, raw.data(), static_cast<uLong>(raw.size()), Z_DEFAULT_COMPRESSION);
  check(rc == Z_OK, "write_png: ", path, ": zlib compress failed (", zError(rc), ")");
  idat.resize(zlen);

  static const uint8_t kColourType[5] = {0, 0, 4, 2, 6};  // by channel count
  std::vector<uint8_t> ihdr;
  put_u32be(ihdr, static_cast<uint32_t>(W));
  put_u32be(ihdr, static_cast<uint32_t>(H));
  ihdr.push_back(static_cast<uint8_t>(bits));
  ihdr.push_back(kColourType[C]);
  ihdr.push_back(0);  // compression: deflate
  ihdr.push_back(0);  // filter method 0
  ihdr.push_back(0);  // no interlace

  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  put_chunk(png, "IHDR", ihdr);
  put_chunk(png, "IDAT", idat);
  put_chunk(png, "IEND", {});
  return png;
}

// stb_image_write's callback: append to a byte vector.
void append_bytes(void* context, void* data, int size) {
  auto* out = static_cast<std::vector<uint8_t>*>(context);
  const auto* p = static_cast<const uint8_t*>(data);
  out->insert(out->end(), p, p + size);
}

}  // namespace

void write_png(const std::string& path, const Image& image) {
  check_writable("write_png", path, image);
  std::vector<uint8_t> png = encode_png(path, image, 8);
  write_file_atomic(path, png.data(), png.size());
}

void write_png16(const std::string& path, const Image& image) {
  check_writable("write_png16", path, image);
  std::vector<uint8_t> png = encode_png(path, image, 16);
  write_file_atomic(path, png.data(), png.size());
}

void write_jpeg(const std::string& path, const Image& image, int quality) {
  check_writable("write_jpeg", path, image);
  check(quality >= 1 && quality <= 100, "write_jpeg: ", path, ": quality must be in 1..100, got ", quality);
  std::vector<uint8_t> px = to_hwc_u8(image), out;
  int ok = stbi_write_jpg_to_func(append_bytes, &out, int(image.width), int(image.height), int(image.channels),
                                  px.data(), quality);
  check(ok != 0, "write_jpeg: ", path, ": encoding failed");
  write_file_atomic(path, out.data(), out.size());
}

void write_bmp(const std::string& path, const Image& image) {
  check_writable("write_bmp", path, image);
  std::vector<uint8_t> px = to_hwc_u8(image), out;
  int ok = stbi_write_bmp_to_func(append_bytes, &out, int(image.width), int(image.height), int(image.channels),
                                  px.data());
  check(ok != 0, "write_bmp: ", path, ": encoding failed");
  write_file_atomic(path, out.data(), out.size());
}

}  // namespace sima
