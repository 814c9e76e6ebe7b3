// ImageFolderDataset (see image_folder.h): scan root/<class>/..., decode in get().
#include "data/image_folder.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
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

// "" for a regular file (or a link to one); else what `p` is: "a dangling symbolic link", "a FIFO
// (named pipe)", "a character device", ...
std::string not_regular(const fs::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) {
    struct stat lst {};
    return ::lstat(p.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode) ? "a dangling symbolic link"
                                                                  : std::string("unreadable (") + std::strerror(errno) + ")";
  }
  if (S_ISREG(st.st_mode)) return "";
  if (S_ISFIFO(st.st_mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(st.st_mode)) return "a character device";
  if (S_ISBLK(st.st_mode)) return "a block device";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  return "not a regular file";
}

// Image files under `dir` (recursively, hidden entries skipped), relative paths sorted. An
// entry with an image extension that is not a regular file (a dangling link, a FIFO, a link
// to /dev/zero) is an error naming it: skipping it would change the data set unseen.
std::vector<std::string> list_images(const fs::path& dir, const std::vector<std::string>& extensions) {
  std::vector<std::string> rel, odd;
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
    if (it->is_directory(ec)) continue;  // a sub-folder (a link to one is not followed)
    ec.clear();
    const std::string ext = lower(p.extension().string());
    if (std::find(extensions.begin(), extensions.end(), ext) == extensions.end()) continue;
    if (const std::string kind = not_regular(p); !kind.empty()) {
      odd.push_back(p.string() + " is " + kind);
      continue;
    }
    rel.push_back(fs::relative(p, dir).generic_string());
  }
  check(!ec, "ImageFolder: cannot list ", dir.string(), " (", ec.message(), ")");
  if (!odd.empty()) {
    std::sort(odd.begin(), odd.end());
    fail("ImageFolder: ", odd.size(), " entr", odd.size() > 1 ? "ies" : "y", " with an image name in ", dir.string(),
         odd.size() > 1 ? " are" : " is", " not a regular file (", odd.front(), odd.size() > 1 ? ", ..." : "",
         "); remove ", odd.size() > 1 ? "them" : "it", " or move ", odd.size() > 1 ? "them" : "it",
         " out of the class folders");
  }
  std::sort(rel.begin(), rel.end());  // std::string compares bytes
  return rel;
}

// A class folder that is a link to the root, to a folder above it or to another class (or into
// one) would read the same images twice under two labels: refused, naming the link.
void check_distinct_class_folders(const std::string& root, const std::vector<std::string>& classes) {
  std::error_code ec;
  const fs::path canon_root = fs::canonical(root, ec);
  if (ec) return;
  std::vector<fs::path> dirs, canon;
  for (const std::string& c : classes) {
    dirs.push_back(fs::path(root) / c);
    canon.push_back(fs::canonical(dirs.back(), ec));
  }
  auto inside = [](const fs::path& a, const fs::path& b) {  // a == b or a under b
    return !a.empty() && !b.empty() && std::mismatch(a.begin(), a.end(), b.begin(), b.end()).second == b.end();
  };
  for (size_t i = 0; i < classes.size(); ++i)
    check(!inside(canon_root, canon[i]), "ImageFolder: class folder ", dirs[i].string(), " is ", canon[i].string(),
          ", which holds the root ", root, " itself: every image would be read twice under two labels; remove it");
  for (size_t i = 0; i < classes.size(); ++i)
    for (size_t j = 0; j < classes.size(); ++j) {
      if (i == j || !inside(canon[i], canon[j])) continue;
      const size_t link = fs::is_symlink(dirs[i], ec) ? i : j;  // name the link (the copy), not the original
      fail("ImageFolder: class folders ", dirs[i].string(), " and ", dirs[j].string(), " hold the same images (",
           canon[i].string(), canon[i] == canon[j] ? " is " : " is inside ", canon[j].string(),
           "): they would be read twice under two labels; remove ", dirs[link].string());
    }
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
  check_distinct_class_folders(root, classes_);

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
