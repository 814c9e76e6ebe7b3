#!/usr/bin/env python3
"""PyTorch twin of a tiny sima-train run, to tell "the recipe is weak" from "the framework is wrong".

Trains the DeiT of tests/bench/deit_peer.py (timm-style init: trunc_normal(.02) Linear
weights, pos_embed and cls_token) on a seeded 6000-image Fashion-MNIST subset with sima-train's
recipe (AdamW lr 2e-3, wd 0.05 without decay on 1-D params / pos_embed / cls_token, linear warmup
0.1 epoch then cosine to 1e-5 per step, batch 64, random crop with padding 2 (one offset per batch here, per image in sima.cpp),
horizontal flip) and
prints the test top-1 on the first 2000 test images after each epoch. The sima.cpp side:

  build/bin/sima-train --config configs/quickstart.json --out /tmp/twin --set 'model={"name":
    "deit_tiny_patch4_28_sima","embed_dim":64,"depth":2,"num_heads":4,"drop_path_rate":0}'
    --set data.train_subset=6000 --set data.test_subset=2000 --set data.batch_size=64
    --set augment.crop=random_crop --set augment.padding=2 --set train.epochs=1
    --set schedule.warmup_epochs=0.1 --set train.label_smoothing=0 --set train.seed=3

Run with Debian's torch: /usr/bin/python3 tests/bench/train_fmnist_torch.py --attn sima --epochs 1
"""
import argparse, gzip, math, os, sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deit_peer import DeiT  # noqa: E402

ROOT = "/usr/share/datasets/fashion-mnist/"


def load(split):
    x = np.frombuffer(gzip.open(ROOT + f"{split}-images-idx3-ubyte.gz").read(), np.uint8, offset=16)
    y = np.frombuffer(gzip.open(ROOT + f"{split}-labels-idx1-ubyte.gz").read(), np.uint8, offset=8)
    return torch.tensor(x.reshape(-1, 1, 28, 28), dtype=torch.float32) / 255, torch.tensor(y, dtype=torch.long)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--attn", default="sima", choices=["sima", "softmax"])
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(a.threads)
    xtr, ytr = load("train")
    xte, yte = load("t10k")
    idx = torch.randperm(60000, generator=torch.Generator().manual_seed(3))[:6000]
    xtr, ytr, xte, yte = xtr[idx], ytr[idx], xte[:2000], yte[:2000]
    norm = lambda x: (x - 0.2860) / 0.3530  # noqa: E731

    m = DeiT(28, 4, 1, a.dim, a.depth, a.heads, 10, a.attn)
    for mod in m.modules():
        if isinstance(mod, nn.Linear):
            nn.init.trunc_normal_(mod.weight, std=0.02)
            nn.init.zeros_(mod.bias)
    nn.init.trunc_normal_(m.pos_embed, std=0.02)
    nn.init.trunc_normal_(m.cls_token, std=0.02)
    decays = lambda n, t: t.ndim > 1 and "pos_embed" not in n and "cls_token" not in n  # noqa: E731
    groups = [{"params": [t for n, t in m.named_parameters() if decays(n, t)], "weight_decay": 0.05},
              {"params": [t for n, t in m.named_parameters() if not decays(n, t)], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=2e-3)

    B, lr0 = 64, 2e-3
    spe = len(xtr) // B
    total, warm, step = spe * a.epochs, round(0.1 * spe), 0
    for ep in range(a.epochs):
        perm = torch.randperm(len(xtr))
        m.train()
        for b in range(spe):
            i = perm[b * B:(b + 1) * B]
            x = F.pad(xtr[i], (2, 2, 2, 2))
            ox, oy = np.random.randint(0, 5, 2)
            x = x[:, :, oy:oy + 28, ox:ox + 28].clone()
            flip = torch.rand(B) < 0.5
            x[flip] = x[flip].flip(-1)
            if step < warm:
                lr = 1e-6 + (lr0 - 1e-6) * step / warm
            else:
                lr = 1e-5 + 0.5 * (lr0 - 1e-5) * (1 + math.cos(math.pi * (step - warm) / (total - warm)))
            for g in opt.param_groups:
                g["lr"] = lr
            loss = F.cross_entropy(m(norm(x)), ytr[i])
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
        m.eval()
        with torch.no_grad():
            acc = (m(norm(xte)).argmax(1) == yte).float().mean().item() * 100
        print(f"{a.attn} epoch {ep + 1}: last train loss {loss.item():.4f}, test top-1 {acc:.2f}%")


if __name__ == "__main__":
    main()
