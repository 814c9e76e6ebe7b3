// The shared config mechanism (core/json_schema.h) and checked counts (core/checked.h):
// repeated keys named with their lines, integers beyond int64 / fractional / floats beyond
// float rejected naming the key, a schema table reading an object strictly per kind, and
// products that overflow naming the key and its largest allowed value.
#include <doctest/doctest.h>

#include <limits>

#include "core/checked.h"
#include "core/json_schema.h"
#include "testing.h"

using namespace sima;
using sima::testing::error_message;
using json = nlohmann::json;

TEST_CASE("json_schema: a key repeated in one object is an error naming it and both lines") {
  CHECK(json_duplicate_key(R"({"a": 1, "b": {"a": 2}})").empty());  // same key in another object: fine
  CHECK(json_duplicate_key(R"([{"a": 1}, {"a": 2}])").empty());
  const std::string text = "{\n  \"train\": {\n    \"epochs\": 2,\n    \"seed\": 1,\n    \"epochs\": 3\n  }\n}";
  CHECK(json_duplicate_key(text) == "key 'epochs' appears twice in one object (lines 3 and 5); a key may be given once");
  CHECK(error_message([&] { parse_json_strict(text, "run.json"); }) ==
        "run.json: key 'epochs' appears twice in one object (lines 3 and 5); a key may be given once");
  // A key inside a string value or an escaped quote does not confuse the line count.
  const std::string tricky = "{\"s\": \"x\\\":\",\n\"t\": {\"u\": 1,\n\"u\": 2}}";
  CHECK(json_duplicate_key(tricky) == "key 'u' appears twice in one object (lines 2 and 3); a key may be given once");
  CHECK(error_message([] { parse_json_strict("{\"a\": ", "x.json"); }).rfind("x.json: not valid JSON (byte", 0) == 0);
}

TEST_CASE("json_schema: integers beyond int64, fractional or not numbers are errors naming the key") {
  CHECK(json_value<int64_t>(json::parse("3.0"), "k") == 3);
  CHECK(json_value<int64_t>(json::parse("-7"), "k") == -7);
  CHECK(json_value<int64_t>(json::parse("9223372036854775807"), "k") == std::numeric_limits<int64_t>::max());
  CHECK(error_message([] { json_value<int64_t>(json::parse("18446744073709551615"), "train.seed"); }) ==
        "train.seed: 18446744073709551615 is too large (the largest allowed is 9223372036854775807)");
  CHECK(error_message([] { json_value<int64_t>(json::parse("99999999999999999999"), "train.seed"); }) ==
        "train.seed: 1e+20 is too large (the largest allowed is 9223372036854775807)");
  CHECK(error_message([] { json_value<int64_t>(json::parse("2.5"), "train.epochs"); }) ==
        "train.epochs: expected an integer, got 2.5");
  CHECK(error_message([] { json_value<int64_t>(json::parse("\"3\""), "k"); }) == "k: expected an integer, got \"3\"");
  CHECK(error_message([] { json_value<float>(json::parse("1e300"), "model.eta"); }) ==
        "model.eta: 1e+300 is beyond a float (the largest allowed is 3.40282e+38)");
  CHECK(error_message([] { json_value<std::vector<int64_t>>(json::parse("[1, 2.5]"), "l"); }) ==
        "l[1]: expected an integer, got 2.5");
}

namespace {
struct Toy {
  int64_t width = 4;
  std::string mode = "a";
  bool flag = false;
};
std::vector<SchemaField<Toy>> toy_fields() {
  return {schema_member<Toy, int64_t>("width", &Toy::width, positive<int64_t>(), "width", {"big", "small"}),
          schema_member<Toy, std::string>("mode", &Toy::mode, one_of({"a", "b"}), "mode", {"big"}),
          schema_member<Toy, bool>("flag", &Toy::flag, any_value<bool>(), "a flag")};
}
}  // namespace

TEST_CASE("json_schema: an object is read strictly by the fields its kind reads") {
  const auto fields = toy_fields();
  Toy t;
  read_schema_object(fields, t, json::parse(R"({"width": 8, "mode": "b", "flag": true})"), "toy", {}, "big", "size");
  CHECK(t.width == 8);
  CHECK(t.mode == "b");
  CHECK(t.flag);
  CHECK(error_message([&] { read_schema_object(fields, t, json::parse(R"({"mode": "a"})"), "toy", {}, "small", "size"); }) ==
        "toy.mode: size 'small' does not read it (read by: big; valid keys for size small: width, flag)");
  CHECK(error_message([&] { read_schema_object(fields, t, json::parse(R"({"wdth": 1})"), "toy", {"extra"}, "big", "size"); }) ==
        "toy.wdth: unknown key (valid keys for size big: width, mode, flag, extra)");
  CHECK(error_message([&] { read_schema_object(fields, t, json::parse(R"({"width": 0})"), "toy"); }) ==
        "toy.width: must be positive, got 0");
  CHECK(error_message([&] { read_schema_object(fields, t, json::parse(R"({"mode": "c"})"), "toy"); }) ==
        "toy.mode: 'c' is not one of: a, b");
  CHECK(fields[0].write(t) == json(8));
  CHECK(fields[0].type == "integer");
  CHECK(fields[0].valid == "> 0");
}

TEST_CASE("checked: a product that overflows names the key and its largest allowed value") {
  CHECK(checked_mul(1000, 469, "train.epochs", "steps per epoch") == 469000);
  const int64_t max = std::numeric_limits<int64_t>::max();
  CHECK(error_message([&] { checked_mul(max / 469 + 1, 469, "train.epochs", "steps per epoch"); }) ==
        "train.epochs: 19666038458112529 × 469 steps per epoch overflows a 64-bit count; the largest allowed is "
        "19666038458112528");
  CHECK(checked_mul(max / 469, 469, "train.epochs", "steps per epoch") == (max / 469) * 469);
  CHECK(error_message([&] { checked_add(max, 2, "dino.local_crops_number", "global crops"); }).find(
            "the largest allowed is 9223372036854775805") != std::string::npos);
  CHECK(checked_round_mul(2.5, 4, "schedule.warmup_epochs", "steps per epoch") == 10);
  CHECK(error_message([] { checked_round_mul(1e300, 4, "schedule.decay_epochs", "steps per epoch"); })
            .rfind("schedule.decay_epochs: 1e+300 × 4 steps per epoch overflows", 0) == 0);
}
