// Parity with PyTorch: every case of tests/parity/gen_reference.py (PyTorch, float64)
// is run here in float32 and must give the same output and the same input gradients.
// The reference file comes from the CTest fixture parity.generate (SIMA_PARITY_JSON).
#include "testing.h"

#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

using namespace sima;
using namespace sima::testing;
using json = nlohmann::json;

namespace {
Tensor decode(const json& j) {
  std::vector<int64_t> shape = j.at("shape").get<std::vector<int64_t>>();
  return from_vector(j.at("data").get<std::vector<float>>(), Shape(shape));
}
std::vector<int> ints(const json& j) { return j.get<std::vector<int>>(); }
Reduction reduction(const std::string& s) {
  return s == "mean" ? Reduction::Mean : s == "sum" ? Reduction::Sum : Reduction::None;
}
InterpMode interp(const std::string& s) {
  return s == "nearest" ? InterpMode::Nearest : s == "bilinear" ? InterpMode::Bilinear : InterpMode::Bicubic;
}

using OpFn = std::function<Tensor(const std::vector<Tensor>&, const json&)>;
const std::map<std::string, OpFn>& ops() {
  static const std::map<std::string, OpFn> m = {
      {"add", [](auto& v, auto&) { return add(v[0], v[1]); }},
      {"div", [](auto& v, auto&) { return div(v[0], v[1]); }},
      {"pow", [](auto& v, auto&) { return pow(v[0], v[1]); }},
      {"gelu", [](auto& v, auto&) { return gelu(v[0]); }},
      {"elu", [](auto& v, auto& a) { return elu(v[0], a["alpha"].template get<float>()); }},
      {"softplus", [](auto& v, auto& a) { return softplus(v[0], a["beta"].template get<float>(), a["threshold"].template get<float>()); }},
      {"relu6", [](auto& v, auto&) { return relu6(v[0]); }},
      {"sigmoid", [](auto& v, auto&) { return sigmoid(v[0]); }},
      {"tanh", [](auto& v, auto&) { return tanh(v[0]); }},
      {"clamp", [](auto& v, auto& a) { return clamp(v[0], a["lo"].template get<float>(), a["hi"].template get<float>()); }},
      {"sum", [](auto& v, auto& a) { return sum(v[0], ints(a["dims"]), a["keepdim"].template get<bool>()); }},
      {"mean", [](auto& v, auto& a) { return mean(v[0], ints(a["dims"]), a["keepdim"].template get<bool>()); }},
      {"var", [](auto& v, auto& a) {
         return var(v[0], ints(a["dims"]), a["correction"].template get<int64_t>(), a["keepdim"].template get<bool>());
       }},
      {"max", [](auto& v, auto& a) { return max(v[0], a["dim"].template get<int>(), a["keepdim"].template get<bool>()).values; }},
      {"permute", [](auto& v, auto& a) { return permute(v[0], ints(a["dims"])); }},
      {"cat", [](auto& v, auto& a) { return cat({v[0], v[1]}, a["dim"].template get<int>()); }},
      {"pad", [](auto& v, auto& a) { return pad(v[0], a["pads"].template get<std::vector<int64_t>>()); }},
      {"expand", [](auto& v, auto& a) { return expand(v[0], a["sizes"].template get<std::vector<int64_t>>()); }},
      {"matmul", [](auto& v, auto&) { return matmul(v[0], v[1]); }},
      {"linear", [](auto& v, auto&) { return linear(v[0], v[1], v[2]); }},
      {"conv2d", [](auto& v, auto& a) {
         return conv2d(v[0], v[1], v[2], a["stride"].template get<int>(), a["padding"].template get<int>(),
                       a["groups"].template get<int>());
       }},
      {"avg_pool2d", [](auto& v, auto& a) {
         return avg_pool2d(v[0], a["kernel"].template get<int>(), a["stride"].template get<int>(), a["padding"].template get<int>());
       }},
      {"interpolate", [](auto& v, auto& a) {
         auto size = a["size"].template get<std::vector<int64_t>>();
         bool ac = a["align_corners"].is_boolean() && a["align_corners"].template get<bool>();
         return interpolate(v[0], size[0], size[1], interp(a["mode"].template get<std::string>()), ac);
       }},
      {"layer_norm", [](auto& v, auto& a) { return layer_norm(v[0], v[1], v[2], a["eps"].template get<float>()); }},
      {"batch_norm_train", [](auto& v, auto& a) {
         return batch_norm2d(v[0], v[1], v[2], Tensor(), Tensor(), true, 0.1f, a["eps"].template get<float>());
       }},
      {"normalize", [](auto& v, auto& a) {
         return normalize(v[0], a["p"].template get<float>(), a["dim"].template get<int>(), a["eps"].template get<float>());
       }},
      {"softmax", [](auto& v, auto& a) { return softmax(v[0], a["dim"].template get<int>()); }},
      {"log_softmax", [](auto& v, auto& a) { return log_softmax(v[0], a["dim"].template get<int>()); }},
      {"cross_entropy", [](auto& v, auto& a) {
         return cross_entropy(v[0], a["target"].template get<std::vector<int64_t>>(),
                              a["label_smoothing"].template get<float>(),
                              reduction(a["reduction"].template get<std::string>()));
       }},
      {"cross_entropy_soft", [](auto& v, auto& a) {
         return cross_entropy(v[0], v[1], a["label_smoothing"].template get<float>());
       }},
  };
  return m;
}
}  // namespace

TEST_CASE("every op agrees with PyTorch: outputs and input gradients") {
  const char* path = std::getenv("SIMA_PARITY_JSON");
  REQUIRE_MESSAGE(path != nullptr, "SIMA_PARITY_JSON is not set (run through ctest)");
  std::ifstream f(path);
  REQUIRE_MESSAGE(f.good(), "cannot read " << path);
  json doc = json::parse(f);
  const json& cases = doc.at("cases");
  REQUIRE(cases.size() >= 40);
  int n = 0;
  for (const json& c : cases) {
    std::string op = c.at("op");
    CAPTURE(op);
    CAPTURE(n);
    CAPTURE(c.at("args").dump());
    auto it = ops().find(op);
    REQUIRE_MESSAGE(it != ops().end(), "no sima op for parity case " << op);
    std::vector<Tensor> inputs;
    for (const json& in : c.at("inputs")) {
      Tensor x = decode(in);
      x.requires_grad_(in.at("grad").get<bool>());
      inputs.push_back(x);
    }
    Tensor y = it->second(inputs, c.at("args"));
    Tensor expected = decode(c.at("out"));
    REQUIRE(y.shape() == expected.shape());
    check_close(y, expected, 1e-5f, 1e-4f);
    if (y.requires_grad()) {
      y.backward(decode(c.at("grad_out")));
      for (size_t i = 0; i < inputs.size(); ++i) {
        if (c.at("grads")[i].is_null()) continue;
        CAPTURE(i);
        REQUIRE(inputs[i].grad().defined());
        check_close(inputs[i].grad(), decode(c.at("grads")[i]), 1e-4f, 1e-4f);
      }
    }
    ++n;
  }
  MESSAGE("checked " << n << " PyTorch cases (torch " << doc.at("torch").get<std::string>() << ")");
}
