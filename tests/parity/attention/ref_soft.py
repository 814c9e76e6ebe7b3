"""soft: the official SOFT attention (fudan-zvg/SOFT, models/softmax_free_transformer.py,
SoftmaxFreeAttention / SoftmaxFreeAttentionKernel with ratio > 1 and kernel_method "torch";
SOFT/kernel/inverse.py, newton_inv and _NewtonInverseKernel).

  q = W_q x, v = W_v x (B, h, N, d);  q = q / d^¼;  k = q
  q̃ = GELU(LayerNorm_d(Conv2d(d, d, sr, stride sr, no bias)(q on its H×W grid)))  (m tokens)
  K1 = exp(−‖q_i − q̃_j‖²/2) (N×m),  K2 = exp(−‖q̃_i − q̃_j‖²/2) (m×m), both as ‖a‖² + ‖b‖² − 2ab
  out = (K1 · newton_inverse(K2)) · (K1ᵀ v) + DWConv_k(v)          -> (B, N, C) -> ff
  newton_inverse: α = 1.8 / (max row sum of K2)², P = K2 + 0.01·I, V = α·P,
                  20 × V ← 2V − V P V;  backward dK2 = −Vᵀ G Vᵀ (a custom autograd Function)
  DWConv_k: Conv2d(h, h, k, padding k//2, groups h, no bias) on v laid out as (B·d, h, H, W)

Names as sima.cpp's: the official W_q and W_v are one Linear(C, 2C) `qkv` (rows: q, then v),
ff is `proj`, Qlandmark_op is `q_conv`, Qnorm_act's LayerNorm is `norm`, the v conv `v_conv`.
sima.cpp's options beyond the official code, transcribed the same way: ridge (0 = none),
v_conv (0 = none), nr_backward "unrolled" (autograd through the iterations, α included),
bottleneck "avgpool" (the paper's alternative), and tokens before the grid (a class token:
a query/key like the others, no landmark; the v conv passes its v through, as the official
ratio = 1 branch concatenates the class token's v).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def gaussian(a, b):
    """exp(−‖a_i − b_j‖²/2) as the official subtraction_gaussian_kernel_torch: (.., M, N)."""
    a2 = (a ** 2).sum(-1, keepdim=True)
    b2 = (b ** 2).sum(-1, keepdim=True).transpose(-1, -2)
    return torch.exp(-(a2 + b2 - 2.0 * a @ b.transpose(-1, -2)) / 2)


def newton_iterations(mat, iters, ridge):
    """The official newton_inv, with the ridge as a parameter (0.01 there)."""
    eye = torch.eye(mat.size(-1), dtype=mat.dtype)
    alpha = 0.9 * 2 / torch.max(torch.sum(mat, dim=-1), -1)[0] ** 2
    P = mat + ridge * eye
    V = alpha[..., None, None] * P
    for _ in range(iters):
        V = 2 * V - V @ P @ V
    return V


class NewtonInverse(torch.autograd.Function):
    """The official _NewtonInverseKernel: the iterations without grad, the backward of the
    true inverse evaluated at the iterate, −Vᵀ G Vᵀ."""

    @staticmethod
    def forward(ctx, mat, iters, ridge):
        with torch.no_grad():
            out = newton_iterations(mat, iters, ridge)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (inv,) = ctx.saved_tensors
        return -(inv.transpose(-1, -2) @ grad @ inv.transpose(-1, -2)), None, None


class Soft(nn.Module):
    def __init__(self, dim, num_heads, sr=2, bottleneck="conv", nr_iters=20, ridge=0.01, v_conv=3,
                 nr_backward="inverse"):
        super().__init__()
        self.h, self.d = num_heads, dim // num_heads
        self.sr, self.bottleneck, self.iters, self.ridge = sr, bottleneck, nr_iters, ridge
        self.nr_backward = nr_backward
        self.qkv = nn.Linear(dim, 2 * dim)  # official W_q (rows 0..C) and W_v (rows C..2C)
        self.proj = nn.Linear(dim, dim)     # official ff
        if v_conv:
            self.v_conv = nn.Conv2d(num_heads, num_heads, v_conv, padding=v_conv // 2, groups=num_heads,
                                    bias=False)
        else:
            self.v_conv = None
        if bottleneck == "conv":
            self.q_conv = nn.Conv2d(self.d, self.d, sr, stride=sr, bias=False)
            self.norm = nn.LayerNorm(self.d)

    def landmarks(self, q, H, W):  # q (B, h, H·W, d) -> (B, h, m, d)
        B = q.shape[0]
        img = q.reshape(B * self.h, H, W, self.d).permute(0, 3, 1, 2)
        y = self.q_conv(img) if self.bottleneck == "conv" else F.avg_pool2d(img, self.sr)
        y = y.flatten(2).transpose(1, 2).reshape(B, self.h, -1, self.d)
        return F.gelu(self.norm(y)) if self.bottleneck == "conv" else y

    def conv_v(self, v, H, W):  # the official use_conv branch; tokens before the grid pass through
        B, h, N, d = v.shape
        extra = N - H * W
        g = v[:, :, extra:, :].reshape(B, h, H, W, d).permute(0, 4, 1, 2, 3).reshape(B * d, h, H, W)
        y = self.v_conv(g).reshape(B, d, h, H, W).flatten(3).permute(0, 2, 3, 1)
        return torch.cat([v[:, :, :extra, :], y], dim=2)

    def forward(self, x, H, W):
        B, N, C = x.shape
        t = self.qkv(x).reshape(B, N, 2, self.h, self.d).permute(2, 0, 3, 1, 4)
        q, v = t[0], t[1]
        q = q / math.sqrt(math.sqrt(self.d))
        ql = self.landmarks(q[:, :, N - H * W:, :], H, W)
        k1 = gaussian(q, ql)   # (B, h, N, m)
        k2 = gaussian(ql, ql)  # (B, h, m, m)
        if self.nr_backward == "inverse":
            inv = NewtonInverse.apply(k2, self.iters, self.ridge)
        else:
            inv = newton_iterations(k2, self.iters, self.ridge)
        out = (k1 @ inv) @ (k1.transpose(-1, -2) @ v)
        if self.v_conv is not None:
            out = out + self.conv_v(v, H, W)
        return self.proj(out.transpose(1, 2).reshape(B, N, C))


def build(case):
    a = case["attention"]
    return Soft(case["dim"], case["num_heads"], a.get("sr", 2), a.get("bottleneck", "conv"),
                a.get("nr_iters", 20), a.get("ridge", 0.01), a.get("v_conv", 3),
                a.get("nr_backward", "inverse"))


def case(name, attention, dim, heads, batch, grid, extra=0):
    return {"name": name, "attention": {"type": "soft", **attention}, "dim": dim, "num_heads": heads,
            "batch": batch, "tokens": extra + grid[0] * grid[1], "grid": grid, "build": build}


CASES = [
    # the official defaults: ridge 0.01, 3×3 v conv, inverse backward, conv bottleneck
    case("soft_official", {}, 32, 2, 2, [4, 4]),
    case("soft_k5_sr1", {"v_conv": 5, "sr": 1}, 16, 2, 1, [3, 3]),
    case("soft_official_rect_grid", {}, 24, 3, 2, [4, 6]),
    case("soft_class_token", {}, 32, 2, 2, [4, 4], extra=1),
    case("soft_avgpool", {"bottleneck": "avgpool"}, 32, 2, 2, [4, 4]),
    # 4 iterations: far from converged, so the inverse backward (−Vᵀ G Vᵀ at the iterate) and
    # the unrolled one differ; this case tells them apart
    case("soft_inverse_unconverged", {"nr_iters": 4}, 16, 2, 2, [4, 4]),
    # the first SOFT module's behaviour, reachable as options
    case("soft_legacy_unrolled", {"ridge": 0.0, "v_conv": 0, "nr_backward": "unrolled"}, 32, 2, 2, [4, 4]),
    case("soft_unrolled_ridge", {"nr_backward": "unrolled", "nr_iters": 6}, 16, 1, 2, [4, 4]),
]
