// NaN and infinity in weights: a checkpoint holding one is refused when saved and when
// loaded (models/io/checkpoint.h, train/loop/train_state.h, the apps), naming the file and the
// first bad tensor, unless the user asks for it (the apps' --allow-nonfinite, for looking
// into a broken run). The optimizer checks its updates with has_nonfinite (train/optim/optim.h).
#pragma once
#include <cstdint>
#include <string>

#include "models/io/safetensors.h"
#include "nn/module.h"

namespace sima {

// True when one of the n values is a NaN or an infinity (its exponent bits all set): a plain
// pass the compiler vectorises, exact whatever the floating-point flags.
bool has_nonfinite(const float* x, int64_t n);

// The process-wide switch the apps' --allow-nonfinite sets (off by default).
void set_allow_nonfinite_weights(bool allow);
bool allow_nonfinite_weights();

// Unless allowed: fails when a tensor holds a NaN or an infinity, naming `file`, the first
// such tensor (in the given order), its first bad element and value, and the flag.
// `saving` picks the wording ("refusing to write" / "cannot load").
void check_finite_weights(const NamedTensors& tensors, const std::string& file, bool saving);
void check_finite_weights(const StateDict& tensors, const std::string& file, bool saving);

}  // namespace sima
