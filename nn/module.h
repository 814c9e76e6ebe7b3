// Module: the unit of a model, as in PyTorch / libtorch.
//
// A module owns named parameters (trained), buffers (saved but not trained, e.g.
// BatchNorm running statistics) and child modules. Names compose with dots,
// timm-style: a Block registered as "blocks.3" whose child "attn" has a child
// "qkv" with a parameter "weight" gives "blocks.3.attn.qkv.weight".
//
// Parameters are Tensor handles: the module keeps one in its list and usually a
// member aliasing it (Linear::weight). load_state_dict copies values INTO the
// existing tensors, so every alias (and an optimizer holding them) stays valid.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace sima {

using StateDict = std::map<std::string, Tensor>;

class Module {
 public:
  explicit Module(std::string type_name = "Module") : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The forward of single-input modules (what Sequential calls). Modules with other
  // signatures add their own forward and may leave this one throwing.
  virtual Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }

  // Registration. Parameters are leaves that require grad; buffers do not.
  Tensor register_parameter(const std::string& name, Tensor t);
  Tensor register_buffer(const std::string& name, Tensor t);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }

  // Recursive listings with dotted names, in registration order (parents first).
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  std::vector<Tensor> parameters() const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const {
    return children_;
  }
  // Every module of the tree (this one first) with its dotted name ("" for this one).
  std::vector<std::pair<std::string, Module*>> named_modules();

  void train(bool on = true);  // propagates to children
  void eval() { train(false); }
  bool is_training() const { return training_; }

  void zero_grad();
  int64_t num_parameters() const;

  // Parameters and buffers by dotted name (values shared, not copied).
  StateDict state_dict() const;
  // Copies values from `sd` into this module's tensors. Every missing, unexpected or
  // mis-shaped name is reported in one sima::Error; nothing is changed in that case.
  void load_state_dict(const StateDict& sd);

  const std::string& type_name() const { return type_name_; }

 protected:
  void add_child(const std::string& name, std::shared_ptr<Module> m);
  bool training_ = true;

 private:
  void collect(const std::string& prefix, bool buffers,
               std::vector<std::pair<std::string, Tensor>>& out) const;
  std::string type_name_;
  std::vector<std::pair<std::string, Tensor>> params_, buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

// Eval mode for the scope; the module's own train/eval mode comes back when the guard goes
// out of scope (also when an error unwinds through).
class EvalModeGuard {
 public:
  explicit EvalModeGuard(Module& m) : m_(m), was_training_(m.is_training()) { m_.eval(); }
  ~EvalModeGuard() { m_.train(was_training_); }
  EvalModeGuard(const EvalModeGuard&) = delete;
  EvalModeGuard& operator=(const EvalModeGuard&) = delete;

 private:
  Module& m_;
  bool was_training_;
};

}  // namespace sima
