// example_attention_matrix: SimA's attention matrix A = Q̂ K̂ᵀ of one head of a trained model on
// one image, with the facts docs/sima.md derives about it, and A drawn as a picture.
//
//   build/bin/example_attention_matrix --checkpoint runs/NAME/model.safetensors --image a.png
//                                      [--layer L] [--head H] [--out a_matrix.png] [--scale K]
//
// The image goes through the checkpoint's eval transform, the model runs once, and the layer's
// qk_hook hands over q̂, k̂ (1, h, N, d) (train/viz/attention_heatmap.h, token_maps). Per head:
//   A[i, j] = Σ_c q̂[i, c] k̂[j, c]          (N × Nk; rows: query tokens, columns: key tokens)
// Printed: the shape, max |A| and Σ|A| against the bound d, the share of negative entries, the
// range of the row sums (1 for every row of a softmax), and the largest ℓ1 norm of a column of
// q̂ (1 for ℓ1-normalised columns; ≤ 1 when the eps clamp acted). The picture: red for A > 0,
// blue for A < 0, white for 0, full colour at max |A|.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "data/image_io.h"
#include "models/io/checkpoint.h"
#include "train/config/cli.h"
#include "train/config/transforms_factory.h"
#include "train/eval/evaluate.h"
#include "train/viz/attention_heatmap.h"

using namespace sima;

namespace {

// The model input for one image file, as sima-heatmap prepares it.
Tensor model_input(const std::string& path, const CheckpointEvalInfo& info) {
  Image img = read_image(path, 0);
  if (img.channels == 2 || img.channels == 4) {  // drop alpha (the last plane in CHW)
    img.channels -= 1;
    img.data.resize(static_cast<size_t>(img.numel()));
  }
  Generator unused(0);  // the eval transform draws nothing
  Image x = eval_transform(info.config, info.crop_pct)(img, unused);
  return from_vector(x.data, {1, x.channels, x.height, x.width});
}

// A (N, Nk) of head `hd`: q̂ (1, h, N, d), k̂ (1, h, Nk, d).
std::vector<double> attention_matrix(const Tensor& qh, const Tensor& kh, int64_t hd) {
  const int64_t N = qh.size(2), Nk = kh.size(2), d = qh.size(3);
  const float *q = qh.data() + hd * N * d, *k = kh.data() + hd * Nk * d;
  std::vector<double> A(static_cast<size_t>(N * Nk), 0.0);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < Nk; ++j)
      for (int64_t c = 0; c < d; ++c) A[size_t(i * Nk + j)] += double(q[i * d + c]) * k[j * d + c];
  return A;
}

// Red (A > 0) / blue (A < 0) on white, each entry a scale × scale block.
Image draw(const std::vector<double>& A, int64_t N, int64_t Nk, double amax, int64_t scale) {
  Image im(3, N * scale, Nk * scale, 1.f);
  for (int64_t i = 0; i < N * scale; ++i)
    for (int64_t j = 0; j < Nk * scale; ++j) {
      const double t = amax > 0 ? A[size_t((i / scale) * Nk + j / scale)] / amax : 0.0;
      const float fade = static_cast<float>(1.0 - std::min(1.0, std::fabs(t)));
      im.at(0, i, j) = t < 0 ? fade : 1.f;  // positive keeps red, negative keeps blue
      im.at(1, i, j) = fade;
      im.at(2, i, j) = t > 0 ? fade : 1.f;
    }
  return im;
}

void report(const Tensor& qh, const Tensor& kh, int64_t hd, const std::string& out, int64_t scale) {
  const int64_t N = qh.size(2), Nk = kh.size(2), d = qh.size(3);
  const std::vector<double> A = attention_matrix(qh, kh, hd);
  double amax = 0, asum = 0, rmin = 1e300, rmax = -1e300, qcol = 0;
  int64_t neg = 0;
  for (int64_t i = 0; i < N; ++i) {
    double r = 0;
    for (int64_t j = 0; j < Nk; ++j) {
      const double a = A[size_t(i * Nk + j)];
      amax = std::max(amax, std::fabs(a)), asum += std::fabs(a), r += a, neg += a < 0;
    }
    rmin = std::min(rmin, r), rmax = std::max(rmax, r);
  }
  const float* q = qh.data() + hd * N * d;
  for (int64_t c = 0; c < d; ++c) {
    double s = 0;
    for (int64_t i = 0; i < N; ++i) s += std::fabs(q[i * d + c]);
    qcol = std::max(qcol, s);
  }
  std::printf("head %lld: A is %lld x %lld, d = %lld\n", (long long)hd, (long long)N, (long long)Nk, (long long)d);
  std::printf("  max |A_ij| = %.4g   sum |A_ij| = %.4g   bound d = %lld\n", amax, asum, (long long)d);
  std::printf("  negative entries: %lld of %lld (%.1f %%)\n", (long long)neg, (long long)(N * Nk),
              100.0 * double(neg) / double(N * Nk));
  std::printf("  row sums in [%.4g, %.4g] (a softmax row sums to 1)\n", rmin, rmax);
  std::printf("  largest l1 norm of a q-hat column: %.6f\n", qcol);
  if (!out.empty()) {
    write_png(out, draw(A, N, Nk, amax, scale));
    std::printf("  wrote %s (red > 0, blue < 0, full colour at %.4g)\n", out.c_str(), amax);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Cli cli("example_attention_matrix", "SimA's attention matrix Q̂K̂ᵀ of one head, its bounds and a picture.");
  cli.flag("checkpoint", "PATH", "model.safetensors of a SimA model", /*required=*/true);
  cli.flag("image", "PATH", "the input image", /*required=*/true);
  cli.flag("layer", "L", "self-attention layer, 0-based; negative counts from the end", false, "-1");
  cli.flag("head", "H", "head to show", false, "0");
  cli.flag("out", "PATH", "write the matrix as a PNG here (optional)");
  cli.flag("scale", "K", "pixels per matrix entry in the PNG (1..32)", false, "8");
  if (!cli.parse(argc, argv)) return cli.exit_code();
  try {
    const std::string path = cli.get("checkpoint");
    const CheckpointEvalInfo info = read_checkpoint_eval_info(path);
    std::shared_ptr<Model> model = load_checkpoint(path);
    const TokenMaps tm = token_maps(*model, model_input(cli.get("image"), info), cli.get_int("layer"));
    check(tm.variant == "sima", "layer ", tm.layer, " runs '", tm.variant,
          "' attention: Q̂K̂ᵀ is SimA's matrix; pick a SimA model or layer");
    const int64_t hd = cli.get_int("head"), heads = tm.q_hat.size(1), scale = cli.get_int("scale");
    check(hd >= 0 && hd < heads, "--head: ", hd, " is not in [0, ", heads, ")");
    check(scale >= 1 && scale <= 32, "--scale: ", scale, " is not in 1..32");
    std::printf("layer %lld of %lld (%s)\n", (long long)tm.layer, (long long)tm.layer_count, tm.attention.c_str());
    report(tm.q_hat, tm.k_hat, hd, cli.get("out"), scale);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "example_attention_matrix: error: %s\n", e.what());
    return 1;
  }
}
