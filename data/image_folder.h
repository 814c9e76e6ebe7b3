// ImageFolderDataset: torchvision's ImageFolder layout, root/<class>/<image>.
//
//   root/cat/001.jpg          classes = sub-directories of root, sorted by name in byte
//   root/cat/more/002.png     order: cat -> 0, dog -> 1. Images = files under each class
//   root/dog/a.bmp            directory (recursively) whose extension is .jpg, .jpeg, .png
//                             or .bmp in any case, sorted by path relative to the class
//                             directory (byte order). Samples are ordered by (class, path).
// Names starting with '.' (hidden files and folders) are ignored. Directory symlinks below
// a class directory are not followed. A root that is missing or not a directory, a root
// without class directories, and a class directory without images are errors (as in
// torchvision), naming the directory.
//
// Images are decoded lazily, in get(), so loader threads decode in parallel; only paths
// are held in memory. get() converts to `channels` (3: RGB, 1: grey, 0: as stored).
//
// A file that fails to decode (corrupt, truncated, not an image, unreadable):
//   OnError::Stop (default) — get() throws sima::Error naming the path and the reason.
//   OnError::Skip — get(i) returns the first decodable sample among i+1, i+2, ... wrapping
//     around to 0 (its own image and label), so the result depends only on the files, not
//     on threads or call order. Each failing file is reported once per dataset object on
//     stderr: "warning: ImageFolder: skipping a file (read_image: <path>: <reason>)", then
//     remembered and not
//     decoded again. If no file decodes, get() throws sima::Error.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace sima {

enum class OnError { Stop, Skip };

struct ImageFolderOptions {
  int channels = 3;                  // 0 as stored, 1 grey, 3 RGB (see image_io.h)
  OnError on_error = OnError::Stop;  // what get() does with a file that fails to decode
  std::vector<std::string> extensions = {".jpg", ".jpeg", ".png", ".bmp"};  // compared lowercase
};

class ImageFolderDataset : public Dataset {
 public:
  explicit ImageFolderDataset(const std::string& root, ImageFolderOptions options = {});
  ~ImageFolderDataset() override;
  ImageFolderDataset(ImageFolderDataset&&) noexcept;

  int64_t size() const override { return int64_t(paths_.size()); }
  Sample get(int64_t index, Generator& rng) const override;
  int64_t num_classes() const override { return int64_t(classes_.size()); }
  std::string describe() const override;

  const std::vector<std::string>& classes() const { return classes_; }  // index -> class name
  const std::string& path(int64_t index) const { return paths_.at(size_t(index)); }
  int64_t label(int64_t index) const { return labels_.at(size_t(index)); }
  const std::string& root() const { return root_; }

 private:
  std::string root_;
  ImageFolderOptions options_;
  std::vector<std::string> classes_;
  std::vector<std::string> paths_;
  std::vector<int64_t> labels_;
  struct Failures;  // files known not to decode (OnError::Skip), behind a mutex
  std::unique_ptr<Failures> failures_;
};

}  // namespace sima
