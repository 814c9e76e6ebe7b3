// register_attention_variant (nn/attention/variants.h): a row added from outside the built-in
// table is seen by make_attention, the model config reader, a DeiT built from JSON, the
// config reference and the checkpoint round trip; a row with parameters and an option key of
// its own is parsed, validated, counted by the budget, its exp() counted by its row, listed and
// trained with no other change;
// a bad row is refused with an error naming what is wrong and the table stays as it was.
#include "testing.h"

#include <cstdio>

#include "core/ops.h"
#include "models/budget.h"
#include "models/io/checkpoint.h"
#include "models/model.h"
#include "models/registry.h"
#include "nn/attention/variants.h"
#include "train/config/experiment_config.h"
#include "train/optim/optim.h"

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

// out = v · N^-alpha: the smallest core, enough to tell the rows apart (and it reads "alpha").
class ValueOnlyAttention : public Attention {
 public:
  explicit ValueOnlyAttention(const AttentionOptions& opt)
      : Attention(opt, "ValueOnlyAttention"), alpha(attention_option<float>(opt, "alpha")) {}
  Tensor core(const Tensor& q, const Tensor& k, const Tensor& v, int64_t H, int64_t W) override {
    return mul(v, std::pow(float(v.size(2)), -alpha));
  }
  const float alpha;
};

AttentionVariant value_only_row(const std::string& name) {
  AttentionVariant row;
  row.name = name;
  row.help = "out = v / N^alpha (a test row)";
  row.make = [](const AttentionOptions& o) { return std::make_shared<ValueOnlyAttention>(o); };
  row.options = {*attention_variant("relu").option("alpha")};  // the relu row's alpha spec: one field, one key
  return row;
}

// out = exp(g_h) · v with a learned log-gain per head: a parameter of its own, (h, 1, 1),
// starting at the value of an option key of its own, "gain_init", and h exp() per forward, which
// its row counts (exp_calls).
class HeadGainAttention : public Attention {
 public:
  explicit HeadGainAttention(const AttentionOptions& opt) : Attention(opt, "HeadGainAttention") {
    gain = register_parameter("gain", full({opt.num_heads, 1, 1}, attention_option<float>(opt, "gain_init")));
  }
  Tensor core(const Tensor& q, const Tensor& k, const Tensor& v, int64_t H, int64_t W) override {
    exp_calls_ += gain.numel();
    return mul(v, exp(gain));  // (B, h, N, d) · (h, 1, 1)
  }
  Tensor gain;
};

AttentionVariant head_gain_row() {
  AttentionVariant row;
  row.name = "head_gain";
  row.help = "out = exp(g_h) v, a learned gain per head (a test row with an option, parameters and exp() of its own)";
  row.make = [](const AttentionOptions& o) { return std::make_shared<HeadGainAttention>(o); };
  row.options = {own_option<float>("gain_init", 0.5f, above(0.f), "head_gain: the gains' starting value")};
  row.extra_parameters = [](const AttentionOptions& o) { return double(o.num_heads); };  // gain (h, 1, 1)
  row.exp_calls = [](const AttentionOptions& o, int64_t, int64_t, int64_t, int64_t) { return o.num_heads; };
  return row;
}

}  // namespace

TEST_CASE("a registered variant with an option key, parameters and exp() of its own: config, budget, exp count, reference, training") {
  register_attention_variant(head_gain_row());
  const json model = json::parse(R"({"arch": "deit", "img_size": 8, "patch_size": 4, "embed_dim": 8, "depth": 2,
                                     "num_heads": 2, "num_classes": 3, "attention": {"type": "head_gain"}})");
  // Config: the key is read from the row's own schema, its default when absent, checked.
  ModelConfig c = config_from_json(model);
  CHECK(attention_option<float>(c.attention, "gain_init") == 0.5f);
  CHECK(c.attention.own.empty());  // a default is not stored
  json j = model;
  j["attention"]["gain_init"] = 2.0;
  c = config_from_json(j);
  CHECK(attention_option<float>(c.attention, "gain_init") == 2.0f);
  CHECK(config_to_json(c)["attention"] == json::parse(R"({"type": "head_gain", "gain_init": 2.0})"));
  CHECK(config_from_json(config_to_json(c)).attention.own == c.attention.own);
  j["attention"]["gain_init"] = -1;
  CHECK(error_of([&] { config_from_json(j); }) == "model.attention.gain_init: must be > 0, got -1");
  j["attention"] = json::parse(R"({"type": "sima", "gain_init": 2.0})");
  CHECK(error_of([&] { config_from_json(j); }).find("'sima' does not read 'gain_init'") != std::string::npos);
  j["attention"] = json::parse(R"({"type": "head_gain", "gain_init": 2.0})");
  ExperimentConfig e = experiment_from_json(json{{"model", j}});
  CHECK(attention_option<float>(e.model.attention, "gain_init") == 2.0f);
  // Switching the type drops the owned key; another variant does not read it.
  AttentionOptions switched = attention_options_from_json(json{{"type", "softmax"}}, c.attention);
  CHECK(switched.own.empty());
  CHECK(error_of([&] { attention_option<float>(switched, "gain_init"); })
            .find("attention variant 'softmax' does not read option gain_init") != std::string::npos);

  // Budget: the row's extra_parameters, equal to the built model's count.
  auto net = create_model(c);
  CHECK(count_parameters(c) == double(net->num_parameters()));
  int gains = 0;
  for (auto& [name, p] : net->named_parameters()) gains += name.find("attn.gain") != std::string::npos;
  CHECK(gains == 2);  // one per block

  // exp(): the row's count, as the module counts it in one forward.
  AttentionOptions layer = trunk_attention_options(c, 5);
  auto attn = make_attention(layer);
  attn->forward(randn({3, 5, 8}), 2, 2);
  CHECK(attn->exp_calls() == 2);
  CHECK(attention_exp_calls(layer, 3, 5, 2, 2) == 2);

  // --config-reference: the key with its type, default, help and reader.
  const std::string ref = config_reference_markdown();
  CHECK(ref.find("gain_init") != std::string::npos);
  CHECK(ref.find("head_gain: the gains' starting value") != std::string::npos);

  // A training step moves the gains.
  AdamW optim{{ParamGroup{.params = net->named_parameters()}}, AdamWOptions{.lr = 0.1}};
  optim.set_lr(0.1);
  Tensor gain0;
  for (auto& [name, p] : net->named_parameters())
    if (name.find("attn.gain") != std::string::npos) gain0 = p;
  const std::vector<float> g_before = to_vector(gain0);
  Tensor loss = cross_entropy(net->forward(randn({4, 3, 8, 8})), std::vector<int64_t>{0, 1, 2, 0});
  loss.backward();
  optim.step();
  CHECK(to_vector(gain0) != g_before);
}

TEST_CASE("a registered variant: factory, model config, DeiT forward/backward, config reference, checkpoint") {
  const size_t before = attention_variants().size();
  const AttentionVariant* first = &attention_variants().front();
  register_attention_variant(value_only_row("value_only"));
  REQUIRE(attention_variants().size() == before + 1);
  CHECK(&attention_variants().front() == first);  // rows stay where they are
  CHECK(attention_variant("value_only").name == "value_only");

  AttentionOptions o;
  o.variant = "value_only";
  o.dim = 8;
  o.num_heads = 2;
  auto attn = make_attention(o);
  CHECK(dynamic_cast<ValueOnlyAttention*>(attn.get()) != nullptr);
  o.own["norm"] = "l2";  // a key of another row, not read by this one
  CHECK(error_of([&] { make_attention(o); }).find("does not read option norm") != std::string::npos);

  json j = json::parse(R"({"arch": "deit", "img_size": 8, "patch_size": 4, "embed_dim": 8, "depth": 1,
                           "num_heads": 2, "num_classes": 3, "attention": {"type": "value_only", "alpha": 0.5}})");
  ModelConfig c = config_from_json(j);
  CHECK(c.attention.variant == "value_only");
  CHECK(attention_option<float>(c.attention, "alpha") == 0.5f);
  CHECK(config_to_json(c)["attention"] == json::parse(R"({"type": "value_only", "alpha": 0.5})"));
  json bad = j;
  bad["attention"]["order"] = "qk_first";
  CHECK(error_of([&] { config_from_json(bad); }).find("'value_only' does not read 'order'") != std::string::npos);

  auto model = create_model(c);
  Tensor x = randn({2, 3, 8, 8});
  Tensor y = model->forward(x);
  CHECK(y.shape() == Shape{2, 3});
  sum(y).backward();
  int with_grad = 0;
  for (auto& [name, p] : model->named_parameters()) with_grad += p.grad().defined();
  CHECK(with_grad == int(model->named_parameters().size()));

  CHECK(config_reference_markdown().find("value_only") != std::string::npos);

  const std::string path = "test_register_variant.safetensors";
  save_checkpoint(path, *model);
  auto loaded = load_checkpoint(path);
  std::remove(path.c_str());
  model->eval();
  loaded->eval();
  CHECK(testing::max_abs_diff(loaded->forward(x), model->forward(x)) == 0.0);
}

TEST_CASE("a bad row is refused with the reason, and the table is unchanged") {
  const size_t before = attention_variants().size();
  auto refused = [&](AttentionVariant row, const std::string& why) {
    CAPTURE(why);
    const std::string e = error_of([&] { register_attention_variant(row); });
    CHECK(e.find("register_attention_variant: variant '" + row.name + "'") != std::string::npos);
    CHECK(e.find(why) != std::string::npos);
    CHECK(attention_variants().size() == before);
  };
  refused(value_only_row("sima"), "the name is taken (variants: softmax, xca, sima");
  refused(value_only_row(""), "only a-z, 0-9 and _");
  refused(value_only_row("Value-Only"), "only a-z, 0-9 and _");
  AttentionVariant r = value_only_row("r1");
  r.make = nullptr;
  refused(r, "make must be set");
  r = value_only_row("r2");
  r.help = "";
  refused(r, "help must not be empty");
  r = value_only_row("r3");
  r.traits.class_attention = "linear";
  refused(r, "traits.class_attention must be softmax or sima, got 'linear'");
  r = value_only_row("r4");
  r.options.push_back(r.options[0]);
  refused(r, "option alpha is listed 2 times");
  r = value_only_row("r5");
  r.options[0].key = "type";
  refused(r, "other than 'type'");
  r = value_only_row("r6");
  r.options[0].type = "float";
  refused(r, "type 'float' is not one of: bool, integer, number, string");
  r = value_only_row("r7");
  r.options[0].validate = nullptr;
  refused(r, "read, write and validate must all be set");
  r = value_only_row("r8");
  r.options[0].help = "";
  refused(r, "help and valid must not be empty");
  r = value_only_row("r9");  // "eps" is sima's float field: declared as an integer it is another field
  r.options[0].key = "eps";
  r.options[0].type = "integer";
  refused(r, "write() of the defaults gives 1.0, not a JSON integer");
  r = value_only_row("r10");  // alpha's spec under sima's key "eps": another default than sima's eps
  r.options[0].key = "eps";
  refused(r, "option eps (number, default 1.0) is read by variant 'sima' as number with default");
}
