#!/usr/bin/env python3
"""PyTorch (CPU) twin of the quickstart CvT, timed like tests/bench/deit_peer.py.

The model is configs/quickstart.json's: registry name cvt_13_28_sima (models/registry.cpp:
small(cvt13_small(28)) = cvt_small_config on 28x28 grey images, 10 classes) with stage_dims
[32, 64, 128], stage_depths [1, 1, 2], stage_heads [1, 2, 4], stage_drop_path 0. Layer for
layer what models/cvt.cpp and models/cvt_attention.cpp build (same parameter names too):

  images (B, 1, 28, 28)
  stage i: patch_embed = Conv2d(Cin, C, 3, stride 2, pad 1, bias) -> tokens -> LayerNorm(C, 1e-5)
           grids 14x14 -> 7x7 -> 4x4; the last stage puts cls_token (1, 1, C) in front
  block:   x + attn(norm1(x), H, W); x + mlp(norm2(x)); mlp = fc1 (C, 4C), QuickGELU, fc2
  attn:    cls split off, tokens -> grid (B, C, H, W);
           conv_proj_{q,k,v} = depthwise Conv2d 3x3 pad 1 no bias + BatchNorm2d, stride 1 for q,
           stride_kv = 2 for k and v (grids 7, 4, 2); cls re-attached unconvolved in front;
           proj_{q,k,v} = Linear(C, C, bias); heads (B, h, N, d);
           softmax: softmax(q k^T * C^-1/2) v, C the FULL width (the official CvT scale);
           sima:    q, k l1-normalised over their own tokens per channel (F.normalize(p=1, dim=-2),
                    eps 1e-12), then (q k^T) v if Nq < d else q (k^T v) (sima.cpp's "auto" order:
                    stage 0, 1 run kv_first, stage 2 (17 tokens, d = 32) qk_first);
           merge heads -> proj = Linear(C, C)
  head:    LayerNorm(128, 1e-5) on the last stage's cls token -> Linear(128, 10)

565,642 parameters for either attention (the cores have none), as `sima-bench model` reports.
Dropout and attention dropout are 0 in this config and are left out. Drop path (stochastic depth,
timm's: whole samples zeroed with probability p, the rest scaled by 1/(1-p), on both residual
branches of a block) is 0 here; CvT(..., drop_path=(...)) sets one rate per stage, spread over the
stage's blocks as torch.linspace(0, rate, depth), as models/cvt.cpp (results/torch_twin.py uses it).

Timing protocol as deit_peer.py: 3 warm-up training steps (zero_grad, forward, cross-entropy,
backward, AdamW step), then the mean of --steps steps; then eval mode, no_grad: one warm-up
forward, the mean of --steps forwards. --latency adds the median of 50 batch-1 eval forwards
after 5 warm-up ones ("latency_b1_ms"). Prints one JSON line:
  {"peer":"pytorch","model":"quickstart_cvt",...,"train_step_ms","train_img_s","infer_img_s","peak_rss_mb"}

Needs Debian's python3-torch; run it with /usr/bin/python3 (torch defaults to 1 thread here:
always pass --threads):
  /usr/bin/python3 tests/bench/cvt_peer.py --attn sima --batch 64 --threads 2 --steps 10 --latency
  /usr/bin/python3 tests/bench/cvt_peer.py --attn softmax --check-params
"""
import argparse, json, resource, statistics, time
import torch, torch.nn as nn, torch.nn.functional as F

# configs/quickstart.json's model on top of cvt_small_config / cvt13_config (models/cvt.cpp)
IMG, CHANS, CLASSES = 28, 1, 10
DIMS, DEPTHS, HEADS = (32, 64, 128), (1, 1, 2), (1, 2, 4)
EMBED_KERNEL, EMBED_STRIDE, EMBED_PADDING, STRIDE_KV = 3, 2, 1, 2
MLP_RATIO, EPS = 4.0, 1e-5


class QuickGELU(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(1.702 * x)


class ConvEmbed(nn.Module):  # CvtConvEmbed
    def __init__(self, cin, dim):
        super().__init__()
        self.proj = nn.Conv2d(cin, dim, EMBED_KERNEL, EMBED_STRIDE, EMBED_PADDING)
        self.norm = nn.LayerNorm(dim, eps=EPS)

    def forward(self, x):  # (B, Cin, H, W) -> (B, H'W', C), H', W'
        x = self.proj(x)
        H, W = x.shape[2:]
        return self.norm(x.flatten(2).transpose(1, 2)), H, W


class ConvProjection(nn.Module):  # CvtConvProjection, the official 'dw_bn'
    def __init__(self, dim, stride):
        super().__init__()
        self.conv = nn.Conv2d(dim, dim, 3, stride, 1, groups=dim, bias=False)
        self.bn = nn.BatchNorm2d(dim)

    def forward(self, grid):  # (B, C, H, W) -> (B, H'W', C)
        return self.bn(self.conv(grid)).flatten(2).transpose(1, 2)


class Attention(nn.Module):  # CvtAttention with the softmax (CvtSoftmaxCore) or SimA core
    def __init__(self, dim, heads, kind, with_cls):
        super().__init__()
        if kind not in ("softmax", "sima"):
            raise SystemExit(f"error: unknown --attn {kind} (softmax, sima)")
        self.dim, self.heads, self.kind, self.with_cls = dim, heads, kind, with_cls
        self.conv_proj_q = ConvProjection(dim, 1)
        self.conv_proj_k = ConvProjection(dim, STRIDE_KV)
        self.conv_proj_v = ConvProjection(dim, STRIDE_KV)
        self.proj_q, self.proj_k, self.proj_v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, H, W):
        B, _, C = x.shape
        h, d = self.heads, C // self.heads
        cls, tokens = (x[:, :1], x[:, 1:]) if self.with_cls else (None, x)
        grid = tokens.transpose(1, 2).reshape(B, C, H, W)

        def qkv(conv, lin):  # conv projection, cls back in front, linear, heads (B, h, N, d)
            t = conv(grid)
            t = lin(torch.cat([cls, t], 1) if cls is not None else t)
            return t.reshape(B, t.shape[1], h, d).transpose(1, 2)

        q = qkv(self.conv_proj_q, self.proj_q)
        k = qkv(self.conv_proj_k, self.proj_k)
        v = qkv(self.conv_proj_v, self.proj_v)
        N = q.shape[2]
        if self.kind == "softmax":
            o = ((q @ k.transpose(-2, -1)) * C ** -0.5).softmax(-1) @ v
        else:
            q, k = F.normalize(q, p=1.0, dim=-2), F.normalize(k, p=1.0, dim=-2)
            o = (q @ k.transpose(-2, -1)) @ v if N < d else q @ (k.transpose(-2, -1) @ v)
        return self.proj(o.transpose(1, 2).reshape(B, N, C))


class Mlp(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(dim, int(dim * MLP_RATIO)), QuickGELU(), nn.Linear(int(dim * MLP_RATIO), dim)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def drop_path(x, p, training):  # (B, ...) -> same; whole samples zeroed with probability p
    if p == 0.0 or not training:
        return x
    keep = x.new_empty((x.shape[0],) + (1,) * (x.dim() - 1)).bernoulli_(1.0 - p)
    return x * keep / (1.0 - p)


class Block(nn.Module):
    def __init__(self, dim, heads, kind, with_cls, dpr=0.0):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim, eps=EPS), Attention(dim, heads, kind, with_cls)
        self.norm2, self.mlp = nn.LayerNorm(dim, eps=EPS), Mlp(dim)
        self.dpr = dpr

    def forward(self, x, H, W):
        x = x + drop_path(self.attn(self.norm1(x), H, W), self.dpr, self.training)
        return x + drop_path(self.mlp(self.norm2(x)), self.dpr, self.training)


class Stage(nn.Module):
    def __init__(self, cin, dim, depth, heads, kind, with_cls, drop_path_rate=0.0):
        super().__init__()
        self.patch_embed = ConvEmbed(cin, dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim)) if with_cls else None
        # torch.linspace(0, rate, depth)[j], as models/cvt.cpp (one block: 0)
        dprs = [drop_path_rate * j / (depth - 1) if depth > 1 else 0.0 for j in range(depth)]
        self.blocks = nn.ModuleList([Block(dim, heads, kind, with_cls, dprs[j]) for j in range(depth)])
        # the official init, as CvtStage: cls_token and Linear weights trunc_normal(.02), biases 0
        if with_cls:
            nn.init.trunc_normal_(self.cls_token, std=0.02)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)

    def forward(self, x):  # (B, Cin, H, W) -> grid (B, C, H', W'), cls (B, 1, C) or None
        t, H, W = self.patch_embed(x)
        B, _, C = t.shape
        if self.cls_token is not None:
            t = torch.cat([self.cls_token.expand(B, -1, -1), t], 1)
        for blk in self.blocks:
            t = blk(t, H, W)
        cls = None
        if self.cls_token is not None:
            cls, t = t[:, :1], t[:, 1:]
        return t.transpose(1, 2).reshape(B, C, H, W), cls


class CvT(nn.Module):
    def __init__(self, kind, dims=DIMS, depths=DEPTHS, heads=HEADS, drop_path=(0.0, 0.0, 0.0)):
        super().__init__()
        if not len(dims) == len(depths) == len(heads) == len(drop_path):
            raise ValueError(f"CvT: dims {dims}, depths {depths}, heads {heads}, drop_path {drop_path} "
                             "need one entry per stage each")
        self.num_stages, cin = len(dims), CHANS
        for i, (dim, depth, h, dpr) in enumerate(zip(dims, depths, heads, drop_path)):
            self.add_module(f"stage{i}", Stage(cin, dim, depth, h, kind, i == len(dims) - 1, dpr))
            cin = dim
        self.norm, self.head = nn.LayerNorm(cin, eps=EPS), nn.Linear(cin, CLASSES)
        nn.init.trunc_normal_(self.head.weight, std=0.02)  # the bias keeps PyTorch's default

    def forward(self, x):  # (B, 1, 28, 28) -> (B, 10)
        for i in range(self.num_stages):
            x, cls = getattr(self, f"stage{i}")(x)
        return self.head(self.norm(cls).flatten(1))



def quantize_int8(m):
    """PyTorch's dynamic int8 of every nn.Linear (weights int8 per tensor, activations per batch),
    on the oneDNN engine when this build has it, else fbgemm: the peer of sima.cpp's --precision int8."""
    engines = torch.backends.quantized.supported_engines
    torch.backends.quantized.engine = "onednn" if "onednn" in engines else "fbgemm"
    return torch.ao.quantization.quantize_dynamic(m, {torch.nn.Linear}, dtype=torch.qint8)

def batch1_latency_ms(m):
    """Median ms of 50 batch-1 forwards after 5 warm-up ones (under no_grad, m in eval mode)."""
    one = torch.randn(1, CHANS, IMG, IMG)
    for _ in range(5):
        m(one)
    runs = []
    for _ in range(50):
        t = time.perf_counter()
        m(one)
        runs.append(time.perf_counter() - t)
    return round(statistics.median(runs) * 1e3, 3)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--attn", default="sima", choices=["sima", "softmax"])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--int8", action="store_true", help="infer with PyTorch's dynamic int8 Linears (quantize_int8)")
    p.add_argument("--train-precision", default="fp32", choices=["fp32", "bf16"],
                   help="bf16: the training step's forward under torch.autocast('cpu', dtype=torch.bfloat16)")
    p.add_argument("--latency", action="store_true", help="also time batch-1 inference (median of 50 after 5 warm-up)")
    p.add_argument("--check-params", action="store_true", help="print the parameter count and exit")
    a = p.parse_args()
    if a.batch < 1 or a.steps < 1:
        raise SystemExit("error: --batch and --steps must be >= 1")
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    m = CvT(a.attn)
    params = sum(t.numel() for t in m.parameters())
    if a.check_params:
        print(json.dumps({"peer": "pytorch", "model": "quickstart_cvt", "attn": a.attn, "parameters": params}))
        return
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    x, y = torch.randn(a.batch, CHANS, IMG, IMG), torch.randint(0, CLASSES, (a.batch,))

    def step():
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.train_precision == "bf16"):
            loss = F.cross_entropy(m(x), y)
        loss.backward()
        opt.step()

    for _ in range(3):
        step()
    t = time.perf_counter()
    for _ in range(a.steps):
        step()
    train = (time.perf_counter() - t) / a.steps
    m.eval()
    if a.int8:
        m = quantize_int8(m)
    latency = {}
    with torch.no_grad():
        m(x)
        t = time.perf_counter()
        for _ in range(a.steps):
            m(x)
        infer = (time.perf_counter() - t) / a.steps
        if a.latency:
            latency = {"latency_b1_ms": batch1_latency_ms(m)}
    print(json.dumps({"peer": "pytorch", "model": "quickstart_cvt", "torch": torch.__version__,
                      "threads": torch.get_num_threads(), "attn": a.attn, "batch": a.batch, "img": IMG,
                      "chans": CHANS, "dims": list(DIMS), "depths": list(DEPTHS), "heads": list(HEADS),
                      "parameters": params,
                      "train_precision": a.train_precision, "train_step_ms": round(train * 1e3, 2), "train_img_s": round(a.batch / train, 2),
                      "infer_img_s": round(a.batch / infer, 2), **latency, "precision": "int8" if a.int8 else "fp32",
                      "quantized_engine": torch.backends.quantized.engine if a.int8 else None,
                      "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}))


if __name__ == "__main__":
    main()
