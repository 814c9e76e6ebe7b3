// IdxDataset on arbitrary bytes: an images file and a labels file, raw or gzip.
//
//   input = [split: 2 bytes, big-endian] [images file bytes] [labels file bytes]
//   the images file is the first (split mod (size + 1)) bytes after the prefix.
// A dataset that loads is also read back: every get() and describe().
#include "core/error.h"
#include "core/rng.h"
#include "data/idx.h"
#include "fuzz_common.h"

using namespace sima;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const size_t rest = size - 2, split = ((size_t(data[0]) << 8) | data[1]) % (rest + 1);
  const std::string images = fuzz::write_scratch("images-idx3-ubyte", data + 2, split);
  const std::string labels = fuzz::write_scratch("labels-idx1-ubyte", data + 2 + split, rest - split);
  try {
    IdxDataset ds(images, labels, 10);
    Generator g(0);
    for (int64_t i = 0; i < ds.size(); ++i) (void)ds.get(i, g);
    (void)ds.describe();
  } catch (const Error&) {
  }
  return 0;
}
