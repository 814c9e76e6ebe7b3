// IdxDataset (see idx.h): load and validate IDX image and label files, raw or gzip.
#include "data/idx.h"

#include <filesystem>
#include <sstream>

#include "core/error.h"
#include "core/file_io.h"

namespace sima {

namespace {

constexpr uint32_t kMagicImages = 0x00000803;  // unsigned bytes, 3 dimensions
constexpr uint32_t kMagicLabels = 0x00000801;  // unsigned bytes, 1 dimension
// Deflate cannot compress better than about 1032 : 1, so a .gz of n bytes inflates to at
// most ~1032·n: a header claiming more is rejected before anything is allocated.
constexpr int64_t kMaxDeflateRatio = 1032;

uint32_t be32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

std::string hex(uint32_t v) {
  std::ostringstream os;
  os << "0x" << std::hex;
  os.width(8);
  os.fill('0');
  os << v;
  return os.str();
}

// Reads the header of an IDX file (magic + `ndim` sizes), checks the magic number, and
// returns the dimension sizes. Leaves `in` positioned at the first element.
std::vector<int64_t> read_idx_header(GzReader& in, uint32_t magic, const char* kind) {
  uint8_t head[4 * 3];
  in.read_exact(head, 4, "the IDX magic number");
  uint32_t got = be32(head);
  check(got == magic, in.path(), ": not an IDX ", kind, " file: magic number ", hex(got), ", expected ", hex(magic));
  const int ndim = int(magic & 0xff);
  in.read_exact(head, size_t(4 * ndim), "the IDX dimensions");
  std::vector<int64_t> dims(ndim);
  for (int d = 0; d < ndim; ++d) dims[d] = be32(head + 4 * d);
  return dims;
}

// The number of element bytes the header promises must fit the file: exactly for a raw
// file, within the deflate ratio for a gzip one. Checked before allocating.
void check_fits(GzReader& in, int64_t header_bytes, int64_t elements) {
  const int64_t on_disk = file_size(in.path());
  if (in.compressed()) {
    check(elements <= on_disk * kMaxDeflateRatio, in.path(), ": header claims ", elements,
          " bytes of data, more than a gzip file of ", on_disk, " bytes can hold (corrupt header?)");
  } else {
    check(header_bytes + elements <= on_disk, in.path(), ": truncated: header claims ", header_bytes + elements,
          " bytes, the file has ", on_disk);
    check(header_bytes + elements >= on_disk, in.path(), ": trailing data: header claims ", header_bytes + elements,
          " bytes, the file has ", on_disk);
  }
}

// root/name.gz when it exists, else root/name; error naming both when neither does.
std::string pick(const std::string& root, const std::string& name) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string gz = (fs::path(root) / (name + ".gz")).string(), raw = (fs::path(root) / name).string();
  if (fs::exists(gz, ec)) return gz;
  if (fs::exists(raw, ec)) return raw;
  fail("IdxDataset: neither ", gz, " nor ", raw, " exists");
}

}  // namespace

IdxDataset::IdxDataset(const std::string& images_path, const std::string& labels_path, int64_t num_classes)
    : images_path_(images_path), labels_path_(labels_path), num_classes_(num_classes) {
  check(num_classes >= 1 && num_classes <= 256, "IdxDataset: num_classes must be in 1..256, got ", num_classes);

  // Images: magic, N, rows, cols, then N·rows·cols bytes.
  {
    GzReader in(images_path);
    std::vector<int64_t> d = read_idx_header(in, kMagicImages, "images");
    count_ = d[0], rows_ = d[1], cols_ = d[2];
    check(count_ > 0 && rows_ > 0 && cols_ > 0, images_path, ": dimensions ", count_, " x ", rows_, " x ", cols_,
          " (all must be > 0)");
    // Each dimension < 2^32, so rows·cols itself can overflow int64 (fuzz finding): bound it
    // by division first, then N·rows·cols < 2^32 · 2^24 fits.
    constexpr int64_t kMaxImageBytes = int64_t(1) << 24;
    check(rows_ <= kMaxImageBytes && cols_ <= kMaxImageBytes / rows_, images_path, ": image size ", rows_, " x ",
          cols_, " is too large (at most ", kMaxImageBytes, " pixels)");
    const int64_t total = count_ * rows_ * cols_;
    check_fits(in, 16, total);
    pixels_.resize(size_t(total));
    in.read_exact(pixels_.data(), pixels_.size(), "the images");
    check(in.at_end(), images_path, ": trailing data after ", count_, " images of ", rows_, " x ", cols_);
  }
  // Labels: magic, N, then N bytes, each < num_classes.
  {
    GzReader in(labels_path);
    int64_t n = read_idx_header(in, kMagicLabels, "labels")[0];
    check(n == count_, "IdxDataset: ", labels_path, " holds ", n, " labels but ", images_path, " holds ", count_,
          " images");
    check_fits(in, 8, n);
    labels_.resize(size_t(n));
    in.read_exact(labels_.data(), labels_.size(), "the labels");
    check(in.at_end(), labels_path, ": trailing data after ", n, " labels");
    for (int64_t i = 0; i < n; ++i)
      check(labels_[i] < num_classes, labels_path, ": label ", int(labels_[i]), " at index ", i,
            " is out of range for ", num_classes, " classes");
  }
}

IdxDataset IdxDataset::fashion_mnist(bool train, const std::string& root) {
  const std::string split = train ? "train" : "t10k";
  const std::string images = pick(root, split + "-images-idx3-ubyte");
  const std::string labels = pick(root, split + "-labels-idx1-ubyte");
  return IdxDataset(images, labels, 10);
}

IdxDataset IdxDataset::mnist(bool train, const std::string& root) { return fashion_mnist(train, root); }

Sample IdxDataset::get(int64_t index, Generator&) const {
  check(index >= 0 && index < count_, "IdxDataset::get: index ", index, " out of range [0, ", count_, ")");
  Sample s;
  s.image = Image(1, rows_, cols_);
  const uint8_t* p = pixels_.data() + index * rows_ * cols_;
  for (int64_t i = 0; i < rows_ * cols_; ++i) s.image.data[i] = float(p[i]) / 255.f;
  s.label = labels_[index];
  return s;
}

std::string IdxDataset::describe() const {
  std::ostringstream os;
  os << "IDX " << images_path_ << ": " << count_ << " images " << rows_ << "x" << cols_ << ", " << num_classes_
     << " classes";
  return os.str();
}

}  // namespace sima
