#!/usr/bin/env python3
"""torch.save checkpoints of upstream models at a tiny size, for tests/models/test_pth.cpp.

  gen_pth.py OUT_DIR      writes OUT_DIR/<case>.pth and OUT_DIR/cases.json

Each model is a transcription, in our own words, of the upstream forward pass (sources named
per class), built at 32x32 pixels with a few blocks, trained for two AdamW steps (so BatchNorm
statistics and every weight move away from their init), then saved with torch.save the way
upstream saves it. cases.json has, per case, the file, the --from / --model arguments, two
input images and the eval-mode logits PyTorch computes on them. Storages in float16 / bfloat16
are saved for some cases; their reference logits come from the model with the rounded weights.

Then malformed and hostile files (truncated, bad CRC, pickles calling os.system / builtins.eval,
deep nesting, the legacy format, wrong architectures), each with the words its error must contain.
Run by ctest (models.gen_pth) with Debian's python3-torch. The model classes also serve
tests/models/check_pth_export.py, which loads the files sima-convert --to writes into them.
"""
import argparse
import io
import json
import math
import os
import pickle
import struct
import sys
import zipfile

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
IMG = 32


class Mlp(nn.Module):
    def __init__(self, dim, hidden, act):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(dim, hidden), act, nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


# ---- timm DeiT (timm/models/vision_transformer.py: Attention, Block, VisionTransformer;
#      deit.py: the distilled variant with dist_token and head_dist) ------------------------
class DeitAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.h, self.qkv, self.proj = heads, nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.h, C // self.h).permute(2, 0, 3, 1, 4)
        a = (q @ k.transpose(-2, -1) * (C // self.h) ** -0.5).softmax(-1)
        return self.proj((a @ v).transpose(1, 2).reshape(B, N, C))


class DeitBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim, eps=1e-6), DeitAttention(dim, heads)
        self.norm2, self.mlp = nn.LayerNorm(dim, eps=1e-6), Mlp(dim, 4 * dim, nn.GELU())

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class PatchEmbed(nn.Module):
    def __init__(self, patch, dim):
        super().__init__()
        self.proj = nn.Conv2d(3, dim, patch, patch)


class DistilledDeit(nn.Module):  # distilled=False: timm's plain VisionTransformer (cls token, one head)
    def __init__(self, dim=64, depth=2, heads=1, patch=8, classes=10, distilled=True):
        super().__init__()
        n = (IMG // patch) ** 2
        self.patch_embed = PatchEmbed(patch, dim)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * .02)
        if distilled:
            self.dist_token = nn.Parameter(torch.randn(1, 1, dim) * .02)
        self.pos_embed = nn.Parameter(torch.randn(1, n + 1 + distilled, dim) * .02)
        self.blocks = nn.ModuleList([DeitBlock(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, classes)
        if distilled:
            self.head_dist = nn.Linear(dim, classes)
        self.distilled = distilled

    def forward(self, img):
        x = self.patch_embed.proj(img).flatten(2).transpose(1, 2)
        B = x.shape[0]
        tokens = [self.cls_token] + ([self.dist_token] if self.distilled else [])
        x = torch.cat([t.expand(B, -1, -1) for t in tokens] + [x], 1) + self.pos_embed
        for b in self.blocks:
            x = b(x)
        x = self.norm(x)
        if not self.distilled:
            return self.head(x[:, 0])
        return (self.head(x[:, 0]) + self.head_dist(x[:, 1])) / 2  # inference: the mean of both heads


# ---- XCiT: timm/models/xcit.py (ConvPatchEmbed, PositionalEncodingFourier, LPI, XCA,
#      XCABlock, ClassAttention with split q/k/v, ClassAttentionBlock) and the official SimA
#      release UCDvision/sima sima.py (SimA, its ClassAttention on one qkv, pos_embeder) ------
def conv_bn(i, o):
    return nn.Sequential(nn.Conv2d(i, o, 3, 2, 1, bias=False), nn.BatchNorm2d(o))


class ConvPatchEmbed(nn.Module):  # patch 8: three stride-2 convs
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Sequential(conv_bn(3, dim // 4), nn.GELU(), conv_bn(dim // 4, dim // 2), nn.GELU(),
                                  conv_bn(dim // 2, dim))

    def forward(self, x):
        x = self.proj(x)
        return x.flatten(2).transpose(1, 2), x.shape[2], x.shape[3]


class Fourier(nn.Module):
    def __init__(self, dim, hidden=32):
        super().__init__()
        self.hidden, self.token_projection = hidden, nn.Conv2d(2 * hidden, dim, 1)

    def forward(self, B, H, W):
        y = torch.arange(1, H + 1, dtype=torch.float32)[:, None].expand(H, W) / (H + 1e-6) * 2 * math.pi
        x = torch.arange(1, W + 1, dtype=torch.float32)[None, :].expand(H, W) / (W + 1e-6) * 2 * math.pi
        t = 10000 ** (2 * (torch.arange(self.hidden) // 2) / self.hidden)
        px, py = x[..., None] / t, y[..., None] / t
        px = torch.stack([px[..., 0::2].sin(), px[..., 1::2].cos()], 3).flatten(2)
        py = torch.stack([py[..., 0::2].sin(), py[..., 1::2].cos()], 3).flatten(2)
        pos = torch.cat([py, px], 2).permute(2, 0, 1)[None].expand(B, -1, -1, -1)
        return self.token_projection(pos)


class LPI(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.conv1 = nn.Conv2d(dim, dim, 3, padding=1, groups=dim)
        self.act, self.bn = nn.GELU(), nn.BatchNorm2d(dim)  # SyncBatchNorm upstream: same names, eval math
        self.conv2 = nn.Conv2d(dim, dim, 3, padding=1, groups=dim)

    def forward(self, x, H, W):
        B, N, C = x.shape
        x = self.conv2(self.bn(self.act(self.conv1(x.transpose(1, 2).reshape(B, C, H, W)))))
        return x.reshape(B, C, N).transpose(1, 2)


class XCA(nn.Module):  # timm: softmax over the d x d cross-covariance, per-head temperature
    def __init__(self, dim, heads):
        super().__init__()
        self.h, self.qkv, self.proj = heads, nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.temperature = nn.Parameter(torch.ones(heads, 1, 1) + 0.1 * torch.randn(heads, 1, 1))

    def forward(self, x):
        B, N, C = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.h, C // self.h).permute(2, 0, 3, 4, 1)  # (B, h, d, N)
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
        a = (q @ k.transpose(-2, -1) * self.temperature).softmax(-1)
        return self.proj((a @ v).permute(0, 3, 1, 2).reshape(B, N, C))


class SimA(nn.Module):  # official: q, k l1-normalised over the tokens, no softmax
    def __init__(self, dim, heads):
        super().__init__()
        self.h, self.qkv, self.proj = heads, nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.h, C // self.h).permute(2, 0, 3, 1, 4)  # (B, h, N, d)
        q, k = F.normalize(q, p=1.0, dim=-2), F.normalize(k, p=1.0, dim=-2)
        return self.proj((q @ (k.transpose(-2, -1) @ v)).transpose(1, 2).reshape(B, N, C))


class XCABlock(nn.Module):
    def __init__(self, dim, heads, attn):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim, eps=1e-6), attn(dim, heads)
        self.norm3, self.local_mp = nn.LayerNorm(dim, eps=1e-6), LPI(dim)
        self.norm2, self.mlp = nn.LayerNorm(dim, eps=1e-6), Mlp(dim, 4 * dim, nn.GELU())
        self.gamma1, self.gamma3, self.gamma2 = (nn.Parameter(torch.ones(dim) + 0.1 * torch.randn(dim)) for _ in range(3))

    def forward(self, x, H, W):
        x = x + self.gamma1 * self.attn(self.norm1(x))
        x = x + self.gamma3 * self.local_mp(self.norm3(x), H, W)
        return x + self.gamma2 * self.mlp(self.norm2(x))


class ClassAttnSplit(nn.Module):  # recent timm: separate q, k, v; softmax; returns the class token only
    def __init__(self, dim, heads):
        super().__init__()
        self.h = heads
        self.q, self.k, self.v, self.proj = (nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x):
        B, N, C = x.shape
        d = C // self.h
        q = self.q(x[:, 0]).reshape(B, 1, self.h, d).transpose(1, 2) * d ** -0.5
        k = self.k(x).reshape(B, N, self.h, d).transpose(1, 2)
        v = self.v(x).reshape(B, N, self.h, d).transpose(1, 2)
        a = (q @ k.transpose(-2, -1)).softmax(-1)
        return self.proj((a @ v).transpose(1, 2).reshape(B, 1, C))


class ClassAttnQkv(nn.Module):  # timm before the q/k/v split: the same softmax from one qkv Linear
    def __init__(self, dim, heads):
        super().__init__()
        self.h, self.qkv, self.proj = heads, nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        d = C // self.h
        q, k, v = self.qkv(x).reshape(B, N, 3, self.h, d).permute(2, 0, 3, 1, 4)  # (B, h, N, d)
        a = (q[:, :, :1] * d ** -0.5 @ k.transpose(-2, -1)).softmax(-1)  # the class query's row
        return self.proj((a @ v).transpose(1, 2).reshape(B, 1, C))


class ClassAttnSimA(nn.Module):  # official SimA: one qkv, l1-normalised q, k, the class query's row
    def __init__(self, dim, heads):
        super().__init__()
        self.h, self.qkv, self.proj = heads, nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.h, C // self.h).permute(2, 0, 3, 1, 4)
        k, q = F.normalize(k, p=1.0, dim=-2, eps=1e-6), F.normalize(q, p=1.0, dim=-2, eps=1e-6)
        a = (q[:, :, 0:1] * k).sum(-1)  # (B, h, N)
        return self.proj((a.unsqueeze(2) @ v).transpose(1, 2).reshape(B, 1, C))


class ClassAttentionBlock(nn.Module):
    def __init__(self, dim, heads, attn, tokens_norm):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim, eps=1e-6), attn(dim, heads)
        self.norm2, self.mlp = nn.LayerNorm(dim, eps=1e-6), Mlp(dim, 4 * dim, nn.GELU())
        self.gamma1, self.gamma2 = (nn.Parameter(torch.ones(dim) + 0.1 * torch.randn(dim)) for _ in range(2))
        self.tokens_norm = tokens_norm

    def forward(self, x):
        u = self.norm1(x)
        x = x + self.gamma1 * torch.cat([self.attn(u), u[:, 1:]], 1)  # patch tokens get norm1(x) added
        x = self.norm2(x) if self.tokens_norm else torch.cat([self.norm2(x[:, :1]), x[:, 1:]], 1)
        return x + torch.cat([self.gamma2 * self.mlp(x[:, :1]), x[:, 1:]], 1)  # patch tokens doubled


class XCiT(nn.Module):
    def __init__(self, official, dim=32, depth=2, heads=4, tokens_norm=True, classes=10, legacy_qkv=False):
        super().__init__()
        attn, cls_attn = (SimA, ClassAttnSimA) if official else (XCA, ClassAttnQkv if legacy_qkv else ClassAttnSplit)
        self.patch_embed = ConvPatchEmbed(dim)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * .02)
        pos = Fourier(dim)
        if official:
            self.pos_embeder = pos
        else:
            self.pos_embed = pos
        self.blocks = nn.ModuleList([XCABlock(dim, heads, attn) for _ in range(depth)])
        self.cls_attn_blocks = nn.ModuleList([ClassAttentionBlock(dim, heads, cls_attn, tokens_norm) for _ in range(2)])
        self.norm, self.head = nn.LayerNorm(dim, eps=1e-6), nn.Linear(dim, classes)
        self.official = official

    def forward(self, img):
        x, H, W = self.patch_embed(img)
        B, N, C = x.shape
        pos = self.pos_embeder if self.official else self.pos_embed
        x = x + pos(B, H, W).reshape(B, C, N).transpose(1, 2)
        for b in self.blocks:
            x = b(x, H, W)
        x = torch.cat([self.cls_token.expand(B, -1, -1), x], 1)
        for b in self.cls_attn_blocks:
            x = b(x)
        return self.head(self.norm(x)[:, 0])


# ---- CvT: microsoft/CvT lib/models/cls_cvt.py (ConvEmbed, Attention with 'dw_bn' conv
#      projections and the scale dim_out^-0.5, Block, VisionTransformer stages, ConvolutionalVisionTransformer)
class QuickGELU(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(1.702 * x)


class ConvEmbed(nn.Module):
    def __init__(self, cin, dim, k, s, p):
        super().__init__()
        self.proj, self.norm = nn.Conv2d(cin, dim, k, s, p), nn.LayerNorm(dim)

    def forward(self, x):
        x = self.proj(x)
        B, C, H, W = x.shape
        return self.norm(x.flatten(2).transpose(1, 2)).transpose(1, 2).reshape(B, C, H, W)


def dw_bn(dim, stride):
    from collections import OrderedDict
    return nn.Sequential(OrderedDict([('conv', nn.Conv2d(dim, dim, 3, stride, 1, bias=False, groups=dim)),
                                      ('bn', nn.BatchNorm2d(dim))]))


class CvtAttention(nn.Module):
    def __init__(self, dim, heads, cls):
        super().__init__()
        self.h, self.cls, self.scale = heads, cls, dim ** -0.5
        self.conv_proj_q, self.conv_proj_k, self.conv_proj_v = dw_bn(dim, 1), dw_bn(dim, 2), dw_bn(dim, 2)
        self.proj_q, self.proj_k, self.proj_v, self.proj = (nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x, H, W):
        if self.cls:
            c, x = x[:, :1], x[:, 1:]
        B, N, C = x.shape
        g = x.transpose(1, 2).reshape(B, C, H, W)
        q, k, v = (p(g).flatten(2).transpose(1, 2) for p in (self.conv_proj_q, self.conv_proj_k, self.conv_proj_v))
        if self.cls:
            q, k, v = (torch.cat([c, t], 1) for t in (q, k, v))
        heads = lambda t: t.reshape(B, t.shape[1], self.h, C // self.h).transpose(1, 2)
        q, k, v = heads(self.proj_q(q)), heads(self.proj_k(k)), heads(self.proj_v(v))
        a = (q @ k.transpose(-2, -1) * self.scale).softmax(-1)
        return self.proj((a @ v).transpose(1, 2).reshape(B, -1, C))


class CvtBlock(nn.Module):
    def __init__(self, dim, heads, cls):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim), CvtAttention(dim, heads, cls)
        self.norm2, self.mlp = nn.LayerNorm(dim), Mlp(dim, 4 * dim, QuickGELU())

    def forward(self, x, H, W):
        x = x + self.attn(self.norm1(x), H, W)
        return x + self.mlp(self.norm2(x))


class CvtStage(nn.Module):
    def __init__(self, cin, dim, depth, heads, k, s, p, cls):
        super().__init__()
        self.patch_embed = ConvEmbed(cin, dim, k, s, p)
        if cls:
            self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * .02)
        self.blocks = nn.ModuleList([CvtBlock(dim, heads, cls) for _ in range(depth)])
        self.has_cls = cls

    def forward(self, x):
        x = self.patch_embed(x)
        B, C, H, W = x.shape
        x = x.flatten(2).transpose(1, 2)
        if self.has_cls:
            x = torch.cat([self.cls_token.expand(B, -1, -1), x], 1)
        for b in self.blocks:
            x = b(x, H, W)
        cls = x[:, :1] if self.has_cls else None
        if self.has_cls:
            x = x[:, 1:]
        return x.transpose(1, 2).reshape(B, C, H, W), cls


class CvT(nn.Module):
    def __init__(self, dims=(64, 128, 192), depths=(1, 1, 1), classes=10, heads=None):
        super().__init__()
        cin, geo, heads = 3, [(7, 4, 2), (3, 2, 1), (3, 2, 1)], heads or [d // 64 for d in dims]
        for i, (d, n) in enumerate(zip(dims, depths)):
            setattr(self, f'stage{i}', CvtStage(cin, d, n, heads[i], *geo[i], i == len(dims) - 1))
            cin = d
        self.n = len(dims)
        self.norm, self.head = nn.LayerNorm(dims[-1]), nn.Linear(dims[-1], classes)

    def forward(self, x):
        for i in range(self.n):
            x, cls = getattr(self, f'stage{i}')(x)
        return self.head(self.norm(cls).squeeze(1))


# ---- training, saving, reference logits -----------------------------------------------------
def train_two_steps(model):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.train()
    for _ in range(2):
        loss = F.cross_entropy(model(torch.randn(4, 3, IMG, IMG)), torch.randint(0, 10, (4,)))
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    return opt


def rounded(sd, dtype):  # the state dict with its float tensors in `dtype`
    return {k: v.to(dtype) if v.is_floating_point() else v for k, v in sd.items()}


def make_case(out, cases, name, model, save, from_, spec, dtype=None):
    opt = train_two_steps(model)
    sd = model.state_dict()
    if dtype is not None:
        sd = rounded(sd, dtype)
        model.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in sd.items()})
    x = torch.randn(2, 3, IMG, IMG)
    with torch.no_grad():
        logits = model(x)
    path = os.path.join(out, name + '.pth')
    torch.save(save(sd, opt), path)
    cases.append({'name': name, 'file': path, 'from': from_, 'model': spec, 'input_shape': list(x.shape),
                  'input': x.flatten().tolist(), 'logits': logits.flatten().tolist(),
                  'num_classes': logits.shape[1]})


def xcit_timm_views(sd, _):
    """timm XCiT, with q/k/v saved as views of one storage (offsets) and head.weight transposed (strides)."""
    sd = dict(sd)
    for i in range(2):
        for leaf in ('weight', 'bias'):
            names = [f'cls_attn_blocks.{i}.attn.{w}.{leaf}' for w in 'qkv']
            big = torch.cat([sd[n] for n in names])
            for j, n in enumerate(names):
                sd[n] = big[j * big.shape[0] // 3:(j + 1) * big.shape[0] // 3]
    sd['head.weight'] = sd['head.weight'].t().contiguous().t()
    assert sd['head.weight'].stride() == (1, sd['head.weight'].shape[0])
    return {'state_dict': {'model': sd}}


def xcit_timm_old(sd, _):
    """timm XCiT before the q/k/v split: the class attention's q, k, v rows in one qkv Linear."""
    sd = dict(sd)
    for i in range(2):
        for leaf in ('weight', 'bias'):
            names = [f'cls_attn_blocks.{i}.attn.{w}.{leaf}' for w in 'qkv']
            sd[f'cls_attn_blocks.{i}.attn.qkv.{leaf}'] = torch.cat([sd.pop(n) for n in names])
    return sd


# ---- hostile and malformed files --------------------------------------------------------------
def archive(path, pkl, storages=()):
    """A zip laid out as torch.save's, with our own data.pkl bytes."""
    with zipfile.ZipFile(path, 'w', zipfile.ZIP_STORED) as z:
        z.writestr('archive/data.pkl', pkl)
        z.writestr('archive/version', '3\n')
        for key, data in storages:
            z.writestr('archive/data/' + key, data)


class Call:
    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


def bad_cases(out, good):
    cases = []

    def add(name, expect, from_='', spec='', path=None):
        cases.append({'name': name, 'file': path or os.path.join(out, name + '.pth'), 'from': from_, 'model': spec,
                      'expect': expect})

    data = open(good, 'rb').read()
    open(os.path.join(out, 'truncated.pth'), 'wb').write(data[:len(data) // 2])
    add('truncated', 'end-of-central-directory')
    with zipfile.ZipFile(good) as z:
        info = next(i for i in z.infolist() if '/data/' in i.filename)
    name_len, extra_len = struct.unpack('<HH', data[info.header_offset + 26:info.header_offset + 30])
    at = info.header_offset + 30 + name_len + extra_len
    flipped = bytearray(data)
    flipped[at] ^= 0x40
    open(os.path.join(out, 'bad_crc.pth'), 'wb').write(bytes(flipped))
    add('bad_crc', 'CRC-32')
    marker = os.path.join(out, 'PWNED')
    archive(os.path.join(out, 'os_system.pth'), pickle.dumps({'model': Call(os.system, 'touch ' + marker)}, protocol=2))
    add('os_system', "global 'posix.system'")
    archive(os.path.join(out, 'builtins_eval.pth'), pickle.dumps(Call(eval, "__import__('os')"), protocol=2))
    add('builtins_eval', "global '__builtin__.eval'")  # protocol 2 names Python 2's module
    archive(os.path.join(out, 'stack_global.pth'), pickle.dumps(Call(os.system, 'true'), protocol=4))
    add('stack_global', "global 'posix.system'")
    archive(os.path.join(out, 'deep_nesting.pth'), b'\x80\x02' + b']' * 100000 + b'a' * 99999 + b'.')
    add('deep_nesting', 'deeper than 64')
    archive(os.path.join(out, 'self_cycle.pth'), b'\x80\x02]q\x00h\x00a.')
    add('self_cycle', 'inside itself')
    archive(os.path.join(out, 'builtins_list.pth'), b'\x80\x02cbuiltins\nlist\n)\x81.')
    add('builtins_list', "global 'builtins.list'")
    archive(os.path.join(out, 'newobj.pth'), b'\x80\x02ccollections\nOrderedDict\n)\x81.')
    add('newobj', 'NEWOBJ at byte 28 creates a collections.OrderedDict')
    # A tensor whose view reaches past its storage.
    bad_view = (b'\x80\x02}q\x00X\x01\x00\x00\x00wctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storage'
                b'ctorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x04tQK\x02K\x04\x85K\x01\x85'
                b'\x89ccollections\nOrderedDict\n)RtRs.')
    archive(os.path.join(out, 'view_out_of_range.pth'), bad_view, [('0', b'\0' * 16)])
    add('view_out_of_range', 'reaches element 5 of a storage of 4')
    torch.save({'w': torch.ones(3)}, os.path.join(out, 'legacy.pth'), _use_new_zipfile_serialization=False)
    add('legacy', 'a legacy (PyTorch < 1.6, non-zip) torch.save file')
    with open(os.path.join(out, 'plain_pickle.pth'), 'wb') as f:  # pickle.dump, not torch.save
        pickle.dump({'w': [1.0, 2.0]}, f, protocol=2)
    add('plain_pickle', 'a plain Python pickle (pickle.dump), not a torch.save checkpoint')
    torch.save({'conv1.weight': torch.ones(4, 3, 3, 3), 'fc.weight': torch.ones(10, 4)}, os.path.join(out, 'resnet.pth'))
    add('wrong_architecture', 'fit none of the known layouts', path=os.path.join(out, 'resnet.pth'))
    add('wrong_layout_flag', "--from cvt, but the tensor names are timm's layout", from_='cvt', path=good)
    sd = torch.load(good)
    del sd['blocks.1.mlp.fc2.bias']
    sd['blocks.1.mlp.fc3.bias'] = torch.ones(3)
    torch.save(sd, os.path.join(out, 'missing_key.pth'))
    add('missing_key', 'missing (1):\n    blocks.1.mlp.fc2.bias\n  unexpected (1):\n    blocks.1.mlp.fc3.bias')
    add('heads_not_inferable', 'num_heads: width 32 is none of the official models', path=os.path.join(out, 'sima_official.pth'))
    return cases, marker


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    cases = []
    make_case(out, cases, 'deit_timm_fp16', DistilledDeit(), lambda sd, opt: sd, 'timm', '', torch.float16)
    make_case(out, cases, 'xcit_timm_views', XCiT(official=False), xcit_timm_views, 'timm', '')
    make_case(out, cases, 'xcit_timm_old_qkv', XCiT(official=False), xcit_timm_old, '', '')
    make_case(out, cases, 'sima_official', XCiT(official=True, tokens_norm=False),
              lambda sd, opt: {'model': sd, 'optimizer': opt.state_dict(), 'epoch': 2,
                               'args': argparse.Namespace(model='sima_tiny_12_p16', lr=5e-4, betas=None)}, '',
              '{"num_heads": 4, "tokens_norm": false}')
    make_case(out, cases, 'cvt_bf16', CvT(), lambda sd, opt: {'module.' + k: v for k, v in sd.items()}, 'cvt', '',
              torch.bfloat16)
    bad, marker = bad_cases(out, os.path.join(out, 'deit_timm_fp16.pth'))
    # An ImageNet-1k-sized head (1000 classes): sima-convert names its classes
    # (tests/models/test_convert_imagenet.cpp).
    imagenet = []
    make_case(out, imagenet, 'deit_timm_imagenet', DistilledDeit(classes=1000), lambda sd, opt: sd, 'timm', '')
    json.dump({'good': cases, 'bad': bad, 'marker': marker, 'imagenet': imagenet},
              open(os.path.join(out, 'cases.json'), 'w'))


if __name__ == '__main__':
    main()
