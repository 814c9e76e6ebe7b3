// CifarDataset on arbitrary bytes, as CIFAR-10 or CIFAR-100 test files.
//
//   input = [mode: 1 byte] [file bytes]
//   mode bit 0: CIFAR-100 (test.bin) instead of CIFAR-10 (test_batch.bin);
//   mode bit 1: CIFAR-100 coarse labels; mode bit 2: a class-names file is written too,
//               holding the first (byte 1 of the file) bytes of the file as text.
// Run with -max_len of a few records (3073 / 3074 bytes each).
#include <filesystem>

#include "core/error.h"
#include "core/rng.h"
#include "data/cifar.h"
#include "fuzz_common.h"

using namespace sima;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  const bool c100 = mode & 1, coarse = mode & 2, names = mode & 4;
  const uint8_t* file = data + 1;
  const size_t n = size - 1;
  const std::string dir = fuzz::scratch_dir();
  std::error_code ec;
  for (const char* f : {"test_batch.bin", "test.bin", "batches.meta.txt", "fine_label_names.txt",
                        "coarse_label_names.txt"})
    std::filesystem::remove(dir + "/" + f, ec);
  fuzz::write_scratch(c100 ? "test.bin" : "test_batch.bin", file, n);
  if (names) {
    const size_t len = n > 1 ? std::min<size_t>(file[1], n) : 0;
    fuzz::write_scratch(!c100 ? "batches.meta.txt" : coarse ? "coarse_label_names.txt" : "fine_label_names.txt", file,
                        len);
  }
  try {
    CifarDataset ds = c100 ? CifarDataset::cifar100(dir, false, coarse ? CifarLabel::Coarse : CifarLabel::Fine)
                           : CifarDataset::cifar10(dir, false);
    Generator g(0);
    for (int64_t i = 0; i < ds.size(); ++i) (void)ds.get(i, g);
    (void)ds.describe();
  } catch (const Error&) {
  }
  return 0;
}
