// Datasets: IDX (raw and gzip files the test writes, the real Fashion-MNIST when
// installed), CIFAR-10 / CIFAR-100 binary files, and ImageFolder over PNG / JPEG / BMP files
// with a corrupt file under both on_error modes. Values checked against the bytes written.
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/cifar.h"
#include "core/file_io.h"
#include "data/idx.h"
#include "data/image_folder.h"
#include "data/image_io.h"
#include "temp_dir.h"
#include "testing.h"

using namespace sima;
using namespace sima::testing;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

void put_be32(std::vector<uint8_t>& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(uint8_t(v >> s));
}

// Writes `bytes` to path, gzip-compressed with zlib's gzopen/gzwrite when gz.
void write_maybe_gz(const std::string& path, const std::vector<uint8_t>& bytes, bool gz) {
  if (!gz) return write_bytes(path, bytes);
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, bytes.data(), unsigned(bytes.size())) == int(bytes.size()));
  REQUIRE(gzclose(f) == Z_OK);
}

// IDX images: magic, n, rows, cols, then pixel k = (13k + 1) mod 256.
std::vector<uint8_t> idx_images(uint32_t n, uint32_t rows, uint32_t cols, uint32_t magic = 0x803) {
  std::vector<uint8_t> b;
  put_be32(b, magic);
  put_be32(b, n);
  put_be32(b, rows);
  put_be32(b, cols);
  for (uint32_t k = 0; k < n * rows * cols; ++k) b.push_back(uint8_t((13 * k + 1) % 256));
  return b;
}
std::vector<uint8_t> idx_labels(const std::vector<uint8_t>& labels, uint32_t magic = 0x801) {
  std::vector<uint8_t> b;
  put_be32(b, magic);
  put_be32(b, uint32_t(labels.size()));
  b.insert(b.end(), labels.begin(), labels.end());
  return b;
}

// What IdxDataset(images, labels) throws, or "(no error)".
std::string idx_error(const std::string& images, const std::string& labels, int64_t classes = 10) {
  return error_message([&] { IdxDataset d(images, labels, classes); });
}

// Captures what is written to stderr (file descriptor 2) between construction and text().
class StderrCapture {
 public:
  explicit StderrCapture(std::string path) : path_(std::move(path)) {
    std::fflush(stderr);
    saved_ = dup(2);
    int fd = open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    close(fd);
  }
  ~StderrCapture() { restore(); }
  std::string text() {
    restore();
    std::ifstream in(path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    dup2(saved_, 2);
    close(saved_);
    saved_ = -1;
  }
  std::string path_;
  int saved_ = -1;
};

int count(const std::string& s, const std::string& part) {
  int n = 0;
  for (size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) ++n;
  return n;
}

}  // namespace

// ---- IDX --------------------------------------------------------------------------------

TEST_CASE("IDX: raw and gzip files give the same samples, values = byte / 255") {
  TempDir tmp;
  for (bool gz : {false, true}) {
    CAPTURE(gz);
    const std::string im = tmp.file(gz ? "im.gz" : "im"), lb = tmp.file(gz ? "lb.gz" : "lb");
    write_maybe_gz(im, idx_images(3, 2, 3), gz);
    write_maybe_gz(lb, idx_labels({2, 0, 9}), gz);
    IdxDataset d(im, lb);
    CHECK(d.size() == 3);
    CHECK(d.rows() == 2);
    CHECK(d.cols() == 3);
    CHECK(d.num_classes() == 10);
    CHECK(contains(d.describe(), im));
    Generator g(0);
    Sample s = d.get(1, g);
    CHECK(s.label == 0);
    REQUIRE(s.image.channels == 1);
    REQUIRE(s.image.height == 2);
    REQUIRE(s.image.width == 3);
    // Image 1 holds pixels k = 6..11: (13k + 1) mod 256 = 79, 92, 105, 118, 131, 144.
    CHECK(s.image.data == std::vector<float>{79 / 255.f, 92 / 255.f, 105 / 255.f, 118 / 255.f, 131 / 255.f,
                                             144 / 255.f});
    CHECK(s.image.at(0, 1, 2) == 144 / 255.f);
    CHECK(d.get(2, g).label == 9);
    CHECK(contains(error_message([&] { d.get(3, g); }), "index 3 out of range [0, 3)"));
  }
}

TEST_CASE("IDX: malformed files are errors naming the file") {
  TempDir tmp;
  const std::string im = tmp.file("im"), lb = tmp.file("lb");
  write_bytes(im, idx_images(3, 2, 3));
  write_bytes(lb, idx_labels({2, 0, 9}));
  REQUIRE(idx_error(im, lb) == "(no error)");

  // Wrong magic numbers (the two files swapped, a 16-bit type).
  std::string m = idx_error(lb, im);
  CHECK(contains(m, lb + ": not an IDX images file: magic number 0x00000801, expected 0x00000803"));
  write_bytes(tmp.file("im_short"), idx_images(3, 2, 3, 0x0b03));
  CHECK(contains(idx_error(tmp.file("im_short"), lb), "magic number 0x00000b03"));
  write_bytes(tmp.file("lb_bad"), idx_labels({2, 0, 9}, 0x803));
  CHECK(contains(idx_error(im, tmp.file("lb_bad")), "lb_bad: not an IDX labels file"));

  // Counts disagree.
  write_bytes(tmp.file("lb2"), idx_labels({2, 0}));
  m = idx_error(im, tmp.file("lb2"));
  CHECK(contains(m, "lb2 holds 2 labels but " + im + " holds 3 images"));

  // Truncated and trailing data, raw and gzip.
  for (bool gz : {false, true}) {
    CAPTURE(gz);
    std::vector<uint8_t> b = idx_images(3, 2, 3);
    b.pop_back();
    write_maybe_gz(tmp.file("cut"), b, gz);
    CHECK(contains(idx_error(tmp.file("cut"), lb), tmp.file("cut") + ": truncated"));
    b.push_back(0);
    b.push_back(0);
    write_maybe_gz(tmp.file("long"), b, gz);
    CHECK(contains(idx_error(tmp.file("long"), lb), tmp.file("long") + ": trailing data"));
    std::vector<uint8_t> l = idx_labels({2, 0, 9});
    l.push_back(1);
    write_maybe_gz(tmp.file("lb_long"), l, gz);
    CHECK(contains(idx_error(im, tmp.file("lb_long")), "lb_long: trailing data"));
    write_maybe_gz(tmp.file("head"), {0, 0, 8, 3, 0, 0}, gz);
    CHECK(contains(idx_error(tmp.file("head"), lb), "head: truncated: the IDX dimensions needs 12 bytes"));
  }

  // A gzip file cut short (its deflate stream and trailer missing).
  write_maybe_gz(tmp.file("full.gz"), idx_images(40, 8, 8), true);
  std::vector<uint8_t> z = read_file(tmp.file("full.gz"));
  z.resize(z.size() - 30);
  write_bytes(tmp.file("cut.gz"), z);
  m = idx_error(tmp.file("cut.gz"), lb);
  CHECK(contains(m, tmp.file("cut.gz")));
  CHECK(contains(m, "truncated"));
  // The deflate data whole but the gzip trailer (CRC-32, length: 8 bytes) missing.
  z = read_file(tmp.file("full.gz"));
  z.resize(z.size() - 8);
  write_bytes(tmp.file("notrailer.gz"), z);
  CHECK(contains(idx_error(tmp.file("notrailer.gz"), lb), "notrailer.gz: corrupt gzip data at the end"));
  // A corrupt CRC in the gzip trailer is found when checking for the end.
  z = read_file(tmp.file("full.gz"));
  z[z.size() - 6] ^= 0xff;
  write_bytes(tmp.file("crc.gz"), z);
  CHECK(contains(idx_error(tmp.file("crc.gz"), lb), "crc.gz: corrupt gzip data"));

  // A header claiming more than the file can hold is refused before allocating.
  std::vector<uint8_t> big = idx_images(1, 2, 3);
  big[4] = 0x7f;  // n = 0x7f000001 images
  write_bytes(tmp.file("big"), big);
  CHECK(contains(idx_error(tmp.file("big"), lb), "big: truncated: header claims"));
  write_maybe_gz(tmp.file("big.gz"), big, true);
  CHECK(contains(idx_error(tmp.file("big.gz"), lb), "more than a gzip file of"));
  // Image dimensions whose product overflows int64 (fuzz finding, tests/fuzz/regressions/idx):
  // 0xffffffff x 0xffffffff wrapped to a negative size and passed the bound.
  std::vector<uint8_t> huge;
  put_be32(huge, 0x803), put_be32(huge, 1), put_be32(huge, 0xffffffff), put_be32(huge, 0xffffffff);
  write_bytes(tmp.file("huge"), huge);
  CHECK(contains(idx_error(tmp.file("huge"), lb), "huge: image size 4294967295 x 4294967295 is too large"));

  // Zero dimensions, labels out of range, bad num_classes, missing files.
  write_bytes(tmp.file("zero"), idx_images(3, 0, 3));
  CHECK(contains(idx_error(tmp.file("zero"), lb), "dimensions 3 x 0 x 3 (all must be > 0)"));
  write_bytes(tmp.file("lb10"), idx_labels({2, 10, 9}));
  CHECK(contains(idx_error(im, tmp.file("lb10")), "lb10: label 10 at index 1 is out of range for 10 classes"));
  CHECK(contains(idx_error(im, lb, 5), "lb: label 9 at index 2 is out of range for 5 classes"));
  CHECK(contains(idx_error(im, lb, 0), "num_classes must be in 1..256, got 0"));
  CHECK(contains(idx_error(tmp.file("nope"), lb), tmp.file("nope") + ": no such file"));
  CHECK(contains(error_message([&] { IdxDataset::mnist(true, tmp.str()); }), "train-images-idx3-ubyte.gz nor"));
}

TEST_CASE("IDX: the real Fashion-MNIST (when installed)") {
  const std::string root = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(root + "/train-images-idx3-ubyte.gz")) {
    MESSAGE("Fashion-MNIST not installed; skipped");
    return;
  }
  for (bool train : {true, false}) {
    CAPTURE(train);
    IdxDataset d = IdxDataset::fashion_mnist(train);
    const int64_t n = train ? 60000 : 10000;
    CHECK(d.size() == n);
    CHECK(d.rows() == 28);
    CHECK(d.cols() == 28);
    std::array<int64_t, 10> hist{};
    for (uint8_t l : d.labels()) hist[l]++;
    for (int c = 0; c < 10; ++c) CHECK(hist[c] == n / 10);
    Generator g(0);
    Sample s = d.get(0, g);
    if (train) CHECK(s.label == 9);  // the first training image is an ankle boot
    CHECK(s.image.numel() == 784);
    double sum = 0, bytes = 0;
    for (float v : s.image.data) sum += v;
    for (int i = 0; i < 784; ++i) bytes += d.pixels()[i];
    CHECK(sum == doctest::Approx(bytes / 255.0).epsilon(1e-5));
    CHECK(bytes > 0);
  }
}

// ---- CIFAR ------------------------------------------------------------------------------

namespace {

// `n` records of `label_bytes` labels + 3072 pixels; record r pixel k = (r + 3k) mod 256.
std::vector<uint8_t> cifar_records(const std::vector<std::vector<uint8_t>>& labels) {
  std::vector<uint8_t> b;
  for (size_t r = 0; r < labels.size(); ++r) {
    b.insert(b.end(), labels[r].begin(), labels[r].end());
    for (int k = 0; k < 3072; ++k) b.push_back(uint8_t((r + 3 * k) % 256));
  }
  return b;
}

}  // namespace

TEST_CASE("CIFAR-10: five training batches, test batch, R/G/B planes") {
  TempDir tmp;
  const std::string dir = tmp.dir("cifar-10-batches-bin");  // the extracted archive's folder
  for (int i = 1; i <= 5; ++i)
    write_bytes(dir + "/data_batch_" + std::to_string(i) + ".bin", cifar_records({{uint8_t(i)}, {uint8_t(2 * i - 1)}}));
  write_bytes(dir + "/test_batch.bin", cifar_records({{7}, {0}, {9}}));
  std::ofstream(dir + "/batches.meta.txt")
      << "airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\ntruck\n\n";

  CifarDataset train = CifarDataset::cifar10(tmp.str());  // finds the sub-folder
  CHECK(train.size() == 10);
  CHECK(train.num_classes() == 10);
  CHECK(train.labels() == std::vector<uint8_t>{1, 1, 2, 3, 3, 5, 4, 7, 5, 9});
  REQUIRE(train.classes().size() == 10);
  CHECK(train.classes()[9] == "truck");
  Generator g(0);
  Sample s = train.get(3, g);  // second record of data_batch_2: r = 1
  CHECK(s.label == 3);
  REQUIRE(s.image.channels == 3);
  REQUIRE(s.image.height == 32);
  REQUIRE(s.image.width == 32);
  // Pixel k = (1 + 3k) mod 256; red (y, x) is k = 32y + x, green k = 1024 + 32y + x, blue 2048 + ...
  CHECK(s.image.at(0, 0, 0) == 1 / 255.f);
  CHECK(s.image.at(0, 2, 5) == float((1 + 3 * 69) % 256) / 255.f);
  CHECK(s.image.at(1, 0, 1) == float((1 + 3 * 1025) % 256) / 255.f);
  CHECK(s.image.at(2, 31, 31) == float((1 + 3 * 3071) % 256) / 255.f);

  CifarDataset test = CifarDataset::cifar10(dir, false);  // the folder itself works too
  CHECK(test.size() == 3);
  CHECK(test.get(2, g).label == 9);
  CHECK(contains(test.describe(), "CIFAR-10 test"));
}

TEST_CASE("CIFAR-100: coarse then fine label byte; fine by default") {
  TempDir tmp;
  write_bytes(tmp.file("train.bin"), cifar_records({{3, 99}, {19, 0}, {0, 42}}));
  CifarDataset fine = CifarDataset::cifar100(tmp.str());
  CHECK(fine.num_classes() == 100);
  CHECK(fine.labels() == std::vector<uint8_t>{99, 0, 42});
  CifarDataset coarse = CifarDataset::cifar100(tmp.str(), true, CifarLabel::Coarse);
  CHECK(coarse.num_classes() == 20);
  CHECK(coarse.labels() == std::vector<uint8_t>{3, 19, 0});
  Generator g(0);
  CHECK(coarse.get(2, g).image.at(0, 0, 1) == float((2 + 3) % 256) / 255.f);  // record 2, k = 1
  CHECK(contains(error_message([&] { CifarDataset::cifar100(tmp.str(), false); }), "test.bin not found"));
}

TEST_CASE("CIFAR: malformed files are errors naming the file and record") {
  TempDir tmp;
  write_bytes(tmp.file("test_batch.bin"), cifar_records({{1}, {10}}));
  std::string m = error_message([&] { CifarDataset::cifar10(tmp.str(), false); });
  CHECK(contains(m, tmp.file("test_batch.bin") + ": record 1 has label 10, out of range for 10 classes"));

  std::vector<uint8_t> b = cifar_records({{1}, {2}});
  b.pop_back();
  write_bytes(tmp.file("test_batch.bin"), b);
  m = error_message([&] { CifarDataset::cifar10(tmp.str(), false); });
  CHECK(contains(m, "test_batch.bin: size 6145 bytes is not a non-zero multiple of the record size 3073"));
  write_bytes(tmp.file("test_batch.bin"), {});
  CHECK(contains(error_message([&] { CifarDataset::cifar10(tmp.str(), false); }), "size 0 bytes"));

  // CIFAR-100: a CIFAR-10 file (3073-byte records) is not whole records; labels in range per choice.
  write_bytes(tmp.file("train.bin"), cifar_records({{1}, {2}}));
  CHECK(contains(error_message([&] { CifarDataset::cifar100(tmp.str()); }), "record size 3074 (2 label bytes"));
  write_bytes(tmp.file("train.bin"), cifar_records({{20, 5}}));
  CHECK(error_message([&] { CifarDataset::cifar100(tmp.str()); }) == "(no error)");
  CHECK(contains(error_message([&] { CifarDataset::cifar100(tmp.str(), true, CifarLabel::Coarse); }),
                 "record 0 has label 20, out of range for 20 classes"));

  // Missing training batch 3 and a missing root.
  for (int i : {1, 2}) write_bytes(tmp.file("data_batch_" + std::to_string(i) + ".bin"), cifar_records({{0}}));
  CHECK(contains(error_message([&] { CifarDataset::cifar10(tmp.str()); }), "data_batch_3.bin: no such file"));
  CHECK(contains(error_message([&] { CifarDataset::cifar10(tmp.str() + "/nope"); }), "/nope is not a directory"));
}

// ---- ImageFolder ------------------------------------------------------------------------

namespace {

// An image of `c` channels filled with value (v + 10·k) / 255 in channel k.
Image flat(int64_t c, int64_t h, int64_t w, int v) {
  Image im(c, h, w);
  for (int64_t k = 0; k < c; ++k)
    for (int64_t i = 0; i < h * w; ++i) im.data[k * h * w + i] = float(v + 10 * k) / 255.f;
  return im;
}

// root/Zebra/z.png                 grey PNG         -> sample 0, class 0 ('Z' < 'a' in byte order)
// root/ant/a.jpg                   RGB JPEG         -> sample 1, class 1
// root/ant/b.PNG                   RGBA PNG         -> sample 2
// root/ant/sub/c.bmp               RGB BMP          -> sample 3
// root/bee/bad.png                 not an image     -> sample 4, class 2
// root/bee/x.jpeg                  grey JPEG        -> sample 5
// root/bee/zz.png                  truncated PNG    -> sample 6
// ignored: root/.hidden/h.png, root/bee/.h.png, root/bee/notes.txt, root/readme.png (not in a class)
void make_folder(const TempDir& tmp) {
  write_png(tmp.file("root/Zebra/z.png"), flat(1, 4, 5, 30));
  write_jpeg(tmp.file("root/ant/a.jpg"), flat(3, 8, 8, 100), 100);
  write_png(tmp.file("root/ant/b.PNG"), flat(4, 2, 3, 50));
  write_bmp(tmp.file("root/ant/sub/c.bmp"), flat(3, 3, 2, 70));
  write_bytes(tmp.file("root/bee/bad.png"), {'n', 'o', 't', ' ', 'a', 'n', ' ', 'i', 'm', 'a', 'g', 'e'});
  write_jpeg(tmp.file("root/bee/x.jpeg"), flat(1, 8, 8, 200), 100);
  write_png(tmp.file("root/bee/zz.png"), flat(3, 4, 4, 90));
  std::vector<uint8_t> png = read_file(tmp.file("root/bee/zz.png"));
  png.resize(png.size() - 20);  // cuts into the IDAT chunk
  write_bytes(tmp.file("root/bee/zz.png"), png);
  write_png(tmp.file("root/.hidden/h.png"), flat(1, 2, 2, 0));
  write_png(tmp.file("root/bee/.h.png"), flat(1, 2, 2, 0));
  write_bytes(tmp.file("root/bee/notes.txt"), {'h', 'i'});
  write_png(tmp.file("root/readme.png"), flat(1, 2, 2, 0));
}

}  // namespace

TEST_CASE("ImageFolder: classes and files in byte order, lazy decoding to RGB") {
  TempDir tmp;
  make_folder(tmp);
  const std::string root = tmp.str() + "/root";
  ImageFolderDataset d(root);
  CHECK(d.classes() == std::vector<std::string>{"Zebra", "ant", "bee"});
  REQUIRE(d.size() == 7);
  const char* expected[7] = {"Zebra/z.png", "ant/a.jpg", "ant/b.PNG", "ant/sub/c.bmp",
                             "bee/bad.png", "bee/x.jpeg", "bee/zz.png"};
  const int64_t labels[7] = {0, 1, 1, 1, 2, 2, 2};
  for (int i = 0; i < 7; ++i) {
    CAPTURE(i);
    CHECK(d.path(i) == root + "/" + expected[i]);
    CHECK(d.label(i) == labels[i]);
  }
  CHECK(d.num_classes() == 3);
  CHECK(contains(d.describe(), "7 images, 3 classes"));

  Generator g(0);
  Sample z = d.get(0, g);  // grey 30 -> RGB (30, 30, 30)
  CHECK(z.label == 0);
  REQUIRE(z.image.channels == 3);
  CHECK(z.image.height == 4);
  CHECK(z.image.width == 5);
  CHECK(z.image.at(0, 3, 4) == 30 / 255.f);
  CHECK(z.image.at(2, 0, 0) == 30 / 255.f);
  Sample b = d.get(2, g);  // RGBA (50, 60, 70, 80) -> RGB (50, 60, 70), alpha dropped
  REQUIRE(b.image.channels == 3);
  CHECK(b.image.at(0, 1, 2) == 50 / 255.f);
  CHECK(b.image.at(1, 1, 2) == 60 / 255.f);
  CHECK(b.image.at(2, 1, 2) == 70 / 255.f);
  Sample c = d.get(3, g);  // BMP, lossless
  CHECK(c.image.at(1, 2, 1) == 80 / 255.f);
  Sample a = d.get(1, g);  // JPEG quality 100, flat colour: within a couple of levels
  CHECK(std::fabs(a.image.at(0, 4, 4) - 100 / 255.f) <= 2.5f / 255.f);
  CHECK(std::fabs(a.image.at(2, 4, 4) - 120 / 255.f) <= 2.5f / 255.f);
  Sample x = d.get(5, g);  // grey JPEG -> r = g = b
  CHECK(x.image.at(0, 1, 1) == x.image.at(2, 1, 1));
  CHECK(std::fabs(x.image.at(0, 1, 1) - 200 / 255.f) <= 2.5f / 255.f);

  // channels = 1: grey.
  ImageFolderOptions grey;
  grey.channels = 1;
  ImageFolderDataset dg(root, grey);
  CHECK(dg.get(0, g).image.channels == 1);
  CHECK(dg.get(0, g).image.at(0, 0, 0) == 30 / 255.f);
}

TEST_CASE("ImageFolder: on_error = stop throws naming the file") {
  TempDir tmp;
  make_folder(tmp);
  ImageFolderDataset d(tmp.str() + "/root");
  Generator g(0);
  std::string m = error_message([&] { d.get(4, g); });
  CHECK(contains(m, "ImageFolder: read_image: " + d.path(4) + ": cannot decode (unknown image type)"));
  m = error_message([&] { d.get(6, g); });
  CHECK(contains(m, d.path(6) + ": truncated PNG (chunk at byte 33 claims"));  // the IDAT cut
  CHECK(contains(error_message([&] { d.get(7, g); }), "index 7 out of range [0, 7)"));
}

TEST_CASE("ImageFolder: on_error = skip returns the next decodable sample, warns once per file") {
  TempDir tmp;
  make_folder(tmp);
  ImageFolderOptions opt;
  opt.on_error = OnError::Skip;
  ImageFolderDataset d(tmp.str() + "/root", opt);
  Generator g(0);
  std::string log;
  Sample s4, s6, again, fine;
  {
    StderrCapture cap(tmp.str() + "/stderr.txt");
    s4 = d.get(4, g);     // bad.png -> x.jpeg (index 5)
    s6 = d.get(6, g);     // zz.png (last) -> wraps to z.png (index 0)
    again = d.get(4, g);  // known bad: no second warning
    fine = d.get(3, g);
    log = cap.text();
  }
  CHECK(s4.label == 2);
  CHECK(std::fabs(s4.image.at(0, 0, 0) - 200 / 255.f) <= 2.5f / 255.f);
  CHECK(s6.label == 0);
  CHECK(s6.image.at(0, 0, 0) == 30 / 255.f);
  CHECK(again.image.data == s4.image.data);
  CHECK(fine.label == 1);
  INFO("stderr: " << log);
  CHECK(count(log, "warning: ImageFolder: skipping a file") == 2);
  CHECK(count(log, d.path(4)) == 1);
  CHECK(count(log, d.path(6)) == 1);

  // Concurrent get() from several threads (a fresh dataset: failures not yet known) gives
  // the serial results, and each bad file is still reported once.
  ImageFolderDataset par(tmp.str() + "/root", opt);
  std::vector<Sample> got(28);
  {
    StderrCapture cap(tmp.str() + "/stderr3.txt");
#pragma omp parallel for num_threads(4) schedule(static, 1)
    for (int i = 0; i < 28; ++i) {
      Generator gi(i);
      got[i] = par.get(i % 7, gi);
    }
    log = cap.text();
  }
  for (int i = 0; i < 28; ++i) {
    CAPTURE(i);
    Sample want = d.get(i % 7, g);
    CHECK(got[i].label == want.label);
    CHECK(got[i].image.data == want.image.data);
  }
  CHECK(count(log, "warning: ImageFolder: skipping a file") == 2);

  // Every file bad: an error, not an endless loop.
  write_bytes(tmp.file("bad/a/1.png"), {1, 2, 3});
  write_bytes(tmp.file("bad/b/2.jpg"), {4, 5, 6});
  ImageFolderDataset all_bad(tmp.str() + "/bad", opt);
  StderrCapture quiet(tmp.str() + "/stderr2.txt");
  CHECK(contains(error_message([&] { all_bad.get(1, g); }), "none of the 2 image files could be decoded"));
}

TEST_CASE("ImageFolder: a class folder linked to its own split or to another class is refused by name") {
  TempDir tmp;
  write_png(tmp.file("r/a/1.png"), flat(1, 2, 2, 0));
  write_png(tmp.file("r/b/2.png"), flat(1, 2, 2, 0));
  std::filesystem::create_directory_symlink(tmp.str() + "/r", tmp.str() + "/r/c");  // c -> its own split
  std::string m = error_message([&] { ImageFolderDataset d(tmp.str() + "/r"); });
  CHECK(contains(m, "ImageFolder: class folder " + tmp.str() + "/r/c is "));
  CHECK(contains(m, ", which holds the root " + tmp.str() + "/r itself: every image would be read twice under two "
                    "labels; remove it"));
  std::filesystem::remove(tmp.str() + "/r/c");
  std::filesystem::create_directory_symlink(tmp.str() + "/r/a", tmp.str() + "/r/d");  // d -> class a
  m = error_message([&] { ImageFolderDataset d(tmp.str() + "/r"); });
  CHECK(contains(m, "ImageFolder: class folders " + tmp.str() + "/r/a and " + tmp.str() + "/r/d hold the same images"));
  CHECK(contains(m, "they would be read twice under two labels; remove " + tmp.str() + "/r/d"));
  std::filesystem::remove(tmp.str() + "/r/d");
  CHECK(ImageFolderDataset(tmp.str() + "/r").size() == 2);
}

TEST_CASE("ImageFolder: a dangling link, a FIFO or a link to /dev/zero among the images is refused by name") {
  TempDir tmp;
  write_png(tmp.file("r/a/1.png"), flat(1, 2, 2, 0));
  write_png(tmp.file("r/b/2.png"), flat(1, 2, 2, 0));
  std::filesystem::create_symlink(tmp.str() + "/nowhere.png", tmp.str() + "/r/a/gone.png");
  std::string m = error_message([&] { ImageFolderDataset d(tmp.str() + "/r"); });
  CHECK(contains(m, "ImageFolder: 1 entry with an image name in " + tmp.str() + "/r/a is not a regular file (" +
                        tmp.str() + "/r/a/gone.png is a dangling symbolic link); remove it"));
  std::filesystem::remove(tmp.str() + "/r/a/gone.png");
  REQUIRE(::mkfifo((tmp.str() + "/r/b/pipe.png").c_str(), 0644) == 0);
  std::filesystem::create_symlink("/dev/zero", tmp.str() + "/r/b/zero.jpg");
  m = error_message([&] { ImageFolderDataset d(tmp.str() + "/r"); });
  CHECK(contains(m, "ImageFolder: 2 entries with an image name in " + tmp.str() + "/r/b are not a regular file (" +
                        tmp.str() + "/r/b/pipe.png is a FIFO (named pipe), ...); remove them"));
  std::filesystem::remove(tmp.str() + "/r/b/pipe.png");
  m = error_message([&] { ImageFolderDataset d(tmp.str() + "/r"); });
  CHECK(contains(m, "zero.jpg is a character device"));
  std::filesystem::remove(tmp.str() + "/r/b/zero.jpg");
  CHECK(ImageFolderDataset(tmp.str() + "/r").size() == 2);
}

TEST_CASE("ImageFolder: errors for bad roots and options") {
  TempDir tmp;
  const std::string none = tmp.str() + "/none";
  CHECK(contains(error_message([&] { ImageFolderDataset d(none); }), "root " + none + " does not exist"));
  write_bytes(tmp.file("file"), {1});
  CHECK(contains(error_message([&] { ImageFolderDataset d(tmp.file("file")); }), "is not a directory"));
  tmp.dir("empty");
  CHECK(contains(error_message([&] { ImageFolderDataset d(tmp.str() + "/empty"); }),
                 "has no class sub-directories (expected root/<class>/<image>)"));
  write_png(tmp.file("r/a/1.png"), flat(1, 2, 2, 0));
  tmp.dir("r/b");
  write_bytes(tmp.file("r/c/notes.txt"), {1});
  CHECK(contains(error_message([&] { ImageFolderDataset d(tmp.str() + "/r"); }),
                 "no image files (.jpg .jpeg .png .bmp) in class directories b, c"));
  ImageFolderOptions opt;
  opt.channels = 4;
  CHECK(contains(error_message([&] { ImageFolderDataset d(tmp.str() + "/r", opt); }),
                 "option channels must be 0, 1 or 3, got 4"));
  std::filesystem::remove(tmp.str() + "/r/b");
  opt = {};
  opt.extensions = {".PNG", ".txt"};  // lower-cased; now every class has a file
  ImageFolderDataset d(tmp.str() + "/r", opt);
  CHECK(d.size() == 2);
  opt.extensions = {"png"};
  CHECK(contains(error_message([&] { ImageFolderDataset d2(tmp.str() + "/r", opt); }), "must look like \".jpg\""));
}
