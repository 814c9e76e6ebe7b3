// ImageFolderDataset (see image_folder.h): scan root/<class>/..., decode in get().
#include "data/image_folder.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <sstream>

#include "core/error.h"
#include "data/image_io.h"

namespace sima {

namespace fs = std::filesystem;

struct ImageFolderDataset::Failures {
  std::mutex mutex;
  std::vector<char> bad;  // bad[i]: file i failed to decode (already reported)
};

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool hidden(const fs::path& p) {
  const std::string name = p.filename().string();
  return !name.empty() && name[0] == '.';
}

// Image files under `dir` (recursively, hidden entries skipped), relative paths sorted.
std::vector<std::string> list_images(const fs::path& dir, const std::vector<std::string>& extensions) {
  std::vector<std::string> rel;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, ec), end;
  check(!ec, "ImageFolder: cannot list ", dir.string(), " (", ec.message(), ")");
  for (; it != end; it.increment(ec)) {
    check(!ec, "ImageFolder: cannot list ", dir.string(), " (", ec.message(), ")");
    const fs::path& p = it->path();
    if (hidden(p)) {
      if (it->is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file(ec)) continue;  // follows file symlinks
    const std::string ext = lower(p.extension().string());
    if (std::find(extensions.begin(), extensions.end(), ext) == extensions.end()) continue;
    rel.push_back(fs::relative(p, dir).generic_string());
  }
  check(!ec, "ImageFolder: cannot list ", dir.string(), " (", ec.message(), ")");
  std::sort(rel.begin(), rel.end());  // std::string compares bytes
  return rel;
}

}  // namespace

ImageFolderDataset::ImageFolderDataset(const std::string& root, ImageFolderOptions options)
    : root_(root), options_(std::move(options)), failures_(std::make_unique<Failures>()) {
  const int ch = options_.channels;
  check(ch == 0 || ch == 1 || ch == 3, "ImageFolder: option channels must be 0, 1 or 3, got ", ch);
  check(!options_.extensions.empty(), "ImageFolder: option extensions is empty");
  for (std::string& e : options_.extensions) {
    e = lower(e);
    check(e.size() >= 2 && e[0] == '.', "ImageFolder: option extensions: '", e, "' must look like \".jpg\"");
  }
  std::error_code ec;
  check(fs::exists(root, ec), "ImageFolder: root ", root, " does not exist");
  check(fs::is_directory(root, ec), "ImageFolder: root ", root, " is not a directory");

  // Classes: the non-hidden sub-directories of root, in byte order.
  fs::directory_iterator it(root, ec), end;
  check(!ec, "ImageFolder: cannot list ", root, " (", ec.message(), ")");
  for (; it != end; it.increment(ec)) {
    check(!ec, "ImageFolder: cannot list ", root, " (", ec.message(), ")");
    if (!hidden(it->path()) && it->is_directory(ec)) classes_.push_back(it->path().filename().string());
  }
  check(!ec, "ImageFolder: cannot list ", root, " (", ec.message(), ")");
  check(!classes_.empty(), "ImageFolder: root ", root, " has no class sub-directories (expected root/<class>/<image>)");
  std::sort(classes_.begin(), classes_.end());

  std::vector<std::string> empty_classes;
  for (size_t c = 0; c < classes_.size(); ++c) {
    const fs::path dir = fs::path(root) / classes_[c];
    std::vector<std::string> files = list_images(dir, options_.extensions);
    if (files.empty()) empty_classes.push_back(classes_[c]);
    for (const std::string& f : files) {
      paths_.push_back((dir / f).string());
      labels_.push_back(int64_t(c));
    }
  }
  if (!empty_classes.empty()) {
    std::ostringstream os;
    for (size_t i = 0; i < empty_classes.size(); ++i) os << (i ? ", " : "") << empty_classes[i];
    std::ostringstream ex;
    for (size_t i = 0; i < options_.extensions.size(); ++i) ex << (i ? " " : "") << options_.extensions[i];
    fail("ImageFolder: root ", root, ": no image files (", ex.str(), ") in class director",
         empty_classes.size() > 1 ? "ies " : "y ", os.str());
  }
  failures_->bad.assign(paths_.size(), 0);
}

ImageFolderDataset::~ImageFolderDataset() = default;
ImageFolderDataset::ImageFolderDataset(ImageFolderDataset&&) noexcept = default;

Sample ImageFolderDataset::get(int64_t index, Generator&) const {
  const int64_t n = size();
  check(index >= 0 && index < n, "ImageFolder::get: index ", index, " out of range [0, ", n, ")");
  if (options_.on_error == OnError::Stop) {
    try {
      return Sample{read_image(paths_[index], options_.channels), labels_[index]};
    } catch (const Error& e) {
      fail("ImageFolder: ", e.what());
    }
  }
  // Skip: the first decodable file among index, index+1, ... (mod n).
  for (int64_t k = 0; k < n; ++k) {
    const int64_t j = (index + k) % n;
    {
      std::lock_guard<std::mutex> lock(failures_->mutex);
      if (failures_->bad[j]) continue;
    }
    try {
      return Sample{read_image(paths_[j], options_.channels), labels_[j]};
    } catch (const Error& e) {
      std::lock_guard<std::mutex> lock(failures_->mutex);
      if (!failures_->bad[j]) {  // first failure of this file: report it once
        failures_->bad[j] = 1;
        std::fprintf(stderr, "warning: ImageFolder: skipping a file (%s)\n", e.what());
      }
    }
  }
  fail("ImageFolder: root ", root_, ": none of the ", n, " image files could be decoded");
}

std::string ImageFolderDataset::describe() const {
  std::ostringstream os;
  os << "ImageFolder " << root_ << ": " << size() << " images, " << num_classes() << " classes";
  return os.str();
}

}  // namespace sima
