#!/usr/bin/env python3
"""PyTorch (CPU) peer for sima-bench: the same DeiT-style model, timed the same way.

The model is the one `sima-bench model --model deit_tiny_patch4_32_sima` times (docs/models.md
section 2): patch-4 Conv2d embedding, class token, learned position embedding, pre-norm blocks
(LayerNorm eps 1e-6, MLP ratio 4, GELU), softmax or SimA attention (SimA: q, k l1-normalised over
the tokens, F.normalize(p=1, dim=-2); (q k^T) v when N < d, else q (k^T v): docs/attention_costs.md
section 2). tests/bench/compare_pytorch.py runs it next to sima-bench.

Needs Debian's python3-torch (apt-get install python3-torch); run it with /usr/bin/python3.
Prints one JSON object per line:
  {"peer":"pytorch","attn":...,"batch":...,"train_img_s":...,"infer_img_s":...,"peak_rss_mb":...}
Example: /usr/bin/python3 tests/bench/deit_peer.py --attn sima --img 32 --chans 3 --dim 192 --depth 12 --heads 3
"""
import argparse, json, resource, time
import torch, torch.nn as nn, torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, dim, heads, kind):
        super().__init__()
        self.heads, self.kind = heads, kind
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        if self.kind == "softmax":
            x = ((q @ k.transpose(-2, -1)) * (C // self.heads) ** -0.5).softmax(-1) @ v
        elif self.kind == "sima":
            q, k = F.normalize(q, p=1.0, dim=-2), F.normalize(k, p=1.0, dim=-2)
            x = (q @ k.transpose(-2, -1)) @ v if N < C // self.heads else q @ (k.transpose(-2, -1) @ v)
        else:
            raise SystemExit(f"unknown attention {self.kind}")
        return self.proj(x.transpose(1, 2).reshape(B, N, C))


class Block(nn.Module):
    def __init__(self, dim, heads, kind):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim, eps=1e-6), Attention(dim, heads, kind)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class DeiT(nn.Module):
    def __init__(self, img, patch, chans, dim, depth, heads, classes, kind):
        super().__init__()
        self.patch_embed = nn.Conv2d(chans, dim, patch, patch)
        n = (img // patch) ** 2
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, n + 1, dim))
        self.blocks = nn.Sequential(*[Block(dim, heads, kind) for _ in range(depth)])
        self.norm, self.head = nn.LayerNorm(dim, eps=1e-6), nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], 1) + self.pos_embed
        return self.head(self.norm(self.blocks(x))[:, 0])



def quantize_int8(m):
    """PyTorch's dynamic int8 of every nn.Linear (weights int8 per tensor, activations per batch),
    on the oneDNN engine when this build has it, else fbgemm: the peer of sima.cpp's --precision int8."""
    engines = torch.backends.quantized.supported_engines
    torch.backends.quantized.engine = "onednn" if "onednn" in engines else "fbgemm"
    return torch.ao.quantization.quantize_dynamic(m, {torch.nn.Linear}, dtype=torch.qint8)

def main():
    p = argparse.ArgumentParser()
    p.add_argument("--attn", default="sima")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--img", type=int, default=32)
    p.add_argument("--patch", type=int, default=4)
    p.add_argument("--chans", type=int, default=3)
    p.add_argument("--dim", type=int, default=192)
    p.add_argument("--depth", type=int, default=12)
    p.add_argument("--heads", type=int, default=3)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--int8", action="store_true", help="infer with PyTorch's dynamic int8 Linears (quantize_int8)")
    p.add_argument("--train-precision", default="fp32", choices=["fp32", "bf16"],
                   help="bf16: the training step's forward under torch.autocast('cpu', dtype=torch.bfloat16)")
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    m = DeiT(a.img, a.patch, a.chans, a.dim, a.depth, a.heads, a.classes, a.attn)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    x, y = torch.randn(a.batch, a.chans, a.img, a.img), torch.randint(0, a.classes, (a.batch,))

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
    with torch.no_grad():
        m(x)
        t = time.perf_counter()
        for _ in range(a.steps):
            m(x)
        infer = (time.perf_counter() - t) / a.steps
    print(json.dumps({"peer": "pytorch", "torch": torch.__version__, "threads": torch.get_num_threads(),
                      **{k: getattr(a, k) for k in ("attn", "batch", "img", "patch", "chans", "dim", "depth", "heads")},
                      "train_precision": a.train_precision, "train_step_ms": round(train * 1e3, 2), "train_img_s": round(a.batch / train, 2),
                      "infer_img_s": round(a.batch / infer, 2), "precision": "int8" if a.int8 else "fp32",
                      "quantized_engine": torch.backends.quantized.engine if a.int8 else None,
                      "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}))


if __name__ == "__main__":
    main()
