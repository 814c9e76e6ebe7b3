// Resuming a run: the config must match the run's, except keys that change neither the
// numbers computed nor the schedule (experiment_config.h, check_resume_config).
#include "core/error.h"
#include "models/registry.h"
#include "train/config/experiment_config.h"

namespace sima {

using json = nlohmann::json;

namespace {

// The keys whose values differ between two resolved configs ("train.epochs", ...).
std::vector<std::string> differing_keys(const json& a, const json& b, const std::string& prefix = "") {
  std::vector<std::string> out;
  if (a.is_object() && b.is_object()) {
    for (auto& [k, v] : a.items()) {
      std::string key = prefix.empty() ? k : prefix + "." + k;
      if (!b.contains(k)) out.push_back(key);
      else for (auto& d : differing_keys(v, b[k], key)) out.push_back(d);
    }
    for (auto& [k, v] : b.items())
      if (!a.contains(k)) out.push_back(prefix.empty() ? k : prefix + "." + k);
  } else if (a != b) {
    out.push_back(prefix);
  }
  return out;
}

// Keys that may change between a run and its resumption: they change neither the
// numbers computed nor the schedule.
bool may_change_on_resume(const std::string& key) {
  for (const char* k : {"train.max_steps", "train.log_every", "train.checkpoint_every", "data.num_workers",
                        "data.eval_batch_size", "train.eval_every", "train.allreduce_bucket_mb"})
    if (key == k) return true;
  return false;
}

}  // namespace

void check_resume_config(const json& stored, const json& resolved, const std::string& state_path) {
  // A run saved before a config section existed lacks its keys: resolve the stored config
  // again so they take their defaults (what that run used) before comparing.
  // A run saved before the attention variant table lists every attention key: the ones its
  // variant does not read, at their defaults, are dropped; before the model schema, every
  // model key of every architecture: those its architecture does not read are dropped
  // (models/registry.h, stored_config_json).
  json then = stored;
  if (then.is_object() && then.contains("model")) then["model"] = stored_config_json(then["model"]);
  try {
    then = experiment_to_json(experiment_from_json(then, state_path));
  } catch (const Error&) {
    // not a valid config today (a key since removed): compare as stored, naming the keys
  }
  std::vector<std::string> changed;
  for (auto& k : differing_keys(then, resolved))
    if (!may_change_on_resume(k)) changed.push_back(k);
  if (changed.empty()) return;
  std::string list;
  for (auto& k : changed) list += (list.empty() ? "" : ", ") + k;
  fail(state_path, ": the config differs from the run's in ", list,
       " (a resumed run must keep them; start a new run instead)");
}

}  // namespace sima
