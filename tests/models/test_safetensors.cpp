// safetensors: round trips (bit-identical, 0-d and empty tensors, metadata), the exact
// bytes of small files (ours written out by hand, and the reference implementation's own
// test vectors), hostile files (every truncation, bad lengths, bad JSON, bad types, bad
// offsets, absurd shapes), failed saves that must leave no temporary file and no damage,
// and Python reading our file (struct + json, then PyTorch) and writing one we read.
#include "testing.h"

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <bit>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "data/temp_dir.h"
#include "models/io/safetensors.h"

using namespace sima;
using namespace sima::testing;
namespace fs = std::filesystem;

namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE(f.good());
  return std::string(std::istreambuf_iterator<char>(f), {});
}
void write_bytes(const std::string& path, const std::string& bytes) {
  // A new file each time: ext4 flushes a file truncated over old data on close (auto_da_alloc),
  // which would make the thousand rewrites below take seconds.
  std::error_code ec;
  fs::remove(path, ec);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(f.good());
}

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(n >> (8 * i));
  return s;
}
std::string f32_bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}
// A file made of a length, the header exactly as given (no padding), and the data.
std::string make_file(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}
std::string bytes_of(std::initializer_list<int> b) {
  std::string s;
  for (int x : b) s.push_back(static_cast<char>(x));
  return s;
}

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }
void check_bit_identical(const Tensor& got, const Tensor& want) {
  REQUIRE(got.shape() == want.shape());
  for (int64_t i = 0; i < want.numel(); ++i) {
    INFO("element " << i);
    CHECK(bits(got.data()[i]) == bits(want.data()[i]));
  }
}

bool no_temp_files(const TempDir& d) { return temp_files_in(d.str()).empty(); }

// The tensors of the round trip: names out of order, a 0-d tensor, two empty ones, and
// values that a lossy path would change (NaN payload, ±inf, -0, subnormals, extremes).
NamedTensors sample_tensors() {
  Tensor special = from_vector({std::bit_cast<float>(0x7FC01234u), std::numeric_limits<float>::infinity(),
                                -std::numeric_limits<float>::infinity(), -0.0f,
                                std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max(),
                                std::numeric_limits<float>::lowest(), 0.1f});
  return {{"head.weight", randn_leaf({3, 5}, 7, false)},
          {"blocks.0.attn.qkv.weight", randn_leaf({6, 2, 1, 1, 2, 1}, 8, false)},
          {"special", special},
          {"cls_token", randn_leaf({1, 1, 4}, 9, false)},
          {"scale", scalar_tensor(-1.5f)},
          {"empty", zeros({0, 3})},
          {"zero_dim", zeros({0})}};
}
const std::map<std::string, std::string> kMetadata = {
    {"config", "{\"arch\": \"deit\",\n \"note\": \"tab\\t, quote \\\" and ünïcödé ✓\"}"},
    {"format", "pt"},
    {"empty", ""}};

}  // namespace

// ---- round trips and exact bytes ------------------------------------------------------

TEST_CASE("round trip: names, shapes, bit-identical values and metadata") {
  TempDir d;
  NamedTensors in = sample_tensors();
  const std::string path = d.file("model.safetensors");
  save_safetensors(path, in, kMetadata);

  SafetensorsFile f = load_safetensors(path);
  REQUIRE(f.tensors.size() == in.size());
  // The file holds them sorted by name.
  std::vector<std::string> names;
  for (auto& [n, t] : f.tensors) names.push_back(n);
  CHECK(names == std::vector<std::string>{"blocks.0.attn.qkv.weight", "cls_token", "empty", "head.weight",
                                          "scale", "special", "zero_dim"});
  for (auto& [name, t] : in) {
    CAPTURE(name);
    Tensor got = f.get(name);
    REQUIRE(got.defined());
    check_bit_identical(got, t);
  }
  CHECK(f.get("scale").dim() == 0);
  CHECK(f.get("empty").shape() == Shape{0, 3});
  CHECK(!f.get("missing").defined());
  CHECK(f.metadata == kMetadata);
  CHECK(read_safetensors_metadata(path) == kMetadata);

  // The data starts 8-byte aligned, and the file is exactly length + header + data.
  std::string raw = read_bytes(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(raw[i]);
  CHECK(n % 8 == 0);
  int64_t floats = 0;
  for (auto& [name, t] : in) floats += t.numel();
  CHECK(raw.size() == 8 + n + 4 * floats);

  // Deterministic: the same tensors in another order give the same bytes.
  NamedTensors reversed(in.rbegin(), in.rend());
  save_safetensors(path, reversed, kMetadata);  // also overwrites an existing file
  CHECK(read_bytes(path) == raw);
  CHECK(d.listing() == std::vector<std::string>{"model.safetensors"});

  // No tensors, no metadata.
  save_safetensors(d.file("nothing.safetensors"), {});
  SafetensorsFile none = load_safetensors(d.file("nothing.safetensors"));
  CHECK(none.tensors.empty());
  CHECK(none.metadata.empty());
}

TEST_CASE("I8 tensors (quantized checkpoints): written after the F32 ones, read back as floats") {
  TempDir d;
  const std::string path = d.file("q.safetensors");
  const NamedTensors in = {{"w", from_vector({-127.f, 0.f, 3.f, 127.f}, {2, 2})}, {"s", from_vector({0.5f, 2.f})}};
  save_safetensors(path, in, {}, {"w"});
  const SafetensorsFile f = load_safetensors(path);
  CHECK(f.dtypes.at("w") == "I8");
  CHECK(f.dtypes.at("s") == "F32");
  CHECK(to_vector(f.get("w")) == std::vector<float>{-127.f, 0.f, 3.f, 127.f});
  CHECK(f.tensors[0].first == "s");  // the reference's order: F32 (alignment 4) before I8 (1)
  const std::string raw = read_bytes(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(raw[i]);
  CHECK(raw.size() == 8 + n + 2 * 4 + 4);  // 2 floats, then 4 bytes
  // Only integers in [-127, 127] can be written as I8, and only tensors that are there
  for (float bad : {0.5f, 128.f, -128.f, NAN}) {
    CAPTURE(bad);
    const std::string e = error_message([&] { save_safetensors(path, {{"w", from_vector({bad})}}, {}, {"w"}); });
    CHECK(e.find("tensor 'w' is written as I8 but holds") != std::string::npos);
  }
  CHECK(error_message([&] { save_safetensors(path, in, {}, {"x"}); }).find("I8 tensor 'x' is not among the tensors") !=
        std::string::npos);
}

TEST_CASE("exact bytes of a tiny file, written out by hand") {
  TempDir d;
  const std::string path = d.file("tiny.safetensors");
  save_safetensors(path, {{"b", from_vector({1.0f, -2.0f})}, {"a", scalar_tensor(0.5f)}}, {{"format", "pt"}});

  // The header, piece by piece (compact JSON, __metadata__ first, tensors by name):
  //   {                                                   1
  //   "__metadata__":                                    15
  //   {"format":"pt"}                                    15
  //   ,"a":                                               5
  //   {"dtype":"F32","shape":[],"data_offsets":[0,4]}    47
  //   ,"b":                                               5
  //   {"dtype":"F32","shape":[2],"data_offsets":[4,12]}  49
  //   }                                                   1
  // = 138 bytes, padded with 6 spaces to 144 = 0x90, a multiple of 8.
  const std::string header =
      "{\"__metadata__\":{\"format\":\"pt\"},"
      "\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}"
      "      ";
  REQUIRE(header.size() == 144);
  const std::string expected = bytes_of({0x90, 0, 0, 0, 0, 0, 0, 0}) + header +
                               bytes_of({0x00, 0x00, 0x00, 0x3F,     // a = 0.5  = 0x3F000000
                                         0x00, 0x00, 0x80, 0x3F,     // b[0] = 1 = 0x3F800000
                                         0x00, 0x00, 0x00, 0xC0});  // b[1] = -2 = 0xC0000000
  CHECK(read_bytes(path) == expected);
}

TEST_CASE("the reference implementation's own test vectors, byte for byte") {
  // huggingface/safetensors, safetensors/src/tensor.rs: test_serialization,
  // test_serialization_forced_alignement and test_empty.
  TempDir d;
  const std::string p = d.file("ref.safetensors");
  Tensor six = from_vector({0, 1, 2, 3, 4, 5});
  const std::string data = f32_bytes({0, 1, 2, 3, 4, 5});

  save_safetensors(p, {{"attn.0", reshape(six, {1, 2, 3})}});
  CHECK(read_bytes(p) == bytes_of({64, 0, 0, 0, 0, 0, 0, 0}) +
                             "{\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,3],\"data_offsets\":[0,24]}}" +
                             data);

  save_safetensors(p, {{"attn0", reshape(six, {1, 1, 2, 3})}});
  CHECK(read_bytes(p) == bytes_of({72, 0, 0, 0, 0, 0, 0, 0}) +
                             "{\"attn0\":{\"dtype\":\"F32\",\"shape\":[1,1,2,3],\"data_offsets\":[0,24]}}" +
                             "       " + data);

  save_safetensors(p, {});
  CHECK(read_bytes(p) == bytes_of({8, 0, 0, 0, 0, 0, 0, 0}) + "{}      ");
  save_safetensors(p, {}, {{"framework", "pt"}});
  CHECK(read_bytes(p) == bytes_of({40, 0, 0, 0, 0, 0, 0, 0}) + "{\"__metadata__\":{\"framework\":\"pt\"}}     ");
}

TEST_CASE("reads F16 and BF16 (converted to float32) and other writers' layouts") {
  TempDir d;
  const std::string p = d.file("half.safetensors");
  // F16: 1, -2, 65504 (max), 2^-24 (smallest subnormal), inf, -0.  BF16: 1, -3.5.
  // Header in pretty JSON, data of "b" before "a", no padding: all allowed by the format.
  std::string f16 = bytes_of({0x00, 0x3C, 0x00, 0xC0, 0xFF, 0x7B, 0x01, 0x00, 0x00, 0x7C, 0x00, 0x80});
  std::string bf16 = bytes_of({0x80, 0x3F, 0x60, 0xC0});
  write_bytes(p, make_file("{ \"a\": {\"dtype\": \"F16\", \"shape\": [2, 3], \"data_offsets\": [4, 16]},\n"
                           "  \"b\": {\"shape\": [2], \"data_offsets\": [0, 4], \"dtype\": \"BF16\", \"x\": 1} }",
                           bf16 + f16));
  SafetensorsFile f = load_safetensors(p);
  REQUIRE(f.tensors.size() == 2);
  CHECK(f.tensors[0].first == "b");  // file order
  check_close(f.get("b"), {1.0f, -3.5f}, 0, 0);
  Tensor a = f.get("a");
  CHECK(a.shape() == Shape{2, 3});
  check_bit_identical(a, from_vector({1.0f, -2.0f, 65504.0f, std::ldexp(1.0f, -24),
                                      std::numeric_limits<float>::infinity(), -0.0f},
                                     {2, 3}));
}

// ---- hostile files --------------------------------------------------------------------

namespace {
// Writes `bytes` as a file and checks that loading it (and reading its metadata) throws a
// sima::Error whose message contains `fault` and names the file.
void check_rejected(const TempDir& d, const std::string& bytes, const std::string& fault) {
  const std::string p = d.file("bad.safetensors");
  write_bytes(p, bytes);
  CAPTURE(fault);
  CHECK_THROWS_WITH_AS(load_safetensors(p), doctest::Contains(fault.c_str()), Error);
  CHECK_THROWS_WITH_AS(read_safetensors_metadata(p), doctest::Contains((p + ": ").c_str()), Error);
}
std::string one(const std::string& entry) { return "{\"t\":" + entry + "}"; }
}  // namespace

TEST_CASE("every truncation of a valid file is an error, never a crash") {
  TempDir d;
  const std::string good = d.file("good.safetensors");
  save_safetensors(good, {{"b", from_vector({1.0f, -2.0f})}, {"a", scalar_tensor(0.5f)}, {"e", zeros({0})}},
                   {{"format", "pt"}});
  const std::string raw = read_bytes(good);
  const std::string p = d.file("cut.safetensors");
  int rejected = 0;
  for (size_t len = 0; len < raw.size(); ++len) {
    write_bytes(p, raw.substr(0, len));
    try {
      load_safetensors(p);
    } catch (const Error& e) {
      ++rejected;
      continue;
    }
    FAIL("a prefix of " << len << " bytes loaded");
  }
  CHECK(rejected == static_cast<int>(raw.size()));
  check_rejected(d, raw + "x", "bytes [12, 13) at the end of the data buffer belong to no tensor");
  write_bytes(p, raw);
  CHECK(load_safetensors(p).tensors.size() == 3);
}

TEST_CASE("random mutations of a valid file load or throw sima::Error, never crash") {
  TempDir d;
  const std::string good = d.file("good.safetensors");
  save_safetensors(good, {{"w", from_vector({1.0f, -2.0f, 3.0f})}, {"s", scalar_tensor(0.5f)}}, {{"k", "v"}});
  const std::string raw = read_bytes(good), p = d.file("mutant.safetensors");
  const std::string alphabet = "{}[]\",:0123456789-.e ";
  Generator g(1234);
  int loaded = 0, rejected = 0;
  for (int trial = 0; trial < 1000; ++trial) {
    std::string m = raw;
    for (uint64_t k = 0, edits = 1 + g.randint(3); k < edits; ++k)
      m[g.randint(m.size())] = g.uniform() < 0.7f ? alphabet[g.randint(alphabet.size())]
                                                  : static_cast<char>(g.randint(256));
    write_bytes(p, m);
    try {
      load_safetensors(p);
      ++loaded;
    } catch (const Error&) {
      ++rejected;
    }
  }
  CHECK(loaded + rejected == 1000);
  CHECK(rejected > 500);
}

TEST_CASE("hostile header lengths") {
  TempDir d;
  check_rejected(d, "", "the file is 0 bytes, too short");
  check_rejected(d, "1234567", "the file is 7 bytes, too short");
  check_rejected(d, le64(uint64_t(1) << 63) + "{}",
                 "the header length 9223372036854775808 runs past the end of the file (2 bytes");
  check_rejected(d, le64(~uint64_t(0)), "the header length 18446744073709551615 runs past the end");
  check_rejected(d, le64(3) + "{}", "the header length 3 runs past the end of the file (2 bytes");
  // A sparse file of 100 MB + 16 bytes whose header length is one byte over the limit.
  const std::string p = d.file("huge.safetensors");
  write_bytes(p, le64(kSafetensorsMaxHeader + 1));
  fs::resize_file(p, kSafetensorsMaxHeader + 16);
  CHECK_THROWS_WITH_AS(load_safetensors(p), doctest::Contains("the header length 100000001 exceeds the limit"),
                       Error);
}

TEST_CASE("hostile headers: JSON, types, dtypes") {
  TempDir d;
  const std::string f32 = "\"dtype\":\"F32\"";
  check_rejected(d, make_file("{\"t\":", ""), "the header is not valid JSON");
  check_rejected(d, make_file("{} x", ""), "the header is not valid JSON");
  check_rejected(d, make_file("{\"\xff\":1}", ""), "the header is not valid UTF-8 (byte 2 of the header)");
  check_rejected(d, make_file("{\"\xc0\xaf\":1}", ""), "not valid UTF-8");      // overlong '/'
  check_rejected(d, make_file("{\"\xed\xa0\x80\":1}", ""), "not valid UTF-8");  // a surrogate
  check_rejected(d, make_file("[]", ""), "the header is a JSON array, not an object");
  check_rejected(d, make_file(std::string(100000, '[') + std::string(100000, ']'), ""),
                 "the header is a JSON array, not an object");
  check_rejected(d, make_file(one("3"), ""), "tensor 't': the entry is a JSON number, not an object");
  check_rejected(d, make_file(one("{\"shape\":[],\"data_offsets\":[0,4]}"), "abcd"),
                 "tensor 't': the entry has no \"dtype\"");
  check_rejected(d, make_file(one("{\"dtype\":4,\"shape\":[],\"data_offsets\":[0,4]}"), "abcd"),
                 "tensor 't': \"dtype\" is a JSON number, not a string");
  for (const char* dt : {"I64", "F64", "float32", "U8", ""})
    check_rejected(d, make_file(one("{\"dtype\":\"" + std::string(dt) + "\",\"shape\":[],\"data_offsets\":[0,4]}"), "abcd"),
                   "tensor 't': dtype '" + std::string(dt) + "' is not supported (F32, F16, BF16 or I8)");
  check_rejected(d, make_file(one("{" + f32 + ",\"shape\":\"2\",\"data_offsets\":[0,8]}"), "abcdefgh"),
                 "\"shape\" is a JSON string, not a list");
  check_rejected(d, make_file(one("{" + f32 + ",\"shape\":[2.0],\"data_offsets\":[0,8]}"), "abcdefgh"),
                 "the shape holds a JSON number, not an integer");
  check_rejected(d, make_file(one("{" + f32 + ",\"shape\":[[2]],\"data_offsets\":[0,8]}"), "abcdefgh"),
                 "the shape holds a JSON array, not an integer");
  check_rejected(d, make_file(one("{" + f32 + ",\"shape\":[1,1,1,1,1,1,1],\"data_offsets\":[0,4]}"), "abcd"),
                 "the shape has 7 dimensions, at most 6 are supported");
  // Duplicate keys, at the top and inside an entry.
  const std::string e4 = "{" + f32 + ",\"shape\":[],\"data_offsets\":[0,4]}";
  check_rejected(d, make_file("{\"t\":" + e4 + ",\"t\":" + e4 + "}", "abcd"), "the header has the key 't' twice");
  check_rejected(d, make_file(one("{" + f32 + "," + f32 + ",\"shape\":[],\"data_offsets\":[0,4]}"), "abcd"),
                 "the header has the key 'dtype' twice");
  // Metadata: an object of strings.
  check_rejected(d, make_file("{\"__metadata__\":{\"k\":1}}", ""),
                 "__metadata__ value of 'k' is a JSON number, not a string");
  check_rejected(d, make_file("{\"__metadata__\":[\"k\"]}", ""), "__metadata__ is a JSON array, not an object");
  // Not a file at all.
  CHECK_THROWS_WITH_AS(load_safetensors(d.file("missing.safetensors")),
                       doctest::Contains("missing.safetensors: cannot open: No such file or directory"), Error);
  CHECK_THROWS_WITH_AS(load_safetensors(d.str()), doctest::Contains(": not a regular file"), Error);
}

TEST_CASE("hostile headers: shapes and offsets") {
  TempDir d;
  auto entry = [](const std::string& name, const std::string& shape, const std::string& offsets) {
    return "\"" + name + "\":{\"dtype\":\"F32\",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}";
  };
  const std::string bad = d.file("bad.safetensors");
  // The example of the brief, message in full.
  write_bytes(bad, make_file("{" + entry("head.weight", "[10,20]", "[0,400]") + "}", std::string(400, 'x')));
  CHECK_THROWS_WITH_AS(load_safetensors(bad),
                       (bad + ": tensor 'head.weight': data_offsets [0, 400] do not match shape (10, 20) of F32 "
                              "(800 bytes)").c_str(),
                       Error);

  check_rejected(d, make_file("{" + entry("t", "[-1,4]", "[0,0]") + "}", ""),
                 "tensor 't': the shape has a negative dimension -1");
  // 2^62 · 4 elements of 4 bytes overflow; so does 2^63 alone; and 2^62 · 2^62 · 0 (we
  // bound the product of the nonzero dims so that no partial product can overflow).
  check_rejected(d, make_file("{" + entry("t", "[4611686018427387904,4]", "[0,0]") + "}", ""),
                 "tensor 't': the shape's size overflows 64 bits");
  check_rejected(d, make_file("{" + entry("t", "[9223372036854775808]", "[0,0]") + "}", ""),
                 "the shape's size overflows 64 bits");
  check_rejected(d, make_file("{" + entry("t", "[18446744073709551615]", "[0,0]") + "}", ""),
                 "the shape's size overflows 64 bits");
  check_rejected(d, make_file("{" + entry("t", "[4611686018427387904,4611686018427387904,0]", "[0,0]") + "}", ""),
                 "the shape's size overflows 64 bits");
  check_rejected(d, make_file("{" + entry("t", "[1e30]", "[0,4]") + "}", "abcd"),
                 "the shape holds a JSON number, not an integer");
  // A big but representable shape whose offsets cannot be right.
  check_rejected(d, make_file("{" + entry("t", "[1000000000,1000000000]", "[0,4]") + "}", "abcd"),
                 "data_offsets [0, 4] do not match shape (1000000000, 1000000000) of F32 (4000000000000000000 bytes)");

  for (const char* offs : {"[0]", "[0,4,8]", "[-4,0]", "[0,4.0]", "\"0,4\"", "[0,18446744073709551616]"})
    check_rejected(d, make_file("{" + entry("t", "[1]", offs) + "}", "abcd"),
                   "tensor 't': \"data_offsets\" must be a list of two non-negative integers");
  check_rejected(d, make_file("{" + entry("t", "[1]", "[8,4]") + "}", "abcdefgh"),
                 "data_offsets [8, 4] end before they begin");
  check_rejected(d, make_file("{" + entry("t", "[2]", "[0,8]") + "}", "abcd"),
                 "tensor 't': data_offsets [0, 8] lie outside the data buffer of 4 bytes");
  check_rejected(d, make_file("{" + entry("t", "[1]", "[18446744073709551611,18446744073709551615]") + "}", "abcd"),
                 "lie outside the data buffer of 4 bytes");
  check_rejected(d, make_file("{" + entry("a", "[2]", "[0,8]") + "," + entry("b", "[2]", "[4,12]") + "}",
                              std::string(12, 'x')),
                 "tensor 'b' (data_offsets [4, 12]) overlaps tensor 'a' (data_offsets [0, 8])");
  check_rejected(d, make_file("{" + entry("a", "[1]", "[0,4]") + "," + entry("b", "[1]", "[0,4]") + "}", "abcd"),
                 "overlaps tensor");
  check_rejected(d, make_file("{" + entry("a", "[1]", "[0,4]") + "," + entry("b", "[1]", "[8,12]") + "}",
                              std::string(12, 'x')),
                 "bytes [4, 8) of the data buffer belong to no tensor (a hole before tensor 'b')");
  check_rejected(d, make_file("{" + entry("a", "[1]", "[4,8]") + "}", std::string(8, 'x')),
                 "bytes [0, 4) of the data buffer belong to no tensor");
  check_rejected(d, make_file("{" + entry("a", "[1]", "[0,4]") + "}", std::string(8, 'x')),
                 "bytes [4, 8) at the end of the data buffer belong to no tensor");

  // Sanity: the same helpers make files that load.
  write_bytes(bad, make_file("{" + entry("a", "[1]", "[0,4]") + "," + entry("e", "[0,5]", "[4,4]") + "}",
                             f32_bytes({2.5f})));
  SafetensorsFile ok = load_safetensors(bad);
  CHECK(ok.get("a").item() == 2.5f);
  CHECK(ok.get("e").shape() == Shape{0, 5});
}

// ---- failed saves -------------------------------------------------------------------

TEST_CASE("a failed save leaves no temporary file and an existing file untouched") {
  TempDir d;
  const std::string path = d.file("model.safetensors");
  NamedTensors good = {{"w", from_vector({1, 2, 3})}};
  save_safetensors(path, good, {{"epoch", "1"}});
  const std::string before = read_bytes(path);
  auto unchanged = [&] {
    CHECK(read_bytes(path) == before);
    CHECK(no_temp_files(d));
  };

  SUBCASE("arguments that fail validation, before any file is created") {
    Tensor x = from_vector({4, 5});
    CHECK_THROWS_WITH_AS(save_safetensors(path, {{"w", x}, {"w", x}}),
                         (path + ": cannot save: two tensors are called 'w'").c_str(), Error);
    CHECK_THROWS_WITH_AS(save_safetensors(path, {{"__metadata__", x}}), doctest::Contains("is reserved"), Error);
    CHECK_THROWS_WITH_AS(save_safetensors(path, {{"", x}}), doctest::Contains("an empty name"), Error);
    CHECK_THROWS_WITH_AS(save_safetensors(path, {{"w", Tensor()}}), doctest::Contains("'w' is undefined"), Error);
    CHECK_THROWS_WITH_AS(save_safetensors(path, {{"w\xff", x}}), doctest::Contains("not valid UTF-8"), Error);
    CHECK_THROWS_WITH_AS(save_safetensors(path, {{"w", x}}, {{"k", "\xc3"}}),
                         doctest::Contains("metadata entry 'k' is not valid UTF-8"), Error);
    unchanged();
  }
  SUBCASE("the target's directory does not exist, or is a file") {
    const std::string missing = d.str() + "/no_such_dir/model.safetensors";
    CHECK_THROWS_WITH_AS(save_safetensors(missing, good),
                         doctest::Contains((missing + ": cannot open for writing (cannot create the temporary file " + missing +
                                           ".tmp.").c_str()),
                         Error);
    CHECK_THROWS_WITH_AS(save_safetensors(missing, good), doctest::Contains("No such file or directory"), Error);
    const std::string under_file = path + "/model.safetensors";  // ENOTDIR, also for root
    CHECK_THROWS_WITH_AS(save_safetensors(under_file, good), doctest::Contains(": Not a directory"), Error);
    unchanged();
  }
  SUBCASE("the rename fails after the temporary file was written") {
    fs::create_directory(d.file("taken"));  // rename(file, directory) fails with EISDIR
    const std::string taken = d.file("taken");
    CHECK_THROWS_WITH_AS(save_safetensors(taken, good),
                         doctest::Contains((": cannot save: rename of " + taken + ".tmp.").c_str()), Error);
    CHECK(fs::is_directory(taken));
    unchanged();
  }
  SUBCASE("the disk fills up mid-write (a file size limit: EFBIG, also for root)") {
    struct rlimit old {};
    REQUIRE(getrlimit(RLIMIT_FSIZE, &old) == 0);
    struct rlimit low = old;
    low.rlim_cur = 4096;  // the header fits, the 256 KiB of data does not
    auto old_handler = signal(SIGXFSZ, SIG_IGN);
    REQUIRE(setrlimit(RLIMIT_FSIZE, &low) == 0);
    std::string message;
    try {
      save_safetensors(path, {{"big", zeros({65536})}});
    } catch (const Error& e) {
      message = e.what();
    }
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, old_handler);
    CHECK(message.find(path + ": cannot save: write to " + path + ".tmp.") == 0);
    CHECK(message.find("File too large") != std::string::npos);
    unchanged();
  }
}

// ---- Python reads what we write, and we read what Python writes -----------------------------

namespace {
// tests/models/read_safetensors.py beside this source file (__FILE__ is absolute under CMake).
const fs::path kScript = fs::path(__FILE__).parent_path() / "read_safetensors.py";
const char* kPython = "/usr/bin/python3";
int run_python(const std::string& args) {
  std::string cmd = std::string(kPython) + " '" + kScript.string() + "' " + args;
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}
}  // namespace

TEST_CASE("Python reads our file with struct + json, then into PyTorch via torch.frombuffer") {
  if (!fs::exists(kPython)) {
    MESSAGE("skipped: no " << kPython);
    return;
  }
  REQUIRE(fs::exists(kScript));
  TempDir d;
  NamedTensors in = sample_tensors();
  const std::string file = d.file("model.safetensors"), expected = d.file("expected.json");
  save_safetensors(file, in, kMetadata);
  // What we wrote, for the script to compare against: names, shapes, float32 bit patterns.
  nlohmann::json e;
  e["metadata"] = kMetadata;
  for (auto& [name, t] : in) {
    std::vector<uint32_t> b;
    for (int64_t i = 0; i < t.numel(); ++i) b.push_back(bits(t.data()[i]));
    e["tensors"][name] = {{"shape", t.shape().vec()}, {"bits", b}};
  }
  // The script can fail: a value changed by one bit (caught before PyTorch is imported).
  e["tensors"]["scale"]["bits"][0] = bits(-1.5f) ^ 1u;
  std::ofstream(expected) << e.dump();
  CHECK(run_python("check '" + file + "' '" + expected + "' 2>/dev/null") != 0);
  e["tensors"]["scale"]["bits"][0] = bits(-1.5f);
  std::ofstream(expected) << e.dump();

  // Then the real check, and PyTorch writes F32, F16 and BF16 tensors in a layout of its
  // own for us to read (one Python run: importing PyTorch takes seconds).
  const std::string theirs = d.file("torch.safetensors"), theirs_json = d.file("torch.json");
  REQUIRE(run_python("check '" + file + "' '" + expected + "' write '" + theirs + "' '" + theirs_json + "'") == 0);
  SafetensorsFile f = load_safetensors(theirs);
  nlohmann::json want = nlohmann::json::parse(read_bytes(theirs_json));
  CHECK(f.metadata == want["metadata"].get<std::map<std::string, std::string>>());
  REQUIRE(f.tensors.size() == want["tensors"].size());
  for (auto& [name, w] : want["tensors"].items()) {
    CAPTURE(name);
    Tensor t = f.get(name);
    REQUIRE(t.defined());
    CHECK(t.shape().vec() == w["shape"].get<std::vector<int64_t>>());
    auto b = w["bits"].get<std::vector<uint32_t>>();
    REQUIRE(static_cast<int64_t>(b.size()) == t.numel());
    for (size_t i = 0; i < b.size(); ++i) CHECK(bits(t.data()[i]) == b[i]);
  }
}
