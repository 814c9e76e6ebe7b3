// A reader for the zip archives torch.save writes (PyTorch >= 1.6, PyTorchStreamWriter).
//
// torch.save stores every entry uncompressed (method 0, "STORED") and pads the local headers
// with an extra field so each entry's data starts 64-byte aligned. The archive holds
//   <name>/data.pkl        the pickled object (models/io/torch_pickle.h)
//   <name>/data/<key>      one raw little-endian storage per key
//   <name>/version, <name>/byteorder (newer PyTorch), ...
// Layout (PKWARE APPNOTE 6.3, sections 4.3.7, 4.3.12, 4.3.16): the end-of-central-directory
// record at the end of the file points at the central directory, one header per entry with its
// sizes, CRC-32 and the offset of its local header, which precedes the data.
//
// The whole archive is checked when opened (every offset and size inside the file, entries
// not overlapping the directory, local and central names equal, STORED only); an entry's
// CRC-32 is checked when it is read. Any fault is a sima::Error naming the file and the entry.
// ZIP64 (archives over 4 GB) and compressed entries are refused with a clear message.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace sima {

class ZipArchive {
 public:
  struct Entry {
    std::string name;
    uint64_t data_offset = 0;  // into the file
    uint64_t size = 0;
    uint32_t crc32 = 0;
  };

  // Reads `path` into memory and checks its directory (sima::Error on any fault).
  explicit ZipArchive(const std::string& path);
  // The same on bytes already in memory; `label` names them in errors.
  ZipArchive(std::string bytes, std::string label);

  const std::vector<Entry>& entries() const { return entries_; }
  // The entry called `name`, or nullptr.
  const Entry* find(const std::string& name) const;
  // The bytes of `e`, CRC-32 checked (sima::Error naming the entry on a mismatch).
  std::string read(const Entry& e) const;
  const std::string& label() const { return label_; }

 private:
  void parse_directory();
  std::string bytes_, label_;
  std::vector<Entry> entries_;
};

// The whole file at `path` as bytes; a sima::Error naming the path when it cannot be read.
std::string read_file_bytes(const std::string& path);

// True when the bytes start like a zip archive ("PK\3\4").
bool looks_like_zip(const std::string& first_bytes);

// The CRC-32 (zlib's) of `bytes`, any length.
uint32_t crc32_of(const std::string& bytes);

// Record signatures and fixed sizes (APPNOTE 4.3.7, 4.3.12, 4.3.16), shared with models/io/zip_writer.h.
namespace zip {
constexpr uint32_t kLocalSig = 0x04034b50, kCentralSig = 0x02014b50, kEndSig = 0x06054b50;
constexpr size_t kEndSize = 22, kCentralSize = 46, kLocalSize = 30;
}  // namespace zip

}  // namespace sima
