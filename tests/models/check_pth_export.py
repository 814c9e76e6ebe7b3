#!/usr/bin/env python3
"""PyTorch loads the .pth files sima-convert --to wrote and computes our logits.

  check_pth_export.py DIR     reads DIR/cases.json (written by tests/models/test_pth_export.cpp)

Per case: the upstream model is built from its transcription in gen_pth.py (timm DeiT, plain
and distilled; timm XCiT with split or legacy joined class-attention q/k/v; the official SimA
XCiT; Microsoft's CvT), the file is read with torch.load(weights_only=True) (PyTorch's own
restricted loader), the state dict (under 'model' for the official layout) goes in with
load_state_dict(strict=True), and the eval-mode logits on the case's input must match the
ones our C++ model gave to 1e-4 relative (max |a - b| / max |b|). Prints each error.
Run by ctest (models.check_pth_export) with Debian's python3-torch.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_pth  # noqa: E402  (the transcriptions of the upstream models)


def build(spec):
    args = dict(spec)
    cls = getattr(gen_pth, args.pop('cls'))
    for k in ('dims', 'depths', 'heads'):
        if isinstance(args.get(k), list):
            args[k] = tuple(args[k])
    return cls(**args)


def main():
    cases = json.load(open(os.path.join(sys.argv[1], 'cases.json')))
    assert len(cases) == 6, f'{len(cases)} cases, expected 6'
    worst, failed = {}, []
    for c in cases:
        model = build(c['python'])
        saved = torch.load(c['file'], weights_only=True)
        if c['layout'] == 'official':
            assert set(saved) == {'model'}, f"{c['name']}: top-level keys {list(saved)}"
            saved = saved['model']
        counters = [k for k in saved if k.endswith('num_batches_tracked')]
        assert all(saved[k].dtype == torch.int64 and saved[k].item() == 1234 for k in counters), c['name']
        model.load_state_dict(saved, strict=True)
        model.eval()
        x = torch.tensor(c['input'], dtype=torch.float32).reshape(c['input_shape'])
        with torch.no_grad():
            got = model(x).flatten()
        ours = torch.tensor(c['logits'], dtype=torch.float32)
        err = ((got - ours).abs().max() / ours.abs().max()).item()
        worst[c['name']] = err
        print(f"{c['name']} ({c['layout']}, {len(saved)} tensors, {len(counters)} int64 counters): "
              f"logits max relative error {err:.3g}")
        if not err < 1e-4:
            failed.append(c['name'])
    if failed:
        sys.exit(f'logits differ beyond 1e-4 relative: {failed}')


if __name__ == '__main__':
    main()
