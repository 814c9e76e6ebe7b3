// IdxDataset: MNIST-style IDX files (MNIST, Fashion-MNIST, KMNIST, ...).
//
// IDX format (big-endian): a magic number 0x0000TTDD, TT = element type (0x08 = unsigned
// byte), DD = number of dimensions, then DD dimension sizes (uint32), then the elements.
//   images file: 0x00000803, N, rows, cols, then N·rows·cols pixel bytes (row-major)
//   labels file: 0x00000801, N, then N label bytes
// Either file may be gzip-compressed (read through zlib) or raw. Both are loaded whole at
// construction and validated: magic numbers, non-zero dimensions, equal counts, exact
// (decompressed) sizes — truncated or trailing data is an error naming the file — and
// every label < num_classes. get() then converts one image: 1 × rows × cols floats, /255.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace sima {

class IdxDataset : public Dataset {
 public:
  IdxDataset(const std::string& images_path, const std::string& labels_path, int64_t num_classes = 10);

  // Debian's dataset-fashion-mnist files: {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz
  // under `root`. Classes: 0 T-shirt/top, 1 Trouser, 2 Pullover, 3 Dress, 4 Coat, 5 Sandal,
  // 6 Shirt, 7 Sneaker, 8 Bag, 9 Ankle boot.
  static IdxDataset fashion_mnist(bool train = true, const std::string& root = "/usr/share/datasets/fashion-mnist");
  // The same file names, MNIST's digits (.gz or, when the .gz is absent, the raw file).
  static IdxDataset mnist(bool train, const std::string& root);

  int64_t size() const override { return count_; }
  Sample get(int64_t index, Generator& rng) const override;
  int64_t num_classes() const override { return num_classes_; }
  std::string describe() const override;

  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  const std::vector<uint8_t>& labels() const { return labels_; }
  // The raw pixel bytes of all images, N · rows · cols.
  const std::vector<uint8_t>& pixels() const { return pixels_; }

 private:
  std::string images_path_, labels_path_;
  int64_t num_classes_ = 10, count_ = 0, rows_ = 0, cols_ = 0;
  std::vector<uint8_t> pixels_, labels_;
};

}  // namespace sima
