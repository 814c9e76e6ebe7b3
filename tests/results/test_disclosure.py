#!/usr/bin/env python3
"""results/disclosure.py, claim 5's disclosure column: its facts come from the sources, not from
typed figures. On the repository: the option defaults of nn/attention/variant_rows.cpp, the 7×7 + class
grid of deit_tiny_patch4_28 (models/registry.cpp), each row's counts (SOFT's 9 landmarks and the
grid row left out, Linformer's k, Performer's m, Nyströmformer's landmarks from its config). On a
copy of those sources with other values: the facts follow the copy."""
import json
import os
import shutil
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "results"))
import disclosure  # noqa: E402
import report_claims  # noqa: E402

from checks import check, finish  # noqa: E402  (tests/results/checks.py)


d = disclosure.option_defaults(ROOT)
check((d["sr"], d["nb_features"], d["num_landmarks"], d["proj_len"], d["reweight"], d["qk_norm"], d["ridge"]) ==
      (2, 0, 64, 0, "none", False, 0.01), "option defaults: %r" % d)
check(disclosure.geometry(ROOT, "deit_tiny_patch4_28") == (4, 28), "geometry of deit_tiny_patch4_28")
try:
    disclosure.geometry(ROOT, "no_such_model")
    check(False, "an unknown model accepted")
except ValueError:
    pass

facts = {row: disclosure.row_facts(ROOT, row) for row, _ in report_claims.CLAIM5}
soft = facts["deit_soft"]
check((soft["grid"], soft["tokens"], soft["d"]) == (7, 50, 16), "DeiT grid: %r" % soft)
check((soft["soft_landmarks"], soft["soft_per_side"], soft["soft_uncovered"]) == (9, 3, 1), "SOFT landmarks: %r" % soft)
check(facts["deit_linformer"]["linformer_k"] == 12, "Linformer k = 50 // 4")
check(facts["deit_performer"]["performer_m"] == 44, "Performer m = int(16 ln 16)")
check(facts["deit_nystromformer"]["opts"]["num_landmarks"] == 10 and facts["deit_nystromformer"]["set"] == ["num_landmarks"],
      "Nyströmformer landmarks from its config")
check(facts["deit_relu_attn"]["opts"]["qk_norm"] is True, "ReLU's qk_norm from its config")

# Every row has a cell naming its Table 2 source; the notes carry the SOFT facts the issue asks for.
cells = {row: disclosure.cell(f) for row, f in facts.items()}
check(cells["deit_soft"].startswith("SOFT's pyramid") and "9 landmarks" in cells["deit_soft"], cells["deit_soft"])
check("k = 12" in cells["deit_linformer"] and "m = 44" in cells["deit_performer"], "counts in the cells: %r" % cells)
check(cells["deit_efficient"].startswith("XCiT-S12/16") and cells["deit_cosformer"].startswith("XCiT-S12/16"),
      "XCiT rows: %r" % cells)
check(cells["deit_cosformer_cos1d"].startswith("no Table 2 figure"), cells["deit_cosformer_cos1d"])
notes = "\n".join(disclosure.notes(list(facts.values())))
for want in ("row and column 7 of the grid never enter a landmark", "3×3 = 9 landmarks", "block4",
             "k = 12", "m = 44", "10 segments of 5 tokens", "did not converge"):
    check(want in notes, "notes without %r" % want)
check("50 tokens" in disclosure.common_line(list(facts.values())), "common line")

# A copy of the sources with another sr, proj_len, image size and landmark count: the facts follow.
with tempfile.TemporaryDirectory() as tmp:
    for rel in ("nn/attention/variant_rows.cpp", "models/registry.cpp"):
        os.makedirs(os.path.join(tmp, os.path.dirname(rel)), exist_ok=True)
        shutil.copy(os.path.join(ROOT, rel), os.path.join(tmp, rel))
    shutil.copytree(os.path.join(ROOT, "configs", "paper"), os.path.join(tmp, "configs", "paper"))
    h = os.path.join(tmp, "nn/attention/variant_rows.cpp")
    text = open(h).read()
    sr, proj_len = 'own_option<int64_t>("sr", 2,', 'own_option<int64_t>("proj_len", 0,'
    check(sr in text and proj_len in text, "variant_rows.cpp declarations moved")
    with open(h, "w") as f:
        f.write(text.replace(sr, sr.replace("2,", "3,")).replace(proj_len, proj_len.replace("0,", "5,")))
    r = os.path.join(tmp, "models/registry.cpp")
    text = open(r).read()
    with open(r, "w") as f:
        f.write(text.replace("deit(192, 3, 4, 28)", "deit(192, 3, 4, 36)"))
    c = os.path.join(tmp, "configs/paper/deit_nystromformer.json")
    cfg = json.load(open(c))
    cfg["model"]["attention"]["num_landmarks"] = 7
    json.dump(cfg, open(c, "w"))
    s = disclosure.row_facts(tmp, "deit_soft")
    check((s["grid"], s["tokens"], s["soft_landmarks"], s["soft_uncovered"]) == (9, 82, 9, 0), "copy, SOFT: %r" % s)
    check(disclosure.row_facts(tmp, "deit_linformer")["linformer_k"] == 5, "copy, Linformer k from proj_len")
    n = disclosure.row_facts(tmp, "deit_nystromformer")
    check("7 segments of 11 or 12 tokens" in disclosure.nystrom_note(n), disclosure.nystrom_note(n))
    check("every grid token enters a landmark" in disclosure.soft_note(s), disclosure.soft_note(s))

finish()
