// CifarDataset (see cifar.h): fixed-size binary records, label byte(s) + 3072 pixels.
#include "data/cifar.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/file_io.h"

namespace sima {

namespace fs = std::filesystem;

namespace {

// The folder holding `first_file`: root itself, or root/subdir (the extracted archive).
std::string find_dir(const std::string& what, const std::string& root, const std::string& subdir,
                     const std::string& first_file) {
  std::error_code ec;
  check(fs::is_directory(root, ec), what, ": ", root, " is not a directory");
  if (fs::exists(fs::path(root) / first_file, ec)) return root;
  if (fs::exists(fs::path(root) / subdir / first_file, ec)) return (fs::path(root) / subdir).string();
  fail(what, ": ", (fs::path(root) / first_file).string(), " not found (nor under ", subdir, "/)");
}

// One name per non-empty line, trailing whitespace removed.
std::vector<std::string> read_names(const std::string& path) {
  std::vector<std::string> names;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
    if (!line.empty()) names.push_back(line);
  }
  return names;
}

}  // namespace

CifarDataset CifarDataset::cifar10(const std::string& root, bool train) {
  std::vector<std::string> files;
  if (train)
    for (int i = 1; i <= 5; ++i) files.push_back("data_batch_" + std::to_string(i) + ".bin");
  else
    files.push_back("test_batch.bin");
  std::string dir = find_dir("CIFAR-10", root, "cifar-10-batches-bin", files[0]);
  return CifarDataset(train ? "CIFAR-10 train" : "CIFAR-10 test", dir, files, 1, 0, 10, "batches.meta.txt");
}

CifarDataset CifarDataset::cifar100(const std::string& root, bool train, CifarLabel label) {
  std::vector<std::string> files{train ? "train.bin" : "test.bin"};
  std::string dir = find_dir("CIFAR-100", root, "cifar-100-binary", files[0]);
  const bool fine = label == CifarLabel::Fine;
  return CifarDataset(std::string(train ? "CIFAR-100 train" : "CIFAR-100 test") + (fine ? " (fine)" : " (coarse)"),
                      dir, files, 2, fine ? 1 : 0, fine ? 100 : 20,
                      fine ? "fine_label_names.txt" : "coarse_label_names.txt");
}

CifarDataset::CifarDataset(const std::string& name, const std::string& dir, const std::vector<std::string>& files,
                           int label_bytes, int label_offset, int64_t num_classes, const std::string& names_file)
    : name_(name), dir_(dir), num_classes_(num_classes) {
  const int64_t record = label_bytes + kPixels;
  // Sizes first (nothing allocated before every file is known to be whole records).
  std::vector<std::string> paths;
  std::vector<int64_t> sizes;
  int64_t total = 0;
  for (const std::string& f : files) {
    paths.push_back((fs::path(dir) / f).string());
    int64_t n = file_size(paths.back());
    check(n > 0 && n % record == 0, name, ": ", paths.back(), ": size ", n, " bytes is not a non-zero multiple of ",
          "the record size ", record, " (", label_bytes, " label byte", label_bytes > 1 ? "s" : "", " + ", kPixels,
          " pixels)");
    sizes.push_back(n);
    total += n / record;
  }
  pixels_.resize(size_t(total * kPixels));
  labels_.resize(size_t(total));
  int64_t at = 0;
  for (size_t f = 0; f < paths.size(); ++f) {
    const std::string& path = paths[f];
    std::vector<uint8_t> bytes = read_file(path);
    check(int64_t(bytes.size()) == sizes[f], name, ": ", path, ": file changed while loading");
    const int64_t n = int64_t(bytes.size()) / record;
    for (int64_t r = 0; r < n; ++r, ++at) {
      const uint8_t* rec = bytes.data() + r * record;
      const uint8_t label = rec[label_offset];
      check(label < num_classes, name, ": ", path, ": record ", r, " has label ", int(label), ", out of range for ",
            num_classes, " classes");
      labels_[at] = label;
      std::copy(rec + label_bytes, rec + record, pixels_.begin() + at * kPixels);
    }
  }
  const fs::path names_path = fs::path(dir) / names_file;
  std::error_code ec;
  if (fs::is_regular_file(names_path, ec)) {
    classes_ = read_names(names_path.string());
    check(int64_t(classes_.size()) == num_classes, name, ": ", names_path.string(), " lists ", classes_.size(),
          " class names, expected ", num_classes);
  }
}

Sample CifarDataset::get(int64_t index, Generator&) const {
  check(index >= 0 && index < size(), "CifarDataset::get: index ", index, " out of range [0, ", size(), ")");
  Sample s;
  s.image = Image(3, kHeight, kWidth);
  const uint8_t* p = pixels_.data() + index * kPixels;  // R plane, G plane, B plane = CHW
  for (int64_t i = 0; i < kPixels; ++i) s.image.data[i] = float(p[i]) / 255.f;
  s.label = labels_[index];
  return s;
}

std::string CifarDataset::describe() const {
  std::ostringstream os;
  os << name_ << " " << dir_ << ": " << size() << " images 32x32, " << num_classes_ << " classes";
  return os.str();
}

}  // namespace sima
