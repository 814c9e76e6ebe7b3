// Zip reader for torch.save archives; the format and the checks are described in zip_archive.h.
#include "models/io/zip_archive.h"

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/file_io.h"

namespace sima {

namespace {

using namespace zip;
constexpr size_t kMaxComment = 0xffff;

uint16_t u16(const std::string& b, size_t at) {
  return uint16_t(uint8_t(b[at]) | uint8_t(b[at + 1]) << 8);
}
uint32_t u32(const std::string& b, size_t at) { return uint32_t(u16(b, at)) | uint32_t(u16(b, at + 2)) << 16; }

}  // namespace

std::string read_file_bytes(const std::string& path) {
  const int fd = open_regular_file(path, "checkpoint");  // a FIFO or a directory is refused unopened
  struct stat st {};
  const bool stat_ok = ::fstat(fd, &st) == 0;
  std::string out(stat_ok ? size_t(st.st_size) : 0, '\0');
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::read(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += size_t(n);
  }
  ::close(fd);
  check(stat_ok && done == out.size(), path, ": read error (", done, " of ", out.size(), " bytes read)");
  return out;
}

bool looks_like_zip(const std::string& b) { return b.size() >= 4 && u32(b, 0) == kLocalSig; }

ZipArchive::ZipArchive(const std::string& path) : ZipArchive(read_file_bytes(path), path) {}

ZipArchive::ZipArchive(std::string bytes, std::string label) : bytes_(std::move(bytes)), label_(std::move(label)) {
  parse_directory();
}

const ZipArchive::Entry* ZipArchive::find(const std::string& name) const {
  for (const Entry& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

// The end record: the last "PK\5\6" whose comment length reaches exactly the end of the file.
void ZipArchive::parse_directory() {
  const std::string& b = bytes_;
  check(b.size() >= kEndSize, label_, ": not a zip archive (", b.size(), " bytes, truncated?)");
  size_t end = std::string::npos;
  const size_t lowest = b.size() - kEndSize > kMaxComment ? b.size() - kEndSize - kMaxComment : 0;
  for (size_t at = b.size() - kEndSize + 1; at-- > lowest;)
    if (u32(b, at) == kEndSig && at + kEndSize + u16(b, at + 20) == b.size()) {
      end = at;
      break;
    }
  check(end != std::string::npos, label_, ": no zip end-of-central-directory record (truncated file?)");
  const uint16_t disk = u16(b, end + 4), cd_disk = u16(b, end + 6);
  const uint16_t count_here = u16(b, end + 8), count = u16(b, end + 10);
  const uint32_t cd_size = u32(b, end + 12), cd_offset = u32(b, end + 16);
  check(count != 0xffff && cd_size != 0xffffffffu && cd_offset != 0xffffffffu, label_,
        ": a ZIP64 archive (over 4 GB or 65535 entries), which this reader does not support");
  check(disk == 0 && cd_disk == 0 && count_here == count, label_, ": a multi-disk zip archive is not supported");
  check(uint64_t(cd_offset) + cd_size <= end, label_, ": the zip central directory (offset ", cd_offset, ", ",
        cd_size, " bytes) runs past its end record at ", end, " (truncated or corrupt file)");
  size_t at = cd_offset;
  const size_t cd_end = size_t(cd_offset) + cd_size;
  std::set<std::string> names;
  for (uint16_t i = 0; i < count; ++i) {
    check(at + kCentralSize <= cd_end && u32(b, at) == kCentralSig, label_, ": zip central directory entry ", i,
          " is corrupt");
    const uint16_t flags = u16(b, at + 8), method = u16(b, at + 10);
    const uint32_t crc = u32(b, at + 16), csize = u32(b, at + 20), usize = u32(b, at + 24);
    const uint16_t name_len = u16(b, at + 28), extra_len = u16(b, at + 30), comment_len = u16(b, at + 32);
    const uint32_t local = u32(b, at + 42);
    check(at + kCentralSize + name_len + extra_len + comment_len <= cd_end, label_, ": zip central directory entry ",
          i, " runs past the directory");
    Entry e;
    e.name = b.substr(at + kCentralSize, name_len);
    at += kCentralSize + name_len + extra_len + comment_len;
    check(csize != 0xffffffffu && usize != 0xffffffffu && local != 0xffffffffu, label_, ": entry '", e.name,
          "' uses ZIP64 sizes, which this reader does not support");
    check(method == 0, label_, ": entry '", e.name, "' is compressed (method ", method,
          "); torch.save writes stored (uncompressed) entries only");
    check((flags & 1) == 0, label_, ": entry '", e.name, "' is encrypted");
    check(csize == usize, label_, ": stored entry '", e.name, "' has compressed size ", csize, " != size ", usize);
    check(names.insert(e.name).second, label_, ": the zip archive has two entries named '", e.name, "'");
    // The local header: its own signature and name; the data follows its name and extra field.
    check(uint64_t(local) + kLocalSize <= cd_offset && u32(b, local) == kLocalSig, label_, ": entry '", e.name,
          "': no local header at offset ", local);
    const uint16_t lname = u16(b, local + 26), lextra = u16(b, local + 28);
    e.data_offset = uint64_t(local) + kLocalSize + lname + lextra;
    e.size = usize;
    e.crc32 = crc;
    check(e.data_offset + e.size <= cd_offset, label_, ": entry '", e.name, "' (", e.size, " bytes at ",
          e.data_offset, ") runs past the start of the central directory (truncated or corrupt file)");
    check(b.compare(local + kLocalSize, lname, e.name) == 0, label_, ": entry '", e.name,
          "': the local header names it differently");
    entries_.push_back(std::move(e));
  }
}

uint32_t crc32_of(const std::string& bytes) {
  uLong crc = ::crc32(0L, Z_NULL, 0);
  for (size_t done = 0; done < bytes.size();) {  // zlib takes uInt lengths
    const size_t n = std::min<size_t>(bytes.size() - done, 1u << 30);
    crc = ::crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + done), uInt(n));
    done += n;
  }
  return uint32_t(crc);
}

std::string ZipArchive::read(const Entry& e) const {
  std::string out = bytes_.substr(e.data_offset, e.size);
  const uint32_t crc = crc32_of(out);
  check(crc == e.crc32, label_, ": entry '", e.name, "' fails its CRC-32 check (stored ", e.crc32,
        ", computed ", crc, "): the file is corrupt");
  return out;
}

}  // namespace sima
