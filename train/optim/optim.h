// Optimizers with PyTorch's update rules (torch.optim.SGD, torch.optim.AdamW), over
// parameter groups that each carry their own lr and weight decay.
//
//   auto groups = param_groups_no_decay(model.named_parameters(), {"pos_embed", "cls_token", ...});
//   AdamW opt(groups, {.lr = 5e-4, .weight_decay = 0.05});
//   loss.backward(); opt.step(); opt.zero_grad();
//
// Schedules set the lr (and weight decay) of every group before a step through
// set_lr / set_weight_decay; a group's `lr_scale` / `wd_scale` multiply what is set,
// so "no weight decay" is wd_scale = 0 and survives a weight-decay schedule.
//
// Update rules (p parameter, g its gradient, t the step count starting at 1):
//   SGD:   g ← g + wd·p;  b ← g (t = 1) or μ·b + (1 − dampening)·g;  d = nesterov ? g + μ·b : b
//          (μ = 0: d = g);  p ← p − lr·d
//   AdamW: p ← p·(1 − lr·wd);  m ← β1·m + (1 − β1)·g;  v ← β2·v + (1 − β2)·g²;
//          p ← p − lr·(m / (1 − β1^t)) / (√(v / (1 − β2^t)) + eps)
// written as PyTorch's single-tensor (for-loop) implementations do, in float32, so the
// results match torch 1.13 on CPU bit for bit. As in PyTorch, t is counted per parameter
// (AdamW's state "step.<name>"), and a parameter without a gradient (undefined grad) is
// skipped: neither it nor its state changes.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace sima {

struct ParamGroup {
  std::vector<std::pair<std::string, Tensor>> params;  // named, for state files and errors
  double lr_scale = 1.0;  // the group's lr = scheduled lr · lr_scale
  double wd_scale = 1.0;  // the group's weight decay = scheduled wd · wd_scale
  // Current values (set by set_lr / set_weight_decay from the scheduled value).
  double lr = 0.0;
  double weight_decay = 0.0;
};

// Splits parameters into two groups as timm's param_groups_weight_decay does: group 0 with
// decay, group 1 without (wd_scale 0) for every parameter with fewer than 2 dimensions
// (biases, norm weights, XCA temperatures of shape (h, 1, 1) are 3-D: see below) and every
// parameter whose dotted name contains one of `no_decay_names` as a dot-separated component
// or ends with it (e.g. "pos_embed", "cls_token", "dist_token", "temperature").
// Parameters that do not require grad are left out. Empty groups are dropped.
std::vector<ParamGroup> param_groups_no_decay(const std::vector<std::pair<std::string, Tensor>>& named_params,
                                              const std::vector<std::string>& no_decay_names);
// True when `name` is one of the no-decay names by the rule above (a helper for tests/logs).
bool is_no_decay_name(const std::string& name, const std::vector<std::string>& no_decay_names);

class Optimizer {
 public:
  explicit Optimizer(std::vector<ParamGroup> groups);
  virtual ~Optimizer() = default;

  // One update of every parameter that has a gradient (the subclass's update()).
  void step();
  void zero_grad();  // drops every gradient (set_to_none)

  // lr / weight decay of every group = value · the group's scale.
  void set_lr(double lr);
  void set_weight_decay(double wd);

  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  int64_t step_count() const { return step_count_; }

  // The optimizer's state for a train-state file: every per-parameter buffer as
  // "<kind>.<param name>" (e.g. "exp_avg.blocks.0.attn.qkv.weight"; AdamW also keeps
  // "step.<param name>", a 1-element count) plus "step" (a 1-element tensor holding
  // step_count()). The tensors are copies. A parameter never updated has no entries, and
  // load_state leaves its buffers undefined. load_state checks names and shapes and throws a
  // sima::Error naming the first unknown, missing or mis-shaped entry; nothing changes then.
  std::vector<std::pair<std::string, Tensor>> state() const;
  void load_state(const std::vector<std::pair<std::string, Tensor>>& state);

  // Non-finite results (train.on_nonfinite, train/loop/loop_common.h). After step(): the name of
  // the first parameter (in the optimizer's order) whose new value or optimizer state holds a
  // NaN or an infinity, "" when all are finite. update() checks each block of values right
  // after writing it, while it is in cache.
  const std::string& nonfinite_after_step() const { return nonfinite_; }
  // With keep_previous on, step() first copies what it is about to change (each parameter it
  // updates, that parameter's buffers, the step counts); undo_step() then puts back the
  // values from before the last step(), bit for bit. Off by default (it costs a copy).
  void set_keep_previous(bool on) { keep_previous_ = on; }
  void undo_step();

 protected:
  // One update of every parameter that has a gradient; step() wraps it.
  virtual void update() = 0;
  // update()'s bookkeeping for parameter i of group g, before it changes: with keep_previous,
  // copies it and its buffers (an undefined buffer is remembered as undefined).
  void save_previous(size_t g, size_t i);
  // update()'s note that parameter i of group g came out with a non-finite value.
  void note_nonfinite(size_t g, size_t i);

  // The per-parameter buffers, one list per kind ("momentum_buffer", "exp_avg", ...), each
  // parallel to all_params(); an entry is undefined until the parameter's first update.
  std::vector<std::pair<std::string, std::vector<Tensor>>> buffers_;
  std::vector<ParamGroup> groups_;
  int64_t step_count_ = 0;
  // Index of a parameter in the flattened list of every group's params.
  int64_t flat_index(size_t group, size_t i) const;

 private:
  std::vector<size_t> group_offset_;
  std::string nonfinite_;
  bool keep_previous_ = false;
  // The values before the last step() (keep_previous): per flat index, the parameter and
  // each kind of buffer (parallel to buffers_; undefined when it was undefined).
  std::vector<std::pair<size_t, size_t>> touched_;  // (group, i) saved by the last step()
  std::vector<Tensor> prev_params_;
  std::vector<std::vector<Tensor>> prev_buffers_;
  int64_t prev_step_count_ = 0;
};


struct SGDOptions {
  double lr = 0.1;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;  // requires momentum > 0 and dampening = 0 (as PyTorch)
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<ParamGroup> groups, const SGDOptions& options);
  const SGDOptions& options() const { return options_; }

 private:
  void update() override;
  SGDOptions options_;
};

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

class AdamW : public Optimizer {
 public:
  AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options);
  const AdamWOptions& options() const { return options_; }

 private:
  void update() override;
  AdamWOptions options_;
};

// ---- gradient clipping (torch.nn.utils) -------------------------------------------

// clip_grad_norm_: total = ‖all gradients‖₂ (as one vector); when max_norm / (total + 1e-6)
// < 1 (i.e. total > max_norm, give or take 1e-6) every gradient is scaled by that ratio.
// Returns the total norm before clipping (non-finite if any gradient is; then nothing is
// scaled). Norms are summed in double.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);
// DINO's clip_gradients: each parameter's gradient clipped to norm `clip` on its own
// (scaled by clip / (norm + 1e-6) when that ratio is < 1). Returns every norm before clipping,
// parallel to `params` (0 for a parameter without a gradient).
std::vector<double> clip_grad_per_param(const std::vector<Tensor>& params, double clip);
// The global ℓ2 norm of the gradients (params without a gradient count as zero).
double grad_norm(const std::vector<Tensor>& params);

}  // namespace sima
