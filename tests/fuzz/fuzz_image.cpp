// decode_image (data/image_io.h) on arbitrary bytes: the in-memory path read_image and
// ImageFolder take (JPEG, PNG incl. 16-bit, BMP through stb_image, after our header checks).
//
//   input = [mode: 1 byte] [file bytes]
//   mode & 0x7f, mod 3 -> channels asked: 0 as stored, 1 grey, 3 RGB
//   mode & 0x80 clear  -> every whole PNG chunk's CRC is rewritten first
//
// decode_image refuses a PNG whose chunk CRC does not match, so nearly every mutation of a PNG
// would stop there and the decoder behind it would go unexplored; the CRCs are therefore
// recomputed for most inputs (as libpng's own fuzzer skips its CRC checks). Inputs with the bit
// set keep their bytes, so the CRC check itself is fuzzed as well.
#include <zlib.h>

#include <cstring>
#include <vector>

#include "core/error.h"
#include "data/image_io.h"

using namespace sima;

namespace {

uint32_t get_u32be(const uint8_t* p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }

// Rewrites the CRC of every chunk that lies wholly inside `f` (a PNG: 8-byte signature, then
// chunks of length, type, data, CRC over type + data); stops at the first chunk that does not.
void fix_png_crcs(std::vector<uint8_t>& f) {
  static const uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (f.size() < 8 || std::memcmp(f.data(), kSignature, 8) != 0) return;
  for (size_t at = 8; at + 12 <= f.size();) {
    const uint64_t len = get_u32be(f.data() + at);
    if (len > f.size() - at - 12) return;
    const uint32_t crc = uint32_t(crc32(crc32(0, nullptr, 0), f.data() + at + 4, uInt(len + 4)));
    uint8_t* out = f.data() + at + 8 + len;
    out[0] = uint8_t(crc >> 24), out[1] = uint8_t(crc >> 16), out[2] = uint8_t(crc >> 8), out[3] = uint8_t(crc);
    at += size_t(len) + 12;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static const int kChannels[3] = {0, 1, 3};
  const int channels = kChannels[(data[0] & 0x7f) % 3];
  std::vector<uint8_t> file(data + 1, data + size);
  if ((data[0] & 0x80) == 0) fix_png_crcs(file);
  try {
    Image im = decode_image(file.data(), file.size(), channels, "fuzz");
    // The decoded image must be what it says it is.
    if (im.channels < 1 || im.channels > 4 || int64_t(im.data.size()) != im.numel()) __builtin_trap();
    if (channels != 0 && im.channels != channels) __builtin_trap();
  } catch (const Error&) {
  }
  return 0;
}
