// Zip writer for torch.save archives; the layout is described in zip_writer.h.
#include "models/io/zip_writer.h"

#include "core/error.h"
#include "models/io/zip_archive.h"

namespace sima {

namespace {

using namespace zip;
constexpr uint32_t kZip32Max = 0xffffffffu;  // this value means "see the ZIP64 record"
constexpr uint16_t kVersion = 20;            // 2.0: the version needed for stored entries in folders
constexpr uint16_t kDosTime = 0, kDosDate = (1 << 5) | 1;  // 1980-01-01 00:00:00
constexpr uint16_t kPadId = 'F' | 'B' << 8;                // "FB", PyTorch's padding field

void put16(std::string& b, uint16_t v) { b.push_back(char(v & 0xff)), b.push_back(char(v >> 8)); }
void put32(std::string& b, uint32_t v) { put16(b, uint16_t(v & 0xffff)), put16(b, uint16_t(v >> 16)); }

// version, flags, method, time, date, crc, sizes: the part local and central headers share.
void put_common(std::string& b, uint32_t crc, uint32_t size) {
  put16(b, kVersion), put16(b, 0), put16(b, 0), put16(b, kDosTime), put16(b, kDosDate);
  put32(b, crc), put32(b, size), put32(b, size);
}

}  // namespace

void ZipWriter::add(const std::string& name, const std::string& data) {
  check(!finished_, label_, ": zip entry '", name, "' added after the archive was finished");
  check(!name.empty() && name.size() < 0xffff, label_, ": zip entry name of ", name.size(),
        " bytes (1 to 65534 allowed)");
  check(!names_.count(name), label_, ": two zip entries named '", name, "'");
  check(records_.size() + 1 < 0xffff, label_, ": more than 65534 zip entries need ZIP64, which this writer does not write");
  // The data starts after the 30-byte header, the name and the 4-byte extra field header.
  const uint64_t start = bytes_.size() + kLocalSize + name.size() + 4;
  const uint64_t pad = (kAlignment - start % kAlignment) % kAlignment;
  check(data.size() < kZip32Max && start + pad + data.size() < kZip32Max, label_, ": zip entry '", name, "' (",
        data.size(), " bytes at offset ", start + pad, ") ends past 4 GiB, which needs ZIP64 (not written by this writer)");
  Record r{name, crc32_of(data), uint32_t(data.size()), uint32_t(bytes_.size())};
  put32(bytes_, kLocalSig);
  put_common(bytes_, r.crc, r.size);
  put16(bytes_, uint16_t(name.size())), put16(bytes_, uint16_t(4 + pad));
  bytes_ += name;
  put16(bytes_, kPadId), put16(bytes_, uint16_t(pad));
  bytes_.append(pad, 'Z');
  bytes_ += data;
  records_.push_back(std::move(r));
  names_.insert(name);
}

std::string ZipWriter::finish() {
  check(!finished_, label_, ": the zip archive was already finished");
  finished_ = true;
  const uint64_t cd_offset = bytes_.size();
  for (const Record& r : records_) {
    put32(bytes_, kCentralSig);
    put16(bytes_, kVersion);  // made by: MS-DOS attributes, version 2.0
    put_common(bytes_, r.crc, r.size);
    put16(bytes_, uint16_t(r.name.size())), put16(bytes_, 0), put16(bytes_, 0);  // name, extra, comment lengths
    put16(bytes_, 0), put16(bytes_, 0), put32(bytes_, 0);                        // disk, internal, external attributes
    put32(bytes_, r.local_offset);
    bytes_ += r.name;
  }
  const uint64_t cd_size = bytes_.size() - cd_offset;
  check(bytes_.size() + kEndSize < kZip32Max, label_, ": the zip central directory ends past 4 GiB, which needs ZIP64 "
        "(not written by this writer)");
  put32(bytes_, kEndSig);
  put16(bytes_, 0), put16(bytes_, 0);  // this disk, the directory's disk
  put16(bytes_, uint16_t(records_.size())), put16(bytes_, uint16_t(records_.size()));
  put32(bytes_, uint32_t(cd_size)), put32(bytes_, uint32_t(cd_offset));
  put16(bytes_, 0);  // comment length
  return std::move(bytes_);
}

}  // namespace sima
