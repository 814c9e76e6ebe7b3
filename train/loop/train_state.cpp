#include "train/loop/train_state.h"

#include <cmath>

#include "core/error.h"
#include "core/rng.h"
#include "models/finite_check.h"
#include "models/quantized.h"
#include "models/io/safetensors.h"

namespace sima {

using json = nlohmann::json;

namespace {

constexpr const char* kFormat = "sima.cpp/train_state/1";

json position_to_json(const TrainPosition& p) {
  json j = {{"step", p.step},
            {"epoch", p.epoch},
            {"batch", p.batch},
            {"epoch_loss_sum", p.epoch_loss_sum},
            {"epoch_loss_count", p.epoch_loss_count},
            {"best_top1", p.best_top1}};
  if (p.amp.scale > 0.f)  // a float16 run's loss scaler (absent otherwise: fp32 states are as before)
    j["loss_scaler"] = {{"scale", p.amp.scale},
                        {"growth_tracker", p.amp.growth_tracker},
                        {"skipped_steps", p.amp.skipped_steps},
                        {"forward_peak", p.amp.forward_peak},
                        {"forward_peak_attention", p.amp.forward_peak_attention}};
  return j;
}

TrainPosition position_from_json(const json& j, const std::string& path) {
  TrainPosition p;
  try {
    p.step = j.at("step").get<int64_t>();
    p.epoch = j.at("epoch").get<int64_t>();
    p.batch = j.at("batch").get<int64_t>();
    p.epoch_loss_sum = j.at("epoch_loss_sum").get<double>();
    p.epoch_loss_count = j.at("epoch_loss_count").get<int64_t>();
    p.best_top1 = j.at("best_top1").get<double>();
    if (j.contains("loss_scaler")) {
      const json& a = j.at("loss_scaler");
      p.amp = {a.at("scale").get<float>(), a.at("growth_tracker").get<int64_t>(), a.at("skipped_steps").get<int64_t>(),
               a.value("forward_peak", 0.f),  // the two peaks: absent from the states saved before
               a.value("forward_peak_attention", 0.f)};
      check(p.amp.scale > 0.f && std::isfinite(p.amp.scale) && p.amp.growth_tracker >= 0 && p.amp.skipped_steps >= 0 &&
                p.amp.forward_peak >= 0.f && p.amp.forward_peak_attention >= 0.f,
            path, ": the loss scaler in the metadata is malformed");
    }
  } catch (const json::exception& e) {
    fail(path, ": the training position in the metadata is malformed (", e.what(), ")");
  }
  check(p.step >= 0 && p.epoch >= 0 && p.batch >= 0 && p.epoch_loss_count >= 0, path,
        ": the training position in the metadata has negative values");
  return p;
}

// The tensors under `prefix` with the prefix removed, as a StateDict.
StateDict with_prefix_removed(const SafetensorsFile& f, const std::string& prefix) {
  StateDict sd;
  for (auto& [name, t] : f.tensors)
    if (name.rfind(prefix, 0) == 0) sd[name.substr(prefix.size())] = t;
  return sd;
}

// Checks `sd` against the module's tensors (names and shapes) without changing anything.
void check_matches(const Module& m, const StateDict& sd, const std::string& path, const std::string& what) {
  StateDict mine = m.state_dict();
  for (auto& [name, t] : mine) {
    auto it = sd.find(name);
    check(it != sd.end(), path, ": ", what, " tensor '", name, "' is missing (a state of a different model?)");
    check(it->second.shape() == t.shape(), path, ": ", what, " tensor '", name, "' has shape ",
          it->second.shape().str(), ", the model's is ", t.shape().str());
  }
  for (auto& [name, t] : sd)
    check(mine.count(name), path, ": ", what, " tensor '", name, "' does not belong to the model");
}

}  // namespace

void save_train_state(const std::string& path, const Module& model, const Optimizer& optim, const Module* ema,
                      const TrainPosition& pos, const json& config,
                      const std::map<std::string, std::string>& extra_metadata) {
  NamedTensors tensors;
  for (auto& [name, t] : model.state_dict()) tensors.emplace_back("model." + name, t);
  for (auto& [name, t] : optim.state()) tensors.emplace_back("optim." + name, t);
  if (ema)
    for (auto& [name, t] : ema->state_dict()) tensors.emplace_back("ema." + name, t);
  json rng_state = json::array();
  for (int s = 0; s < kNumRngStreams; ++s) {
    auto st = rng(RngStream(s)).state();
    rng_state.push_back(json(std::vector<uint64_t>(st.begin(), st.end())));
  }
  std::map<std::string, std::string> meta = extra_metadata;
  meta["format"] = kFormat;
  meta["position"] = position_to_json(pos).dump();
  meta["rng"] = rng_state.dump();
  meta["config"] = config.dump();
  check_finite_weights(tensors, path, /*saving=*/true);
  save_safetensors(path, tensors, meta);
}

TrainPosition load_train_state(const std::string& path, Module& model, Optimizer& optim, Module* ema,
                               json* config) {
  SafetensorsFile f = load_safetensors(path);
  check(!is_quantized_checkpoint(f.metadata), path,
        ": is a quantized checkpoint (int8 weights, sima-convert --quantize), not a train state; training needs "
        "float32 weights");
  check_finite_weights(f.tensors, path, /*saving=*/false);
  auto meta = [&](const char* key) -> json {
    auto it = f.metadata.find(key);
    check(it != f.metadata.end(), path, ": no '", key, "' in the metadata (not a sima.cpp train state?)");
    try {
      return key == std::string("format") ? json(it->second) : json::parse(it->second);
    } catch (const json::exception& e) {
      fail(path, ": metadata '", key, "' is not valid JSON (", e.what(), ")");
    }
  };
  check(meta("format") == kFormat, path, ": format ", meta("format").dump(), " is not ", kFormat);
  TrainPosition pos = position_from_json(meta("position"), path);
  json rng_state = meta("rng");
  check(rng_state.is_array() && rng_state.size() == size_t(kNumRngStreams), path, ": malformed RNG state");
  std::array<std::array<uint64_t, 4>, kNumRngStreams> streams{};
  for (int s = 0; s < kNumRngStreams; ++s) {
    const json& st = rng_state[size_t(s)];
    check(st.is_array() && st.size() == 4, path, ": malformed RNG state of stream ", s);
    for (int k = 0; k < 4; ++k) {
      check(st[size_t(k)].is_number_unsigned(), path, ": malformed RNG state of stream ", s);
      streams[size_t(s)][size_t(k)] = st[size_t(k)].get<uint64_t>();
    }
  }

  // Check everything first, then change.
  StateDict model_sd = with_prefix_removed(f, "model.");
  check_matches(model, model_sd, path, "model");
  StateDict ema_sd = with_prefix_removed(f, "ema.");
  if (ema) check_matches(*ema, ema_sd, path, "EMA");
  else check(ema_sd.empty(), path, ": holds EMA weights but the run has train.ema off");
  std::vector<std::pair<std::string, Tensor>> optim_state;
  for (auto& [name, t] : f.tensors)
    if (name.rfind("optim.", 0) == 0) optim_state.emplace_back(name.substr(6), t);
  try {
    optim.load_state(optim_state);  // validates before it changes anything
  } catch (const Error& e) {
    fail(path, ": ", e.what());
  }
  model.load_state_dict(model_sd);
  if (ema) ema->load_state_dict(ema_sd);
  for (int s = 0; s < kNumRngStreams; ++s) rng(RngStream(s)).set_state(streams[size_t(s)]);
  if (config) *config = meta("config");
  return pos;
}

}  // namespace sima
