// decode_image (data/image_io.h) on arbitrary bytes: the in-memory path read_image and
// ImageFolder take (JPEG, PNG incl. 16-bit, BMP through stb_image, after our header checks).
//
//   input = [channels selector: 1 byte, mod 3 -> 0 as stored, 1 grey, 3 RGB] [file bytes]
#include "core/error.h"
#include "data/image_io.h"

using namespace sima;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static const int kChannels[3] = {0, 1, 3};
  const int channels = kChannels[data[0] % 3];
  try {
    Image im = decode_image(data + 1, size - 1, channels, "fuzz");
    // The decoded image must be what it says it is.
    if (im.channels < 1 || im.channels > 4 || int64_t(im.data.size()) != im.numel()) __builtin_trap();
    if (channels != 0 && im.channels != channels) __builtin_trap();
  } catch (const Error&) {
  }
  return 0;
}
