// CvT (models/cvt.h): parameter counts, names, init, shapes, every attention variant
// forward and backward, the convolutional attention against a composition of primitive
// ops, a gradcheck of a whole tiny model, other input sizes, config errors.
#include "testing.h"

#include <cmath>
#include <map>
#include <set>
#include <tuple>
#include <string>

#include "core/parallel.h"
#include "models/cvt.h"
#include "nn/attention/sima.h"
#include "nn/attention/soft_gaussian.h"
#include "nn/attention/variants.h"

using namespace sima;
using namespace sima::testing;

namespace {

// Every row of the variant table (nn/attention/variants.h).
const std::vector<std::string> kVariants = attention_variant_names();

std::map<std::string, Tensor> params_by_name(const Module& m) {
  std::map<std::string, Tensor> out;
  for (auto& [n, p] : m.named_parameters()) out[n] = p;
  return out;
}

// Uniform values in [lo, hi) in every parameter, so that defaults (ones, zeros) hide nothing.
void randomise(Module& m, float lo, float hi, uint64_t seed) {
  Generator g(seed);
  for (auto& [n, p] : m.named_parameters()) g.fill_uniform(p.data(), p.numel(), lo, hi);
}

// BatchNorm running statistics away from their 0 / 1 defaults (mean ±0.2, var in [0.5, 1.5)).
void randomise_bn_stats(Module& m, uint64_t seed) {
  Generator g(seed);
  for (auto& [n, b] : m.named_buffers()) {
    const bool var = n.size() > 11 && n.compare(n.size() - 11, 11, "running_var") == 0;
    g.fill_uniform(b.data(), b.numel(), var ? 0.5f : -0.2f, var ? 1.5f : 0.2f);
  }
}

// Tiny models run on one thread while alive: OpenBLAS threads even their GEMMs of a few
// hundred multiply-adds, which made these tests 10-50x slower on a busy machine.
struct OneThread {
  int saved = num_threads();
  OneThread() { set_num_threads(1); }
  ~OneThread() { set_num_threads(saved); }
};

}  // namespace

// ---- reference sizes -------------------------------------------------------------------

// CvT-13 by hand (1000 classes; no position embedding, so the count does not depend on the
// image size). A block of width C (dim_in = dim_out = C, qkv_bias on, MLP ratio 4):
//   norm1                          2C
//   conv_proj_q/k/v: conv 3x3 dw   3 · 9C        (no bias)
//                    bn            3 · 2C        (weight, bias; running stats are buffers)
//   proj_q/k/v                     3 · (C² + C)
//   proj                           C² + C
//   norm2                          2C
//   mlp.fc1 (C -> 4C)              4C² + 4C
//   mlp.fc2 (4C -> C)              4C² + C
//   total                          12C² + 46C
//   C =  64:  12·4096   + 46·64  =    49,152 +  2,944 =    52,096
//   C = 192:  12·36864  + 46·192 =   442,368 +  8,832 =   451,200
//   C = 384:  12·147456 + 46·384 = 1,769,472 + 17,664 = 1,787,136
// stage0: patch_embed.proj 3·64·7·7 + 64 = 9,472; patch_embed.norm 128; 1 block 52,096
//         = 61,696
// stage1: patch_embed.proj 64·192·3·3 + 192 = 110,784; norm 384; 2 blocks 902,400
//         = 1,013,568
// stage2: patch_embed.proj 192·384·3·3 + 384 = 663,936; norm 768; cls_token 384;
//         10 blocks 17,871,360 = 18,536,448
// norm 768; head 384·1000 + 1000 = 385,000
// total 61,696 + 1,013,568 + 18,536,448 + 768 + 385,000 = 19,997,480
// The official README says 20M; the lucid library's docs (ChanLumerico/lucid,
// cvt_13.rst) list 19,997,480 for the same architecture.
constexpr int64_t kCvt13Params = 19'997'480;

// Built once (20M parameters take a second to initialise).
CvT& cvt13() {
  static CvT m(cvt13_config());
  return m;
}

TEST_CASE("CvT-13: exact parameter count, and the same for its SimA twin") {
  CHECK(cvt13().num_parameters() == kCvt13Params);
  ModelConfig cfg = cvt13_config();
  cfg.attention.variant = "sima";
  CHECK(CvT(cfg).num_parameters() == kCvt13Params);
}

TEST_CASE("parameter counts of the other variants: the same, + XCA temperatures, SOFT without k") {
  ModelConfig cfg = cvt_small_config({16, 32, 48}, {1, 2, 3}, {1, 2, 4}, 10);
  const int64_t base = CvT(cfg).num_parameters();
  for (const std::string& v : kVariants) {
    CAPTURE(v);
    cfg.attention.variant = v;
    int64_t want = base;
    // XCA: temperature (h) per block: 1·1 + 2·2 + 4·3 = 17.
    if (v == "xca") want += 17;
    // SOFT: no conv_proj_k (9C + 2C) nor proj_k (C² + C) per block; the conv bottleneck
    // (d·d·2·2 weight, LayerNorm 2d) and the official 3×3 v conv (h·9 weight) in its core.
    if (v == "soft")
      for (auto [C, h, n] : {std::tuple{16, 1, 1}, std::tuple{32, 2, 2}, std::tuple{48, 4, 3}}) {
        const int64_t d = C / h;
        want -= n * (12 * C + C * C) - n * (4 * d * d + 2 * d + 9 * h);
      }
    // Linformer: E and F, (k, N) each, shared by the heads, k = N / 4, per block; the last
    // stage's tokens include the class token.
    if (v == "linformer") {
      const std::vector<int64_t> grid = cvt_grid_sizes(cfg, cfg.img_size), blocks = {1, 2, 3};
      for (size_t s = 0; s < grid.size(); ++s) {
        const int64_t N = grid[s] * grid[s] + (s + 1 == grid.size() ? 1 : 0);
        want += blocks[s] * 2 * std::max<int64_t>(1, N / 4) * N;
      }
    }
    CHECK(CvT(cfg).num_parameters() == want);
  }
}

TEST_CASE("CvT-13: official state dict names, shapes, drop path rates and init") {
  CvT& m = cvt13();
  auto p = params_by_name(m);
  const std::map<std::string, Shape> expected = {
      {"stage0.patch_embed.proj.weight", {64, 3, 7, 7}},
      {"stage0.patch_embed.proj.bias", {64}},
      {"stage0.patch_embed.norm.weight", {64}},
      {"stage0.patch_embed.norm.bias", {64}},
      {"stage0.blocks.0.norm1.weight", {64}},
      {"stage0.blocks.0.attn.conv_proj_q.conv.weight", {64, 1, 3, 3}},
      {"stage0.blocks.0.attn.conv_proj_q.bn.weight", {64}},
      {"stage0.blocks.0.attn.conv_proj_k.bn.bias", {64}},
      {"stage0.blocks.0.attn.conv_proj_v.conv.weight", {64, 1, 3, 3}},
      {"stage0.blocks.0.attn.proj_q.weight", {64, 64}},
      {"stage0.blocks.0.attn.proj_q.bias", {64}},
      {"stage0.blocks.0.attn.proj_k.weight", {64, 64}},
      {"stage0.blocks.0.attn.proj_v.bias", {64}},
      {"stage0.blocks.0.attn.proj.weight", {64, 64}},
      {"stage0.blocks.0.attn.proj.bias", {64}},
      {"stage0.blocks.0.norm2.bias", {64}},
      {"stage0.blocks.0.mlp.fc1.weight", {256, 64}},
      {"stage0.blocks.0.mlp.fc1.bias", {256}},
      {"stage0.blocks.0.mlp.fc2.weight", {64, 256}},
      {"stage1.patch_embed.proj.weight", {192, 64, 3, 3}},
      {"stage1.blocks.1.attn.conv_proj_k.conv.weight", {192, 1, 3, 3}},
      {"stage2.cls_token", {1, 1, 384}},
      {"stage2.patch_embed.proj.weight", {384, 192, 3, 3}},
      {"stage2.blocks.9.attn.proj_v.bias", {384}},
      {"stage2.blocks.9.mlp.fc2.bias", {384}},
      {"norm.weight", {384}},
      {"norm.bias", {384}},
      {"head.weight", {1000, 384}},
      {"head.bias", {1000}},
  };
  for (auto& [name, shape] : expected) {
    CAPTURE(name);
    REQUIRE(p.count(name) == 1);
    CHECK(p[name].shape() == shape);
  }
  // 25 tensors per block (13 blocks), 4 per patch embedding (3), cls_token, norm (2), head (2).
  CHECK(p.size() == 25 * 13 + 4 * 3 + 1 + 2 + 2);
  for (const char* absent : {"stage0.cls_token", "stage1.cls_token", "stage2.pos_embed", "cls_token"}) {
    CAPTURE(absent);
    CHECK(p.count(absent) == 0);
  }
  std::set<std::string> buffers;
  for (auto& [n, b] : m.named_buffers()) buffers.insert(n);
  CHECK(buffers.count("stage1.blocks.1.attn.conv_proj_k.bn.running_mean") == 1);
  CHECK(buffers.count("stage2.blocks.0.attn.conv_proj_v.bn.running_var") == 1);
  CHECK(buffers.count("stage2.blocks.9.attn.conv_proj_q.bn.num_batches_tracked") == 1);
  CHECK(buffers.size() == 13 * 3 * 3);  // running_mean, running_var, num_batches_tracked

  // Drop path linspace(0, 0.1, 10) in stage 2, 0 elsewhere.
  CHECK(m.stages[0]->blocks[0]->drop_path->p == 0.f);
  CHECK(m.stages[1]->blocks[1]->drop_path->p == 0.f);
  CHECK(m.stages[2]->blocks[0]->drop_path->p == 0.f);
  CHECK(m.stages[2]->blocks[1]->drop_path->p == doctest::Approx(0.1 / 9));
  CHECK(m.stages[2]->blocks[9]->drop_path->p == doctest::Approx(0.1));
  CHECK(m.stages[0]->blocks[0]->attn->stride_kv == 2);
  CHECK(m.stages[2]->blocks[0]->norm1->eps == 1e-5f);

  // Init: Linear trunc_normal(.02) / bias 0 in the stages, LayerNorm and BatchNorm 1 / 0,
  // conv PyTorch default (|w| <= 1/√fan_in), head weight .02 but default bias (official).
  auto stddev = [](const Tensor& t) {
    double s = 0, s2 = 0;
    for (float f : to_vector(t)) s += f, s2 += double(f) * f;
    const double n = double(t.numel());
    return std::sqrt(s2 / n - (s / n) * (s / n));
  };
  CHECK(stddev(p["stage2.blocks.3.attn.proj_k.weight"]) == doctest::Approx(0.02).epsilon(0.05));
  CHECK(stddev(p["stage2.blocks.3.mlp.fc1.weight"]) == doctest::Approx(0.02).epsilon(0.05));
  CHECK(stddev(p["head.weight"]) == doctest::Approx(0.02).epsilon(0.05));
  CHECK(stddev(p["stage2.cls_token"]) == doctest::Approx(0.02).epsilon(0.2));
  for (const char* zero : {"stage1.blocks.0.attn.proj_q.bias", "stage1.blocks.0.attn.proj.bias",
                           "stage1.blocks.0.mlp.fc2.bias", "stage1.blocks.0.attn.conv_proj_q.bn.bias",
                           "stage1.patch_embed.norm.bias", "norm.bias"}) {
    CAPTURE(zero);
    for (float f : to_vector(p[zero])) REQUIRE(f == 0.f);
  }
  for (const char* one : {"stage1.blocks.0.norm1.weight", "stage1.blocks.0.attn.conv_proj_v.bn.weight", "norm.weight"}) {
    CAPTURE(one);
    for (float f : to_vector(p[one])) REQUIRE(f == 1.f);
  }
  float head_bias_max = 0.f, conv_max = 0.f;
  for (float f : to_vector(p["head.bias"])) head_bias_max = std::fmax(head_bias_max, std::fabs(f));
  for (float f : to_vector(p["stage0.patch_embed.proj.weight"])) conv_max = std::fmax(conv_max, std::fabs(f));
  CHECK(head_bias_max > 0.f);
  CHECK(head_bias_max <= 1.f / std::sqrt(384.f));
  CHECK(conv_max <= 1.f / std::sqrt(3.f * 49.f));
  CHECK(conv_max > 0.5f / std::sqrt(3.f * 49.f));  // uniform, not .02-normal
}

TEST_CASE("CvT-13 at 224x224 (depths cut to 1/1/1): token grids 56, 28, 14 and logits (B, 1000)") {
  ModelConfig cfg = cvt13_config();
  CHECK(cvt_grid_sizes(cfg, 224) == std::vector<int64_t>{56, 28, 14});
  cfg.stage_depths = {1, 1, 1};  // the full depth changes no shape, only the runtime
  CvT m(cfg);
  m.eval();
  NoGradGuard ng;
  Tensor y = m.forward(randn({1, 3, 224, 224}));
  CHECK(y.shape() == Shape{1, 1000});
  CHECK(all_finite(y));
  // #exp of the softmax cores: h · Nq · Nk per block, keys on the stride-2 grid.
  auto layers = m.attention_layers();
  REQUIRE(layers.size() == 3);
  CHECK(layers[0]->exp_calls() == 1 * (56 * 56) * (28 * 28));
  CHECK(layers[1]->exp_calls() == 3 * (28 * 28) * (14 * 14));
  CHECK(layers[2]->exp_calls() == 6 * (1 + 14 * 14) * (1 + 7 * 7));
}

// ---- small models, every variant ----------------------------------------------------------

TEST_CASE("small CvT (32x32, strides 2/2/2): every variant runs forward and backward") {
  OneThread one;
  for (const std::string& v : kVariants) {
    CAPTURE(v);
    ModelConfig cfg = cvt_small_config({16, 32, 48}, {1, 1, 2}, {1, 2, 3}, 10);
    cfg.attention.variant = v;
    CHECK(cvt_grid_sizes(cfg, 32) == std::vector<int64_t>{16, 8, 4});
    CvT m(cfg);
    // The k, v stride that runs: 2 where the core takes fewer keys than queries (the table's
    // traits; their values for the paper's variants are checked in nn.test_attention_variants).
    const AttentionTraits& traits = attention_variant(v).traits;
    const int64_t want_stride = traits.strided_kv ? 2 : 1;
    CHECK(m.stages[1]->blocks[0]->attn->stride_kv == want_stride);
    CHECK((m.stages[0]->blocks[0]->attn->proj_k == nullptr) == traits.shares_qk);

    // q and k as the cores see them: the cls token in the last stage, strided keys.
    std::vector<Shape> q_shapes, k_shapes;
    for (Attention* a : m.attention_layers())
      a->qk_hook = [&](const Tensor& q, const Tensor& k) {
        q_shapes.push_back(q.shape());
        k_shapes.push_back(k.shape());
      };
    Tensor x = randn_leaf({2, 3, 32, 32}, 3);
    Tensor feats = m.forward_features(x);
    CHECK(feats.shape() == Shape{2, 48});
    Tensor y = m.heads(feats)[0];
    CHECK(y.shape() == Shape{2, 10});
    REQUIRE(all_finite(y));
    REQUIRE(q_shapes.size() == 4);
    CHECK(q_shapes[0] == Shape{2, 1, 16 * 16, 16});
    CHECK(q_shapes[3] == Shape{2, 3, 1 + 4 * 4, 16});
    if (want_stride == 2) {
      CHECK(k_shapes[0] == Shape{2, 1, 8 * 8, 16});
      CHECK(k_shapes[3] == Shape{2, 3, 1 + 2 * 2, 16});
    } else {
      CHECK(k_shapes[0] == q_shapes[0]);
      CHECK(k_shapes[3] == q_shapes[3]);
    }

    y.backward(randn(y.shape()));
    CHECK(x.grad().defined());
    for (auto& [name, p] : m.named_parameters()) {
      CAPTURE(name);
      REQUIRE(p.grad().defined());
      CHECK(all_finite(p.grad()));
    }
  }
}

TEST_CASE("variant options pass through: relu gate and qk_norm, soft avgpool, xca temperature") {
  OneThread one;
  ModelConfig cfg = cvt_small_config({16, 32}, {1, 1}, {2, 2}, 5);
  cfg.stage_embed_kernel = {3, 3};
  cfg.stage_embed_stride = {2, 2};
  cfg.stage_embed_padding = {1, 1};
  cfg.stage_drop_path = {0.f, 0.f};
  cfg.stage_stride_kv = {2, 2};
  cfg.attention.variant = "relu";
  cfg.attention.with("gate", true);
  cfg.attention.with("qk_norm", true);
  CvT m(cfg);
  auto p = params_by_name(m);
  CHECK(p.count("stage1.blocks.0.attn.core.gate.weight") == 1);
  CHECK(p.count("stage1.blocks.0.attn.core.q_norm.weight") == 1);
  Tensor y = m.forward(randn({2, 3, 32, 32}));
  y.backward(randn(y.shape()));
  CHECK(p["stage1.blocks.0.attn.core.gate.weight"].grad().defined());
  CHECK(p["stage1.blocks.0.attn.core.k_norm.bias"].grad().defined());

  cfg.attention = AttentionOptions();
  cfg.attention.variant = "xca";
  CHECK(params_by_name(CvT(cfg)).count("stage0.blocks.0.attn.core.temperature") == 1);
  cfg.attention.variant = "soft";
  cfg.attention.with("bottleneck", "avgpool");
  CvT soft(cfg);
  CHECK(params_by_name(soft).count("stage0.blocks.0.attn.proj_k.weight") == 0);
  CHECK(all_finite(soft.forward(randn({2, 3, 32, 32}))));
}

// ---- the convolutional attention against primitive ops -----------------------------------

TEST_CASE("CvtAttention (softmax) = composition: cls unconvolved, C^-½ scale, stride-2 keys") {
  for (bool cls : {false, true}) {
    CAPTURE(cls);
    const int64_t B = 2, C = 8, h = 2, d = C / h, H = 3, W = 4, T = cls ? 1 : 0;
    AttentionOptions opt;
    opt.variant = "softmax";
    opt.dim = C;
    opt.num_heads = h;
    CvtAttention attn(opt, 2, cls);
    randomise(attn, -0.6f, 0.6f, 11);
    randomise_bn_stats(attn, 12);
    attn.eval();
    Tensor x = randn_leaf({B, T + H * W, C}, 13);

    auto reference = [&](const std::vector<Tensor>& in) {
      const Tensor& xx = in[0];
      Tensor tokens = narrow(xx, 1, T, H * W);
      Tensor grid = reshape(permute(tokens, {0, 2, 1}), {B, C, H, W});
      auto branch = [&](CvtConvProjection& cp, int stride, Linear& lin) {
        Tensor g = conv2d(grid, cp.conv->weight, Tensor(), stride, 1, static_cast<int>(C));
        g = batch_norm2d(g, cp.bn->weight, cp.bn->bias, cp.bn->running_mean, cp.bn->running_var, false);
        Tensor t = permute(reshape(g, {B, C, g.size(2) * g.size(3)}), {0, 2, 1});
        if (cls) t = cat({narrow(xx, 1, 0, 1), t}, 1);
        t = linear(t, lin.weight, lin.bias);
        return permute(reshape(t, {B, t.size(1), h, d}), {0, 2, 1, 3});
      };
      Tensor q = branch(*attn.conv_proj_q, 1, *attn.proj_q);
      Tensor k = branch(*attn.conv_proj_k, 2, *attn.proj_k);
      Tensor v = branch(*attn.conv_proj_v, 2, *attn.proj_v);
      CHECK(k.size(2) == T + 2 * 2);  // ceil(3/2) x ceil(4/2) keys
      Tensor a = softmax(mul(matmul(q, k, false, true), 1.f / std::sqrt(float(C))), -1);
      Tensor o = reshape(permute(matmul(a, v), {0, 2, 1, 3}), {B, T + H * W, C});
      return linear(o, attn.proj->weight, attn.proj->bias);
    };
    check_close(attn.forward(x, H, W), reference({x}), 1e-5f, 1e-4f);
  }
}

TEST_CASE("CvtConvProjection: forward_tokens (channels last) == forward (NCHW), training mode, with gradients") {
  for (int64_t stride : {1, 2}) {
    CAPTURE(stride);
    const int64_t B = 2, C = 6, H = 3, W = 5;
    CvtConvProjection a(C, stride), b(C, stride);
    randomise(a, -0.6f, 0.6f, 31);
    b.load_state_dict(a.state_dict());
    Tensor tokens = randn_leaf({B, H * W, C}, 32);
    check_same([&](auto& v) { return a.forward_tokens(v[0], H, W); },
               [&](auto& v) { return b.forward(reshape(permute(v[0], {0, 2, 1}), {B, C, H, W})); }, {tokens});
    check_close(a.conv->weight.grad(), b.conv->weight.grad(), 1e-5f, 1e-4f);
    check_close(a.bn->running_var, b.bn->running_var, 1e-6f);
  }
}

TEST_CASE("CvtConvProjection: the BatchNorm folded into oneDNN's convolution, in eval mode only") {
  for (int64_t stride : {1, 2}) {
    CAPTURE(stride);
    const int64_t B = 2, C = 6, H = 5, W = 4;
    CvtConvProjection a(C, stride);
    randomise(a, -0.6f, 0.6f, 33);  // the kernel, γ and β
    for (int64_t c = 0; c < C; ++c) {  // running statistics away from 0 and 1
      a.bn->running_mean.data()[c] = 0.3f - 0.1f * float(c);
      a.bn->running_var.data()[c] = 0.5f + 0.2f * float(c);
    }
    const Tensor tokens = randn_leaf({B, H * W, C}, 34, false);
    a.eval();
    const Tensor plain = a.forward_tokens(tokens, H, W);
    a.lowp = a.folded(Precision::F32);
    {
      NoGradGuard ng;
      const Tensor fused = a.forward_tokens(tokens, H, W);
      REQUIRE(fused.shape() == plain.shape());
      CHECK(rel_l2_error(fused, plain) < 1e-6);  // the fold rounds once more: float32 up to that
      a.train();  // batch statistics: no fold, the float32 path bit for bit
      const Tensor batch_stats = a.forward_tokens(tokens, H, W);
      CvtConvProjection b(C, stride);
      b.load_state_dict(a.state_dict());
      CHECK(max_abs_diff(batch_stats, b.forward_tokens(tokens, H, W)) == 0.f);
    }
  }
}

TEST_CASE("CvtAttention::forward_add: the plain sum with a gradient, proj's post-op without") {
  for (bool cls : {false, true}) {
    CAPTURE(cls);
    const int64_t B = 2, C = 8, H = 3, W = 4, T = cls ? 1 : 0;
    AttentionOptions opt;
    opt.variant = "sima";
    opt.dim = C;
    opt.num_heads = 2;
    CvtAttention attn(opt, 2, cls);
    randomise(attn, -0.6f, 0.6f, 35);
    randomise_bn_stats(attn, 36);
    attn.eval();
    const Tensor x = randn_leaf({B, T + H * W, C}, 37), r = randn_leaf({B, T + H * W, C}, 38);
    const Tensor plain = add(r, attn.forward(x, H, W));
    Tensor y = attn.forward_add(x, r, H, W);
    CHECK(max_abs_diff(y, plain) == 0.f);
    y.backward(randn_leaf(y.shape(), 39, false));
    CHECK(r.grad().defined());
    attn.proj->lowp = std::make_shared<const LowpLinear>(Precision::F32, attn.proj->weight, attn.proj->bias);
    NoGradGuard ng;
    CHECK(rel_l2_error(attn.forward_add(x.detach(), r.detach(), H, W), plain) < 1e-6);
  }
}

TEST_CASE("SOFT core with a cls token = Pᵀ A⁻¹ P v with landmarks from the grid tokens only") {
  // avgpool bottleneck sr 2 on a 2x4 grid: m = 2 landmarks, each the mean of a 2x2 block of
  // the scaled q; A⁻¹ in closed form (Newton–Raphson with 30 iterations has converged).
  const int64_t B = 1, h = 2, d = 4, H = 2, W = 4, N = 1 + H * W;
  AttentionOptions opt;
  opt.variant = "soft";
  opt.dim = h * d;
  opt.num_heads = h;
  opt.with("bottleneck", "avgpool");
  opt.with("nr_iters", 30);
  opt.with("ridge", 0.f);  // the plain inverse and no v conv: the formula below
  opt.with("v_conv", 0);
  opt.projections = false;
  SoftAttention core(opt);
  Tensor q = mul(randn_leaf({B, h, N, d}, 31, false), 0.5f), v = randn_leaf({B, h, N, d}, 32, false);
  Tensor got = core.core(q, q, v, H, W);
  REQUIRE(got.shape() == Shape{B, h, N, d});
  std::vector<float> want;
  const float s = 1.f / std::sqrt(std::sqrt(float(d)));
  for (int64_t p = 0; p < h; ++p) {
    auto qs = [&](int64_t t, int64_t c) { return s * q.at({0, p, t, c}); };
    float lm[2][4] = {};  // landmark i: tokens 1 + r·W + c, r ∈ {0, 1}, c ∈ {2i, 2i + 1}
    for (int i = 0; i < 2; ++i)
      for (int r = 0; r < 2; ++r)
        for (int c = 2 * i; c < 2 * i + 2; ++c)
          for (int k = 0; k < d; ++k) lm[i][k] += 0.25f * qs(1 + r * W + c, k);
    auto kernel = [&](const float* a, auto b) {
      float dist = 0.f;
      for (int k = 0; k < d; ++k) dist += (a[k] - b(k)) * (a[k] - b(k));
      return std::exp(-0.5f * dist);
    };
    float A[2][2], P[2][N];
    for (int i = 0; i < 2; ++i) {
      for (int j = 0; j < 2; ++j) A[i][j] = kernel(lm[i], [&](int k) { return lm[j][k]; });
      for (int64_t t = 0; t < N; ++t) P[i][t] = kernel(lm[i], [&](int k) { return qs(t, k); });
    }
    const float det = A[0][0] * A[1][1] - A[0][1] * A[1][0];
    const float Ai[2][2] = {{A[1][1] / det, -A[0][1] / det}, {-A[1][0] / det, A[0][0] / det}};
    for (int64_t t = 0; t < N; ++t)
      for (int k = 0; k < d; ++k) {
        float o = 0.f;
        for (int i = 0; i < 2; ++i)
          for (int j = 0; j < 2; ++j)
            for (int64_t u = 0; u < N; ++u) o += P[i][t] * Ai[i][j] * P[j][u] * v.at({0, p, u, k});
        want.push_back(o);
      }
  }
  check_close(got, want, 1e-4f, 1e-3f);
}

// ---- gradcheck of a whole model -----------------------------------------------------------

TEST_CASE("gradcheck: tiny CvT (2 stages, 8x8 input) w.r.t. the input and every parameter") {
  ModelConfig cfg = cvt_small_config({4, 8}, {1, 1}, {1, 2}, 3);
  cfg.img_size = 8;
  cfg.in_chans = 2;
  cfg.stage_embed_kernel = {3, 3};
  cfg.stage_embed_stride = {2, 2};
  cfg.stage_embed_padding = {1, 1};
  cfg.stage_drop_path = {0.f, 0.f};
  cfg.stage_stride_kv = {2, 2};
  CvT m(cfg);  // grids 4x4 and 2x2 (+ cls), keys 2x2 and 1x1 (+ cls)
  randomise(m, -0.5f, 0.5f, 21);
  randomise_bn_stats(m, 22);
  // Train mode: BatchNorm on the batch statistics (the harder backward; dropout and drop
  // path are 0, so the forward is deterministic). Eval-mode BatchNorm is covered by the
  // composition test above.
  m.train();
  Tensor x = uniform_leaf({2, 2, 8, 8}, -1.f, 1.f, 23);
  std::vector<Tensor> inputs{x};
  for (auto& [n, p] : m.named_parameters()) inputs.push_back(p);
  GradcheckOptions o;
  o.eps = 1e-2;
  OneThread one;  // ~4000 forwards of a tiny model
  CHECK_GRADCHECK([&](const std::vector<Tensor>& v) { return m.forward(v[0]); }, inputs, o);
}

// ---- other input sizes ---------------------------------------------------------------------

TEST_CASE("no position embedding: a model configured for 32x32 runs at 48x48 and 48x40") {
  OneThread one;
  for (const std::string& v : {std::string("softmax"), std::string("sima"), std::string("soft")}) {
    CAPTURE(v);
    ModelConfig cfg = cvt_small_config({16, 32, 48}, {1, 1, 1}, {1, 2, 3}, 7);
    cfg.attention.variant = v;
    CvT m(cfg);
    Tensor y = m.forward(randn({2, 3, 48, 48}));  // grids 24, 12, 6
    CHECK(y.shape() == Shape{2, 7});
    CHECK(all_finite(y));
    Tensor z = m.forward_features(randn({1, 3, 48, 40}));  // grids 24x20, 12x10, 6x5
    CHECK(z.shape() == Shape{1, 48});
    CHECK(all_finite(z));
  }
  // The CvT-13 embedding at 32x32 still works: 8, 4, 2 tokens per side.
  ModelConfig c13 = cvt13_config();
  c13.stage_dims = {16, 48, 96};
  c13.stage_depths = {1, 1, 1};
  CHECK(cvt_grid_sizes(c13, 32) == std::vector<int64_t>{8, 4, 2});
  CvT m(c13);
  CHECK(m.forward(randn({2, 3, 32, 32})).shape() == Shape{2, 1000});  // (B = 1 would leave BatchNorm one value per channel at the 1x1 keys, an error in training as in PyTorch)
}

TEST_CASE("num_classes 0: no head, heads() returns the features") {
  OneThread one;
  ModelConfig cfg = cvt_small_config({16, 32, 48}, {1, 1, 1}, {1, 2, 3}, 0);
  CvT m(cfg);
  CHECK(params_by_name(m).count("head.weight") == 0);
  CHECK(m.forward(randn({2, 3, 32, 32})).shape() == Shape{2, 48});
}

// ---- errors ----------------------------------------------------------------------------------

TEST_CASE("bad configs are errors naming the field") {
  auto fails_with = [](ModelConfig cfg, const std::string& part) {
    try {
      CvT m(cfg);
    } catch (const Error& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(part) != std::string::npos);
      return;
    }
    FAIL("no error for " << part);
  };
  ModelConfig base = cvt_small_config();
  ModelConfig c = base;
  c.stage_heads = {1, 3, 3};  // 3 does not divide 64
  fails_with(c, "stage_heads[1] = 3 must be > 0 and divide stage_dims[1] = 64");
  c = base;
  c.stage_depths = {1, 1};
  fails_with(c, "stage_depths has 2 entries but stage_dims has 3");
  c = base;
  c.stage_stride_kv = {2, 0, 2};
  fails_with(c, "stage_stride_kv[1] must be >= 1");
  c = base;
  c.img_size = 2;  // 2 + 2·2 padding < kernel 7
  c.stage_embed_kernel = {7, 3, 3};
  c.stage_embed_stride = {4, 2, 2};
  c.stage_embed_padding = {2, 1, 1};
  fails_with(c, "img_size 2 is too small: stage 0");
  c = base;
  c.attention.variant = "soft";
  c.img_size = 16;  // grids 8, 4, 2; sr 4 needs 4
  c.attention.with("sr", 4);
  fails_with(c, "stage 2 a 2x2 token grid, smaller than the soft attention's options allow (side >= 4");
  c = base;
  c.attention.variant = "reformer";
  fails_with(c, "attention variant 'reformer' is unknown");
  c = base;
  c.act = "swish";
  fails_with(c, "activation 'swish' is unknown");
  c = base;
  c.norm_eps = 0.f;
  fails_with(c, "norm_eps");

  CvT m(base);
  CHECK_THROWS_AS(m.forward(randn({1, 1, 32, 32})), Error);  // wrong channels
  ModelConfig c13 = cvt13_config();
  c13.stage_dims = {16, 48, 96};
  c13.stage_depths = {1, 1, 1};
  CvT m13(c13);
  CHECK_THROWS_WITH_AS(m13.forward(randn({1, 3, 2, 2})), doctest::Contains("too small: stage 0"), Error);
}
