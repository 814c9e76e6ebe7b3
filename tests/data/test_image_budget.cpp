// Images are refused from their header, before decoding, when they would not fit: the pixel
// limit follows the memory limit (SIMA_MEMORY_LIMIT, core/memory_limit.h), and a PNG must
// hold enough compressed data for the pixels its header claims.
#include <doctest/doctest.h>
#include <stdlib.h>
#include <zlib.h>

#include <chrono>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/memory_limit.h"
#include "core/file_io.h"
#include "data/image_io.h"
#include "temp_dir.h"
#include "testing.h"

using namespace sima;
using sima::testing::error_message;
using sima::testing::TempDir;

namespace {

bool has(const std::string& s, const std::string& part) {
  INFO("message: " << s);
  return s.find(part) != std::string::npos;
}

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(uint8_t(v >> s));
}

void put_chunk(std::vector<uint8_t>& png, const char* type, const std::vector<uint8_t>& data) {
  put_u32(png, uint32_t(data.size()));
  const size_t start = png.size();
  png.insert(png.end(), type, type + 4);
  png.insert(png.end(), data.begin(), data.end());
  put_u32(png, uint32_t(crc32(crc32(0, nullptr, 0), png.data() + start, uInt(png.size() - start))));
}

// A PNG whose IHDR claims w x h grey 8-bit pixels but whose IDAT holds the zlib stream of
// only `rows` zero rows: a few hundred bytes.
std::vector<uint8_t> lying_png(uint32_t w, uint32_t h, uint32_t rows) {
  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'}, ihdr;
  put_u32(ihdr, w), put_u32(ihdr, h);
  ihdr.insert(ihdr.end(), {8, 0, 0, 0, 0});
  put_chunk(png, "IHDR", ihdr);
  std::vector<uint8_t> raw(size_t(rows) * (w + 1), 0);
  uLongf n = compressBound(uLong(raw.size()));
  std::vector<uint8_t> z(n);
  REQUIRE(compress2(z.data(), &n, raw.data(), uLong(raw.size()), 9) == Z_OK);
  z.resize(n);
  put_chunk(png, "IDAT", z);
  put_chunk(png, "IEND", {});
  return png;
}

struct ScopedEnv {
  ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name_); }
  const char* name_;
};

}  // namespace

TEST_CASE("image budget: a small PNG whose header claims 8000 x 8000 pixels is refused at once") {
  const std::vector<uint8_t> png = lying_png(8000, 8000, 4);
  REQUIRE(png.size() < 1000);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string msg = error_message([&] { decode_image(png.data(), png.size(), 0, "lie.png"); });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(has(msg, "lie.png: truncated or corrupt PNG (8000x8000 pixels of 8 bits need at least 62015 bytes"));
  CHECK(s < 0.5);
  // The same stream with the size it holds decodes.
  const std::vector<uint8_t> honest = lying_png(8000, 4, 4);
  CHECK(decode_image(honest.data(), honest.size(), 0, "ok.png").height == 4);
}

TEST_CASE("image budget: the pixel limit follows SIMA_MEMORY_LIMIT, checked on the header") {
  TempDir tmp;
  Image img(1, 1000, 1100);  // 1.1 Mpixel, zeros
  write_png(tmp.file("big.png"), img);
  CHECK(read_image(tmp.file("big.png")).width == 1100);
  ScopedEnv env("SIMA_MEMORY_LIMIT", "64M");  // 64 MiB / 64 bytes per pixel = 1 Mpixel
  const std::string msg = error_message([&] { read_image(tmp.file("big.png")); });
  CHECK(has(msg, "big.png: image size 1100x1000 exceeds the limit of 1048576 pixels"));
  CHECK(has(msg, "SIMA_MEMORY_LIMIT=64M"));
}
