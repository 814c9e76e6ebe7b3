// torch.save's format, written from C++; described in pth_writer.h. Opcode meanings: CPython
// Lib/pickletools.py; the tensor's reduce arguments: PyTorch torch/_utils.py (_rebuild_tensor_v2)
// and torch/serialization.py (persistent_id of a storage).
#include "models/io/pth_writer.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <set>

#include "core/error.h"
#include "core/file_io.h"
#include "models/io/zip_writer.h"

namespace sima {

static_assert(std::endian::native == std::endian::little, "pth_writer.cpp assumes a little-endian host");

namespace {

// The opcodes of protocol 2 the writer uses, in the order a state dict needs them.
class Pickler {
 public:
  std::string bytes = std::string("\x80\x02", 2);  // PROTO 2

  void op(char c) { bytes.push_back(c); }
  void str(const std::string& s) {  // BINUNICODE: u32 length, UTF-8 bytes
    op('X');
    le(s.size(), 4);
    bytes += s;
  }
  void integer(int64_t v) {
    if (v >= 0 && v < 256) op('K'), le(uint64_t(v), 1);           // BININT1
    else if (v >= 0 && v < 65536) op('M'), le(uint64_t(v), 2);   // BININT2
    else if (v >= INT32_MIN && v <= INT32_MAX) op('J'), le(uint64_t(uint32_t(int32_t(v))), 4);  // BININT
    else {  // LONG1: the shortest little-endian two's complement
      int n = 1;
      while (n < 8 && !(v >= -(int64_t(1) << (8 * n - 1)) && v < (int64_t(1) << (8 * n - 1)))) ++n;
      op(char(0x8a)), le(uint64_t(n), 1), le(uint64_t(v), n);
    }
  }
  void global(const std::string& module, const std::string& name) { op('c'), bytes += module + "\n" + name + "\n"; }
  void int_tuple(const std::vector<int64_t>& v) {
    if (v.empty()) return op(')');  // EMPTY_TUPLE
    op('(');                        // MARK ... TUPLE
    for (int64_t x : v) integer(x);
    op('t');
  }
  void empty_ordered_dict() { global("collections", "OrderedDict"), op(')'), op('R'); }

 private:
  void le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) bytes.push_back(char((v >> (8 * i)) & 0xff));
  }
};

// _rebuild_tensor_v2(('storage', <Type>Storage, key, 'cpu', numel), 0, size, stride, False, OrderedDict())
void pickle_tensor(Pickler& p, const Shape& shape, StorageDtype dtype, const std::string& key) {
  std::vector<int64_t> size(shape.begin(), shape.end()), stride(size.size(), 1);
  for (size_t d = size.size(); d-- > 1;) stride[d - 1] = stride[d] * size[d];
  int64_t numel = 1;
  for (int64_t s : size) numel *= s;
  const std::string& type = storage_type_global(dtype);
  const size_t dot = type.rfind('.');
  p.global("torch._utils", "_rebuild_tensor_v2");
  p.op('(');
  p.op('('), p.str("storage"), p.global(type.substr(0, dot), type.substr(dot + 1)), p.str(key), p.str("cpu");
  p.integer(numel), p.op('t');
  p.op('Q');  // BINPERSID
  p.integer(0), p.int_tuple(size), p.int_tuple(stride);
  p.op(char(0x89));  // NEWFALSE: requires_grad
  p.empty_ordered_dict();  // backward hooks
  p.op('t'), p.op('R');
}

// The storage bytes of `t` as `dtype`.
std::string storage_bytes(const PthTensor& t, const std::string& label) {
  const float* x = t.tensor.data();
  const size_t n = size_t(t.tensor.numel());
  if (t.dtype == StorageDtype::Float32) return std::string(reinterpret_cast<const char*>(x), n * sizeof(float));
  check(t.dtype == StorageDtype::Int64, label, ": tensor '", t.name, "' as ", storage_dtype_name(t.dtype),
        " (only float32 and int64 are written)");
  std::string out(n * sizeof(int64_t), '\0');
  for (size_t i = 0; i < n; ++i) {
    check(std::isfinite(x[i]) && x[i] == std::trunc(x[i]) && std::fabs(x[i]) < 9.0e15f, label, ": tensor '", t.name,
          "' is written as int64 but holds ", x[i], " at ", i);
    const int64_t v = int64_t(x[i]);
    std::memcpy(out.data() + i * sizeof v, &v, sizeof v);
  }
  return out;
}

}  // namespace

std::string pth_bytes(const std::vector<PthTensor>& tensors, const std::string& wrap_key, const std::string& label) {
  Pickler p;
  if (!wrap_key.empty()) p.op('}'), p.str(wrap_key);  // EMPTY_DICT, the key; SETITEM at the end
  p.empty_ordered_dict();
  std::set<std::string> names;
  if (!tensors.empty()) p.op('(');
  for (size_t i = 0; i < tensors.size(); ++i) {
    const PthTensor& t = tensors[i];
    check(t.tensor.defined() && !t.name.empty() && names.insert(t.name).second, label, ": tensor ", i, " ('", t.name,
          "') is undefined, unnamed or named twice");
    p.str(t.name);
    pickle_tensor(p, t.tensor.shape(), t.dtype, std::to_string(i));
  }
  if (!tensors.empty()) p.op('u');  // SETITEMS
  if (!wrap_key.empty()) p.op('s');  // SETITEM
  p.op('.');                         // STOP

  ZipWriter zip(label);
  zip.add("archive/data.pkl", p.bytes);
  zip.add("archive/byteorder", "little");
  for (size_t i = 0; i < tensors.size(); ++i) zip.add("archive/data/" + std::to_string(i), storage_bytes(tensors[i], label));
  zip.add("archive/version", "3\n");
  return zip.finish();
}

void save_pth(const std::string& path, const std::vector<PthTensor>& tensors, const std::string& wrap_key) {
  const std::string bytes = pth_bytes(tensors, wrap_key, path);
  write_file_atomic(path, bytes.data(), bytes.size());
}

}  // namespace sima
