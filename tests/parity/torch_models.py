"""PyTorch transcriptions of the SimA registry models at 28x28 grey, under sima.cpp's parameter
names (which are the upstream ones), for tests/parity/check_model_grads.py.

  XCiT-SimA  the official SimA release (UCDvision/sima, sima.py): SimA in the XCA blocks, its
             l1 class attention (eps 1e-6), LPI, LayerScale, the Fourier position encoding; the
             conv stem of timm's xcit.py, with two stride-2 convs for patch 4
  DeiT-SimA  timm's VisionTransformer (patch conv, class token, learned position embedding) with
             the official SimA attention in place of softmax
  CvT-SimA   microsoft/CvT lib/models/cls_cvt.py (conv embeddings with LayerNorm, dw_bn conv
             projections, stride-2 k and v, the class token in the last stage, QuickGELU) with
             the official SimA core in place of softmax

Every module works in the dtype of its parameters: the caller makes a float64 copy (the truth)
and a float32 one. Written for this test, not imported from the upstream repositories.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Kinks:
    """What sima_core does at the l1 kink, call by call (the i-th call is the model's i-th SimA
    layer): `record` keeps sign(q), sign(k) of each call; `align` (a list of (sign_q, sign_k)) puts
    every entry whose |value| is below `band` times its column's mean |value| on the given side
    (the value's size kept, its sign set; 0 for sign 0), with the gradient passing through as
    through the identity. `moved` counts the entries align changed."""

    def __init__(self, align=None, band=1e-5):
        self.align, self.band, self.recorded, self.moved, self.calls = align, band, [], 0, 0

    def __call__(self, q, k):
        i, self.calls = self.calls, self.calls + 1
        self.recorded.append((torch.sign(q.detach()), torch.sign(k.detach())))
        if self.align is None:
            return q, k
        return self._put(q, self.align[i][0]), self._put(k, self.align[i][1])

    def _put(self, x, side):
        side = side.to(x.dtype)
        near = x.detach().abs() < self.band * x.detach().abs().mean(-2, keepdim=True)
        move = near & (torch.sign(x.detach()) != side)
        self.moved += int(move.sum())
        target = torch.where(move, side * x.detach().abs(), x.detach())
        return x + (target - x.detach())


KINKS = None  # a Kinks while check_model_grads.py runs a model, else None


def sima_core(q, k, v, eps=1e-12):
    """Official SimA: q, k (B, h, N, d) l1-normalised over the tokens; (q k^T) v when the query
    tokens are fewer than the channels, q (k^T v) otherwise."""
    if KINKS is not None:
        q, k = KINKS(q, k)
    q, k = F.normalize(q, p=1.0, dim=-2, eps=eps), F.normalize(k, p=1.0, dim=-2, eps=eps)
    if q.shape[-2] < q.shape[-1]:
        return (q @ k.transpose(-2, -1)) @ v
    return q @ (k.transpose(-2, -1) @ v)


class Mlp(nn.Module):
    def __init__(self, dim, hidden, act):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(dim, hidden), act, nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class SimA(nn.Module):  # one qkv Linear, heads split, the core, proj
    def __init__(self, dim, heads):
        super().__init__()
        self.h, self.qkv, self.proj = heads, nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.h, C // self.h).permute(2, 0, 3, 1, 4)
        return self.proj(sima_core(q, k, v).transpose(1, 2).reshape(B, N, C))


# ---- XCiT-SimA ----------------------------------------------------------------------------
class ConvStem(nn.Module):  # timm xcit.py ConvPatchEmbed: stride-2 conv3x3 + BN stages, GELU between
    def __init__(self, patch, in_chans, dim):
        super().__init__()
        n = {4: 2, 8: 3, 16: 4}[patch]
        layers, cin = [], in_chans
        for i in range(n):
            cout = dim >> (n - 1 - i)
            layers.append(nn.Sequential(nn.Conv2d(cin, cout, 3, 2, 1, bias=False), nn.BatchNorm2d(cout)))
            if i + 1 < n:
                layers.append(nn.GELU())
            cin = cout
        self.proj = nn.Sequential(*layers)

    def forward(self, x):
        x = self.proj(x)
        return x.flatten(2).transpose(1, 2), x.shape[2], x.shape[3]


class FourierPos(nn.Module):  # official PositionalEncodingFourier, in the module's dtype
    def __init__(self, dim, hidden=32, temperature=10000):
        super().__init__()
        self.hidden, self.temperature = hidden, temperature
        self.token_projection = nn.Conv2d(2 * hidden, dim, 1)

    def forward(self, B, H, W):
        dt = self.token_projection.weight.dtype
        y = torch.arange(1, H + 1, dtype=dt)[:, None].expand(H, W)
        x = torch.arange(1, W + 1, dtype=dt)[None, :].expand(H, W)
        y = y / (y[-1:, :] + 1e-6) * 2 * math.pi
        x = x / (x[:, -1:] + 1e-6) * 2 * math.pi
        t = torch.arange(self.hidden, dtype=dt)
        t = self.temperature ** (2 * torch.div(t, 2, rounding_mode="floor") / self.hidden)
        px, py = x[..., None] / t, y[..., None] / t
        px = torch.stack([px[..., 0::2].sin(), px[..., 1::2].cos()], 3).flatten(2)
        py = torch.stack([py[..., 0::2].sin(), py[..., 1::2].cos()], 3).flatten(2)
        pos = torch.cat([py, px], 2).permute(2, 0, 1)[None].expand(B, -1, -1, -1)
        return self.token_projection(pos)  # (B, dim, H, W)


class LPI(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.conv1 = nn.Conv2d(dim, dim, 3, padding=1, groups=dim)
        self.act, self.bn = nn.GELU(), nn.BatchNorm2d(dim)
        self.conv2 = nn.Conv2d(dim, dim, 3, padding=1, groups=dim)

    def forward(self, x, H, W):
        B, N, C = x.shape
        x = self.conv2(self.bn(self.act(self.conv1(x.transpose(1, 2).reshape(B, C, H, W)))))
        return x.reshape(B, C, N).transpose(1, 2)


class SimABlock(nn.Module):
    def __init__(self, dim, heads, eps=1e-6):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim, eps=eps), SimA(dim, heads)
        self.norm3, self.local_mp = nn.LayerNorm(dim, eps=eps), LPI(dim)
        self.norm2, self.mlp = nn.LayerNorm(dim, eps=eps), Mlp(dim, 4 * dim, nn.GELU())
        self.gamma1, self.gamma3, self.gamma2 = (nn.Parameter(torch.ones(dim)) for _ in range(3))

    def forward(self, x, H, W):
        x = x + self.gamma1 * self.attn(self.norm1(x))
        x = x + self.gamma3 * self.local_mp(self.norm3(x), H, W)
        return x + self.gamma2 * self.mlp(self.norm2(x))


class ClassAttnSimA(nn.Module):  # official: q, k l1-normalised over all tokens (eps 1e-6), the class row
    def __init__(self, dim, heads):
        super().__init__()
        self.h, self.qkv, self.proj = heads, nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.h, C // self.h).permute(2, 0, 3, 1, 4)
        k, q = F.normalize(k, p=1.0, dim=-2, eps=1e-6), F.normalize(q, p=1.0, dim=-2, eps=1e-6)
        a = (q[:, :, 0:1] * k).sum(-1)  # (B, h, N)
        cls = self.proj((a.unsqueeze(2) @ v).transpose(1, 2).reshape(B, 1, C))
        return torch.cat([cls, x[:, 1:]], 1)


class ClassAttentionBlock(nn.Module):  # tokens_norm False (xcit_nano)
    def __init__(self, dim, heads, eps=1e-6):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim, eps=eps), ClassAttnSimA(dim, heads)
        self.norm2, self.mlp = nn.LayerNorm(dim, eps=eps), Mlp(dim, 4 * dim, nn.GELU())
        self.gamma1, self.gamma2 = (nn.Parameter(torch.ones(dim)) for _ in range(2))

    def forward(self, x):
        x = x + self.gamma1 * self.attn(self.norm1(x))
        x = torch.cat([self.norm2(x[:, :1]), x[:, 1:]], 1)  # official: x[:, 0:1] = norm2(x[:, 0:1])
        return x + torch.cat([self.gamma2 * self.mlp(x[:, :1]), x[:, 1:]], 1)


class XCiTSimA(nn.Module):
    def __init__(self, patch=4, in_chans=1, dim=128, depth=12, heads=4, classes=10):
        super().__init__()
        self.patch_embed = ConvStem(patch, in_chans, dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = FourierPos(dim)
        self.blocks = nn.ModuleList([SimABlock(dim, heads) for _ in range(depth)])
        self.cls_attn_blocks = nn.ModuleList([ClassAttentionBlock(dim, heads) for _ in range(2)])
        self.norm, self.head = nn.LayerNorm(dim, eps=1e-6), nn.Linear(dim, classes)

    def forward(self, img):
        x, H, W = self.patch_embed(img)
        B, N, C = x.shape
        x = x + self.pos_embed(B, H, W).reshape(B, C, N).transpose(1, 2)
        for b in self.blocks:
            x = b(x, H, W)
        x = torch.cat([self.cls_token.expand(B, -1, -1), x], 1)
        for b in self.cls_attn_blocks:
            x = b(x)
        return self.head(self.norm(x)[:, 0])


# ---- DeiT-SimA ----------------------------------------------------------------------------
class PatchConv(nn.Module):
    def __init__(self, patch, in_chans, dim):
        super().__init__()
        self.proj = nn.Conv2d(in_chans, dim, patch, patch)


class DeitBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim, eps=1e-6), SimA(dim, heads)
        self.norm2, self.mlp = nn.LayerNorm(dim, eps=1e-6), Mlp(dim, 4 * dim, nn.GELU())

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class DeitSimA(nn.Module):
    def __init__(self, img=28, patch=4, in_chans=1, dim=192, depth=12, heads=3, classes=10):
        super().__init__()
        self.patch_embed = PatchConv(patch, in_chans, dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, (img // patch) ** 2 + 1, dim))
        self.blocks = nn.ModuleList([DeitBlock(dim, heads) for _ in range(depth)])
        self.norm, self.head = nn.LayerNorm(dim, eps=1e-6), nn.Linear(dim, classes)

    def forward(self, img):
        x = self.patch_embed.proj(img).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], 1) + self.pos_embed
        for b in self.blocks:
            x = b(x)
        return self.head(self.norm(x)[:, 0])


# ---- CvT-SimA -----------------------------------------------------------------------------
class QuickGELU(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(1.702 * x)


class ConvEmbed(nn.Module):
    def __init__(self, cin, dim, k, s, p):
        super().__init__()
        self.proj, self.norm = nn.Conv2d(cin, dim, k, s, p), nn.LayerNorm(dim, eps=1e-5)

    def forward(self, x):
        x = self.proj(x)
        return self.norm(x.flatten(2).transpose(1, 2)), x.shape[2], x.shape[3]  # (B, HW, C)


class DwBn(nn.Module):  # 'dw_bn': depthwise conv3x3 (no bias) + BatchNorm, then tokens
    def __init__(self, dim, stride):
        super().__init__()
        self.conv = nn.Conv2d(dim, dim, 3, stride, 1, bias=False, groups=dim)
        self.bn = nn.BatchNorm2d(dim)

    def forward(self, g):
        return self.bn(self.conv(g)).flatten(2).transpose(1, 2)


class CvtAttention(nn.Module):
    def __init__(self, dim, heads, cls, stride_kv=2):
        super().__init__()
        self.h, self.cls = heads, cls
        self.conv_proj_q, self.conv_proj_k, self.conv_proj_v = DwBn(dim, 1), DwBn(dim, stride_kv), DwBn(dim, stride_kv)
        self.proj_q, self.proj_k, self.proj_v, self.proj = (nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x, H, W):
        c, t = (x[:, :1], x[:, 1:]) if self.cls else (None, x)
        B, N, C = t.shape
        g = t.transpose(1, 2).reshape(B, C, H, W)
        q, k, v = (p(g) for p in (self.conv_proj_q, self.conv_proj_k, self.conv_proj_v))
        if self.cls:
            q, k, v = (torch.cat([c, u], 1) for u in (q, k, v))
        heads = lambda u: u.reshape(B, u.shape[1], self.h, C // self.h).transpose(1, 2)
        o = sima_core(heads(self.proj_q(q)), heads(self.proj_k(k)), heads(self.proj_v(v)))
        return self.proj(o.transpose(1, 2).reshape(B, -1, C))


class CvtBlock(nn.Module):
    def __init__(self, dim, heads, cls):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim, eps=1e-5), CvtAttention(dim, heads, cls)
        self.norm2, self.mlp = nn.LayerNorm(dim, eps=1e-5), Mlp(dim, 4 * dim, QuickGELU())

    def forward(self, x, H, W):
        x = x + self.attn(self.norm1(x), H, W)
        return x + self.mlp(self.norm2(x))


class CvtStage(nn.Module):
    def __init__(self, cin, dim, depth, heads, cls):
        super().__init__()
        self.patch_embed = ConvEmbed(cin, dim, 3, 2, 1)
        if cls:
            self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.cls = cls
        self.blocks = nn.ModuleList([CvtBlock(dim, heads, cls) for _ in range(depth)])

    def forward(self, x):
        t, H, W = self.patch_embed(x)
        B, _, C = t.shape
        if self.cls:
            t = torch.cat([self.cls_token.expand(B, -1, -1), t], 1)
        for b in self.blocks:
            t = b(t, H, W)
        cls, t = (t[:, :1], t[:, 1:]) if self.cls else (None, t)
        return t.transpose(1, 2).reshape(B, C, H, W), cls


class CvtSimA(nn.Module):  # cvt_13 widths, depths and heads; kernels 3, strides 2 (small images)
    def __init__(self, in_chans=1, dims=(64, 192, 384), depths=(1, 2, 10), heads=(1, 3, 6), classes=10):
        super().__init__()
        cins = (in_chans,) + tuple(dims[:-1])
        for i in range(3):
            setattr(self, f"stage{i}", CvtStage(cins[i], dims[i], depths[i], heads[i], i == 2))
        self.norm, self.head = nn.LayerNorm(dims[-1], eps=1e-5), nn.Linear(dims[-1], classes)

    def forward(self, img):
        x = img
        for i in range(3):
            x, cls = getattr(self, f"stage{i}")(x)
        return self.head(self.norm(cls[:, 0]))


MODELS = {"xcit_nano_12_p4_28_sima": XCiTSimA, "deit_tiny_patch4_28_sima": DeitSimA, "cvt_13_28_sima": CvtSimA}
