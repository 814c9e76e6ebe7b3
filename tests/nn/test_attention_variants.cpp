// The attention variant table (nn/attention/variants.h): its rows, the traits of the paper's
// variants, JSON options read and written through each row's specs, and the errors for keys
// a variant does not read and for invalid values.
#include "testing.h"

#include <set>

#include "nn/attention/variants.h"

using namespace sima;
using json = nlohmann::json;

namespace {
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}
}  // namespace

TEST_CASE("variants: unique names, help, a factory; every option spec complete and unique per row") {
  std::set<std::string> names;
  for (const AttentionVariant& v : attention_variants()) {
    CAPTURE(v.name);
    CHECK(names.insert(v.name).second);
    CHECK(!v.help.empty());
    REQUIRE(v.make);
    std::set<std::string> keys;
    for (const AttentionOptionSpec& s : v.options) {
      CAPTURE(s.key);
      CHECK(s.key != "type");
      CHECK(keys.insert(s.key).second);
      CHECK(!s.help.empty());
      CHECK(!s.valid.empty());
      CHECK(std::set<std::string>{"bool", "integer", "number", "string"}.count(s.type) == 1);
      REQUIRE((s.read && s.write && s.validate));
      CHECK(s.validate(AttentionOptions{}) == "");  // the struct's default is a valid value
    }
  }
  CHECK(attention_variant_names().size() == attention_variants().size());
}

TEST_CASE("variants: a key read by several rows has one type and one default") {
  for (const AttentionKeyReference& r : attention_key_reference()) {
    CAPTURE(r.spec->key);
    for (const std::string& n : r.read_by) {
      const AttentionOptionSpec* s = attention_variant(n).option(r.spec->key);
      REQUIRE(s != nullptr);
      CHECK(s->type == r.spec->type);
      CHECK(s->write(AttentionOptions{}) == r.spec->write(AttentionOptions{}));
    }
  }
}

TEST_CASE("variants: the traits of the paper's variants") {
  auto t = [](const char* n) { return attention_variant(n).traits; };
  CHECK((t("softmax").strided_kv && t("softmax").softmax_row && !t("softmax").shares_qk));
  CHECK((t("sima").strided_kv && !t("sima").softmax_row && t("sima").class_attention == "sima"));
  CHECK((!t("xca").strided_kv && !t("xca").softmax_row && t("xca").class_attention == "softmax"));
  CHECK((t("soft").shares_qk && t("soft").needs_grid && !t("soft").strided_kv));
  for (const char* n : {"relu", "linear_elu", "cosformer"}) {
    CAPTURE(n);
    CHECK((!t(n).strided_kv && !t(n).shares_qk && !t(n).needs_grid && !t(n).softmax_row));
  }
  AttentionOptions o;
  o.variant = "soft";
  o.with("sr", 3);
  CHECK(attention_min_grid_side(o) == 3);
  o.variant = "sima";
  CHECK(attention_min_grid_side(o) == 1);
}

TEST_CASE("variants: traits agree with what the built module does") {
  for (const AttentionVariant& v : attention_variants()) {
    CAPTURE(v.name);
    AttentionOptions o;
    o.variant = v.name;
    o.dim = 16;
    o.num_heads = 2;
    o.num_tokens = 16;  // as a model sets it (linformer's E, F are built for N)
    auto attn = make_attention(o);
    // shares_qk: qkv makes q and v only (Linear(C, 2C)).
    CHECK(attn->qkv->weight.size(0) == (v.traits.shares_qk ? 2 : 3) * 16);
    if (v.traits.needs_grid) CHECK_THROWS_AS(attn->forward(randn({1, 16, 16}), 0, 0), Error);
    else CHECK(attn->forward(randn({1, 16, 16}), 0, 0).shape() == Shape{1, 16, 16});
    if (v.traits.strided_kv) {  // the core takes fewer keys than queries
      o.projections = false;
      auto core = make_attention(o);
      CHECK(core->core(randn({1, 2, 9, 8}), randn({1, 2, 4, 8}), randn({1, 2, 4, 8}), 3, 3).shape() ==
            Shape{1, 2, 9, 8});
    }
  }
}

TEST_CASE("variants: JSON options round-trip through every row, defaults included") {
  for (const AttentionVariant& v : attention_variants()) {
    CAPTURE(v.name);
    AttentionOptions o = attention_options_from_json(json{{"type", v.name}}, AttentionOptions{});
    CHECK(o.variant == v.name);
    json j = attention_options_to_json(o);
    CHECK(j.size() == v.options.size() + 1);  // type and exactly the keys it reads
    CHECK(j["type"] == v.name);
    for (const auto& s : v.options) CHECK(j.contains(s.key));
    CHECK(attention_options_to_json(attention_options_from_json(j, AttentionOptions{})) == j);
  }
  AttentionOptions o = attention_options_from_json(json{{"type", "sima"}, {"norm", "l2"}, {"order", "kv_first"}},
                                                   AttentionOptions{});
  CHECK(attention_option<std::string>(o, "norm") == "l2");
  CHECK(attention_option<std::string>(o, "order") == "kv_first");
  CHECK(o.own == json{{"norm", "l2"}, {"order", "kv_first"}});
  // Switching the type resets the options of the old variant to their defaults.
  AttentionOptions back = attention_options_from_json(json{{"type", "softmax"}}, o);
  CHECK(back.own.empty());
  back.dim = 8;
  back.num_heads = 2;
  CHECK(make_attention(back)->options().variant == "softmax");  // nothing of sima's left set
}

TEST_CASE("variants: unread keys, unknown types and invalid values are errors naming key and valid values") {
  auto read = [](const json& j) { return error_of([&] { attention_options_from_json(j, AttentionOptions{}, "a"); }); };
  CHECK(read({{"type", "softmax"}, {"norm", "l2"}}) ==
        "a.norm: attention variant 'softmax' does not read 'norm' (it reads: type; read by: sima)");
  CHECK(read({{"type", "sima"}, {"gate", true}}) ==
        "a.gate: attention variant 'sima' does not read 'gate' (it reads: type, norm, order, eps; read by: relu)");
  CHECK(read({{"type", "sima"}, {"norm", "l3"}}) == "a.norm: 'l3' is not one of: l1, l2, none");
  CHECK(read({{"type", "relu"}, {"alpha", "1"}}) == "a.alpha: expected a number, got \"1\"");
  CHECK(read({{"type", "soft"}, {"nr_iters", -1}}) == "a.nr_iters: must be >= 0, got -1");
  CHECK(read({{"type", "soft"}, {"sr", 1.5}}) == "a.sr: expected an integer, got 1.5");
  CHECK(read({{"type", 3}}) == "a.type: expected a string, got 3");
  CHECK(read(json::array()) == "a: expected a JSON object, got []");
  CHECK(read({{"type", "mamba"}}).rfind("a.type: attention variant 'mamba' is unknown (allowed: softmax, xca, ", 0) ==
        0);
  // The factory: a value outside the valid range, and a field of another variant left set.
  AttentionOptions o;
  o.dim = 8;
  o.num_heads = 2;
  o.variant = "sima";
  o.own["eps"] = -1.f;  // set around the row's check (with() would refuse it)
  CHECK(error_of([&] { make_attention(o); }) == "attention variant 'sima': option eps: must be > 0, got -1.0 (valid: > 0)");
  o.own.erase("eps");
  o.own["gate"] = true;
  CHECK(error_of([&] { make_attention(o); }) ==
        "attention variant 'sima' does not read option gate (set to true; it reads: type, norm, order, eps)");
}

TEST_CASE("variants: stored configs keep loading: unread keys at their defaults are dropped, others kept") {
  json old = {{"type", "softmax"}, {"norm", "l1"}, {"order", "auto"}, {"eps", 1e-12f}, {"alpha", 1.f},
              {"fn", "relu"},      {"gate", false}, {"qk_norm", false}, {"sr", 2},     {"bottleneck", "conv"},
              {"nr_iters", 20}};
  CHECK(drop_unread_default_keys(old) == json{{"type", "softmax"}});
  old["norm"] = "l2";  // not a default: kept, so reading it fails as it should
  CHECK(drop_unread_default_keys(old) == json{{"type", "softmax"}, {"norm", "l2"}});
}

namespace {
// One forward of the built module on B images of N = extra + H·W tokens, its exp() count.
int64_t measured_exp_calls(const AttentionOptions& o, int64_t B, int64_t extra, int64_t H, int64_t W) {
  auto attn = make_attention(o);
  attn->reset_exp_calls();
  attn->forward(randn({B, extra + H * W, o.dim}), H, W);
  return attn->exp_calls();
}
}  // namespace

TEST_CASE("variants: each row's exp_calls equals the exp() its module counts in one forward") {
  struct Grid {
    int64_t B, extra, H, W;  // extra: tokens before the grid (a class token)
  };
  const std::vector<Grid> grids = {{1, 0, 4, 4}, {2, 1, 3, 5}, {2, 1, 6, 6}};
  // The rows at their defaults, and the options that change the count.
  std::vector<std::pair<std::string, json>> cases;
  for (const AttentionVariant& v : attention_variants()) cases.push_back({v.name, json::object()});
  cases.push_back({"relu", {{"fn", "gelu"}}});
  cases.push_back({"relu", {{"fn", "sigmoid"}}});
  cases.push_back({"relu", {{"fn", "softplus"}}});  // no score above softplus's threshold 20 here
  cases.push_back({"nystromformer", {{"num_landmarks", 4}}});  // m < N: three softmaxes
  cases.push_back({"performer", {{"nb_features", 7}}});
  cases.push_back({"soft", {{"sr", 1}, {"bottleneck", "avgpool"}}});
  cases.push_back({"linformer", {{"proj_len", 3}, {"compress", "input"}}});
  for (const auto& [name_, options_] : cases)
    for (const Grid& g : grids) {
      // clang 14 cannot capture a structured binding
      const auto& name = name_;
      const auto& options = options_;
      const int64_t N = g.extra + g.H * g.W;
      CAPTURE(name);
      CAPTURE(options.dump());
      CAPTURE(N);
      json j = options;
      j["type"] = name;
      AttentionOptions o;
      o.dim = 16;
      o.num_heads = 2;
      o.num_tokens = N;  // linformer's E, F are built for N
      o = attention_options_from_json(j, o);
      CHECK(attention_variant(name).exp_calls);  // every built-in row counts its exp()
      CHECK(attention_exp_calls(o, g.B, N, g.H, g.W) == measured_exp_calls(o, g.B, g.extra, g.H, g.W));
    }
}
