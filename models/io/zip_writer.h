// A writer of zip archives as torch.save lays them out (PyTorch's PyTorchStreamWriter), the
// inverse of models/io/zip_archive.h.
//
//   [local header, name, "FB" padding extra field, data] per entry, in the order added
//   [central directory: one header per entry]  [end-of-central-directory record]
//
// Every entry is STORED (no compression) with its CRC-32 (zlib). Like PyTorch, each local
// header carries an extra field with the id "FB" whose payload pads the header so the entry's
// data starts at a multiple of 64 bytes in the file (so a loader can map storages in place);
// the central directory carries no extra fields. Times are fixed (1980-01-01 00:00) so the same
// entries give the same bytes. No ZIP64: an archive that would need it (an entry or the whole
// archive at 4 GiB or more, 65535 entries or more) is a sima::Error naming the entry and the
// limit, never a corrupt file.
#pragma once
#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace sima {

class ZipWriter {
 public:
  // `label` names the archive in errors (e.g. the path it is for).
  explicit ZipWriter(std::string label) : label_(std::move(label)) {}

  // Appends the entry `name` holding `data` (names must be distinct and shorter than 64 KiB).
  void add(const std::string& name, const std::string& data);
  // The central directory and end record appended: the whole archive. The writer is spent.
  std::string finish();

  static constexpr uint64_t kAlignment = 64;

 private:
  struct Record {
    std::string name;
    uint32_t crc = 0, size = 0, local_offset = 0;
  };
  std::string label_, bytes_;
  std::vector<Record> records_;
  std::set<std::string> names_;
  bool finished_ = false;
};

}  // namespace sima
