// Whole-file reads, atomic writes and the gzip-or-raw reader (see file_io.h).
#include "core/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/durable_file.h"
#include "core/error.h"

namespace sima {

namespace fs = std::filesystem;

namespace {

// "is a directory", "is a FIFO (named pipe)", ... for a mode that is not a regular file.
const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "is a directory";
  if (S_ISFIFO(mode)) return "is a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "is a character device";
  if (S_ISBLK(mode)) return "is a block device";
  if (S_ISSOCK(mode)) return "is a socket";
  return "is a special file";
}

[[noreturn]] void fail_open(const std::string& path, const std::string& what, int err) {
  fail(path, ": cannot open: ", std::strerror(err), " (expected a ", what, ")");
}

}  // namespace

void check_regular_file(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return;  // missing: the caller's own open reports it
  check(S_ISREG(st.st_mode), path, ": not a regular file: it ", file_kind(st.st_mode), " (expected a ", what, ")");
}

int open_regular_file(const std::string& path, const std::string& what) {
  // O_NONBLOCK: opening a FIFO for reading returns at once instead of waiting for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) fail_open(path, what, errno);
  struct stat st {};
  const bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  if (!ok) {
    const int err = errno;
    ::close(fd);
    if (st.st_mode == 0) fail(path, ": cannot stat the ", what, " (", std::strerror(err), ")");
    fail(path, ": not a regular file: it ", file_kind(st.st_mode), " (expected a ", what, ")");
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

int64_t file_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    fail(path, errno == ENOENT ? ": no such file" : std::string(": cannot stat (") + std::strerror(errno) + ")");
  check(S_ISREG(st.st_mode), path, ": not a regular file: it ", file_kind(st.st_mode));
  return static_cast<int64_t>(st.st_size);
}

std::vector<uint8_t> read_file(const std::string& path, const std::string& what) {
  file_size(path);  // "no such file"; stat never blocks
  const int fd = open_regular_file(path, what);
  struct stat st {};
  ::fstat(fd, &st);
  FILE* f = ::fdopen(fd, "rb");
  if (f == nullptr) ::close(fd);
  check(f != nullptr, path, ": cannot open (", std::strerror(errno), ")");
  const int64_t n = st.st_size;
  std::vector<uint8_t> bytes(static_cast<size_t>(n));
  size_t got = n > 0 ? std::fread(bytes.data(), 1, bytes.size(), f) : 0;
  bool err = std::ferror(f);
  std::fclose(f);
  check(!err, path, ": read error");
  check(got == bytes.size(), path, ": file changed while reading (expected ", n, " bytes, got ", got, ")");
  return bytes;
}

void write_file_atomic(const std::string& path, const void* data, size_t size) {
  refuse_symlink(path);
  const std::string tmp = temp_path_for(path);
  const int fd = create_temp_file(path);
  FILE* f = ::fdopen(fd, "wb");
  if (f == nullptr) {
    ::close(fd);
    ::unlink(tmp.c_str());
    fail(path, ": cannot open for writing (", std::strerror(errno), ")");
  }
  bool ok = size == 0 || std::fwrite(data, 1, size, f) == size;
  // Flushed to the kernel and then to the disk before the rename: a crash or a power loss after
  // the rename finds the whole new file, never a short one under the final name.
  ok = std::fflush(f) == 0 && ok;
  ok = ::fsync(::fileno(f)) == 0 && ok;
  const int err = errno;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    fail(path, ": write failed (", std::strerror(err), "); the previous file, if any, is untouched");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    fail(path, ": cannot rename the temporary file into place (", ec.message(), ")");
  }
  sync_parent_directory(path);
}

// ---- GzReader ------------------------------------------------------------------

GzReader::GzReader(const std::string& path) : path_(path) {
  file_size(path);                         // "no such file"
  const int fd = open_regular_file(path);  // a directory or a FIFO: refused unopened
  gzFile gz = gzdopen(fd, "rb");
  if (gz == nullptr) ::close(fd);
  check(gz != nullptr, path, ": cannot open (", std::strerror(errno), ")");
  gzbuffer(gz, 1 << 17);
  gz_ = gz;
  compressed_ = gzdirect(gz) == 0;  // gzdirect: 1 when the file is not gzip (read as stored)
}

GzReader::~GzReader() {
  if (gz_) gzclose_r(static_cast<gzFile>(gz_));
}

void GzReader::read_exact(void* dst, size_t n, const char* what) {
  gzFile gz = static_cast<gzFile>(gz_);
  auto* p = static_cast<uint8_t*>(dst);
  size_t done = 0;
  while (done < n) {
    // gzread takes an unsigned count that must fit in an int: read in chunks of 1 GiB.
    unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - done, size_t(1) << 30));
    int got = gzread(gz, p + done, chunk);
    if (got < 0) {
      int errnum = 0;
      const char* msg = gzerror(gz, &errnum);
      fail(path_, ": corrupt ", compressed_ ? "gzip data" : "file", " while reading ", what, " (", msg, ")");
    }
    if (got == 0) break;
    done += static_cast<size_t>(got);
  }
  offset_ += done;
  if (done < n) {
    int errnum = 0;
    const char* msg = gzerror(gz, &errnum);
    fail(path_, ": truncated: ", what, " needs ", n, " bytes at offset ", offset_ - done, " but only ", done,
         " remain", compressed_ ? " after decompression" : "", errnum != Z_OK ? std::string(" (") + msg + ")" : "");
  }
}

bool GzReader::at_end() {
  gzFile gz = static_cast<gzFile>(gz_);
  uint8_t byte;
  int got = gzread(gz, &byte, 1);
  int errnum = Z_OK;
  const char* msg = gzerror(gz, &errnum);
  // A gzip stream whose data ended but whose trailer (CRC, length) is missing or wrong
  // reports the fault only now, when reading past the data.
  check(got >= 0 && errnum == Z_OK, path_, ": corrupt ", compressed_ ? "gzip data" : "file", " at the end (", msg,
        ")");
  return got == 0;
}

}  // namespace sima
