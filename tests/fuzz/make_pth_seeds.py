#!/usr/bin/env python3
"""Seeds of tests/fuzz/fuzz_pth.cpp (committed under corpus/pth/; rerun to rewrite them):

  /usr/bin/python3 tests/fuzz/make_pth_seeds.py tests/fuzz/corpus/pth

Tiny torch.save files of every upstream layout (the models of tests/models/gen_pth.py at 8x8
pixels and width 4 to 8, one head), float16 and bfloat16 storages, views and wrappers. The
first byte is the harness's mode: 1 (a file, nothing given), 2 (a file, one head given) or 0
(the file's data.pkl alone, for the unpickler).
"""
import argparse
import io
import os
import sys
import zipfile

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'models'))
import gen_pth  # noqa: E402

gen_pth.IMG = 8


def saved(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def write(out, name, mode, data):
    with open(os.path.join(out, name), 'wb') as f:
        f.write(bytes([mode]) + data)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    deit = gen_pth.DistilledDeit(dim=4, depth=1, heads=1, patch=4, classes=2).state_dict()
    xcit = gen_pth.XCiT(official=False, dim=8, depth=1, heads=1, classes=2).state_dict()
    sima = gen_pth.XCiT(official=True, dim=8, depth=1, heads=1, tokens_norm=False, classes=2).state_dict()
    cvt = gen_pth.CvT(dims=(4, 8), depths=(1, 1), classes=2, heads=(1, 1)).state_dict()
    files = {
        'deit_fp16': {k: v.half() if v.is_floating_point() else v for k, v in deit.items()},
        'xcit_views': gen_pth.xcit_timm_views(xcit, None),
        'sima_wrapped': {'model': {k: v.bfloat16() if v.is_floating_point() else v for k, v in sima.items()},
                         'epoch': 1, 'lr': 1e-3, 'names': ['a', 'b'], 'flags': (True, None),
                         'args': argparse.Namespace(model='sima_nano', lr=1e-3)},
        'module_prefix': {'module.' + k: v for k, v in deit.items()},
        'cvt_bf16': {k: v.bfloat16() if v.is_floating_point() else v for k, v in cvt.items()},
    }
    for name, obj in files.items():
        data = saved(obj)
        write(out, name, 2, data)
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            pkl = next(n for n in z.namelist() if n.endswith('/data.pkl'))
            write(out, name + '.pkl', 0, z.read(pkl))
    write(out, 'deit_inferred', 1, saved(deit))


if __name__ == '__main__':
    main()
