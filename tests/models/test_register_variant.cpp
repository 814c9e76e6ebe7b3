// register_attention_variant (nn/attention/variants.h): a row added from outside the built-in
// table is seen by make_attention, the model config reader, a DeiT built from JSON, the
// config reference and the checkpoint round trip; a bad row is refused with an error naming
// what is wrong and the table stays as it was.
#include "testing.h"

#include <cstdio>

#include "models/checkpoint.h"
#include "models/registry.h"
#include "nn/attention/variants.h"
#include "train/config/experiment_config.h"

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
  explicit ValueOnlyAttention(const AttentionOptions& opt) : Attention(opt, "ValueOnlyAttention") {}
  Tensor core(const Tensor& q, const Tensor& k, const Tensor& v, int64_t H, int64_t W) override {
    return mul(v, std::pow(float(v.size(2)), -opt_.alpha));
  }
};

AttentionVariant value_only_row(const std::string& name) {
  AttentionVariant row;
  row.name = name;
  row.help = "out = v / N^alpha (a test row)";
  row.make = [](const AttentionOptions& o) { return std::make_shared<ValueOnlyAttention>(o); };
  row.options = {*attention_variant("relu").option("alpha")};  // the relu row's alpha spec: one field, one key
  return row;
}

}  // namespace

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
  o.norm = "l2";  // a key of another row, not read by this one
  CHECK(error_of([&] { make_attention(o); }).find("does not read option norm") != std::string::npos);

  json j = json::parse(R"({"arch": "deit", "img_size": 8, "patch_size": 4, "embed_dim": 8, "depth": 1,
                           "num_heads": 2, "num_classes": 3, "attention": {"type": "value_only", "alpha": 0.5}})");
  ModelConfig c = config_from_json(j);
  CHECK(c.attention.variant == "value_only");
  CHECK(c.attention.alpha == 0.5f);
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
