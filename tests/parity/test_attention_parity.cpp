// Parity of every attention variant with a PyTorch transcription of its official code:
// every case of tests/parity/attention/ref_*.py (gen_attention_reference.py, float64) is
// built here through the factory from the same JSON options, loaded with the same state
// dict (strictly, by name), run forward and backward in float32, and must agree to a
// relative error max|a − b| / max|b| <= 1e-4 on the output, the input gradient and every
// parameter gradient. The reference file comes from the CTest fixture
// parity.generate_attention (SIMA_ATTENTION_PARITY_JSON).
#include "testing.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "models/registry.h"
#include "nn/attention/attention.h"
#include "nn/attention/variants.h"

using namespace sima;
using namespace sima::testing;
using json = nlohmann::json;

namespace {

constexpr float kMaxRelError = 1e-4f;

Tensor decode(const json& j) {
  return from_vector(j.at("data").get<std::vector<float>>(), Shape(j.at("shape").get<std::vector<int64_t>>()));
}

json load_reference() {
  const char* path = std::getenv("SIMA_ATTENTION_PARITY_JSON");
  REQUIRE_MESSAGE(path != nullptr, "SIMA_ATTENTION_PARITY_JSON is not set (run through ctest)");
  std::ifstream f(path);
  REQUIRE_MESSAGE(f.good(), "cannot read " << path);
  return json::parse(f);
}

// The case's options exactly as a model config would give them: model.attention parsed by
// the registry (the same validation as sima-train), then the layer's width, heads and tokens.
AttentionOptions case_options(const json& c) {
  AttentionOptions opt = config_from_json(json{{"attention", c.at("attention")}}).attention;
  opt.dim = c.at("dim").get<int64_t>();
  opt.num_heads = c.at("num_heads").get<int64_t>();
  opt.num_tokens = c.at("tokens").get<int64_t>();  // as a model sets it (linformer's E, F are (k, N))
  return opt;
}

std::string names(const std::vector<std::string>& v) {
  std::string s;
  for (auto& n : v) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// Runs one case; returns the largest relative error over out, x grad and parameter grads.
float run_case(const json& c) {
  const std::string name = c.at("name");
  auto attn = make_attention(case_options(c));
  attn->train(c.at("mode").get<std::string>() == "train");

  StateDict sd;
  for (auto& [n, t] : c.at("state").items()) sd[n] = decode(t);
  try {
    attn->load_state_dict(sd);  // strict: missing, unexpected and mis-shaped names all listed
  } catch (const Error& e) {
    FAIL_CHECK("case " << name << ": the reference state does not match the module's:\n" << std::string(e.what()));
    return 1.f;
  }
  std::vector<std::string> params, no_ref;
  for (auto& [n, p] : attn->named_parameters()) {
    params.push_back(n);
    if (!c.at("grads").contains(n)) no_ref.push_back(n);
  }
  CHECK_MESSAGE(no_ref.empty(), "case " << name << ": no reference gradient for " << names(no_ref));
  CHECK_MESSAGE(params.size() == c.at("grads").size(), "case " << name << ": " << c.at("grads").size()
                    << " reference gradients for the " << params.size() << " parameters " << names(params));

  int64_t H = 0, W = 0;
  if (!c.at("grid").is_null()) H = c["grid"][0].get<int64_t>(), W = c["grid"][1].get<int64_t>();
  Tensor x = decode(c.at("x"));
  x.requires_grad_(true);
  Tensor y = attn->forward(x, H, W);
  y.backward(decode(c.at("grad_out")));

  float worst = 0.f;
  auto compare = [&](const std::string& what, const Tensor& got, const json& expected) {
    REQUIRE_MESSAGE(got.defined(), "case " << name << ": " << what << " was not computed");
    Tensor e = decode(expected);
    REQUIRE_MESSAGE(got.shape() == e.shape(), "case " << name << ": " << what << " " << got.shape().str()
                        << ", reference " << e.shape().str());
    const float err = rel_error(got, e);
    CHECK_MESSAGE(err <= kMaxRelError, "case " << name << ": " << what << " relative error " << err);
    worst = std::max(worst, err);
  };
  compare("out", y, c.at("out"));
  compare("x.grad", x.grad(), c.at("x_grad"));
  for (auto& [n, p] : attn->named_parameters())
    if (c.at("grads").contains(n)) compare(n + ".grad", p.grad(), c["grads"][n]);
  return worst;
}

}  // namespace

TEST_CASE("every attention case agrees with its official PyTorch transcription") {
  json doc = load_reference();
  const json& cases = doc.at("cases");
  REQUIRE(!cases.empty());
  for (const json& c : cases) {
    CAPTURE(c.at("name").get<std::string>());
    CAPTURE(c.at("attention").dump());
    const float err = run_case(c);
    std::printf("attention parity %-28s %-40s max rel error %.2e\n", c.at("name").get<std::string>().c_str(),
                c.at("attention").dump().c_str(), err);
  }
  std::printf("checked %zu attention cases (torch %s)\n", cases.size(), doc.at("torch").get<std::string>().c_str());
}

TEST_CASE("every attention variant has a PyTorch reference case") {
  json doc = load_reference();
  std::set<std::string> covered;
  for (const json& c : doc.at("cases")) covered.insert(c.at("attention").at("type").get<std::string>());
  std::vector<std::string> missing;
  for (const std::string& v : attention_variant_names())
    if (!covered.count(v)) missing.push_back(v);
  CHECK_MESSAGE(missing.empty(), "attention variants without a reference case in tests/parity/attention/ref_*.py: "
                                     << names(missing));
}
