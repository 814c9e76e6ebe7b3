// SimA's backward in float32 is as accurate as PyTorch's float32: every case of
// tests/parity/gen_sima_precision.py (the official SimA in PyTorch float64, the truth, and
// PyTorch float32's error on the same inputs) runs here, and the relative error of every
// input gradient, ||g - g64|| / ||g64||, must be at most twice PyTorch float32's.
// The inputs make the l1 normalisation's backward cancel (tokens alike: docs/derivations.md §6).
// The reference file comes from the CTest fixture parity.generate_sima_precision
// (SIMA_PRECISION_JSON).
#include "testing.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "nn/attention/sima.h"

using namespace sima;
using namespace sima::testing;
using json = nlohmann::json;

namespace {

Tensor decode(const json& j) {
  return from_vector(j.at("data").get<std::vector<float>>(), Shape(j.at("shape").get<std::vector<int64_t>>()));
}

// ||got − truth|| / ||truth||, in double; truth is the float64 gradient as stored.
double rel_error64(const Tensor& got, const json& truth) {
  const std::vector<double> t = truth.at("data").get<std::vector<double>>();
  REQUIRE(static_cast<int64_t>(t.size()) == got.numel());
  double num = 0, den = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    const double e = static_cast<double>(got.data()[i]) - t[i];
    num += e * e;
    den += t[i] * t[i];
  }
  return std::sqrt(num / den);
}

// The official SimA module (qkv Linear, core, proj Linear) with the case's weights.
Tensor run_module(std::map<std::string, Tensor>& in, int64_t heads) {
  AttentionOptions o;
  o.variant = "sima";
  o.dim = in.at("x").size(2);
  o.num_heads = heads;
  SimaAttention m(o);
  for (auto [name, p] : {std::pair<std::string, Tensor>{"w_qkv", m.qkv->weight}, {"b_qkv", m.qkv->bias},
                         {"w_proj", m.proj->weight}, {"b_proj", m.proj->bias}}) {
    REQUIRE(p.shape() == in.at(name).shape());
    std::copy(in.at(name).data(), in.at(name).data() + p.numel(), p.data());
    in.at(name) = p;  // the gradient lands on the module's parameter
  }
  return m.forward(in.at("x"));
}

}  // namespace

TEST_CASE("sima: float32 gradients through the l1 normalisation are within 2x PyTorch float32's error") {
  const char* path = std::getenv("SIMA_PRECISION_JSON");
  REQUIRE_MESSAGE(path != nullptr, "SIMA_PRECISION_JSON is not set (run through ctest)");
  std::ifstream f(path);
  REQUIRE_MESSAGE(f.good(), "cannot read " << path);
  const json doc = json::parse(f);
  REQUIRE(doc.at("cases").size() >= 6);
  for (const json& c : doc.at("cases")) {
    const std::string name = c.at("name");
    CAPTURE(name);
    std::map<std::string, Tensor> in;
    for (auto& [n, t] : c.at("inputs").items()) in[n] = decode(t);
    Tensor y;
    if (name.rfind("core", 0) == 0) {
      for (auto& [n, t] : in) t.requires_grad_(true);
      y = sima_attention(in.at("q"), in.at("k"), in.at("v"));
    } else {
      in.at("x").requires_grad_(true);
      y = run_module(in, c.at("args").at("heads").get<int64_t>());
    }
    y.backward(decode(c.at("grad_out")));
    for (auto& [n, ref] : c.at("grads64").items()) {  // the gradients through the normalisation
      CAPTURE(n);
      const Tensor& t = in.at(n);
      REQUIRE(t.grad().defined());
      const double ours = rel_error64(t.grad(), ref);
      const double torch32 = c.at("torch32_error").at(n).get<double>();
      MESSAGE(name << " d" << n << ": sima.cpp " << ours << ", PyTorch float32 " << torch32);
      CHECK(ours <= 2 * torch32);
    }
  }
}
