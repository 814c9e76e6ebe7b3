// Writes the seed corpora and dictionaries of the harnesses (run once; the output is committed
// under tests/fuzz/corpus/ and tests/fuzz/dict/). Small valid files of each format, written by
// the library's own writers where it has one.
//
//   build-asan/fuzz/make_seeds tests/fuzz
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "core/error.h"
#include "core/file_io.h"
#include "data/image_io.h"
#include "models/io/checkpoint.h"
#include "models/registry.h"
#include "models/io/safetensors.h"
#include "nn/attention/variants.h"
#include "train/config/experiment_config.h"

using namespace sima;
namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

static void put(const fs::path& p, const Bytes& b) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}
static void put_text(const fs::path& p, const std::string& s) { put(p, Bytes(s.begin(), s.end())); }
static Bytes slurp(const fs::path& p) { return read_file(p.string()); }
static void be32(Bytes& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(uint8_t(v >> s));
}
static Bytes gzip(const Bytes& raw) {  // a gzip stream (windowBits 15 + 16)
  z_stream z{};
  deflateInit2(&z, 9, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY);
  Bytes out(deflateBound(&z, uLong(raw.size())) + 32);
  z.next_in = const_cast<Bytef*>(raw.data());
  z.avail_in = uInt(raw.size());
  z.next_out = out.data();
  z.avail_out = uInt(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}
// fuzz_idx input: 2-byte split, images file, labels file.
static Bytes idx_input(const Bytes& images, const Bytes& labels) {
  Bytes b{uint8_t(images.size() >> 8), uint8_t(images.size())};
  b.insert(b.end(), images.begin(), images.end());
  b.insert(b.end(), labels.begin(), labels.end());
  return b;
}

int main(int argc, char** argv) {
  const fs::path out = argc > 1 ? argv[1] : "tests/fuzz";
  const fs::path corpus = out / "corpus", tmp = fs::temp_directory_path() / "sima-make-seeds";
  fs::create_directories(tmp);

  // ---- IDX: 2 images of 3 x 2, labels 1 and 7; raw and gzip.
  Bytes images, labels;
  be32(images, 0x803), be32(images, 2), be32(images, 3), be32(images, 2);
  for (int k = 0; k < 12; ++k) images.push_back(uint8_t(20 * k));
  be32(labels, 0x801), be32(labels, 2);
  labels.push_back(1), labels.push_back(7);
  put(corpus / "idx" / "raw", idx_input(images, labels));
  put(corpus / "idx" / "gzip", idx_input(gzip(images), gzip(labels)));
  put(corpus / "idx" / "gzip_images", idx_input(gzip(images), labels));

  // ---- CIFAR: one CIFAR-10 record, one CIFAR-100 record (+ a names file for CIFAR-10).
  Bytes c10{0, 3}, c100{1, 5, 42};
  for (int k = 0; k < 3072; ++k) c10.push_back(uint8_t(k * 7)), c100.push_back(uint8_t(k * 11));
  put(corpus / "cifar" / "cifar10", c10);
  put(corpus / "cifar" / "cifar100", c100);
  Bytes c100c = c100;
  c100c[0] = 3;
  put(corpus / "cifar" / "cifar100_coarse", c100c);

  // ---- images: PNG 8/16-bit grey, grey+alpha, RGB, RGBA; JPEG; BMP 24/32-bit.
  for (int c : {1, 2, 3, 4}) {
    Image im(c, 5, 7);
    for (size_t i = 0; i < im.data.size(); ++i) im.data[i] = float(i % 17) / 16.f;
    const std::string n = std::to_string(c);
    write_png((tmp / "a.png").string(), im), write_png16((tmp / "b.png").string(), im);
    write_jpeg((tmp / "c.jpg").string(), im, 50), write_bmp((tmp / "d.bmp").string(), im);
    for (auto [file, name] : {std::pair{"a.png", "png8_c"}, {"b.png", "png16_c"}, {"c.jpg", "jpeg_c"},
                              {"d.bmp", "bmp_c"}}) {
      Bytes b = slurp(tmp / file);
      b.insert(b.begin(), uint8_t(c % 3));  // the channel selector byte
      put(corpus / "image" / (std::string(name) + n), b);
    }
  }
  // Headers claiming 8000 x 8000 pixels over the few bytes of data of the 5 x 7 seeds: refused
  // from the header (the PNG's compressed data, the JPEG's coded bytes, the BMP's pixel array),
  // never decoded at the claimed size.
  {
    Bytes png = slurp(corpus / "image" / "png8_c3"), jpeg = slurp(corpus / "image" / "jpeg_c3"),
          bmp = slurp(corpus / "image" / "bmp_c3");
    auto set_be32 = [](Bytes& b, size_t at, uint32_t v) {
      for (int k = 0; k < 4; ++k) b[at + k] = uint8_t(v >> (24 - 8 * k));
    };
    set_be32(png, 1 + 16, 8000), set_be32(png, 1 + 20, 8000);  // IHDR width, height; then its CRC
    set_be32(png, 1 + 29, uint32_t(crc32(crc32(0, nullptr, 0), png.data() + 1 + 12, 17)));
    put(corpus / "image" / "png_claims_8000x8000", png);
    for (size_t i = 1; i + 8 < jpeg.size(); ++i)
      if (jpeg[i] == 0xFF && jpeg[i + 1] == 0xC0) {  // SOF0: length, precision, height, width
        jpeg[i + 5] = 8000 >> 8, jpeg[i + 6] = 8000 & 255, jpeg[i + 7] = 8000 >> 8, jpeg[i + 8] = 8000 & 255;
        break;
      }
    put(corpus / "image" / "jpeg_claims_8000x8000", jpeg);
    for (size_t at : {size_t(1 + 18), size_t(1 + 22)})  // BITMAPINFOHEADER width, height (little-endian)
      bmp[at] = 8000 & 255, bmp[at + 1] = 8000 >> 8, bmp[at + 2] = 0, bmp[at + 3] = 0;
    put(corpus / "image" / "bmp_claims_8000x8000", bmp);
  }

  // ---- safetensors: two tensors + metadata; F16 and BF16 entries by hand.
  {
    Tensor a = empty({2, 3}), b = empty({4});
    for (int i = 0; i < 6; ++i) a.data()[i] = float(i) - 2.5f;
    for (int i = 0; i < 4; ++i) b.data()[i] = float(i) * 0.25f;
    save_safetensors((tmp / "t.safetensors").string(), {{"weight", a}, {"bias", b}}, {{"format", "pt"}});
    put(corpus / "safetensors" / "f32", slurp(tmp / "t.safetensors"));
    for (auto dtype : {"F16", "BF16"}) {
      std::string h = std::string("{\"h\":{\"dtype\":\"") + dtype + "\",\"shape\":[2,2],\"data_offsets\":[0,8]}}";
      h.append((8 - h.size() % 8) % 8, ' ');
      Bytes f;
      for (int i = 0; i < 8; ++i) f.push_back(uint8_t(h.size() >> (8 * i)));
      f.insert(f.end(), h.begin(), h.end());
      for (uint8_t v : {0x00, 0x3c, 0x00, 0xc0, 0xff, 0x7b, 0x01, 0x00}) f.push_back(v);
      put(corpus / "safetensors" / (std::string("half_") + dtype), f);
    }
  }

  // ---- checkpoints: the smallest DeiT, XCiT and CvT (a few KB each).
  const char* tiny[] = {
      R"({"arch":"deit","img_size":8,"in_chans":1,"num_classes":3,"mean":[0.5],"std":[0.5],"patch_size":4,)"
      R"("embed_dim":8,"depth":1,"num_heads":2,"mlp_ratio":1.0})",
      R"({"arch":"deit","img_size":8,"in_chans":1,"num_classes":3,"mean":[0.5],"std":[0.5],"patch_size":4,)"
      R"("embed_dim":8,"depth":1,"num_heads":2,"mlp_ratio":1.0,"distilled":true,"attention":{"type":"sima"}})",
      R"({"arch":"xcit","img_size":8,"in_chans":1,"num_classes":3,"mean":[0.5],"std":[0.5],"patch_size":4,)"
      R"("embed_dim":8,"depth":1,"num_heads":2,"mlp_ratio":1.0,"cls_attn_layers":1,"patch_embed":"conv"})",
      R"({"arch":"cvt","img_size":8,"in_chans":1,"num_classes":3,"mean":[0.5],"std":[0.5],"stage_dims":[4],)"
      R"("stage_depths":[1],"stage_heads":[1],"stage_embed_kernel":[3],"stage_embed_stride":[2],)"
      R"("stage_embed_padding":[1],"stage_drop_path":[0.0],"stage_stride_kv":[2],"mlp_ratio":1.0})"};
  int k = 0;
  for (const char* j : tiny) {
    try {
      auto model = create_model(nlohmann::json::parse(j));
      save_checkpoint((tmp / "m.safetensors").string(), *model);
      put(corpus / "checkpoint" / ("model" + std::to_string(k++)), slurp(tmp / "m.safetensors"));
    } catch (const Error& e) {
      std::fprintf(stderr, "make_seeds: skipped a checkpoint seed: %s\n", e.what());
    }
  }

  // ---- configs: every configs/*.json, and one with --set overrides.
  for (auto& e : fs::directory_iterator(out / ".." / ".." / "configs"))
    put(corpus / "config" / e.path().filename(), slurp(e.path()));
  put_text(corpus / "config" / "with_set",
           "{\"name\": \"s\", \"model\": {\"name\": \"deit_tiny_patch4_28_sima\"}}\n--set train.epochs=3"
           "\n--set model.depth=2\n--set optimizer.no_weight_decay=[\"pos_embed\"]\n--set schedule.type=step");
  // Configs accept nothing they then ignore: keys given twice, keys of another architecture, a model without arch, a section
  // given a value, integers beyond int64, counts that overflow.
  for (const auto& [file, text] : std::vector<std::pair<std::string, std::string>>{
           {"duplicate_key.json",
            "{\"name\": \"d\",\n \"model\": {\"name\": \"deit_tiny_patch4_28\", \"depth\": 2, \"depth\": 3},\n"
            " \"train\": {\"epochs\": 2, \"seed\": 1,\n  \"epochs\": 3}}\n"},
           {"cvt_with_deit_keys.json",
            "{\"name\": \"c\", \"model\": {\"name\": \"cvt_13_28\", \"embed_dim\": 64, \"depth\": 2, "
            "\"patch_size\": 4}}\n"},
           {"deit_with_xcit_key.json", "{\"name\": \"x\", \"model\": {\"arch\": \"deit\", \"cls_attn_layers\": 1}}\n"},
           {"model_without_arch.json", "{\"name\": \"e\", \"model\": {}}\n"},
           {"big_integers.json",
            "{\"name\": \"b\", \"model\": {\"name\": \"deit_tiny_patch4_28\"}, \"train\": {\"seed\": "
            "18446744073709551615}, \"data\": {\"batch_size\": 4611686018427387904}}\n"},
           {"set_section",
            "{\"name\": \"s\", \"model\": {\"name\": \"cvt_13_28\"}}\n--set train=5\n--set "
            "model.attention={\"type\": \"sima\", \"type\": \"relu\"}\n--set model.embed_dim=8"}})
    put_text(corpus / "config" / file, text);

  // ---- dictionaries: config keys (sections, keys, model keys, values), safetensors keys.
  std::set<std::string> words{"model", "name", "arch", "attention", "type", "\n--set "};
  for (auto& f : config_fields()) {
    const auto dot = f.key.find('.');
    words.insert(f.key.substr(0, dot));
    if (dot != std::string::npos) words.insert(f.key.substr(dot + 1));
    words.insert(f.key + "=");
  }
  for (const auto& f : model_config_fields()) {  // every architecture's keys
    words.insert(f.key);
    words.insert("model." + f.key + "=");
  }
  for (const auto& r : attention_key_reference()) words.insert(r.spec->key);
  for (auto& n : model_names()) words.insert(n);
  std::string dict;
  for (auto& w : words) {  // "word", with libFuzzer's escapes (\\, \" and \xAB)
    std::string q = "\"";
    for (char ch : w)
      q += ch == '\n' ? std::string("\\x0A") : ch == '"' || ch == '\\' ? std::string("\\") + ch : std::string(1, ch);
    dict += q + "\"\n";
  }
  put_text(out / "dict" / "config.dict", dict);
  put_text(out / "dict" / "safetensors.dict",
           "\"__metadata__\"\n\"dtype\"\n\"shape\"\n\"data_offsets\"\n\"F32\"\n\"F16\"\n\"BF16\"\n\"config\"\n"
           "\"format\"\n\"sima.cpp/1\"\n\"normalization\"\n\"embed_dim\"\n\"depth\"\n\"img_size\"\n\"arch\"\n");
  fs::remove_all(tmp);
  return 0;
}
