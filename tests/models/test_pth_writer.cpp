// The .pth writer without Python (models/io/zip_writer.h, models/io/pth_writer.h) against our own
// readers (models/io/zip_archive.h, models/io/pth.h): what the writer writes, the reader reads back
// bit for bit, laid out as torch.save lays it out (64-byte aligned storages, archive/ names);
// the zip32 limits and bad tensors are clear errors, and a failed save leaves no file behind.
// That PyTorch itself loads these files is tests/models/check_pth_export.py's part.
#include "testing.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "data/temp_dir.h"
#include "models/io/pth.h"
#include "models/io/pth_writer.h"
#include "models/io/zip_archive.h"
#include "models/io/zip_writer.h"

using namespace sima;
using namespace sima::testing;

namespace {

Tensor filled(const Shape& s, uint64_t seed) {
  Tensor t = empty(s);
  Generator g(seed);
  g.fill_normal(t.data(), t.numel());
  return t;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), sizeof(float) * size_t(a.numel())) == 0;
}

}  // namespace

TEST_CASE("zip writer: the reader finds every entry, its bytes, its CRC; data 64-byte aligned") {
  ZipWriter w("test.zip");
  const std::vector<std::pair<std::string, std::string>> entries = {
      {"archive/data.pkl", "pickle"}, {"archive/data/0", std::string(1000, '\x7f')}, {"archive/data/1", ""},
      {"archive/version", "3\n"}};
  for (const auto& [n, d] : entries) w.add(n, d);
  std::string bytes = w.finish();
  const ZipArchive zip(bytes, "test.zip");
  REQUIRE(zip.entries().size() == entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const ZipArchive::Entry& e = zip.entries()[i];
    CHECK(e.name == entries[i].first);
    CHECK(e.data_offset % 64 == 0);
    CHECK(zip.read(e) == entries[i].second);
    CHECK(e.crc32 == crc32_of(entries[i].second));
  }
  CHECK(crc32_of("123456789") == 0xcbf43926u);  // the CRC-32 check value (APPNOTE, zlib)
  // A flipped data byte fails its entry's CRC: the writer really stored a CRC of the data.
  bytes[zip.entries()[1].data_offset + 3] ^= 1;
  CHECK(error_message([&] { ZipArchive(bytes, "t").read(ZipArchive(bytes, "t").entries()[1]); }).find("CRC-32") !=
        std::string::npos);

  ZipWriter twice("t.zip");
  twice.add("a", "x");
  CHECK(error_message([&] { twice.add("a", "y"); }) == "t.zip: two zip entries named 'a'");
  twice.finish();
  CHECK(error_message([&] { twice.add("b", "y"); }).find("added after the archive was finished") != std::string::npos);
}

TEST_CASE("zip writer: 65535 entries would need ZIP64, refused with a clear error") {
  ZipWriter w("many.zip");
  for (int i = 0; i < 65534; ++i) w.add(std::to_string(i), "");
  const std::string msg = error_message([&] { w.add("one-more", ""); });
  CHECK(msg == "many.zip: more than 65534 zip entries need ZIP64, which this writer does not write");
  const ZipArchive zip(w.finish(), "many.zip");  // the entries written before stay a valid archive
  CHECK(zip.entries().size() == 65534);
}

TEST_CASE("pth writer: load_pth_state_dict reads back every tensor bit for bit, in order") {
  std::vector<PthTensor> sd = {{"blocks.0.attn.qkv.weight", filled(Shape({6, 2}), 1)},
                               {"temperature", filled(Shape({2, 1, 1}), 2)},
                               {"scalar", filled(Shape(std::vector<int64_t>{}), 3)},
                               {"big", filled(Shape({70000}), 4)},  // numel needs BININT (> 65535)
                               {"empty", empty(Shape({0, 3}))},
                               {"bn.num_batches_tracked", full(Shape(std::vector<int64_t>{}), 300.f), StorageDtype::Int64}};
  for (const std::string wrap : {"", "model"}) {
    CAPTURE(wrap);
    const PthStateDict back = load_pth_state_dict_bytes(pth_bytes(sd, wrap, "x.pth"), "x.pth");
    CHECK(back.where == (wrap.empty() ? "" : "['model']"));
    REQUIRE(back.tensors.size() == sd.size());
    for (size_t i = 0; i < sd.size(); ++i) {
      CHECK(back.tensors[i].first == sd[i].name);
      CHECK(same_bits(back.tensors[i].second, sd[i].tensor));
    }
  }
  // The layout torch.save writes: data.pkl first, byteorder, one storage per tensor, version.
  const ZipArchive zip(pth_bytes(sd, "", "x.pth"), "x.pth");
  std::vector<std::string> names;
  for (const auto& e : zip.entries()) names.push_back(e.name);
  CHECK(names == std::vector<std::string>{"archive/data.pkl", "archive/byteorder", "archive/data/0", "archive/data/1",
                                          "archive/data/2", "archive/data/3", "archive/data/4", "archive/data/5",
                                          "archive/version"});
  CHECK(zip.read(*zip.find("archive/version")) == "3\n");
  CHECK(zip.find("archive/data/5")->size == 8);  // int64
  const std::string pkl = zip.read(*zip.find("archive/data.pkl"));
  CHECK(pkl.rfind("\x80\x02", 0) == 0);  // protocol 2, as torch.save
  CHECK(pkl.find("ctorch\nLongStorage\n") != std::string::npos);
  CHECK(pkl.find("ctorch._utils\n_rebuild_tensor_v2\n") != std::string::npos);
}

TEST_CASE("pth writer: bad tensors are errors; a failed save leaves the old file and no temporary") {
  CHECK(error_message([] { pth_bytes({{"n", full(Shape({2}), 0.5f), StorageDtype::Int64}}, "", "x.pth"); }) ==
        "x.pth: tensor 'n' is written as int64 but holds 0.5 at 0");
  CHECK(error_message([] { pth_bytes({{"h", full(Shape({2}), 1.f), StorageDtype::Float16}}, "", "x.pth"); }) ==
        "x.pth: tensor 'h' as float16 (only float32 and int64 are written)");
  CHECK(error_message([] { pth_bytes({{"a", full(Shape({1}), 1.f)}, {"a", full(Shape({1}), 1.f)}}, "", "x.pth"); }) ==
        "x.pth: tensor 1 ('a') is undefined, unnamed or named twice");
  TempDir dir;
  const std::string path = dir.file("model.pth");
  save_pth(path, {{"w", full(Shape({3}), 2.f)}});
  CHECK(load_pth_state_dict(path).tensors.size() == 1);
  CHECK(error_message([&] { save_pth(path, {{"n", full(Shape({1}), 0.5f), StorageDtype::Int64}}); }).find("int64") !=
        std::string::npos);
  CHECK(load_pth_state_dict(path).tensors.at(0).first == "w");  // the old file, whole
  const std::string into_dir = dir.dir("sub");  // a folder where the file should go: rename fails
  CHECK(error_message([&] { save_pth(into_dir, {{"w", full(Shape({3}), 2.f)}}); }).find(into_dir) != std::string::npos);
  CHECK(dir.listing() == std::vector<std::string>{"model.pth", "sub"});  // no temporary left
}
