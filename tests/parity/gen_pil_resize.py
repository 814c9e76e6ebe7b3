#!/usr/bin/env python3
"""References for tests/parity/test_pil_resize.cpp: Pillow's Image.resize and timm's eval
transform on 8-bit images, computed by Debian's python3-pil and python3-torchvision.

Usage: /usr/bin/python3 tests/parity/gen_pil_resize.py OUT_DIR

Writes OUT_DIR/manifest.json and one raw file per array (uint8 CHW, or float32 CHW
little-endian), named in the manifest:
  resize   cases: an image and PIL's Image.resize((w, h), filter) of it (NEAREST, BILINEAR,
           BICUBIC; downscale, upscale, one side only, mixed, odd sizes, 1 and 3 channels).
  crop     cases: torchvision CenterCrop of an image (smaller and larger than the image).
  eval     cases: timm's transforms_imagenet_eval (timm/data/transforms_factory.py) written with
           torchvision: Resize(floor(img_size / crop_pct), BICUBIC), CenterCrop(img_size),
           ToTensor(), Normalize(mean, std); the bytes after Resize, after CenterCrop, and the
           normalised float tensor.
  classes: torchvision's ImageNet-1k category names (torchvision/models/_meta.py), which
           data/imagenet_classes.cpp must equal.
"""
import json, math, os, sys

import numpy as np
from PIL import Image
import torchvision.transforms as T
from torchvision.models._meta import _IMAGENET_CATEGORIES

out_dir = sys.argv[1]
os.makedirs(out_dir, exist_ok=True)
rng = np.random.default_rng(0)
manifest = {"resize": [], "crop": [], "eval": [], "classes": list(_IMAGENET_CATEGORIES)}
counter = [0]


def save(arr, dtype):
    """Writes a CHW array, returns {"file", "shape"}."""
    counter[0] += 1
    name = f"a{counter[0]:03d}.{'u8' if dtype == np.uint8 else 'f32'}"
    a = np.ascontiguousarray(arr, dtype=dtype)
    a.astype(a.dtype.newbyteorder("<")).tofile(os.path.join(out_dir, name))
    return {"file": name, "shape": list(a.shape)}


def make_image(c, h, w, kind):
    """uint8 HWC (or HW): uniform noise, or a smooth field with a few sharp edges."""
    if kind == "random":
        a = rng.integers(0, 256, size=(h, w, c), dtype=np.uint8)
    else:
        y, x = np.mgrid[0:h, 0:w].astype(np.float64)
        chans = []
        for k in range(c):
            v = 127.5 + 100 * np.sin(x / (7 + 3 * k) + y / 11.0) * np.cos(y / (5 + k))
            v += 60 * ((x + 2 * y + 17 * k) % 37 < 9)  # stripes: sharp edges, clipping
            chans.append(v)
        a = np.clip(np.rint(np.stack(chans, -1)), 0, 255).astype(np.uint8)
    return Image.fromarray(a[:, :, 0] if c == 1 else a, "L" if c == 1 else "RGB")


def chw(img):
    a = np.asarray(img)
    return a[None] if a.ndim == 2 else a.transpose(2, 0, 1)


FILTERS = {"nearest": Image.NEAREST, "bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC}
RESIZES = [  # (c, h, w, kind, out_h, out_w)
    (3, 375, 500, "smooth", 256, 341), (3, 375, 500, "random", 256, 341), (1, 375, 500, "random", 256, 341),
    (3, 17, 23, "random", 40, 54), (1, 17, 23, "smooth", 40, 54),  # upscale
    (3, 31, 29, "random", 31, 13), (1, 31, 29, "random", 9, 29),  # one side only
    (3, 33, 21, "smooth", 14, 50), (1, 33, 21, "random", 14, 50),  # mixed: down and up
    (3, 101, 77, "random", 99, 76), (1, 7, 5, "random", 3, 11), (3, 2, 3, "random", 1, 1),
    (3, 64, 48, "random", 64, 48),  # same size: a copy
]
for c, h, w, kind, oh, ow in RESIZES:
    img = make_image(c, h, w, kind)
    src = save(chw(img), np.uint8)
    for name, f in FILTERS.items():
        manifest["resize"].append({"filter": name, "input": src, "output": save(chw(img.resize((ow, oh), f)), np.uint8)})

for c, h, w, th, tw in [(3, 37, 50, 24, 24), (1, 36, 51, 25, 25), (3, 20, 9, 24, 14), (1, 8, 11, 13, 5)]:
    img = make_image(c, h, w, "random")
    manifest["crop"].append({"size": [th, tw], "input": save(chw(img), np.uint8),
                             "output": save(chw(T.CenterCrop((th, tw))(img)), np.uint8)})

EVALS = [  # (c, h, w, kind, img_size, crop_pct)
    (3, 375, 500, "smooth", 224, 0.875), (3, 375, 500, "random", 224, 0.875), (1, 500, 375, "random", 224, 0.875),
    (3, 224, 224, "random", 224, 0.875), (3, 224, 224, "random", 224, 1.0), (3, 61, 47, "smooth", 32, 0.9),
    (3, 100, 333, "random", 64, 0.95), (1, 20, 26, "random", 28, 1.0), (3, 257, 256, "random", 224, 0.875),
]
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)  # timm's IMAGENET_DEFAULT_MEAN / STD
for c, h, w, kind, size, crop_pct in EVALS:
    img = make_image(c, h, w, kind)
    scale_size = math.floor(size / crop_pct)
    resized = T.Resize(scale_size, interpolation=T.InterpolationMode.BICUBIC)(img)
    cropped = T.CenterCrop(size)(resized)
    mean, std = (MEAN, STD) if c == 3 else (MEAN[:1], STD[:1])
    tensor = T.Normalize(mean, std)(T.ToTensor()(cropped))
    manifest["eval"].append({"img_size": size, "crop_pct": crop_pct, "mean": list(mean), "std": list(std),
                             "input": save(chw(img), np.uint8), "resized": save(chw(resized), np.uint8),
                             "cropped": save(chw(cropped), np.uint8), "tensor": save(tensor.numpy(), np.float32)})

with open(os.path.join(out_dir, "manifest.json"), "w") as f:
    json.dump(manifest, f)
print(f"{len(manifest['resize'])} resize, {len(manifest['crop'])} crop, {len(manifest['eval'])} eval cases -> {out_dir}")
