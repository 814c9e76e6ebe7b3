// Heatmaps, the library side (train/viz/attention_heatmap.h, data/colormap.h); the app
// sima-heatmap end to end is test_heatmap_app.cpp:
// - the q̂, k̂ token_maps captures are the attention's own: recomputed by hand from the qkv
//   Linear (DeiT) or the conv projections (CvT, cls token + strided keys) of that layer and
//   ℓ1-normalised over the tokens, same numbers; the norms are those of these q̂, k̂;
// - the class-token row equals the row the module's own fused softmax core applies (DeiT d^-½,
//   CvT C^-½), read out by giving the core v = identity;
// - token layouts per architecture, layer indices and the errors;
// - a synthetic model whose only non-zero q̂ is one known token puts the map's peak there;
// - the pixel side: bilinear upsampling equals F.interpolate's (data/functional resize), the
//   crop geometry equals eval_transform's, outputs have the image's size, pixels the model did
//   not see keep the image; min-max; foreground mass;
// - matplotlib's colours at 0, 0.5, 1.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/autograd.h"
#include "data/functional.h"
#include "data/image_io.h"
#include "data/temp_dir.h"
#include "models/cvt.h"
#include "models/deit.h"
#include "models/registry.h"
#include "testing.h"
#include "train/config/transforms_factory.h"
#include "train/viz/attention_heatmap.h"

using namespace sima;
using namespace sima::testing;
using nlohmann::json;
namespace F = sima::transforms::functional;

namespace {

// t (1, N, C) split into h heads and ℓ1-normalised over the N tokens per (head, channel), as
// F.normalize(p=1, dim=-2) with eps 1e-12: out[(head·N + n)·d + c] (the (1, h, N, d) layout).
std::vector<float> l1_heads(const Tensor& t, int64_t h) {
  const int64_t N = t.size(1), C = t.size(2), d = C / h;
  std::vector<float> out(static_cast<size_t>(N * C));
  for (int64_t hh = 0; hh < h; ++hh)
    for (int64_t c = 0; c < d; ++c) {
      double s = 0.0;
      for (int64_t n = 0; n < N; ++n) s += std::fabs(t.data()[n * C + hh * d + c]);
      for (int64_t n = 0; n < N; ++n)
        out[size_t((hh * N + n) * d + c)] = static_cast<float>(t.data()[n * C + hh * d + c] / std::max(s, 1e-12));
    }
  return out;
}

// ‖x[:, n, :]‖₂ over heads and channels for tokens prefix.. of a (h, N, d) array.
std::vector<float> token_norms(const std::vector<float>& x, int64_t h, int64_t N, int64_t d, int64_t prefix) {
  std::vector<float> out;
  for (int64_t n = prefix; n < N; ++n) {
    double s = 0.0;
    for (int64_t hh = 0; hh < h; ++hh)
      for (int64_t c = 0; c < d; ++c) s += std::pow(x[size_t((hh * N + n) * d + c)], 2);
    out.push_back(static_cast<float>(std::sqrt(s)));
  }
  return out;
}

void check_close_vec(const std::vector<float>& got, const std::vector<float>& want, float tol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
    CHECK(std::fabs(got[i] - want[i]) <= tol * (1.f + std::fabs(want[i])));
  }
}

std::shared_ptr<Model> small_deit(const std::string& variant, int64_t depth, uint64_t seed) {
  auto m = create_model(json{{"name", "deit_tiny_patch4_28"}, {"depth", depth}, {"embed_dim", 16}, {"num_heads", 2},
                             {"attention", {{"type", variant}}}});
  randomize_parameters(*m, seed, 0.3f);
  return m;
}

std::shared_ptr<Model> small_cvt(const std::string& variant, uint64_t seed) {
  auto m = create_model(json{{"name", "cvt_13_28"}, {"stage_dims", {8, 16, 24}}, {"stage_depths", {1, 1, 2}},
                             {"stage_heads", {1, 2, 3}}, {"attention", {{"type", variant}}}});
  randomize_parameters(*m, seed, 0.3f);
  // Running statistics as a trained model has them (randomize_parameters leaves buffers).
  return m;
}

// v = identity per head (1, h, Nk, Nk): the fused core then returns its attention matrix.
Tensor eye_values(int64_t h, int64_t Nk) {
  Tensor v = zeros({1, h, Nk, Nk});
  for (int64_t hh = 0; hh < h; ++hh)
    for (int64_t j = 0; j < Nk; ++j) v.data()[(hh * Nk + j) * Nk + j] = 1.f;
  return v;
}

// Mean over heads of o[0, :, 0, prefix + n]: the class token's row, patch keys only.
std::vector<float> cls_from_core(const Tensor& o, int64_t prefix) {
  const int64_t h = o.size(1), Nq = o.size(2), Nk = o.size(3);
  std::vector<float> out(static_cast<size_t>(Nk - prefix), 0.f);
  for (int64_t hh = 0; hh < h; ++hh)
    for (int64_t n = prefix; n < Nk; ++n) out[size_t(n - prefix)] += o.data()[hh * Nq * Nk + n] / float(h);
  return out;
}

Image grey_image(int64_t H, int64_t W, float fill = 0.f) { return Image(1, H, W, fill); }

}  // namespace

// ---- tokens ---------------------------------------------------------------------------------

TEST_CASE("token_maps: DeiT SimA, the captured q̂, k̂ are the layer's ℓ1-normalised q, k from its qkv Linear") {
  auto model = small_deit("sima", 2, 3);
  auto& deit = dynamic_cast<DeiT&>(*model);
  const Tensor x = randn_leaf({1, 1, 28, 28}, 5, false);
  const TokenMaps tm = token_maps(*model, x, -1);
  CHECK(tm.layer == 1);
  CHECK(tm.layer_count == 2);
  CHECK(tm.attention == "SimaAttention");
  CHECK(tm.variant == "sima");
  CHECK(tm.layout.q.prefix == 1);
  CHECK(tm.layout.q.height == 7);
  CHECK(tm.layout.q.width == 7);
  REQUIRE(tm.q_hat.shape() == Shape{1, 2, 50, 8});
  REQUIRE(tm.k_hat.shape() == Shape{1, 2, 50, 8});
  CHECK(tm.logits.size() == 10);

  // By hand: the tokens entering block 1, its norm1 and qkv Linear, q = columns [0, C), k = [C, 2C).
  model->eval();
  NoGradGuard no_grad;
  int64_t Hp = 0, Wp = 0;
  Tensor t = deit.patch_embed->forward(x, Hp, Wp);
  t = add(cat({deit.cls_token, t}, 1), deit.position_embedding(Hp, Wp));
  t = deit.blocks[0]->forward(t, Hp, Wp);
  const Tensor qkv = deit.blocks[1]->attn->qkv->forward(deit.blocks[1]->norm1->forward(t));  // (1, 50, 48)
  const std::vector<float> q_hat = l1_heads(narrow(qkv, 2, 0, 16).clone(), 2);
  const std::vector<float> k_hat = l1_heads(narrow(qkv, 2, 16, 16).clone(), 2);
  check_close_vec(to_vector(tm.q_hat), q_hat, 1e-5f);
  check_close_vec(to_vector(tm.k_hat), k_hat, 1e-5f);
  // The maps: ‖q̂_n‖₂ over both heads for the 49 patch tokens (the cls token dropped).
  check_close_vec(tm.q, token_norms(q_hat, 2, 50, 8, 1), 1e-5f);
  check_close_vec(tm.k, token_norms(k_hat, 2, 50, 8, 1), 1e-5f);
  // Every column of q̂ has unit ℓ1 norm over the 50 tokens, so the norms are far from uniform 0.
  CHECK(*std::max_element(tm.q.begin(), tm.q.end()) > 0.f);

  // Layer 0 is another layer with other numbers; the model's own hook is left as it was.
  int calls = 0;
  deit.blocks[0]->attn->qk_hook = [&](const Tensor&, const Tensor&) { ++calls; };
  const TokenMaps first = token_maps(*model, x, 0);
  CHECK(first.layer == 0);
  CHECK(first.q != tm.q);
  REQUIRE(deit.blocks[0]->attn->qk_hook);
  deit.blocks[0]->attn->qk_hook(Tensor(), Tensor());
  CHECK(calls == 1);
}

TEST_CASE("token_maps: CvT SimA, last stage: cls token first, q on 4x4, k on the stride-2 2x2 grid") {
  auto model = small_cvt("sima", 7);
  auto& cvt = dynamic_cast<CvT&>(*model);
  const Tensor x = randn_leaf({1, 1, 28, 28}, 9, false);
  const TokenMaps tm = token_maps(*model, x, -1);
  CHECK(tm.layer == 3);
  CHECK(tm.layer_count == 4);
  CHECK(tm.layout.q.prefix == 1);
  CHECK((tm.layout.q.height == 4 && tm.layout.q.width == 4));
  CHECK(tm.layout.k.prefix == 1);
  CHECK((tm.layout.k.height == 2 && tm.layout.k.width == 2));
  REQUIRE(tm.q_hat.shape() == Shape{1, 3, 17, 8});
  REQUIRE(tm.k_hat.shape() == Shape{1, 3, 5, 8});
  CHECK(tm.q.size() == 16);
  CHECK(tm.k.size() == 4);

  // By hand: stages 0, 1, then stage 2 up to the second block's attention projections.
  model->eval();
  NoGradGuard no_grad;
  Tensor h = x, cls;
  h = cvt.stages[0]->forward(h, &cls);
  h = cvt.stages[1]->forward(h, &cls);  // (1, 16, 7, 7)
  CvtStage& st = *cvt.stages[2];
  Tensor t = cat({st.cls_token, st.patch_embed->forward(h)}, 1);  // (1, 17, 24)
  t = st.blocks[0]->forward(t, 4, 4);
  const Tensor y = st.blocks[1]->norm1->forward(t);
  CvtAttention& a = *st.blocks[1]->attn;
  const Tensor cls_y = narrow(y, 1, 0, 1);
  const Tensor grid = reshape(permute(narrow(y, 1, 1, 16), {0, 2, 1}), {1, 24, 4, 4});
  const Tensor q = a.proj_q->forward(cat({cls_y, a.conv_proj_q->forward(grid)}, 1));  // (1, 17, 24)
  const Tensor k = a.proj_k->forward(cat({cls_y, a.conv_proj_k->forward(grid)}, 1));  // (1, 5, 24)
  const std::vector<float> q_hat = l1_heads(q, 3), k_hat = l1_heads(k, 3);
  check_close_vec(to_vector(tm.q_hat), q_hat, 1e-5f);
  check_close_vec(to_vector(tm.k_hat), k_hat, 1e-5f);
  check_close_vec(tm.q, token_norms(q_hat, 3, 17, 8, 1), 1e-5f);
  check_close_vec(tm.k, token_norms(k_hat, 3, 5, 8, 1), 1e-5f);

  // Stage 0 (layer 0): no cls token, q on 14x14, k on 7x7.
  const TokenMaps s0 = token_maps(*model, x, 0);
  CHECK(s0.layout.q.prefix == 0);
  CHECK((s0.layout.q.height == 14 && s0.layout.k.height == 7));
  CHECK(s0.q.size() == 196);
}

TEST_CASE("token_maps: the class-token row is the one the softmax core applies (DeiT d^-1/2, CvT C^-1/2)") {
  {
    auto model = small_deit("softmax", 1, 11);
    const Tensor x = randn_leaf({1, 1, 28, 28}, 12, false);
    const TokenMaps tm = token_maps(*model, x, 0, /*with_cls=*/true);
    REQUIRE(tm.cls.size() == 49);
    Attention& core = *dynamic_cast<DeiT&>(*model).blocks[0]->attn;
    NoGradGuard no_grad;
    const Tensor P = core.core(tm.q_hat, tm.k_hat, eye_values(2, 50), 7, 7);  // (1, 2, 50, 50)
    check_close_vec(tm.cls, cls_from_core(P, 1), 1e-5f);
    double sum = 0.0;
    for (float v : tm.cls) sum += v;
    CHECK(sum < 1.0);  // the patch keys' share; the rest went to the cls key
    CHECK(sum > 0.0);
  }
  {
    auto model = small_cvt("softmax", 13);
    const Tensor x = randn_leaf({1, 1, 28, 28}, 14, false);
    const TokenMaps tm = token_maps(*model, x, -1, true);
    REQUIRE(tm.cls.size() == 4);  // the keys' 2x2 grid
    Attention& core = *dynamic_cast<CvT&>(*model).stages[2]->blocks[1]->attn->core;
    CHECK(core.type_name() == "SoftmaxAttention");
    CHECK(core.softmax_scale() == doctest::Approx(1.f / std::sqrt(24.f)));  // CvT's C^-½ (C = 24), not d^-½
    NoGradGuard no_grad;
    const Tensor P = core.core(tm.q_hat, tm.k_hat, eye_values(3, 5), 4, 4);  // (1, 3, 17, 5)
    check_close_vec(tm.cls, cls_from_core(P, 1), 1e-5f);
  }
}

TEST_CASE("token layouts and errors: distilled DeiT, XCiT, bad layers, cls where there is none") {
  const Tensor x = randn_leaf({1, 1, 28, 28}, 1, false);
  auto distilled = create_model(
      json{{"name", "deit_tiny_patch4_28"}, {"depth", 1}, {"embed_dim", 16}, {"num_heads", 2}, {"distilled", true}});
  CHECK(attention_layout(*distilled, 0, 28, 28).q.prefix == 2);
  CHECK(token_maps(*distilled, x, 0).q.size() == 49);

  auto xcit = create_model(json{{"name", "xcit_nano_12_p4_28_sima"}, {"depth", 2}, {"embed_dim", 16},
                                {"num_heads", 2}, {"cls_attn_layers", 1}});
  const TokenMaps xm = token_maps(*xcit, x, -1);
  CHECK(xm.layout.q.prefix == 0);
  CHECK((xm.layout.q.height == 7 && xm.layout.q.width == 7));
  CHECK(xm.q.size() == 49);
  CHECK(xm.q_hat.shape() == Shape{1, 2, 49, 8});

  CHECK(resolve_layer(-1, 4) == 3);
  CHECK(resolve_layer(-4, 4) == 0);
  CHECK(resolve_layer(3, 4) == 3);
  CHECK(error_message([] { resolve_layer(4, 4); }) ==
        "layer 4 does not exist: the model has 4 self-attention layers (valid: -4 .. 3, negative counts from the end)");
  CHECK(error_message([] { resolve_layer(-5, 4); }).find("layer -5 does not exist") == 0);
  CHECK(error_message([] { resolve_layer(0, 0); }) == "the model has no self-attention layers to draw a heatmap from");

  auto sima = small_deit("sima", 1, 2);
  CHECK(error_message([&] { token_maps(*sima, x, 0, true); }) ==
        "the class token's attention row (which = cls) needs softmax attention: layer 0 is sima (SimaAttention), "
        "which forms no softmax attention matrix; use q, k or both");
  CHECK(error_message([&] { token_maps(*xcit, x, 0, true); }).find("needs softmax attention: layer 0 is sima") !=
        std::string::npos);
  auto xcit_softmax = create_model(json{{"name", "xcit_nano_12_p4_28"}, {"depth", 1}, {"embed_dim", 16},
                                        {"num_heads", 2}, {"cls_attn_layers", 1}, {"attention", {{"type", "softmax"}}}});
  CHECK(error_message([&] { token_maps(*xcit_softmax, x, 0, true); }) ==
        "the class token's attention row (which = cls): layer 0 of this XCiT sees no class token (XCiT's "
        "self-attention layers run on the patch tokens only)");
  auto cvt = small_cvt("softmax", 3);
  CHECK(error_message([&] { token_maps(*cvt, x, 0, true); }) ==
        "the class token's attention row (which = cls): layer 0 of this CvT sees no class token (only the last CvT "
        "stage has one)");
  CHECK(error_message([&] { token_maps(*sima, randn({2, 1, 28, 28}), 0); }).find("must be one image") !=
        std::string::npos);
}

TEST_CASE("a synthetic model whose only non-zero q̂, k̂ is one token: the map peaks on that token's pixels") {
  // DeiT, one SimA block, patches of 4 on 28x28 (7x7 grid). Zero position embedding and class
  // token, zero qkv bias and a patch embedding without bias: a black patch gives the token 0,
  // LayerNorm(0) = 0 and q = k = 0. The one bright patch (grid row 5, column 2) gives a
  // non-constant token (channel weights of alternating sign), so only its q̂, k̂ are non-zero.
  auto model = create_model(json{{"name", "deit_tiny_patch4_28_sima"}, {"depth", 1}, {"embed_dim", 16},
                                 {"num_heads", 2}, {"mean", {0.0}}, {"std", {1.0}}});
  auto& deit = dynamic_cast<DeiT&>(*model);
  for (auto& [name, p] : model->named_parameters()) {
    if (name == "pos_embed" || name == "cls_token" || name.find("qkv.bias") != std::string::npos ||
        name.find("patch_embed.proj.bias") != std::string::npos)
      std::fill_n(p.data(), p.numel(), 0.f);
    if (name == "patch_embed.proj.weight")
      for (int64_t c = 0; c < 16; ++c)
        std::fill_n(p.data() + c * 16, 16, (c % 2 ? 1.f : -1.f) * float(c + 1) / 16.f);
  }
  (void)deit;
  TempDir dir;
  Image img = grey_image(28, 28);
  for (int64_t y = 20; y < 24; ++y)
    for (int64_t x = 8; x < 12; ++x) img.at(0, y, x) = 1.f;
  const std::string path = dir.file("peak.png");
  write_png(path, img);

  HeatmapOptions opt;
  opt.raw = true;
  opt.scale = 1;
  opt.out_dir = dir.str() + "/out";
  const json j = make_heatmaps(*model, model->config(), path, "peak", opt);
  INFO(j.dump());
  for (const char* m : {"q", "k"}) {
    CAPTURE(m);
    CHECK(j["maps"][m]["argmax"] == json{5, 2});
    CHECK(j["maps"][m]["min"].get<double>() == 0.0);
    CHECK(j["maps"][m]["max"].get<double>() > 0.0);
    const Image raw = read_image(opt.out_dir + "/peak_" + std::string(m) + "_raw.png");
    REQUIRE((raw.channels == 1 && raw.height == 28 && raw.width == 28));
    const auto peak = std::max_element(raw.data.begin(), raw.data.end()) - raw.data.begin();
    CHECK(peak / 28 >= 20);
    CHECK(peak / 28 < 24);
    CHECK(peak % 28 >= 8);
    CHECK(peak % 28 < 12);
    CHECK(raw.data[size_t(peak)] == 1.f);
    // Bilinear spreads a token at most one token (4 pixels) around it; the rest is 0.
    CHECK(raw.at(0, 0, 0) == 0.f);
    CHECK(raw.at(0, 27, 27) == 0.f);
    CHECK(raw.at(0, 21, 20) == 0.f);
  }

  // scale 3: the overlay and the panel are the scale-1 files with every pixel a 3x3 block.
  HeatmapOptions big = opt;
  big.raw = false;
  big.scale = 3;
  big.out_dir = dir.str() + "/big";
  make_heatmaps(*model, model->config(), path, "peak", big);
  for (const char* f : {"peak_q.png", "peak_panel.png"}) {
    CAPTURE(f);
    const Image small = read_image(opt.out_dir + "/" + f), large = read_image(big.out_dir + "/" + f);
    REQUIRE((large.channels == small.channels && large.height == 3 * small.height && large.width == 3 * small.width));
    int64_t mismatches = 0;
    for (int64_t c = 0; c < large.channels; ++c)
      for (int64_t y = 0; y < large.height; ++y)
        for (int64_t x = 0; x < large.width; ++x) mismatches += large.at(c, y, x) != small.at(c, y / 3, x / 3);
    CHECK(mismatches == 0);
  }
}

// ---- pixels ----------------------------------------------------------------------------------

TEST_CASE("upsample_to_image: bilinear as F.interpolate(align_corners=False); crops map back to the image") {
  Generator g(4);
  std::vector<float> grid(15);
  g.fill_uniform(grid.data(), 15, 0.f, 1.f);
  Image small(1, 3, 5);
  small.data = grid;
  for (int64_t side : {28, 56}) {  // 28: the identity geometry; 56: halved to the 28x28 input
    CAPTURE(side);
    const InputGeometry geo = eval_geometry(side, side, 28, 1.0);
    const std::vector<float> up = upsample_to_image(grid, 3, 5, geo);
    const Image want = F::resize(small, side, side, transforms::Interpolation::Bilinear);
    check_close_vec(up, want.data, 1e-6f);
  }

  // A 40x24 image into a 28x28 input: shorter side 24 -> 28, longer int(28·40/24) = 46, crop
  // rows 9..36 of the resized image: original rows 8..31 are what the model saw.
  const InputGeometry geo = eval_geometry(40, 24, 28, 1.0);
  CHECK(geo.scale_y == doctest::Approx(46.0 / 40));
  CHECK(geo.scale_x == doctest::Approx(28.0 / 24));
  CHECK(geo.top == 9);
  CHECK(geo.left == 0);
  const std::vector<float> up = upsample_to_image(grid, 3, 5, geo);
  for (int64_t y = 0; y < 40; ++y) {
    CAPTURE(y);
    CHECK(std::isnan(up[size_t(y * 24)]) == (y < 8 || y > 31));
  }

  // The geometry is eval_transform's: a vertical ramp (value = original row centre / 40) seen
  // through the transform has, at input row r, the value of original row (r + 0.5 + top)/scale_y.
  ModelConfig cfg;
  cfg.img_size = 28;
  cfg.in_chans = 1;
  cfg.mean = {0.f};
  cfg.std = {1.f};
  Image ramp(1, 40, 24);
  for (int64_t y = 0; y < 40; ++y)
    for (int64_t x = 0; x < 24; ++x) ramp.at(0, y, x) = (float(y) + 0.5f) / 40.f;
  Generator unused(0);
  const Image in = eval_transform(cfg, 1.0)(ramp, unused);
  REQUIRE((in.height == 28 && in.width == 28));
  // Keys' bicubic (a = −0.75) bends a ramp by up to ~0.05 pixel either way; a wrong offset or
  // scale would shift every row the same way (half a pixel off gives a mean error of 0.5).
  double mean_error = 0.0;
  for (int64_t r = 3; r < 25; ++r) {  // away from the bicubic border clamp
    CAPTURE(r);
    const double want_row = (r + 0.5 + double(geo.top)) / geo.scale_y;  // original pixel-edge coordinate
    const double error = in.at(0, r, 12) * 40.0 - want_row;
    CHECK(std::fabs(error) < 0.1);
    mean_error += error / 22;
  }
  CHECK(std::fabs(mean_error) < 0.01);
}

TEST_CASE("normalize_min_max, foreground_mass, overlay, side_by_side") {
  std::vector<float> v{2.f, 4.f, std::nanf(""), 3.f};
  const MinMax mm = normalize_min_max(v);
  CHECK(mm.min == 2.f);
  CHECK(mm.max == 4.f);
  CHECK(v[0] == 0.f);
  CHECK(v[1] == 1.f);
  CHECK(std::isnan(v[2]));
  CHECK(v[3] == 0.5f);
  std::vector<float> flat{3.f, 3.f};
  normalize_min_max(flat);
  CHECK(flat == std::vector<float>{0.f, 0.f});

  // mass 0.75 of (0.25 + 0.75) on the one object pixel of two counted (NaN ignored).
  const ForegroundMass f = foreground_mass({0.25f, 0.75f, std::nanf("")}, {0.f, 0.5f, 1.f}, 0.f);
  CHECK(f.mass == doctest::Approx(0.75));
  CHECK(f.share == doctest::Approx(0.5));

  Image rgb = to_rgb(grey_image(1, 2, 0.5f));
  const Image o = overlay(rgb, {1.f, std::nanf("")}, Colormap::Jet, 0.25f);
  CHECK(o.at(0, 0, 0) == doctest::Approx(0.75 * 0.5 + 0.25 * 0.5));  // jet(1) = (.5, 0, 0)
  CHECK(o.at(1, 0, 0) == doctest::Approx(0.75 * 0.5));
  CHECK(o.at(0, 0, 1) == 0.5f);  // NaN: the image unchanged
  const Image p = side_by_side({rgb, o}, 2);
  CHECK((p.channels == 3 && p.height == 1 && p.width == 6));
  CHECK(p.at(0, 0, 2) == 1.f);  // the white gap
  CHECK(p.at(1, 0, 4) == o.at(1, 0, 0));
}

TEST_CASE("colour maps: matplotlib's jet, viridis and inferno at 0, 0.5 and 1") {
  // matplotlib 3.x: cm.jet(0.0), cm.jet(0.5), cm.jet(1.0) and likewise (rgb of the rgba).
  struct Ref {
    Colormap c;
    float t;
    std::array<float, 3> rgb;
  };
  const Ref refs[] = {
      {Colormap::Jet, 0.f, {0.f, 0.f, 0.5f}},
      {Colormap::Jet, 0.5f, {0.490196f, 1.f, 0.477546f}},
      {Colormap::Jet, 1.f, {0.5f, 0.f, 0.f}},
      {Colormap::Viridis, 0.f, {0.267004f, 0.004874f, 0.329415f}},
      {Colormap::Viridis, 0.5f, {0.127568f, 0.566949f, 0.550556f}},
      {Colormap::Viridis, 1.f, {0.993248f, 0.906157f, 0.143936f}},
      {Colormap::Inferno, 0.f, {0.001462f, 0.000466f, 0.013866f}},
      {Colormap::Inferno, 0.5f, {0.735683f, 0.215906f, 0.330245f}},
      {Colormap::Inferno, 1.f, {0.988362f, 0.998364f, 0.644924f}},
  };
  for (const Ref& r : refs) {
    CAPTURE(colormap_name(r.c));
    CAPTURE(r.t);
    const std::array<float, 3> got = colormap_rgb(r.c, r.t);
    for (size_t i = 0; i < 3; ++i) CHECK(got[i] == doctest::Approx(r.rgb[i]).epsilon(1e-5));
  }
  CHECK(colormap_rgb(Colormap::Viridis, -1.f) == colormap_rgb(Colormap::Viridis, 0.f));
  CHECK(colormap_rgb(Colormap::Viridis, 2.f) == colormap_rgb(Colormap::Viridis, 1.f));
  CHECK(colormap_rgb(Colormap::Jet, std::nanf("")) == colormap_rgb(Colormap::Jet, 0.f));
  CHECK(parse_colormap("inferno") == Colormap::Inferno);
  CHECK(error_message([] { parse_colormap("hot"); }) == "colormap 'hot' is not one of: jet, viridis, inferno");
}

TEST_CASE("make_heatmaps: the image budget counts what a heatmap keeps per pixel (an image eval reads is refused here)") {
  // 600 x 600 pixels under a 32 MiB limit: the readers' 64 bytes a pixel allow 524288 pixels,
  // a heatmap at scale 1 needs heatmap_bytes_per_pixel(1) = 208 and allows 161319.
  TempDir dir;
  const std::string path = dir.file("big.png");
  write_png(path, Image(1, 600, 600, 0.5f));
  ::setenv("SIMA_MEMORY_LIMIT", "32M", 1);
  CHECK(read_image(path).height == 600);  // what sima-eval --image and the loaders accept
  auto model = create_model(json{{"name", "deit_tiny_patch4_28_sima"}, {"depth", 1}, {"embed_dim", 16}, {"num_heads", 2}});
  HeatmapOptions opt;
  opt.out_dir = dir.str() + "/out";
  const std::string msg = testing::error_message([&] { make_heatmaps(*model, model->config(), path, "big", opt); });
  ::unsetenv("SIMA_MEMORY_LIMIT");
  CHECK(heatmap_bytes_per_pixel(1) == 208);
  CHECK(msg.find("read_image: " + path + ": image size 600x600 exceeds the limit of 161319 pixels") == 0);
  CHECK(msg.find("/ 208 bytes per pixel") != std::string::npos);
  CHECK(!std::filesystem::exists(opt.out_dir));
  CHECK(auto_scale(28) == 8);
  CHECK(auto_scale(40) == 5);
  CHECK(auto_scale(112) == 2);
  CHECK(auto_scale(113) == 1);
  CHECK(auto_scale(5) == 32);
}
