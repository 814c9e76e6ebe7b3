// Upstream state dicts -> our models: name maps, config inference, loading (upstream.h).
#include "models/io/upstream.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/allocation_budget.h"
#include "core/error.h"
#include "core/file_io.h"
#include "models/io/pth.h"
#include "models/registry.h"

namespace sima {

namespace {

using Lookup = std::map<std::string, Tensor>;

bool starts(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

// Some name starts with p (or with "module." p: DistributedDataParallel's prefix).
bool has_prefix(const NamedTensors& sd, const std::string& p) {
  return std::any_of(sd.begin(), sd.end(),
                     [&](const auto& kv) { return starts(kv.first, p) || starts(kv.first, "module." + p); });
}

// How many of prefix0., prefix1., ... are present (stops at the first gap).
int64_t count_indexed(const Lookup& sd, const std::string& prefix) {
  int64_t n = 0;
  while (true) {
    const std::string p = prefix + std::to_string(n) + ".";
    auto it = sd.lower_bound(p);
    if (it == sd.end() || !starts(it->first, p)) return n;
    ++n;
  }
}

// Infers the config from a Lookup; names what it needed and could not find.
struct Inferrer {
  const Lookup& sd;
  const std::string& label;
  std::vector<std::pair<std::string, std::string>> unknown;  // config key -> why it is not inferable

  const Tensor& need(const std::string& name, int ndim) const {
    auto it = sd.find(name);
    check(it != sd.end(), label, ": no tensor '", name, "', which the config is inferred from");
    check(it->second.dim() == ndim, label, ": '", name, "' has shape ", it->second.shape().str(), ", expected ",
          ndim, " dimensions");
    return it->second;
  }
  int64_t dim(const std::string& name, int ndim, int d) const {
    const int64_t v = need(name, ndim).shape()[d];
    check(v > 0, label, ": '", name, "' has shape ", need(name, ndim).shape().str(), ", with an empty dimension");
    return v;
  }
  bool has(const std::string& name) const { return sd.count(name) > 0; }
  int64_t heads_by_64(int64_t D, const std::string& key) {
    if (D % 64 == 0) return D / 64;
    unknown.emplace_back(key, "width " + std::to_string(D) + " is not a multiple of 64 (the upstream default D/64)");
    return 1;
  }
  float ratio(const std::string& fc1, int64_t D) const { return float(dim(fc1, 2, 0)) / float(D); }

  ModelConfig deit();
  ModelConfig xcit(bool official);
  ModelConfig cvt();
};

ModelConfig Inferrer::deit() {
  ModelConfig c;
  c.arch = "deit";
  c.embed_dim = dim("cls_token", 3, 2);
  c.patch_size = dim("patch_embed.proj.weight", 4, 2);
  c.in_chans = dim("patch_embed.proj.weight", 4, 1);
  c.depth = count_indexed(sd, "blocks.");
  check(c.depth > 0, label, ": no blocks.0.* tensors");
  c.num_classes = dim("head.weight", 2, 0);
  c.mlp_ratio = ratio("blocks.0.mlp.fc1.weight", c.embed_dim);
  c.qkv_bias = has("blocks.0.attn.qkv.bias");
  c.distilled = has("dist_token");
  if (has("blocks.0.ls1.gamma")) c.layer_scale_init = 1e-5f;  // any nonzero value: the gammas are loaded
  const int64_t tokens = dim("pos_embed", 3, 1) - (c.distilled ? 2 : 1);
  int64_t grid = 0;
  while ((grid + 1) * (grid + 1) <= tokens) ++grid;
  check(grid > 0 && grid * grid == tokens, label, ": pos_embed has ", tokens, " patch positions, not a square grid");
  c.img_size = grid * c.patch_size;
  c.num_heads = heads_by_64(c.embed_dim, "num_heads");
  c.attention.variant = "softmax";
  c.drop_path_rate = 0.f;
  return c;
}

ModelConfig Inferrer::xcit(bool official) {
  ModelConfig c;
  c.arch = "xcit";
  c.patch_embed = "conv_stem";
  c.embed_dim = dim("cls_token", 3, 2);
  int convs = 0;
  while (convs < 5 && has("patch_embed.proj." + std::to_string(2 * convs) + ".0.weight")) ++convs;
  check(convs >= 2 && convs <= 4, label, ": patch_embed.proj has ", convs, " convolutions (2, 3 or 4 expected)");
  c.patch_size = int64_t(1) << convs;
  c.in_chans = dim("patch_embed.proj.0.0.weight", 4, 1);
  c.depth = count_indexed(sd, "blocks.");
  check(c.depth > 0, label, ": no blocks.0.* tensors");
  c.cls_attn_layers = count_indexed(sd, "cls_attn_blocks.");
  c.num_classes = dim("head.weight", 2, 0);
  c.mlp_ratio = ratio("blocks.0.mlp.fc1.weight", c.embed_dim);
  c.qkv_bias = has("blocks.0.attn.qkv.bias");
  c.tokens_norm = c.embed_dim != 128;
  c.img_size = 224;
  c.drop_path_rate = 0.f;
  if (official) {
    c.attention.variant = "sima";
    const std::map<int64_t, int64_t> heads = {{128, 4}, {192, 4}, {384, 8}, {512, 8}, {768, 16}};
    if (heads.count(c.embed_dim)) c.num_heads = heads.at(c.embed_dim);
    else unknown.emplace_back("num_heads", "width " + std::to_string(c.embed_dim) + " is none of the official models'");
  } else {
    c.attention.variant = "xca";
    c.num_heads = dim("blocks.0.attn.temperature", 3, 0);
  }
  return c;
}

ModelConfig Inferrer::cvt() {
  ModelConfig c;
  c.arch = "cvt";
  c.act = "quick_gelu";
  c.norm_eps = 1e-5f;
  c.img_size = 224;
  c.attention.variant = "softmax";
  const int64_t stages = count_indexed(sd, "stage");
  check(stages > 0, label, ": no stage0.* tensors");
  c.stage_dims.clear(), c.stage_depths.clear(), c.stage_heads.clear(), c.stage_embed_kernel.clear();
  c.stage_embed_stride.clear(), c.stage_embed_padding.clear();
  c.stage_drop_path.assign(size_t(stages), 0.f);
  c.stage_stride_kv.assign(size_t(stages), 2);
  for (int64_t i = 0; i < stages; ++i) {
    const std::string s = "stage" + std::to_string(i) + ".";
    const int64_t D = dim(s + "patch_embed.proj.weight", 4, 0), k = dim(s + "patch_embed.proj.weight", 4, 2);
    c.stage_dims.push_back(D);
    c.stage_embed_kernel.push_back(k);
    c.stage_depths.push_back(count_indexed(sd, s + "blocks."));
    c.stage_heads.push_back(heads_by_64(D, "stage_heads"));
    if (k == 7 || k == 3) {
      c.stage_embed_stride.push_back(k == 7 ? 4 : 2);
      c.stage_embed_padding.push_back(k == 7 ? 2 : 1);
    } else {
      c.stage_embed_stride.push_back(1), c.stage_embed_padding.push_back(0);
      unknown.emplace_back("stage_embed_stride", "stage " + std::to_string(i) + " embeds with a " + std::to_string(k) +
                                                     "x" + std::to_string(k) + " kernel (only 7 and 3 have a default)");
      unknown.emplace_back("stage_embed_padding", "the same");
    }
  }
  c.in_chans = dim("stage0.patch_embed.proj.weight", 4, 1);
  c.num_classes = dim("head.weight", 2, 0);
  c.mlp_ratio = ratio("stage0.blocks.0.mlp.fc1.weight", c.stage_dims[0]);
  c.qkv_bias = has("stage0.blocks.0.attn.proj_q.bias");
  return c;
}

// cat(a, b, c) along dim 0.
Tensor cat0(const std::vector<Tensor>& parts) {
  std::vector<int64_t> shape(parts[0].shape().begin(), parts[0].shape().end());
  shape[0] *= int64_t(parts.size());
  Tensor out = empty(Shape(shape));
  int64_t at = 0;
  for (const Tensor& p : parts) {
    std::memcpy(out.data() + at, p.data(), sizeof(float) * size_t(p.numel()));
    at += p.numel();
  }
  return out;
}

// timm's split class attention: attn.q / attn.k / attn.v -> attn.qkv (one Linear(C, 3C)).
void join_class_attention_qkv(Lookup& sd, const std::string& label) {
  std::vector<std::string> qs;
  for (const auto& [n, t] : sd)
    if (starts(n, "cls_attn_blocks.") && (n.ends_with(".attn.q.weight") || n.ends_with(".attn.q.bias"))) qs.push_back(n);
  for (const std::string& q : qs) {
    const size_t at = q.rfind(".q.");
    const std::string base = q.substr(0, at), leaf = q.substr(at + 3);
    const Shape shape = sd.at(q).shape();
    std::vector<Tensor> parts;
    for (const char* which : {"q", "k", "v"}) {
      const std::string n = base + "." + which + "." + leaf;
      check(sd.count(n) && sd.at(n).shape() == shape && shape.ndim() >= 1, label, ": '", q, "' needs a '", n,
            "' of the same shape (timm's split class attention)");
      parts.push_back(sd.at(n));
    }
    for (const char* which : {"q", "k", "v"}) sd.erase(base + "." + which + "." + leaf);
    sd[base + ".qkv." + leaf] = cat0(parts);
  }
}

// The JSON object or file of --model, strictly (a key given twice is an error: core/json_schema.h).
nlohmann::json parse_spec(const std::string& spec) {
  if (!spec.empty() && spec.front() == '{') return parse_json_strict(spec, "--model");
  if (std::filesystem::exists(spec)) check_regular_file(spec, "JSON model config");  // a FIFO would block
  std::ifstream in(spec, std::ios::binary);
  check(bool(in), "--model: '", spec, "' is neither a registered model, a JSON object nor a readable .json file");
  std::stringstream text;
  text << in.rdbuf();
  return parse_json_strict(text.str(), "--model " + spec);
}

}  // namespace

std::string detect_layout(const NamedTensors& sd) {
  if (has_prefix(sd, "stage0.")) return "cvt";
  if (has_prefix(sd, "pos_embeder.")) return "official";
  if (has_prefix(sd, "cls_token") && has_prefix(sd, "blocks.0.") && has_prefix(sd, "pos_embed")) return "timm";
  return "";
}

NamedTensors map_upstream_names(const NamedTensors& in, const std::string& from, const std::string& label) {
  check(from == "official" || from == "timm" || from == "cvt", label, ": layout '", from,
        "' is unknown (allowed: official, timm, cvt)");
  const bool ddp = !in.empty() && std::all_of(in.begin(), in.end(), [](const auto& kv) {
    return starts(kv.first, "module.");
  });
  Lookup sd;
  for (const auto& [name, t] : in) {
    std::string n = ddp ? name.substr(std::strlen("module.")) : name;
    if (from == "official" && starts(n, "pos_embeder.")) n = "pos_embed." + n.substr(std::strlen("pos_embeder."));
    check(sd.emplace(n, t).second, label, ": two tensors map to the name '", n, "'");
  }
  if (from != "cvt") join_class_attention_qkv(sd, label);
  return NamedTensors(sd.begin(), sd.end());
}

InferredConfig infer_upstream_config(const NamedTensors& mapped, const std::string& from, const std::string& label) {
  const Lookup sd(mapped.begin(), mapped.end());
  Inferrer inf{sd, label, {}};
  InferredConfig out;
  if (from == "cvt") out.config = inf.cvt();
  else if (from == "official" || sd.count("pos_embed.token_projection.weight")) out.config = inf.xcit(from == "official");
  else out.config = inf.deit();
  out.unknown = inf.unknown;
  // Through the registry's validation (positive sizes, known names): a config made from a file's
  // shapes is as untrusted as one read from JSON.
  out.config = config_from_json(config_to_json(out.config), ModelConfig(), label + ": inferred config");
  return out;
}

UpstreamModel build_upstream_model(const NamedTensors& sd, const std::string& from_flag, const std::string& spec,
                                   const std::string& label) {
  UpstreamModel out;
  const std::string detected = detect_layout(sd);
  out.layout = from_flag.empty() ? detected : from_flag;
  check(!out.layout.empty(), label, ": the tensor names fit none of the known layouts (official: pos_embeder.*; "
        "timm: cls_token, pos_embed, blocks.*; cvt: stage0.*); give --from official|timm|cvt");
  check(detected.empty() || detected == out.layout, label, ": --from ", out.layout, ", but the tensor names are ",
        detected, "'s layout");
  const std::string where = label + " (" + out.layout + " layout)";
  const NamedTensors mapped = map_upstream_names(sd, out.layout, where);
  ModelConfig cfg;
  const std::vector<std::string> names = model_names();
  if (!spec.empty() && std::find(names.begin(), names.end(), spec) != names.end()) {
    cfg = model_config(spec);
  } else {
    const InferredConfig inferred = infer_upstream_config(mapped, out.layout, where);
    const nlohmann::json j = spec.empty() ? nlohmann::json::object() : parse_spec(spec);
    check(j.is_object(), "--model: expected a registered name or a JSON object, got ", j.dump());
    std::string missing;  // what the shapes cannot say must come from --model
    for (const auto& [key, why] : inferred.unknown)
      if (!j.contains(key)) missing += "\n  " + key + ": " + why;
    check(missing.empty(), where, ": the config cannot be inferred from the tensor shapes:", missing,
          "\ngive these keys with --model '{\"key\": value, ...}' (or a registered model name)");
    cfg = config_from_json(j, inferred.config, "--model");
  }
  int64_t file_floats = 0;
  for (const auto& [n, t] : mapped) file_floats += t.numel();
  try {
    AllocationBudget budget(2 * file_floats * int64_t(sizeof(float)) + (int64_t(1) << 20),
                            "the model config describes a larger model than the file's " + std::to_string(file_floats) +
                                " values");
    out.model = create_model(cfg);
  } catch (const Error& e) {
    fail(where, ": ", e.what());
  }
  try {
    out.model->load_state_dict(StateDict(mapped.begin(), mapped.end()));
  } catch (const Error& e) {
    fail(where, ": ", e.what());
  }
  out.model->eval();
  out.crop_pct = upstream_crop_pct(out.layout, cfg);
  if (out.layout == "timm" && cfg.arch == "deit" && spec.empty())
    out.note = label + ": timm's DeiT layout has the same tensors for softmax and SimA attention (SimA adds no "
               "parameter); imported as softmax, timm's own. For a DeiT-SimA checkpoint give --model "
               "'{\"attention\": {\"type\": \"sima\"}}'";
  return out;
}

double upstream_crop_pct(const std::string& layout, const ModelConfig& config) {
  if (layout == "timm") return config.arch == "xcit" || config.img_size >= 384 ? 1.0 : 0.9;
  if (layout == "cvt") return config.img_size >= 384 ? 1.0 : 0.875;
  return 0.875;  // official
}

UpstreamModel load_upstream_checkpoint(const std::string& path, const std::string& from, const std::string& spec) {
  PthStateDict sd = load_pth_state_dict(path);
  UpstreamModel m = build_upstream_model(sd.tensors, from, spec, path);
  m.where = sd.where;
  return m;
}

}  // namespace sima
