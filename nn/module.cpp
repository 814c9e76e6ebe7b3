#include "nn/module.h"

#include <cstring>
#include <set>
#include <sstream>

#include "core/error.h"

namespace sima {

namespace {
void check_name(const std::string& what, const std::string& name, const std::string& type) {
  check(!name.empty() && name.find('.') == std::string::npos, type, ".", what, ": invalid name '",
        name, "' (must be non-empty and contain no '.')");
}
}  // namespace

Tensor Module::forward(const Tensor&) {
  fail(type_name_, ": forward(x) is not available for this module");
}

Tensor Module::register_parameter(const std::string& name, Tensor t) {
  check_name("register_parameter", name, type_name_);
  check(t.defined(), type_name_, ".register_parameter: '", name, "' is undefined");
  for (auto& [n, _] : params_) check(n != name, type_name_, ": parameter '", name, "' registered twice");
  t.requires_grad_(true);
  params_.emplace_back(name, t);
  return t;
}

Tensor Module::register_buffer(const std::string& name, Tensor t) {
  check_name("register_buffer", name, type_name_);
  check(t.defined(), type_name_, ".register_buffer: '", name, "' is undefined");
  for (auto& [n, _] : buffers_) check(n != name, type_name_, ": buffer '", name, "' registered twice");
  buffers_.emplace_back(name, t);
  return t;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> m) {
  check_name("register_module", name, type_name_);
  check(m != nullptr, type_name_, ".register_module: '", name, "' is null");
  for (auto& [n, _] : children_) check(n != name, type_name_, ": module '", name, "' registered twice");
  m->train(training_);
  children_.emplace_back(name, std::move(m));
}

void Module::collect(const std::string& prefix, bool buffers,
                     std::vector<std::pair<std::string, Tensor>>& out) const {
  for (const auto& [n, t] : buffers ? buffers_ : params_) out.emplace_back(prefix + n, t);
  for (const auto& [n, m] : children_) m->collect(prefix + n + ".", buffers, out);
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", false, out);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", true, out);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out{{"", this}};
  for (size_t i = 0; i < out.size(); ++i) {  // breadth-first, no recursion
    auto [prefix, m] = out[i];
    for (auto& [n, c] : m->children_) out.emplace_back(prefix.empty() ? n : prefix + "." + n, c.get());
  }
  return out;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, m] : children_) m->train(on);
}

void Module::zero_grad() {
  for (auto& [n, t] : named_parameters()) t.zero_grad();
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

StateDict Module::state_dict() const {
  StateDict sd;
  for (auto& [n, t] : named_parameters()) sd[n] = t;
  for (auto& [n, t] : named_buffers()) sd[n] = t;
  return sd;
}

void Module::load_state_dict(const StateDict& sd) {
  StateDict own = state_dict();
  std::vector<std::string> missing, unexpected, misshaped;
  for (auto& [n, t] : own) {
    auto it = sd.find(n);
    if (it == sd.end() || !it->second.defined()) missing.push_back(n);
    else if (it->second.shape() != t.shape())
      misshaped.push_back(n + ": checkpoint " + it->second.shape().str() + ", model " + t.shape().str());
  }
  for (auto& [n, t] : sd)
    if (!own.count(n)) unexpected.push_back(n);
  if (!missing.empty() || !unexpected.empty() || !misshaped.empty()) {
    std::ostringstream os;
    os << type_name_ << ".load_state_dict: the state dict does not match the model";
    auto list = [&](const char* what, const std::vector<std::string>& v) {
      if (v.empty()) return;
      os << "\n  " << what << " (" << v.size() << "):";
      for (auto& s : v) os << "\n    " << s;
    };
    list("missing", missing);
    list("unexpected", unexpected);
    list("wrong shape", misshaped);
    throw Error(os.str());
  }
  for (auto& [n, t] : own) std::memcpy(t.data(), sd.at(n).data(), sizeof(float) * t.numel());
}

}  // namespace sima
