// Reading and writing whole files for the datasets, with errors that name the path.
//
// GzReader reads a file through zlib's gzread, which inflates a gzip file and passes any
// other file through unchanged, so one reader serves `x.gz` and `x` alike. Readers that
// know how many bytes a file must hold call read_exact() and then at_end(): a short read
// is "truncated", a byte left over is "trailing data".
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace sima {

// Size in bytes of the regular file at `path`; sima::Error if it is missing or not a file.
int64_t file_size(const std::string& path);

// Every user-given path opened for reading goes through one of these two, so a FIFO, a
// directory or a device is refused with a message naming it instead of blocking forever in
// open() (a FIFO with no writer) or failing later as "not valid JSON" (a directory):
//   "runs/x: not a regular file: it is a directory (expected a JSON config file)"
// `what` names the expected file ("config file", "checkpoint", "image", ...).
//
// stat() (which never blocks) and the checks, for readers that open the path themselves (a
// path that does not exist passes: their open reports it).
void check_regular_file(const std::string& path, const std::string& what = "file");
// open(O_RDONLY | O_NONBLOCK), fstat, the checks, then blocking mode back on: the descriptor
// of a regular file, for the caller to close.
int open_regular_file(const std::string& path, const std::string& what = "file");

// The whole file, as stored (no decompression); `what` as for open_regular_file.
std::vector<uint8_t> read_file(const std::string& path, const std::string& what = "file");

// Writes `size` bytes to `path` through a temporary file (core/durable_file.h) that is flushed,
// fsync'ed and renamed over it, so a failed write, a full disk or a process killed at any moment
// never leaves a half-written file under the final name: the previous file stays whole.
void write_file_atomic(const std::string& path, const void* data, size_t size);



class GzReader {
 public:
  explicit GzReader(const std::string& path);
  ~GzReader();
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  // True for a gzip file (inflated on the fly), false for a file read as stored.
  bool compressed() const { return compressed_; }
  // Reads exactly n bytes into dst; sima::Error "<path>: truncated ..." naming `what`
  // (e.g. "header", "images") when the file ends first, or zlib's message on corrupt data.
  void read_exact(void* dst, size_t n, const char* what);
  // True when no byte is left (reads one byte to find out).
  bool at_end();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  void* gz_ = nullptr;  // gzFile
  bool compressed_ = false;
  uint64_t offset_ = 0;  // bytes delivered so far (uncompressed)
};

}  // namespace sima
