// The restricted unpickler of torch.save's data.pkl; what it accepts is described in torch_pickle.h.
// Opcode meanings: CPython Lib/pickletools.py (the opcode table) and Lib/pickle.py.
#include "models/io/torch_pickle.h"

#include <bit>
#include <cstring>
#include <map>
#include <unordered_map>

#include "core/error.h"

namespace sima {

const char* storage_dtype_name(StorageDtype d) {
  switch (d) {
    case StorageDtype::Float32: return "float32";
    case StorageDtype::Float16: return "float16";
    case StorageDtype::BFloat16: return "bfloat16";
    case StorageDtype::Float64: return "float64";
    case StorageDtype::Int64: return "int64";
    case StorageDtype::Int32: return "int32";
    case StorageDtype::Int16: return "int16";
    case StorageDtype::Int8: return "int8";
    case StorageDtype::UInt8: return "uint8";
    case StorageDtype::Bool: return "bool";
  }
  return "?";
}

size_t storage_dtype_size(StorageDtype d) {
  switch (d) {
    case StorageDtype::Float64: case StorageDtype::Int64: return 8;
    case StorageDtype::Float32: case StorageDtype::Int32: return 4;
    case StorageDtype::Float16: case StorageDtype::BFloat16: case StorageDtype::Int16: return 2;
    default: return 1;
  }
}

const char* PyValue::kind_name() const {
  static const char* names[] = {"None", "bool", "int", "float", "str", "bytes", "tuple", "list", "dict",
                                "global", "storage", "tensor"};
  return names[kind];
}

namespace {

const std::map<std::string, StorageDtype>& storage_types() {
  static const std::map<std::string, StorageDtype> m = {
      {"torch.FloatStorage", StorageDtype::Float32},   {"torch.HalfStorage", StorageDtype::Float16},
      {"torch.BFloat16Storage", StorageDtype::BFloat16}, {"torch.DoubleStorage", StorageDtype::Float64},
      {"torch.LongStorage", StorageDtype::Int64},      {"torch.IntStorage", StorageDtype::Int32},
      {"torch.ShortStorage", StorageDtype::Int16},     {"torch.CharStorage", StorageDtype::Int8},
      {"torch.ByteStorage", StorageDtype::UInt8},      {"torch.BoolStorage", StorageDtype::Bool}};
  return m;
}

}  // namespace

const std::string& storage_type_global(StorageDtype d) {
  for (const auto& [name, dtype] : storage_types())
    if (dtype == d) return name;
  fail("no torch storage type for ", storage_dtype_name(d));
}

namespace {

constexpr const char* kOrderedDict = "collections.OrderedDict";
constexpr const char* kRebuildTensor = "torch._utils._rebuild_tensor_v2";
constexpr const char* kRebuildParameter = "torch._utils._rebuild_parameter";
constexpr const char* kNamespace = "argparse.Namespace";

bool allowed_global(const std::string& g) {
  return g == kOrderedDict || g == kRebuildTensor || g == kRebuildParameter || g == kNamespace ||
         storage_types().count(g);
}

PyRef make(PyValue::Kind k) {
  auto v = std::make_shared<PyValue>();
  v->kind = k;
  return v;
}

class Unpickler {
 public:
  Unpickler(const std::string& b, const std::string& label) : b_(b), label_(label) {}
  PyRef run();

 private:
  // ---- reading the byte stream
  const uint8_t* take(size_t n) {
    check(n <= b_.size() - pos_, label_, ": the pickle ends inside an opcode's argument at byte ", pos_,
          " (truncated?)");
    const uint8_t* p = reinterpret_cast<const uint8_t*>(b_.data()) + pos_;
    pos_ += n;
    return p;
  }
  uint64_t le(size_t n) {
    const uint8_t* p = take(n);
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= uint64_t(p[i]) << (8 * i);
    return v;
  }
  std::string str(size_t n) {
    const uint8_t* p = take(n);
    return std::string(reinterpret_cast<const char*>(p), n);
  }
  std::string line() {
    size_t end = b_.find('\n', pos_);
    check(end != std::string::npos && end - pos_ < 256, label_, ": GLOBAL at byte ", pos_, " has no name line");
    std::string s = b_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return s;
  }

  // ---- the stack
  PyRef pop() {
    check(stack_.size() > floor(), label_, ": pickle opcode at byte ", op_pos_, " pops an empty stack");
    PyRef v = stack_.back();
    stack_.pop_back();
    return v;
  }
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  std::vector<PyRef> pop_mark() {
    check(!marks_.empty(), label_, ": pickle opcode at byte ", op_pos_, " needs a MARK and there is none");
    std::vector<PyRef> out(stack_.begin() + marks_.back(), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return out;
  }
  PyRef& top() {
    check(stack_.size() > floor(), label_, ": pickle opcode at byte ", op_pos_, " needs a value on the stack");
    return stack_.back();
  }

  // ---- building values
  void adopt(PyValue& parent, const PyRef& child) {
    check(!parent.frozen, label_, ": the pickle changes a ", parent.kind_name(), " at byte ", op_pos_,
          " after putting it inside another container (not something torch.save writes)");
    check(child.get() != &parent, label_, ": the pickle puts a ", parent.kind_name(), " inside itself at byte ",
          op_pos_);
    child->frozen = true;
    parent.depth = std::max(parent.depth, child->depth + 1);
    check(parent.depth <= kMaxPickleDepth, label_, ": the pickle nests containers deeper than ", kMaxPickleDepth,
          " levels (byte ", op_pos_, ")");
  }
  PyRef tuple(const std::vector<PyRef>& items) {
    PyRef t = make(PyValue::Tuple);
    for (const PyRef& x : items) adopt(*t, x);
    t->items = items;
    return t;
  }
  void set_item(PyValue& d, const PyRef& k, const PyRef& v) {
    check(d.kind == PyValue::Dict, label_, ": SETITEM(S) at byte ", op_pos_, " on a ", d.kind_name(), ", not a dict");
    adopt(d, k);
    adopt(d, v);
    if (k->kind == PyValue::Str)
      for (auto& [key, value] : d.dict)
        if (key->kind == PyValue::Str && key->s == k->s) {
          value = v;
          return;
        }
    d.dict.emplace_back(k, v);
  }
  void append(PyValue& l, const PyRef& v) {
    check(l.kind == PyValue::List, label_, ": APPEND(S) at byte ", op_pos_, " on a ", l.kind_name(), ", not a list");
    adopt(l, v);
    l.items.push_back(v);
  }
  PyRef global(const std::string& module, const std::string& name) {
    const std::string g = module + "." + name;
    check(allowed_global(g), label_, ": the pickle refers to the global '", g, "' (byte ", op_pos_,
          "), which is not allowed in a weights file; only ", kOrderedDict, ", ", kRebuildTensor, ", ",
          kRebuildParameter, ", ", kNamespace, " and torch.*Storage types are (nothing was run)");
    PyRef v = make(PyValue::Global);
    v->s = g;
    return v;
  }
  void memo_put(uint64_t id) {
    check(id < (uint64_t(1) << 32), label_, ": memo index ", id, " out of range");
    memo_[uint32_t(id)] = top();
  }
  void memo_get(uint64_t id) {
    auto it = memo_.find(uint32_t(id));
    check(id < (uint64_t(1) << 32) && it != memo_.end(), label_, ": the pickle reads memo entry ", id,
          " at byte ", op_pos_, ", which was never stored");
    stack_.push_back(it->second);
  }

  PyRef reduce(const PyRef& fn, const PyRef& args);
  PyRef rebuild_tensor(const std::vector<PyRef>& a);
  PyRef persistent_load(const PyRef& pid);
  bool push_literal(uint8_t op);
  bool step(uint8_t op);

  const std::string& b_;
  const std::string& label_;
  size_t pos_ = 0, op_pos_ = 0;
  std::vector<PyRef> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint32_t, PyRef> memo_;
  std::map<std::string, std::pair<StorageDtype, int64_t>> storages_;  // key -> (dtype, numel)
};

int64_t as_int(const PyRef& v, const std::string& what, const std::string& label) {
  check(v->kind == PyValue::Int || v->kind == PyValue::Bool, label, ": ", what, " is a ", v->kind_name(),
        ", expected an int");
  return v->i;
}

std::vector<int64_t> int_tuple(const PyRef& v, const std::string& what, const std::string& label) {
  check(v->kind == PyValue::Tuple && v->items.size() <= 8, label, ": ", what, " is a ", v->kind_name(),
        v->kind == PyValue::Tuple ? " of more than 8 dimensions" : "", ", expected a tuple of ints");
  std::vector<int64_t> out;
  for (const PyRef& x : v->items) {
    out.push_back(as_int(x, what, label));
    check(out.back() >= 0, label, ": ", what, " has a negative entry ", out.back());
  }
  return out;
}

// _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
PyRef Unpickler::rebuild_tensor(const std::vector<PyRef>& a) {
  check(a.size() == 6 || a.size() == 7, label_, ": _rebuild_tensor_v2 called with ", a.size(),
        " arguments, expected 6 or 7");
  check(a[0]->kind == PyValue::Storage, label_, ": _rebuild_tensor_v2's storage is a ", a[0]->kind_name());
  PyRef t = make(PyValue::Tensor);
  t->tensor = a[0]->tensor;
  TensorRef& r = t->tensor;
  r.offset = as_int(a[1], "a tensor's storage offset", label_);
  r.size = int_tuple(a[2], "a tensor's size", label_);
  r.stride = int_tuple(a[3], "a tensor's stride", label_);
  check(r.offset >= 0 && r.size.size() == r.stride.size(), label_, ": tensor on storage '", r.key,
        "' has offset ", r.offset, ", ", r.size.size(), " sizes and ", r.stride.size(), " strides");
  // The last element the view touches must lie inside the storage (no overflow on the way).
  int64_t numel = 1, last = r.offset;
  for (size_t d = 0; d < r.size.size(); ++d) {
    check(!__builtin_mul_overflow(numel, r.size[d], &numel), label_, ": tensor on storage '", r.key,
          "' has too many elements");
    int64_t reach = 0;
    if (r.size[d] > 0)
      check(!__builtin_mul_overflow(r.size[d] - 1, r.stride[d], &reach) && !__builtin_add_overflow(last, reach, &last),
            label_, ": tensor on storage '", r.key, "' has strides out of range");
  }
  check(numel == 0 || last < r.storage_numel, label_, ": tensor on storage '", r.key, "' (offset ", r.offset,
        ") reaches element ", last, " of a storage of ", r.storage_numel);
  return t;
}

// ('storage', <Type>Storage, key, location, numel) -> a Storage value.
PyRef Unpickler::persistent_load(const PyRef& pid) {
  check(pid->kind == PyValue::Tuple && pid->items.size() == 5 && pid->items[0]->kind == PyValue::Str &&
            pid->items[0]->s == "storage",
        label_, ": a persistent id that is not ('storage', type, key, location, numel)");
  const PyRef &type = pid->items[1], &key = pid->items[2];
  check(type->kind == PyValue::Global && storage_types().count(type->s), label_,
        ": a storage's type is not a torch.*Storage class");
  check(key->kind == PyValue::Str && !key->s.empty() && key->s.size() < 64 && key->s.find('/') == std::string::npos,
        label_, ": a storage key is not a short string");
  PyRef s = make(PyValue::Storage);
  s->tensor.key = key->s;
  s->tensor.dtype = storage_types().at(type->s);
  s->tensor.storage_numel = as_int(pid->items[4], "a storage's size", label_);
  check(s->tensor.storage_numel >= 0 && s->tensor.storage_numel < (int64_t(1) << 40), label_, ": storage '",
        key->s, "' has size ", s->tensor.storage_numel);
  auto [it, fresh] = storages_.emplace(key->s, std::make_pair(s->tensor.dtype, s->tensor.storage_numel));
  check(fresh || it->second == std::make_pair(s->tensor.dtype, s->tensor.storage_numel), label_, ": storage '",
        key->s, "' is described twice, differently");
  return s;
}

PyRef Unpickler::reduce(const PyRef& fn, const PyRef& args) {
  check(fn->kind == PyValue::Global, label_, ": REDUCE at byte ", op_pos_, " calls a ", fn->kind_name(),
        ", not an allowed global");
  check(args->kind == PyValue::Tuple, label_, ": REDUCE at byte ", op_pos_, " with arguments that are not a tuple");
  const std::vector<PyRef>& a = args->items;
  if (fn->s == kOrderedDict) {
    check(a.empty(), label_, ": collections.OrderedDict called with arguments (torch.save passes none)");
    return make(PyValue::Dict);
  }
  if (fn->s == kRebuildTensor) return rebuild_tensor(a);
  if (fn->s == kRebuildParameter) {
    check(a.size() == 3 && a[0]->kind == PyValue::Tensor, label_, ": _rebuild_parameter expects (tensor, bool, hooks)");
    return a[0];
  }
  fail(label_, ": REDUCE at byte ", op_pos_, " calls '", fn->s, "', which is not callable here");
}

// Opcodes that push a constant (None, bools, ints, floats, strings); false for any other opcode.
bool Unpickler::push_literal(uint8_t op) {
  switch (op) {
    case 'N': stack_.push_back(make(PyValue::None)); return true;
    case 0x88: case 0x89: { PyRef v = make(PyValue::Bool); v->i = op == 0x88; stack_.push_back(v); return true; }
    case 'J': { PyRef v = make(PyValue::Int); v->i = int32_t(uint32_t(le(4))); stack_.push_back(v); return true; }
    case 'K': { PyRef v = make(PyValue::Int); v->i = int64_t(le(1)); stack_.push_back(v); return true; }
    case 'M': { PyRef v = make(PyValue::Int); v->i = int64_t(le(2)); stack_.push_back(v); return true; }
    case 0x8a: {                                                        // LONG1: n-byte two's complement
      const uint64_t n = le(1);
      check(n <= 8, label_, ": an integer of ", n, " bytes at byte ", op_pos_, " (at most 8 accepted)");
      uint64_t u = le(n);
      if (n > 0 && n < 8 && (u >> (8 * n - 1)) & 1) u |= ~uint64_t(0) << (8 * n);  // sign-extend
      PyRef v = make(PyValue::Int); v->i = int64_t(u); stack_.push_back(v); return true;
    }
    case 'G': {                                                         // BINFLOAT: big-endian double
      const uint8_t* p = take(8);
      uint64_t u = 0;
      for (int i = 0; i < 8; ++i) u = u << 8 | p[i];
      PyRef v = make(PyValue::Float); v->f = std::bit_cast<double>(u); stack_.push_back(v); return true;
    }
    case 'X': case 0x8c: case 0x8d: case 'T': case 'U': case 'B': case 'C': {
      const size_t n = op == 'X' || op == 'T' || op == 'B' ? 4 : op == 0x8d ? 8 : 1;
      const uint64_t len = le(n);
      check(len <= b_.size() - pos_, label_, ": a string of ", len, " bytes at byte ", op_pos_, " runs past the end");
      PyRef v = make(op == 'B' || op == 'C' ? PyValue::Bytes : PyValue::Str); v->s = str(len); stack_.push_back(v); return true;
    }
    default: return false;
  }
}

// One opcode; false at STOP.
bool Unpickler::step(uint8_t op) {
  switch (op) {
    case 0x80: { uint64_t p = le(1); check(p >= 2 && p <= 5, label_, ": pickle protocol ", p, " (2 to 5 accepted)"); break; }
    case 0x95: le(8); break;                                            // FRAME: a length hint
    case '(': marks_.push_back(stack_.size()); break;                   // MARK
    case '.': return false;                                             // STOP
    case '}': stack_.push_back(make(PyValue::Dict)); break;
    case ']': stack_.push_back(make(PyValue::List)); break;
    case ')': stack_.push_back(make(PyValue::Tuple)); break;
    case 't': stack_.push_back(tuple(pop_mark())); break;
    case 0x85: case 0x86: case 0x87: {
      std::vector<PyRef> items(size_t(op - 0x84));
      for (size_t i = items.size(); i-- > 0;) items[i] = pop();
      stack_.push_back(tuple(items)); break;
    }
    case 'q': memo_put(le(1)); break;
    case 'r': memo_put(le(4)); break;
    case 0x94: memo_put(memo_.size()); break;                           // MEMOIZE
    case 'h': memo_get(le(1)); break;
    case 'j': memo_get(le(4)); break;
    case 'c': { std::string m = line(); std::string n = line(); stack_.push_back(global(m, n)); break; }
    case 0x93: {                                                        // STACK_GLOBAL
      PyRef n = pop(), m = pop();
      check(m->kind == PyValue::Str && n->kind == PyValue::Str, label_, ": STACK_GLOBAL on non-strings");
      stack_.push_back(global(m->s, n->s)); break;
    }
    case 's': { PyRef v = pop(), k = pop(); set_item(*top(), k, v); break; }
    case 'u': {
      std::vector<PyRef> kv = pop_mark();
      check(kv.size() % 2 == 0, label_, ": SETITEMS at byte ", op_pos_, " with an odd number of values");
      PyRef d = top();
      for (size_t i = 0; i < kv.size(); i += 2) set_item(*d, kv[i], kv[i + 1]);
      break;
    }
    case 'a': { PyRef v = pop(); append(*top(), v); break; }
    case 'e': { std::vector<PyRef> vs = pop_mark(); PyRef l = top(); for (auto& v : vs) append(*l, v); break; }
    case 'R': { PyRef args = pop(), fn = pop(); stack_.push_back(reduce(fn, args)); break; }
    case 0x81: {                                                        // NEWOBJ: argparse.Namespace only
      PyRef args = pop(), cls = pop();
      check(cls->kind == PyValue::Global && cls->s == kNamespace && args->kind == PyValue::Tuple && args->items.empty(),
            label_, ": NEWOBJ at byte ", op_pos_, " creates a ", cls->kind == PyValue::Global ? cls->s : cls->kind_name(),
            " (only an argparse.Namespace, with no arguments, is accepted)");
      stack_.push_back(make(PyValue::Dict));  // its attributes come with BUILD, which drops them
      break;
    }
    case 'Q': { PyRef pid = pop(); stack_.push_back(persistent_load(pid)); break; }
    case 'b': {                                                         // BUILD: only an OrderedDict's _metadata
      PyRef state = pop();
      check(top()->kind == PyValue::Dict && (state->kind == PyValue::Dict || state->kind == PyValue::None), label_,
            ": BUILD at byte ", op_pos_, " sets the state of a ", top()->kind_name(), " (only a dict's is accepted)");
      break;
    }
    default: {
      if (push_literal(op)) break;
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x", op);
      fail(label_, ": pickle opcode ", hex, (op >= 0x20 && op < 0x7f ? std::string(" '") + char(op) + "'" : ""),
           " at byte ", op_pos_, " is not allowed in a weights file (nothing was run)");
    }
  }
  return true;
}

PyRef Unpickler::run() {
  while (true) {
    check(pos_ < b_.size(), label_, ": the pickle ends without STOP (truncated?)");
    op_pos_ = pos_;
    if (!step(uint8_t(b_[pos_++]))) break;
  }
  check(stack_.size() == 1 && marks_.empty(), label_, ": the pickle stops with ", stack_.size(),
        " values on its stack (expected exactly 1)");
  return stack_.back();
}

}  // namespace

PyRef unpickle_restricted(const std::string& bytes, const std::string& label) {
  return Unpickler(bytes, label).run();
}

}  // namespace sima
