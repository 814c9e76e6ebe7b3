// The restricted unpickler (models/io/torch_pickle.h) and the zip reader (models/io/zip_archive.h) on
// hand-written bytes: what a state dict needs is read, everything else is refused by name.
// (Whole torch.save files from PyTorch are tests/models/test_pth.cpp's.)
#include "testing.h"

#include <zlib.h>

#include <cstring>
#include <functional>

#include "models/io/pth.h"
#include "models/io/torch_pickle.h"
#include "models/io/zip_archive.h"

using namespace sima;
using namespace std::string_literals;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string P(const std::string& body) { return std::string("\x80\x02", 2) + body + "."; }

void put16(std::string& s, uint16_t v) { s += char(v & 0xff), s += char(v >> 8); }
void put32(std::string& s, uint32_t v) { put16(s, uint16_t(v & 0xffff)), put16(s, uint16_t(v >> 16)); }

// A STORED zip of (name, data) entries, as torch.save lays it out (without the alignment padding).
std::string make_zip(const std::vector<std::pair<std::string, std::string>>& entries) {
  std::string out, cd;
  for (const auto& [name, data] : entries) {
    const uint32_t crc = uint32_t(::crc32(0, reinterpret_cast<const Bytef*>(data.data()), uInt(data.size())));
    const uint32_t at = uint32_t(out.size());
    for (std::string* h : {&out, &cd}) {
      put32(*h, h == &out ? 0x04034b50 : 0x02014b50);
      if (h == &cd) put16(*h, 20);
      put16(*h, 20), put16(*h, 0), put16(*h, 0), put16(*h, 0), put16(*h, 0);
      put32(*h, crc), put32(*h, uint32_t(data.size())), put32(*h, uint32_t(data.size()));
      put16(*h, uint16_t(name.size())), put16(*h, 0);
      if (h == &cd) put16(*h, 0), put16(*h, 0), put16(*h, 0), put32(*h, 0), put32(*h, at);
      *h += name;
    }
    out += data;
  }
  const uint32_t cd_at = uint32_t(out.size());
  out += cd;
  put32(out, 0x06054b50), put16(out, 0), put16(out, 0);
  put16(out, uint16_t(entries.size())), put16(out, uint16_t(entries.size()));
  put32(out, uint32_t(cd.size())), put32(out, cd_at), put16(out, 0);
  return out;
}

// data.pkl of {'w': tensor(storage '0' float32 of 4, offset, size (2,), stride (stride,))}.
std::string one_tensor_pickle(int offset, int stride, const std::string& storage = "FloatStorage") {
  return P("}X\x01\0\0\0wctorch._utils\n_rebuild_tensor_v2\n((X\x07\0\0\0storagectorch\n"s + storage +
           "\nX\x01\0\0\0"s + "0X\x03\0\0\0cpuK\x04tQK"s + char(offset) + "K\x02\x85K" + char(stride) +
           "\x85\x89" + "ccollections\nOrderedDict\n)RtRs");
}

}  // namespace

TEST_CASE("plain values, memo and containers") {
  // {'a': [1, -2, 3.5, True, None], 'b': (300, 70000, -1 via LONG1)}
  const std::string body = "}q\0(X\x01\0\0\0a]q\x01(K\x01J\xfe\xff\xff\xffG\x40\x0c\0\0\0\0\0\0\x88Ne"s +
                           "X\x01\0\0\0bM\x2c\x01J\x70\x11\x01\0\x8a\x01\xff\x87u"s;
  PyRef v = unpickle_restricted(P(body), "t");
  REQUIRE(v->kind == PyValue::Dict);
  REQUIRE(v->dict.size() == 2);
  const PyValue& a = *v->dict[0].second;
  REQUIRE(a.kind == PyValue::List);
  REQUIRE(a.items.size() == 5);
  CHECK(a.items[0]->i == 1);
  CHECK(a.items[1]->i == -2);
  CHECK(a.items[2]->f == 3.5);
  CHECK(a.items[3]->kind == PyValue::Bool);
  CHECK(a.items[4]->kind == PyValue::None);
  const PyValue& b = *v->dict[1].second;
  REQUIRE(b.items.size() == 3);
  CHECK(b.items[0]->i == 300);
  CHECK(b.items[1]->i == 70000);
  CHECK(b.items[2]->i == -1);
  CHECK(v->depth == 3);  // dict > list > int
}

TEST_CASE("globals outside the allow-list are refused by name, never run") {
  CHECK(error_of([] { unpickle_restricted(P("cposix\nsystem\nX\x04\0\0\0true\x85R"s), "x.pkl"); })
            .find("x.pkl: the pickle refers to the global 'posix.system'") == 0);
  CHECK(error_of([] { unpickle_restricted(P("\x8c\x08" "builtins\x8c\x04" "eval\x93"s), "x"); })
            .find("global 'builtins.eval'") != std::string::npos);
  CHECK(error_of([] { unpickle_restricted(P("ctorch\nload\n"), "x"); }).find("'torch.load'") != std::string::npos);
  // An allowed global in a place it may not be called.
  CHECK(error_of([] { unpickle_restricted(P("ctorch\nFloatStorage\n)R"), "x"); }).find("not callable") != std::string::npos);
  CHECK(error_of([] { unpickle_restricted(P("})\x81"), "x"); }).find("NEWOBJ at byte 4 creates a dict") != std::string::npos);
  // argparse.Namespace(lr=0.5): an empty dict, the attributes dropped.
  PyRef ns = unpickle_restricted(P("cargparse\nNamespace\n)\x81}X\x02\0\0\0lrG\x3f\xe0\0\0\0\0\0\0sb"s), "x");
  CHECK(ns->kind == PyValue::Dict);
  CHECK(ns->dict.empty());
  CHECK(error_of([] { unpickle_restricted(P("I1\n"), "x"); }).find("opcode 0x49 'I'") != std::string::npos);
}

TEST_CASE("nesting, cycles and changes after adoption are bounded or refused") {
  auto nested = [](int n) { return P(std::string(size_t(n), ']') + std::string(size_t(n - 1), 'a')); };
  CHECK(unpickle_restricted(nested(kMaxPickleDepth), "x")->depth == kMaxPickleDepth);
  CHECK(error_of([&] { unpickle_restricted(nested(kMaxPickleDepth + 1), "x"); }).find("deeper than 64") !=
        std::string::npos);
  CHECK(error_of([] { unpickle_restricted(P("]q\0h\0a"s), "x"); }).find("inside itself") !=
        std::string::npos);
  // l = []; m = [l]; l.append(m): l was frozen when it went into m.
  CHECK(error_of([] { unpickle_restricted(P("]q\0]q\x01h\0ah\0h\x01" "a"s), "x"); })
            .find("after putting it inside another") != std::string::npos);
  CHECK(error_of([] { unpickle_restricted(P("h\x05"), "x"); }).find("memo entry 5") != std::string::npos);
  CHECK(error_of([] { unpickle_restricted(std::string("\x80\x02]", 3), "x"); }).find("without STOP") !=
        std::string::npos);
  CHECK(error_of([] { unpickle_restricted(std::string("\x80\x02X\xff\xff\xff\x7f", 7), "x"); })
            .find("runs past the end") != std::string::npos);
  CHECK(error_of([] { unpickle_restricted(P("a"), "x"); }).find("pops an empty stack") != std::string::npos);
}

TEST_CASE("tensors: views with offsets and strides, dtypes, bounds") {
  std::string f32(16, '\0');
  const float vals[4] = {1.f, 2.f, 3.f, 4.f};
  std::memcpy(f32.data(), vals, 16);
  auto load = [&](const std::string& pkl, const std::string& storage) {
    return load_pth_state_dict_bytes(make_zip({{"a/data.pkl", pkl}, {"a/data/0", storage}}), "m.pth");
  };
  PthStateDict sd = load(one_tensor_pickle(1, 2), f32);  // elements 1 and 3
  REQUIRE(sd.tensors.size() == 1);
  CHECK(sd.tensors[0].first == "w");
  CHECK(sd.tensors[0].second.data()[0] == 2.f);
  CHECK(sd.tensors[0].second.data()[1] == 4.f);
  // float16 1.0, -2.0, 0.5, 65504 and bfloat16 of the same.
  const std::string f16("\x00\x3c\x00\xc0\x00\x38\xff\x7b", 8), bf16("\x80\x3f\x00\xc0\x00\x3f\x80\x47", 8);
  sd = load(one_tensor_pickle(2, 1, "HalfStorage"), f16);
  CHECK(sd.tensors[0].second.data()[0] == 0.5f);
  CHECK(sd.tensors[0].second.data()[1] == 65504.f);
  sd = load(one_tensor_pickle(0, 1, "BFloat16Storage"), bf16);
  CHECK(sd.tensors[0].second.data()[0] == 1.f);
  CHECK(sd.tensors[0].second.data()[1] == -2.f);
  CHECK(error_of([&] { load(one_tensor_pickle(2, 2), f32); }).find("reaches element 4 of a storage of 4") !=
        std::string::npos);
  CHECK(error_of([&] { load(one_tensor_pickle(0, 1), f32.substr(0, 12)); }).find("has 12 bytes") != std::string::npos);
  CHECK(error_of([&] { load(one_tensor_pickle(0, 1, "UntypedStorage"), f32); }).find("global 'torch.UntypedStorage'") != std::string::npos);
}

TEST_CASE("zip: truncation, CRC and layout faults name the file") {
  const std::string pkl = one_tensor_pickle(0, 1);
  std::string f32(16, '\0');
  const std::string zip = make_zip({{"a/data.pkl", pkl}, {"a/data/0", f32}});
  CHECK(load_pth_state_dict_bytes(zip, "m.pth").tensors.size() == 1);
  CHECK(error_of([&] { load_pth_state_dict_bytes(zip.substr(0, zip.size() - 1), "m.pth"); })
            .find("m.pth: no zip end-of-central-directory record") == 0);
  std::string bad = zip;
  bad[zip.find(pkl) + pkl.size() + 40] ^= 1;  // a byte of the storage
  CHECK(error_of([&] { load_pth_state_dict_bytes(bad, "m.pth"); }).find("'a/data/0' fails its CRC-32 check") !=
        std::string::npos);
  CHECK(error_of([&] { load_pth_state_dict_bytes(make_zip({{"a/x.pkl", pkl}}), "m.pth"); }).find("no <name>/data.pkl") !=
        std::string::npos);
  CHECK(error_of([&] { load_pth_state_dict_bytes(make_zip({{"a/data.pkl", pkl}}), "m.pth"); })
            .find("storage '0', which is not in the archive") != std::string::npos);
  // torch.save's legacy format: PROTO 2, then its magic number as a LONG1 of 10 bytes
  const std::string legacy("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19", 14);
  CHECK(error_of([&] { load_pth_state_dict_bytes(legacy, "m.pth"); }).find("legacy") != std::string::npos);
  CHECK(error_of([&] { load_pth_state_dict_bytes(std::string("\x80\x02\x8a\x0a", 4), "m.pth"); })
            .find("a plain Python pickle") != std::string::npos);
  CHECK(error_of([&] { load_pth_state_dict_bytes(make_zip({{"a/data.pkl", P("K\x01")}}), "m.pth"); })
            .find("is of type int, not a state dict") != std::string::npos);
}
