// An input smaller than a model allows is refused at the model's forward entry with the
// smallest valid size, not deep inside a layer (a training BatchNorm over one value).
#include <doctest/doctest.h>

#include <string>

#include "core/error.h"
#include "core/ops.h"
#include "models/registry.h"
#include "testing.h"

using namespace sima;
using sima::testing::error_message;

namespace {
bool has(const std::string& s, const std::string& part) {
  INFO("message: " << s);
  return s.find(part) != std::string::npos;
}
std::string forward_error(const std::string& name, int64_t side, int64_t batch = 1) {
  auto m = create_model(model_config(name));
  m->train();
  return error_message([&] { m->forward(zeros({batch, m->config().in_chans, side, side})); });
}
}  // namespace

TEST_CASE("min input: training CvT on a too-small image names the smallest size, not BatchNorm") {
  for (int64_t side : {1, 4, 8}) {  // cvt_13_32: grids 16/8/4 at 32, stride_kv 2: 16x16 leaves 1x1 k, v
    const std::string msg = forward_error("cvt_13_32", side);
    CHECK(has(msg, "CvT: images (1, 3, " + std::to_string(side)));
    CHECK(has(msg, "smaller than the model allows for training with batch 1"));
    CHECK(has(msg, "the smallest is 17x17"));
    CHECK(!has(msg, "batch_norm"));
  }
  CHECK(forward_error("cvt_13_32", 17) == "(no error)");  // the size it names trains
  CHECK(forward_error("cvt_13_32", 8, 2) == "(no error)");  // and so does a batch of 2
}

TEST_CASE("min input: training XCiT on a one-token grid names the smallest size") {
  for (int64_t side : {1, 2, 4}) {
    const std::string msg = forward_error("xcit_nano_12_p4_28", side);
    CHECK(has(msg, "smaller than the model allows for training with batch 1"));
    CHECK(has(msg, "the smallest is 5x5"));
  }
  CHECK(forward_error("xcit_nano_12_p4_28", 5) == "(no error)");
}
