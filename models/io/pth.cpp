// torch.save checkpoints -> named float32 tensors; the format is described in pth.h.
#include "models/io/pth.h"

#include <bit>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/error.h"
#include "models/io/torch_pickle.h"
#include "models/io/zip_archive.h"

namespace sima {

static_assert(std::endian::native == std::endian::little, "pth.cpp assumes a little-endian host");

namespace {

float half_to_float(uint16_t h) {  // IEEE binary16 -> binary32, exact
  const uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | man << 13);  // inf, nan
  if (exp != 0) return std::bit_cast<float>(sign | (exp + 112) << 23 | man << 13);
  const float sub = float(man) * 5.9604644775390625e-8f;  // man · 2^-24 (subnormal or zero)
  return sign ? -sub : sub;
}

// Element i of a storage of dtype `d` as float32.
float element(const char* p, StorageDtype d, int64_t i) {
  auto load = [&](auto zero) {
    decltype(zero) v;
    std::memcpy(&v, p + i * int64_t(sizeof v), sizeof v);
    return v;
  };
  switch (d) {
    case StorageDtype::Float32: return load(float());
    case StorageDtype::Float16: return half_to_float(load(uint16_t()));
    case StorageDtype::BFloat16: return std::bit_cast<float>(uint32_t(load(uint16_t())) << 16);
    case StorageDtype::Float64: return float(load(double()));
    case StorageDtype::Int64: return float(load(int64_t()));
    case StorageDtype::Int32: return float(load(int32_t()));
    case StorageDtype::Int16: return float(load(int16_t()));
    case StorageDtype::Int8: return float(load(int8_t()));
    case StorageDtype::UInt8: return float(load(uint8_t()));
    case StorageDtype::Bool: return load(uint8_t()) ? 1.f : 0.f;
  }
  return 0.f;
}

bool is_tensor_dict(const PyValue& v) {
  if (v.kind != PyValue::Dict || v.dict.empty()) return false;
  for (const auto& [k, x] : v.dict)
    if (k->kind != PyValue::Str || x->kind != PyValue::Tensor) return false;
  return true;
}

std::string describe_keys(const PyValue& d) {
  std::string s;
  size_t n = 0;
  for (const auto& [k, v] : d.dict) {
    if (n++ == 12) return s + ", ...";
    s += (s.empty() ? "" : ", ") + (k->kind == PyValue::Str ? "'" + k->s + "'" : std::string(k->kind_name())) + " (" +
         v->kind_name() + ")";
  }
  return s;
}

// The dict of tensors inside `root` (see pth.h); `where` gets its path.
const PyValue& find_state_dict(const PyValue& root, std::string& where, const std::string& label) {
  const PyValue* v = &root;
  for (int level = 0; level < 4; ++level) {
    if (is_tensor_dict(*v)) return *v;
    check(v->kind == PyValue::Dict, label, ": the saved object", where, " is of type ", v->kind_name(),
          ", not a state dict (a dict of tensors)");
    const PyValue* next = nullptr;
    for (const char* key : {"model", "state_dict", "model_state_dict", "module", "net"}) {
      for (const auto& [k, x] : v->dict)
        if (k->kind == PyValue::Str && k->s == key && x->kind == PyValue::Dict) {
          next = x.get();
          where += std::string("['") + key + "']";
          break;
        }
      if (next) break;
    }
    check(next != nullptr, label, ": no state dict in the saved object", where,
          ": it is neither a dict of tensors (keys: ", describe_keys(*v),
          ") nor holds one under 'model', 'state_dict', 'model_state_dict', 'module' or 'net'");
    v = next;
  }
  fail(label, ": no state dict within 4 levels of wrapper dicts (", where, ")");
}

// The tensor `r` views, gathered by its strides into a new float32 tensor.
Tensor materialise(const TensorRef& r, const std::string& storage) {
  Tensor t = empty(Shape(r.size));
  float* out = t.data();
  const int64_t n = t.numel();
  const int nd = int(r.size.size());
  std::vector<int64_t> idx(size_t(nd), 0);
  int64_t src = r.offset;
  for (int64_t i = 0; i < n; ++i) {  // row-major walk of the view, `src` following the strides
    out[i] = element(storage.data(), r.dtype, src);
    for (int d = nd - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < r.size[size_t(d)]) {
        src += r.stride[size_t(d)];
        break;
      }
      src -= (r.size[size_t(d)] - 1) * r.stride[size_t(d)];
      idx[size_t(d)] = 0;
    }
  }
  return t;
}

}  // namespace

bool is_pth_path(const std::string& path) {
  for (const char* ext : {".pth", ".pt", ".bin"}) {
    const size_t n = std::strlen(ext);
    if (path.size() > n && path.compare(path.size() - n, n, ext) == 0) return true;
  }
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;  // never open a FIFO here (it would block)
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && looks_like_zip(std::string(magic, 4));
}

PthStateDict load_pth_state_dict(const std::string& path) { return load_pth_state_dict_bytes(read_file_bytes(path), path); }

PthStateDict load_pth_state_dict_bytes(std::string bytes, const std::string& label) {
  // A pickle stream starts with PROTO (0x80). torch.save's legacy format pickles its magic number
  // 0x1950a86a20f9469cfc6c first (LONG1, 10 bytes, little-endian: torch/serialization.py
  // MAGIC_NUMBER); any other pickle is a plain pickle.dump, not a checkpoint torch.save wrote.
  static const uint8_t kLegacyMagic[12] = {0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};
  const bool pickle = bytes.size() >= 2 && uint8_t(bytes[0]) == 0x80;
  check(!(pickle && bytes.size() >= 14 && std::equal(kLegacyMagic, kLegacyMagic + 12, bytes.begin() + 2,
                                                      [](uint8_t a, char b) { return a == uint8_t(b); })),
        label,
        ": a legacy (PyTorch < 1.6, non-zip) torch.save file; re-save it with a newer PyTorch (torch.save "
        "writes zip archives by default since 1.6)");
  check(!pickle, label,
        ": a plain Python pickle (pickle.dump), not a torch.save checkpoint: save the state dict with torch.save "
        "(a zip archive) and pass that");
  check(looks_like_zip(bytes), label, ": not a torch.save archive (no zip signature)");
  const ZipArchive zip(std::move(bytes), label);
  const ZipArchive::Entry* pkl = nullptr;
  for (const auto& e : zip.entries()) {
    const size_t slash = e.name.find('/');
    if (slash != std::string::npos && e.name.substr(slash) == "/data.pkl") {
      check(pkl == nullptr, label, ": two data.pkl entries ('", pkl ? pkl->name : "", "', '", e.name, "')");
      pkl = &e;
    }
  }
  check(pkl != nullptr, label, ": no <name>/data.pkl entry (not a torch.save archive)");
  const std::string prefix = pkl->name.substr(0, pkl->name.size() - std::strlen("data.pkl"));
  if (const auto* order = zip.find(prefix + "byteorder"))
    check(zip.read(*order) == "little", label, ": saved on a big-endian machine (byteorder '", zip.read(*order),
          "'), which this reader does not convert");
  const PyRef root = unpickle_restricted(zip.read(*pkl), label + ": " + pkl->name);

  PthStateDict out;
  const PyValue& sd = find_state_dict(*root, out.where, label);
  std::map<std::string, std::string> storages;  // key -> bytes, each read (and CRC-checked) once
  int64_t storage_elems = 0, made = 0;
  for (const auto& [k, v] : sd.dict) {
    const TensorRef& r = v->tensor;
    auto it = storages.find(r.key);
    if (it == storages.end()) {
      const ZipArchive::Entry* e = zip.find(prefix + "data/" + r.key);
      check(e != nullptr, label, ": tensor '", k->s, "' views storage '", r.key, "', which is not in the archive");
      const uint64_t want = uint64_t(r.storage_numel) * storage_dtype_size(r.dtype);
      check(e->size == want, label, ": storage '", r.key, "' has ", e->size, " bytes, its ", r.storage_numel, " ",
            storage_dtype_name(r.dtype), " values need ", want);
      it = storages.emplace(r.key, zip.read(*e)).first;
      storage_elems += r.storage_numel;
    }
    // Strides of 0 let a tiny storage describe a huge tensor; legitimate files do not need much of that.
    int64_t numel = 1;
    for (int64_t s : r.size) numel *= s;  // checked against overflow by the unpickler
    check(!__builtin_add_overflow(made, numel, &made) && made <= 4 * storage_elems + (int64_t(1) << 20), label, ": tensor '", k->s,
          "' and those before it expand to far more values (", made, ") than their storages hold (", storage_elems, ")");
    out.tensors.emplace_back(k->s, materialise(r, it->second));
  }
  return out;
}

}  // namespace sima
