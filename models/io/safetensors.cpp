// safetensors reader and writer; the format and the choices are described in safetensors.h.
#include "models/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/durable_file.h"
#include "core/error.h"
#include "core/utf8.h"
#include "core/file_io.h"

namespace sima {

// The data buffer holds little-endian values and we copy it straight into float storage.
static_assert(std::endian::native == std::endian::little, "safetensors.cpp assumes a little-endian host");
static_assert(sizeof(float) == 4 && std::numeric_limits<float>::is_iec559, "float must be IEEE binary32");

using json = nlohmann::json;

Tensor SafetensorsFile::get(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  return Tensor();
}

namespace {

// ---- small helpers -------------------------------------------------------------

std::string os_error(int err) { return std::strerror(err); }

// write(2) until all `n` bytes are out; false with errno set otherwise.
bool write_all(int fd, const void* buf, size_t n) {
  const char* p = static_cast<const char*>(buf);
  while (n > 0) {
    ssize_t w = ::write(fd, p, std::min<size_t>(n, size_t(1) << 30));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return false;
    if (w == 0) {  // no progress and no error: treat as a full disk
      errno = ENOSPC;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// pread(2) exactly `n` bytes at `offset`; false on an error (errno set) or an early end (errno 0).
bool read_all_at(int fd, void* buf, size_t n, uint64_t offset) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, std::min<size_t>(n, size_t(1) << 30), static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (r == 0) errno = 0;
      return false;
    }
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return true;
}

struct FdCloser {  // closes a file descriptor at scope exit
  int fd = -1;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

// ---- dtypes ------------------------------------------------------------------------

struct Dtype {
  const char* name;
  uint64_t size;  // bytes per element
};
constexpr Dtype kF32{"F32", 4}, kF16{"F16", 2}, kBF16{"BF16", 2}, kI8{"I8", 1};

const Dtype* find_dtype(const std::string& s) {
  for (const Dtype* d : {&kF32, &kF16, &kBF16, &kI8})
    if (s == d->name) return d;
  return nullptr;
}

// IEEE binary16 -> binary32 (exact: every half is a float).
float half_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
  if (exp == 0) {  // zero or subnormal: mant · 2^-24
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  uint32_t bits = exp == 0x1F ? (sign | 0x7F800000u | (mant << 13))          // inf / nan
                              : (sign | ((exp + 112) << 23) | (mant << 13));  // rebias 15 -> 127
  return std::bit_cast<float>(bits);
}
// bfloat16 is the top half of a float32.
float bf16_to_float(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

// ---- header ------------------------------------------------------------------------

struct Entry {
  std::string name;
  const Dtype* dtype = nullptr;
  Shape shape;
  uint64_t begin = 0, end = 0;  // relative to the data buffer
};

struct Header {
  uint64_t data_start = 0;     // 8 + N
  std::vector<Entry> entries;  // sorted by data_offsets
  std::map<std::string, std::string> metadata;
};

// Parses JSON, rejecting duplicate keys in any object (the spec disallows them; nlohmann
// would silently keep one). Messages name no values: a hostile value may be huge.
json parse_json(const std::string& path, const std::string& text) {
  std::vector<std::set<std::string>> keys;  // one set per open object
  std::string duplicate;
  json::parser_callback_t cb = [&](int, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::object_start) {
      keys.emplace_back();
    } else if (ev == json::parse_event_t::object_end) {
      if (!keys.empty()) keys.pop_back();
    } else if (ev == json::parse_event_t::key && !keys.empty() && duplicate.empty()) {
      const auto& k = parsed.get_ref<const std::string&>();
      if (!keys.back().insert(k).second) duplicate = k;
    }
    return true;
  };
  json j;
  try {
    j = json::parse(text, cb);
  } catch (const json::exception& e) {
    fail(path, ": the header is not valid JSON: ", e.what());
  }
  check(duplicate.empty(), path, ": the header has the key '", duplicate, "' twice");
  return j;
}

std::string offsets_str(uint64_t b, uint64_t e) {
  std::ostringstream os;
  os << '[' << b << ", " << e << ']';
  return os.str();
}

// One tensor entry of the header, checked against itself and the data buffer size.
Entry parse_entry(const std::string& path, const std::string& name, const json& v, uint64_t data_size) {
  const std::string at = path + ": tensor '" + name + "': ";
  check(v.is_object(), at, "the entry is a JSON ", v.type_name(), ", not an object");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    check(v.contains(key), at, "the entry has no \"", key, "\"");
  Entry e;
  e.name = name;

  const json& dt = v["dtype"];
  check(dt.is_string(), at, "\"dtype\" is a JSON ", dt.type_name(), ", not a string");
  e.dtype = find_dtype(dt.get_ref<const std::string&>());
  check(e.dtype != nullptr, at, "dtype '", dt.get_ref<const std::string&>(),
        "' is not supported (F32, F16, BF16 or I8)");

  const json& sh = v["shape"];
  check(sh.is_array(), at, "\"shape\" is a JSON ", sh.type_name(), ", not a list");
  check(sh.size() <= static_cast<size_t>(kMaxDims), at, "the shape has ", sh.size(),
        " dimensions, at most ", kMaxDims, " are supported");
  // bytes = elem size × Π max(d, 1) must fit in int64, so no product of dims overflows.
  int64_t bound = static_cast<int64_t>(e.dtype->size);
  for (const json& d : sh) {
    check(d.is_number_integer(), at, "the shape holds a JSON ", d.type_name(), ", not an integer");
    check(d.is_number_unsigned() || d.get<int64_t>() >= 0, at, "the shape has a negative dimension ",
          d.get<int64_t>());
    uint64_t u = d.get<uint64_t>();
    check(u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) &&
              !__builtin_mul_overflow(bound, std::max<int64_t>(static_cast<int64_t>(u), 1), &bound),
          at, "the shape's size overflows 64 bits");
    e.shape.push_back(static_cast<int64_t>(u));
  }
  const uint64_t nbytes = static_cast<uint64_t>(e.shape.numel()) * e.dtype->size;

  const json& off = v["data_offsets"];
  check(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(),
        at, "\"data_offsets\" must be a list of two non-negative integers");
  e.begin = off[0].get<uint64_t>();
  e.end = off[1].get<uint64_t>();
  const std::string offs = offsets_str(e.begin, e.end);
  check(e.begin <= e.end, at, "data_offsets ", offs, " end before they begin");
  check(e.end - e.begin == nbytes, at, "data_offsets ", offs, " do not match shape ", e.shape, " of ",
        e.dtype->name, " (", nbytes, " bytes)");
  check(e.end <= data_size, at, "data_offsets ", offs, " lie outside the data buffer of ", data_size,
        " bytes (is the file truncated?)");
  return e;
}

// Reads and checks the whole header of the open file `fd` of `file_size` bytes.
Header read_header(const std::string& path, int fd, uint64_t file_size) {
  check(file_size >= 8, path, ": the file is ", file_size,
        " bytes, too short for the 8-byte header length of a safetensors file");
  unsigned char len_bytes[8];
  check(read_all_at(fd, len_bytes, 8, 0), path, ": cannot read the header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];  // little-endian u64
  check(n <= file_size - 8, path, ": the header length ", n, " runs past the end of the file (",
        file_size - 8, " bytes after the length)");
  check(n <= kSafetensorsMaxHeader, path, ": the header length ", n, " exceeds the limit of ",
        kSafetensorsMaxHeader, " bytes");

  std::string text(n, '\0');
  check(read_all_at(fd, text.data(), n, 8), path, ": cannot read the header");
  int64_t bad = invalid_utf8_at(text);
  check(bad < 0, path, ": the header is not valid UTF-8 (byte ", bad, " of the header)");
  json j = parse_json(path, text);
  check(j.is_object(), path, ": the header is a JSON ", j.type_name(), ", not an object");

  Header h;
  h.data_start = 8 + n;
  const uint64_t data_size = file_size - h.data_start;
  for (const auto& [name, v] : j.items()) {
    if (name == "__metadata__") {
      check(v.is_object(), path, ": __metadata__ is a JSON ", v.type_name(), ", not an object");
      for (const auto& [k, s] : v.items()) {
        check(s.is_string(), path, ": __metadata__ value of '", k, "' is a JSON ", s.type_name(),
              ", not a string");
        h.metadata[k] = s.get<std::string>();
      }
      continue;
    }
    h.entries.push_back(parse_entry(path, name, v, data_size));
  }

  // The tensors must tile the data buffer: sorted by offset, each begins where the last ended.
  std::sort(h.entries.begin(), h.entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t pos = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : h.entries) {
    check(e.begin >= pos, path, ": tensor '", e.name, "' (data_offsets ", offsets_str(e.begin, e.end),
          ") overlaps tensor '", prev ? prev->name : "", "' (data_offsets ",
          prev ? offsets_str(prev->begin, prev->end) : "", ")");
    check(e.begin == pos, path, ": bytes [", pos, ", ", e.begin,
          ") of the data buffer belong to no tensor (a hole before tensor '", e.name, "')");
    pos = e.end;
    prev = &e;
  }
  check(pos == data_size, path, ": bytes [", pos, ", ", data_size,
        ") at the end of the data buffer belong to no tensor");
  return h;
}

// Opens `path` for reading and returns its size; throws naming the path and the OS error.
uint64_t open_for_reading(const std::string& path, FdCloser& f) {
  f.fd = open_regular_file(path, "safetensors file");  // a FIFO or a directory is refused unopened
  struct stat st {};
  check(::fstat(f.fd, &st) == 0, path, ": cannot stat: ", os_error(errno));
  check(S_ISREG(st.st_mode), path, ": not a regular file");
  return static_cast<uint64_t>(st.st_size);
}

}  // namespace

// ---- reading -------------------------------------------------------------------------

SafetensorsFile load_safetensors(const std::string& path) {
  FdCloser f;
  uint64_t size = open_for_reading(path, f);
  Header h = read_header(path, f.fd, size);  // every check happens here, before allocating

  SafetensorsFile out;
  out.metadata = std::move(h.metadata);
  out.tensors.reserve(h.entries.size());
  std::vector<uint16_t> halves;
  std::vector<int8_t> bytes;
  for (const Entry& e : h.entries) {
    Tensor t = empty(e.shape);
    const uint64_t nbytes = e.end - e.begin, at = h.data_start + e.begin;
    bool ok = true;
    out.dtypes[e.name] = e.dtype->name;
    if (e.dtype == &kF32) {
      ok = read_all_at(f.fd, t.data(), nbytes, at);
    } else if (e.dtype == &kI8) {  // every int8 is a float
      bytes.resize(static_cast<size_t>(t.numel()));
      ok = read_all_at(f.fd, bytes.data(), nbytes, at);
      std::copy(bytes.begin(), bytes.end(), t.data());
    } else {
      halves.resize(static_cast<size_t>(t.numel()));
      ok = read_all_at(f.fd, halves.data(), nbytes, at);
      float* dst = t.data();
      for (size_t i = 0; ok && i < halves.size(); ++i)
        dst[i] = e.dtype == &kF16 ? half_to_float(halves[i]) : bf16_to_float(halves[i]);
    }
    if (!ok)
      fail(path, ": cannot read tensor '", e.name, "': ", errno ? os_error(errno) : "unexpected end of file");
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

std::map<std::string, std::string> read_safetensors_metadata(const std::string& path) {
  FdCloser f;
  uint64_t size = open_for_reading(path, f);
  return read_header(path, f.fd, size).metadata;
}

// ---- writing -------------------------------------------------------------------------

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata, const std::set<std::string>& int8_names) {
  const std::string at = path + ": cannot save: ";
  // Everything that can be wrong with the arguments is found before a file is touched.
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    check(!name.empty(), at, "a tensor has an empty name");
    check(name != "__metadata__", at, "'__metadata__' is reserved and cannot name a tensor");
    check(invalid_utf8_at(name) < 0, at, "a tensor name is not valid UTF-8");
    check(seen.insert(name).second, at, "two tensors are called '", name, "'");
    check(t.defined(), at, "tensor '", name, "' is undefined");
    if (int8_names.count(name))
      for (int64_t i = 0; i < t.numel(); ++i)
        check(t.data()[i] == std::nearbyint(t.data()[i]) && std::fabs(t.data()[i]) <= 127.f, at, "tensor '", name,
              "' is written as I8 but holds ", t.data()[i], " (not an integer in [-127, 127])");
  }
  for (const auto& name : int8_names)
    check(seen.count(name), at, "I8 tensor '", name, "' is not among the tensors");
  for (const auto& [k, v] : metadata)
    check(invalid_utf8_at(k) < 0 && invalid_utf8_at(v) < 0, at, "metadata entry '", k,
          "' is not valid UTF-8");

  // Data order: as the reference, by descending dtype alignment (F32 before I8), then by name.
  auto is_i8 = [&](size_t i) { return int8_names.count(tensors[i].first) > 0; };
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return is_i8(a) != is_i8(b) ? is_i8(b) : tensors[a].first < tensors[b].first;
  });

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;  // std::map: sorted keys
    header["__metadata__"] = std::move(m);
  }
  uint64_t offset = 0;
  for (size_t i : order) {
    const auto& [name, t] = tensors[i];
    uint64_t nbytes = static_cast<uint64_t>(t.numel()) * (is_i8(i) ? 1 : sizeof(float));
    nlohmann::ordered_json e = nlohmann::ordered_json::object();
    e["dtype"] = is_i8(i) ? "I8" : "F32";
    e["shape"] = nlohmann::ordered_json::array();
    for (int64_t d : t.shape()) e["shape"].push_back(d);
    e["data_offsets"] = nlohmann::ordered_json::array({offset, offset + nbytes});
    header[name] = std::move(e);
    offset += nbytes;
  }
  std::string text = header.dump();  // compact, like serde_json::to_string
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  unsigned char len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<unsigned char>(text.size() >> (8 * i));

  // Write a temporary file beside the target, then rename it over the target.
  refuse_symlink(path, "checkpoint");
  const std::string tmp = temp_path_for(path);
  int fd = create_temp_file(path);
  auto give_up = [&](const std::string& what) {
    int err = errno;
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    fail(at, what, ": ", os_error(err));
  };
  if (!write_all(fd, len_bytes, 8) || !write_all(fd, text.data(), text.size())) give_up("write to " + tmp);
  for (size_t i : order) {
    const Tensor& t = tensors[i].second;
    std::vector<int8_t> bytes;
    if (is_i8(i)) bytes.assign(t.data(), t.data() + t.numel());  // integers in [-127, 127], checked
    const bool ok = is_i8(i) ? write_all(fd, bytes.data(), bytes.size())
                             : write_all(fd, t.data(), static_cast<size_t>(t.numel()) * sizeof(float));
    if (!ok) give_up("write to " + tmp);
  }
  if (::fsync(fd) != 0) give_up("fsync of " + tmp);
  int closed = ::close(fd);
  fd = -1;
  if (closed != 0) give_up("close of " + tmp);
  if (::rename(tmp.c_str(), path.c_str()) != 0) give_up("rename of " + tmp + " to " + path);

  sync_parent_directory(path);  // the rename itself durable
}

}  // namespace sima
