// image_io: PNG (8- and 16-bit), BMP and JPEG written by our writers and read back by
// stb_image, exact values where the format is lossless, channel conversions worked out by
// hand, the bytes of a 16-bit PNG header, and the errors (paths and stb's reasons).
#include <zlib.h>
#include <cmath>
#include <filesystem>

#include "core/file_io.h"
#include "data/image_io.h"
#include "temp_dir.h"
#include "testing.h"

using namespace sima;
using namespace sima::testing;

namespace {

// A c × h × w image whose values are distinct multiples of 1/255: ((7c + 3y·w + 5x + 11) mod 256) / 255.
Image pattern(int64_t c, int64_t h, int64_t w) {
  Image im(c, h, w);
  for (int64_t k = 0; k < c; ++k)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) im.at(k, y, x) = float((7 * k + 3 * y * w + 5 * x + 11) % 256) / 255.f;
  return im;
}

void check_same_image(const Image& got, const Image& want, float tol) {
  REQUIRE(got.channels == want.channels);
  REQUIRE(got.height == want.height);
  REQUIRE(got.width == want.width);
  float worst = 0.f;
  for (int64_t i = 0; i < want.numel(); ++i) worst = std::fmax(worst, sima::testing::abs_diff(got.data[i], want.data[i]));
  CHECK(worst <= tol);
}

bool contains_text(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("PNG 8-bit round trip is exact for 1-4 channels") {
  TempDir tmp;
  for (int c = 1; c <= 4; ++c) {
    CAPTURE(c);
    Image im = pattern(c, 5, 7);
    const std::string path = tmp.file("im" + std::to_string(c) + ".png");
    write_png(path, im);
    CHECK(temp_files_in(tmp.str()).empty());  // the temporary was renamed
    check_same_image(read_image(path), im, 1e-7f);         // channels 0: as stored
  }
}

TEST_CASE("PNG 16-bit: header bytes, big-endian samples, full-precision read back") {
  TempDir tmp;
  Image im(1, 1, 3);
  im.data = {0.f, 0.5f, 1.f};  // -> 0, round(0.5·65535) = 32768 (half up), 65535
  const std::string path = tmp.file("heat.png");
  write_png16(path, im);
  std::vector<uint8_t> b = read_file(path);
  REQUIRE(b.size() > 33);
  CHECK(std::vector<uint8_t>(b.begin(), b.begin() + 8) == std::vector<uint8_t>{0x89, 'P', 'N', 'G', 13, 10, 26, 10});
  // IHDR: length 13, "IHDR", width 3, height 1, bit depth 16, colour type 0 (grey).
  CHECK(b[11] == 13);
  CHECK(std::string(b.begin() + 12, b.begin() + 16) == "IHDR");
  CHECK(b[19] == 3);
  CHECK(b[23] == 1);
  CHECK(b[24] == 16);
  CHECK(b[25] == 0);
  Image back = read_image(path);
  REQUIRE(back.numel() == 3);
  CHECK(back.data[0] == 0.f);
  CHECK(back.data[1] == doctest::Approx(32768.f / 65535.f).epsilon(1e-7));
  CHECK(back.data[2] == 1.f);

  // 16-bit keeps what 8-bit cannot: k / 65535 for many k survives exactly.
  Image fine(1, 4, 16);
  for (int64_t i = 0; i < fine.numel(); ++i) fine.data[i] = float(1000 * i + 7) / 65535.f;
  write_png16(path, fine);
  check_same_image(read_image(path), fine, 1e-7f);
  // Grey 16-bit read as RGB: replicated.
  Image rgb = read_image(path, 3);
  REQUIRE(rgb.channels == 3);
  CHECK(rgb.at(0, 2, 5) == fine.at(0, 2, 5));
  CHECK(rgb.at(2, 2, 5) == fine.at(0, 2, 5));
  // RGBA 16-bit round trip.
  Image rgba = pattern(4, 3, 2);
  write_png16(path, rgba);
  check_same_image(read_image(path), rgba, 1e-7f);
}

TEST_CASE("channel conversions: luma, replication, alpha dropped") {
  TempDir tmp;
  // RGB (200, 100, 50) -> grey (77·200 + 150·100 + 29·50) >> 8 = 31850 >> 8 = 124.
  Image rgb(3, 1, 1);
  rgb.data = {200 / 255.f, 100 / 255.f, 50 / 255.f};
  write_png(tmp.file("rgb.png"), rgb);
  Image g = read_image(tmp.file("rgb.png"), 1);
  REQUIRE(g.channels == 1);
  CHECK(g.data[0] == 124 / 255.f);

  // Grey 60 -> RGB (60, 60, 60).
  Image grey(1, 1, 2);
  grey.data = {60 / 255.f, 1.f};
  write_png(tmp.file("grey.png"), grey);
  Image r = read_image(tmp.file("grey.png"), 3);
  REQUIRE(r.channels == 3);
  CHECK(r.data == std::vector<float>{60 / 255.f, 1.f, 60 / 255.f, 1.f, 60 / 255.f, 1.f});

  // RGBA (10, 20, 30, alpha 0) -> RGB (10, 20, 30): alpha is dropped, not composited.
  Image rgba(4, 1, 1);
  rgba.data = {10 / 255.f, 20 / 255.f, 30 / 255.f, 0.f};
  write_png(tmp.file("rgba.png"), rgba);
  Image r2 = read_image(tmp.file("rgba.png"), 3);
  CHECK(r2.data == std::vector<float>{10 / 255.f, 20 / 255.f, 30 / 255.f});
  CHECK(read_image(tmp.file("rgba.png")).channels == 4);

  // Values are clamped and rounded on writing: -1 -> 0, 2 -> 255, 0.5 -> round(127.5) = 128.
  Image odd(1, 1, 3);
  odd.data = {-1.f, 2.f, 0.5f};
  write_png(tmp.file("odd.png"), odd);
  CHECK(read_image(tmp.file("odd.png")).data == std::vector<float>{0.f, 1.f, 128 / 255.f});
}

TEST_CASE("BMP round trip: RGB and RGBA exact, grey stored as RGB") {
  TempDir tmp;
  Image rgb = pattern(3, 3, 5);  // width 5: rows padded to 16 bytes in the file
  write_bmp(tmp.file("a.bmp"), rgb);
  check_same_image(read_image(tmp.file("a.bmp")), rgb, 1e-7f);
  Image rgba = pattern(4, 4, 3);
  write_bmp(tmp.file("b.bmp"), rgba);
  check_same_image(read_image(tmp.file("b.bmp")), rgba, 1e-7f);
  Image grey = pattern(1, 2, 2);
  write_bmp(tmp.file("c.bmp"), grey);
  Image back = read_image(tmp.file("c.bmp"));
  CHECK(back.channels == 3);
  check_same_image(read_image(tmp.file("c.bmp"), 1), grey, 1e-7f);  // r = g = b: luma gives it back
}

TEST_CASE("JPEG: flat colours decode within a level or two") {
  TempDir tmp;
  Image rgb(3, 16, 16);
  for (int64_t i = 0; i < 256; ++i) {
    rgb.data[i] = 200 / 255.f;
    rgb.data[256 + i] = 40 / 255.f;
    rgb.data[512 + i] = 90 / 255.f;
  }
  write_jpeg(tmp.file("a.jpg"), rgb, 95);
  check_same_image(read_image(tmp.file("a.jpg")), rgb, 3 / 255.f);
  Image grey(1, 8, 8, 77 / 255.f);
  write_jpeg(tmp.file("g.jpg"), grey);
  CHECK(read_image(tmp.file("g.jpg")).channels == 3);  // stb_image_write stores YCbCr always
  check_same_image(read_image(tmp.file("g.jpg"), 1), grey, 1 / 255.f);
}

TEST_CASE("decoding errors name the path and the reason") {
  TempDir tmp;
  const std::string missing = tmp.str() + "/missing.png";
  std::string m = error_message([&] { read_image(missing); });
  CHECK(m.find(missing) != std::string::npos);
  CHECK(m.find("no such file") != std::string::npos);

  m = error_message([&] { read_image(tmp.str()); });
  CHECK(m.find("not a regular file") != std::string::npos);

  write_bytes(tmp.file("text.png"), {'h', 'e', 'l', 'l', 'o'});
  m = error_message([&] { read_image(tmp.file("text.png")); });
  CHECK(m.find(tmp.file("text.png")) != std::string::npos);
  CHECK(m.find("cannot decode (unknown image type)") != std::string::npos);

  write_bytes(tmp.file("empty.jpg"), {});
  CHECK(error_message([&] { read_image(tmp.file("empty.jpg")); }).find("empty file") != std::string::npos);

  // A valid PNG cut in half: the header parses, the pixel data does not.
  write_png(tmp.file("whole.png"), pattern(3, 32, 32));
  std::vector<uint8_t> b = read_file(tmp.file("whole.png"));
  b.resize(b.size() / 2);
  write_bytes(tmp.file("half.png"), b);
  m = error_message([&] { read_image(tmp.file("half.png")); });
  CHECK(m.find("half.png: truncated PNG (chunk at byte 33 claims") != std::string::npos);
  // A chunk length far past the end (fuzz finding, tests/fuzz/regressions/image): stb would
  // allocate the 1.4 GB the IDAT claims before finding the data missing.
  b = read_file(tmp.file("whole.png"));
  b.resize(33 + 12);  // signature, IHDR, then an IDAT header
  b[33] = 0x53, b[34] = 0x3e, b[35] = 0x00, b[36] = 0x44;
  write_bytes(tmp.file("claims.png"), b);
  m = error_message([&] { read_image(tmp.file("claims.png")); });
  CHECK(m.find("claims.png: truncated PNG (chunk at byte 33 claims 1396572228 bytes of data, the file has 12 bytes "
               "from there)") != std::string::npos);

  // BMP and JPEG cut short (stb alone would decode a short BMP, filling zeros).
  write_bmp(tmp.file("whole.bmp"), pattern(3, 8, 8));
  b = read_file(tmp.file("whole.bmp"));
  b.pop_back();
  write_bytes(tmp.file("short.bmp"), b);
  m = error_message([&] { read_image(tmp.file("short.bmp")); });
  CHECK(contains_text(m, "short.bmp: truncated BMP (pixel data needs 246 bytes, the file has 245)"));
  // The same file with a compression field stb reads as a negative int, so as uncompressed
  // (fuzz finding, tests/fuzz/regressions/image: a 250-byte file decoded as 6225927 x 5 pixels).
  b[30] = 0x12, b[31] = 0x49, b[32] = 0x24, b[33] = 0x92;
  write_bytes(tmp.file("negative.bmp"), b);
  m = error_message([&] { read_image(tmp.file("negative.bmp")); });
  CHECK(contains_text(m, "negative.bmp: truncated BMP (pixel data needs 246 bytes, the file has 245)"));
  // An OS/2 BMP (12-byte header, 16-bit sizes): 8000 x 8000 claimed by 26 bytes.
  std::vector<uint8_t> os2 = {'B', 'M', 26, 0, 0, 0, 0, 0, 0, 0, 26, 0, 0, 0, 12, 0, 0, 0, 0x40, 0x1f, 0x40, 0x1f, 1, 0, 24, 0};
  write_bytes(tmp.file("os2.bmp"), os2);
  m = error_message([&] { read_image(tmp.file("os2.bmp")); });
  CHECK(contains_text(m, "os2.bmp: truncated BMP (pixel data needs 192000026 bytes, the file has 26)"));
  write_jpeg(tmp.file("whole.jpg"), pattern(3, 16, 16));
  b = read_file(tmp.file("whole.jpg"));
  b.resize(b.size() * 3 / 4);
  write_bytes(tmp.file("short.jpg"), b);
  CHECK(contains_text(error_message([&] { read_image(tmp.file("short.jpg")); }), "short.jpg: cannot decode ("));

  // A JPEG whose first Huffman table (DHT) declares 16 + 255 + 255 codes: stb would build it
  // past its 257-entry arrays (fuzz finding, tests/fuzz/regressions/image).
  b = read_file(tmp.file("whole.jpg"));
  size_t dht = 2;
  while (dht + 1 < b.size() && !(b[dht] == 0xFF && b[dht + 1] == 0xC4)) ++dht;
  REQUIRE(dht + 21 < b.size());
  b[dht + 5 + 13] = 16, b[dht + 5 + 14] = 255, b[dht + 5 + 15] = 255;  // counts of 14-, 15-, 16-bit codes
  write_bytes(tmp.file("dht.jpg"), b);
  CHECK(contains_text(error_message([&] { read_image(tmp.file("dht.jpg")); }),
                      "dht.jpg: corrupt JPEG: a Huffman table (DHT at byte " + std::to_string(dht) + ") declares"));
  // The same after 0xFF fill bytes before the SOI marker, which stb skips (a second finding).
  b.insert(b.begin(), 5, 0xFF);
  write_bytes(tmp.file("fill.jpg"), b);
  CHECK(contains_text(error_message([&] { read_image(tmp.file("fill.jpg")); }),
                      "fill.jpg: corrupt JPEG: a Huffman table (DHT at byte " + std::to_string(dht + 5) + ") declares"));

  // A scan using Huffman tables no DHT defined (DC 2, AC 3): stb decoded through its
  // uninitialised state (fuzz finding, tests/fuzz/regressions/image); zeroed, it is an error.
  b = read_file(tmp.file("whole.jpg"));
  size_t sos = 2;
  while (sos + 1 < b.size() && !(b[sos] == 0xFF && b[sos + 1] == 0xDA)) ++sos;
  REQUIRE(sos + 6 < b.size());
  b[sos + 6] = 0x23;  // FF DA, length (2), component count (1), then component 1: id, tables
  write_bytes(tmp.file("tables.jpg"), b);
  CHECK(contains_text(error_message([&] { read_image(tmp.file("tables.jpg")); }), "tables.jpg: cannot decode ("));

  // A JPEG whose frame header claims 4000 x 4000 pixels for its few hundred bytes: stb decoded
  // it, the missing data as zeros (fuzz finding, tests/fuzz/regressions/image: 1280 x 32809).
  b = read_file(tmp.file("whole.jpg"));
  size_t sof = 2;
  while (sof + 1 < b.size() && !(b[sof] == 0xFF && b[sof + 1] == 0xC0)) ++sof;
  REQUIRE(sof + 8 < b.size());
  b[sof + 5] = 0x0f, b[sof + 6] = 0xa0, b[sof + 7] = 0x0f, b[sof + 8] = 0xa0;  // height, width 4000
  write_bytes(tmp.file("claims.jpg"), b);
  CHECK(contains_text(error_message([&] { read_image(tmp.file("claims.jpg")); }),
                      "claims.jpg: truncated or corrupt JPEG (4000x4000 pixels need at least 31250 bytes of coded data, "
                      "the file has " + std::to_string(b.size()) + ")"));

  // A grey PNG header claiming 20000 × 20000 pixels (stb itself refuses only > 2^30
  // bytes): refused by our pixel limit before any allocation.
  std::vector<uint8_t> huge = {0x89, 'P', 'N', 'G', 13, 10, 26, 10, 0, 0, 0, 13, 'I', 'H', 'D', 'R',
                               0, 0, 0x4e, 0x20, 0, 0, 0x4e, 0x20, 8, 0, 0, 0, 0, 0, 0, 0, 0};
  const uint32_t crc = uint32_t(crc32(crc32(0, nullptr, 0), huge.data() + 12, 17));  // IHDR's type and data
  for (int k = 0; k < 4; ++k) huge[size_t(29 + k)] = uint8_t(crc >> (24 - 8 * k));
  write_bytes(tmp.file("huge.png"), huge);
  m = error_message([&] { read_image(tmp.file("huge.png")); });
  CHECK(m.find("huge.png: image size 20000x20000 exceeds the limit") != std::string::npos);

  m = error_message([&] { read_image(tmp.file("whole.png"), 2); });
  CHECK(m.find("channels must be 0 (as stored), 1 (grey) or 3 (RGB), got 2") != std::string::npos);
}

TEST_CASE("PNG with empty IDAT chunks before the image data decodes like the plain file") {
  // Legal PNG; stb alone would memcpy 0 bytes into its null buffer (UB that UBSan reports: fuzz
  // finding, tests/fuzz/regressions/image/fuzzer_found_png_empty_first_idat). decode_image drops
  // those chunks first; an empty IDAT after the data stays and stb reads it fine.
  TempDir tmp;
  const Image want = pattern(3, 6, 5);
  write_png(tmp.file("plain.png"), want);
  std::vector<uint8_t> b = read_file(tmp.file("plain.png"));
  const std::vector<uint8_t> empty_idat = {0, 0, 0, 0, 'I', 'D', 'A', 'T', 0x35, 0xaf, 0x06, 0x1e};  // CRC of "IDAT"
  b.insert(b.begin() + 33, empty_idat.begin(), empty_idat.end());  // after signature (8) and IHDR (25)
  b.insert(b.begin() + 33, empty_idat.begin(), empty_idat.end());
  b.insert(b.end() - 12, empty_idat.begin(), empty_idat.end());    // before IEND
  const Image got = decode_image(b.data(), b.size(), 0, "empty_idat.png");
  check_same_image(got, want, 0.f);
}

TEST_CASE("writing errors") {
  TempDir tmp;
  const std::string nodir = tmp.str() + "/no/such/dir/x.png";
  std::string m = error_message([&] { write_png(nodir, pattern(1, 2, 2)); });
  CHECK(m.find(nodir) != std::string::npos);
  CHECK(m.find("cannot open for writing") != std::string::npos);
  CHECK(error_message([&] { write_png(tmp.file("x.png"), pattern(5, 2, 2)); }).find("need 1-4 channels, got 5") !=
        std::string::npos);
  CHECK(error_message([&] { write_png16(tmp.file("x.png"), Image(1, 0, 4)); }).find("empty image") !=
        std::string::npos);
  CHECK(error_message([&] { write_jpeg(tmp.file("x.jpg"), pattern(3, 2, 2), 0); })
            .find("quality must be in 1..100, got 0") != std::string::npos);
  Image bad(3, 2, 2);
  bad.data.resize(5);
  CHECK(error_message([&] { write_bmp(tmp.file("x.bmp"), bad); }).find("data holds 5 values, shape needs 12") !=
        std::string::npos);
  CHECK_FALSE(std::filesystem::exists(tmp.file("x.png")));
}

TEST_CASE("PNG: a chunk whose CRC does not match is refused before decoding (stb_image checks none)") {
  // One flipped bit in the pixel data: stb decoded it as a good, different image.
  TempDir tmp;
  write_png(tmp.file("good.png"), pattern(3, 6, 5));
  std::vector<uint8_t> b = read_file(tmp.file("good.png"));
  REQUIRE(std::string(b.begin() + 37, b.begin() + 41) == "IDAT");  // after signature (8) and IHDR (25)
  b[41 + 2] ^= 0x01;
  const std::string m = error_message([&] { decode_image(b.data(), b.size(), 0, "flipped.png"); });
  CHECK(m.find("read_image: flipped.png: corrupt PNG (chunk IDAT at byte 33 fails its CRC check: stored 0x") == 0);
  CHECK(m.find(", computed 0x") != std::string::npos);
  b[41 + 2] ^= 0x01;  // restored: decodes
  CHECK(decode_image(b.data(), b.size(), 0, "good.png").height == 6);
}
