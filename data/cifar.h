// CifarDataset: the binary versions of CIFAR-10 and CIFAR-100.
//
// Each file is a sequence of fixed-size records; a record is the label byte(s) then 3072
// pixel bytes: the 1024 red values of the 32 × 32 image (row-major), then green, then blue
// — already the CHW layout of Image.
//   CIFAR-10:  1 label byte (0..9);  train = data_batch_1.bin .. data_batch_5.bin (50 000),
//              test = test_batch.bin (10 000). Record 3073 bytes.
//   CIFAR-100: 2 label bytes, coarse (0..19) then fine (0..99); train = train.bin (50 000),
//              test = test.bin (10 000). Record 3074 bytes.
// `root` is the folder holding the .bin files, or the folder the archive was extracted in
// (then cifar-10-batches-bin/ or cifar-100-binary/ under it is used). All records are
// loaded at construction; each file's size must be a non-zero multiple of the record size
// and every label in range, or sima::Error names the file (and the record).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace sima {

enum class CifarLabel { Fine, Coarse };  // which CIFAR-100 label get() returns

class CifarDataset : public Dataset {
 public:
  static CifarDataset cifar10(const std::string& root, bool train = true);
  static CifarDataset cifar100(const std::string& root, bool train = true, CifarLabel label = CifarLabel::Fine);

  int64_t size() const override { return int64_t(labels_.size()); }
  Sample get(int64_t index, Generator& rng) const override;  // 3 × 32 × 32, bytes / 255
  int64_t num_classes() const override { return num_classes_; }
  std::string describe() const override;

  // Class names from batches.meta.txt (CIFAR-10) or {fine,coarse}_label_names.txt
  // (CIFAR-100) when that file is beside the data, else empty.
  const std::vector<std::string>& classes() const { return classes_; }
  const std::vector<uint8_t>& labels() const { return labels_; }

  static constexpr int64_t kHeight = 32, kWidth = 32, kPixels = 3 * 32 * 32;

 private:
  CifarDataset(const std::string& name, const std::string& dir, const std::vector<std::string>& files,
               int label_bytes, int label_offset, int64_t num_classes, const std::string& names_file);

  std::string name_, dir_;
  int64_t num_classes_ = 0;
  std::vector<uint8_t> pixels_;  // N · 3072
  std::vector<uint8_t> labels_;  // N
  std::vector<std::string> classes_;
};

}  // namespace sima
