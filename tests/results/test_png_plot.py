#!/usr/bin/env python3
"""results/png_plot.py, the report's PNG writer: a decoder written here (signature, every chunk's
CRC, IHDR, the inflated rows and their filter bytes) reads back what it writes, pixel for pixel;
the drawing primitives land where they should; a figure's points are drawn at their data
coordinates in their colours; an empty panel says so; the same input gives the same bytes."""
import os
import struct
import sys
import tempfile
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "results"))
import png_font  # noqa: E402
import png_plot as pp  # noqa: E402

from checks import check, finish  # noqa: E402  (tests/results/checks.py)


def decode(data):
    """(width, height, rows of (r, g, b) tuples) of an 8-bit RGB PNG whose rows use filter 0."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG signature")
    pos, chunks = 8, []
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body, crc = data[pos + 8:pos + 8 + n], struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])[0]
        if zlib.crc32(kind + body) & 0xFFFFFFFF != crc:
            raise ValueError("bad CRC in %r" % kind)
        chunks.append((kind, body))
        pos += 12 + n
    if [k for k, _ in chunks][0] != b"IHDR" or chunks[-1] != (b"IEND", b""):
        raise ValueError("chunk order: %r" % [k for k, _ in chunks])
    w, h, depth, colour, comp, filt, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    if (depth, colour, comp, filt, interlace) != (8, 2, 0, 0, 0):
        raise ValueError("not 8-bit RGB: %r" % ((depth, colour, comp, filt, interlace),))
    raw = zlib.decompress(b"".join(b for k, b in chunks if k == b"IDAT"))
    if len(raw) != h * (1 + 3 * w):
        raise ValueError("%d bytes of rows, want %d" % (len(raw), h * (1 + 3 * w)))
    rows = []
    for y in range(h):
        line = raw[y * (1 + 3 * w):(y + 1) * (1 + 3 * w)]
        if line[0] != 0:
            raise ValueError("row %d has filter %d" % (y, line[0]))
        rows.append([tuple(line[1 + 3 * x:4 + 3 * x]) for x in range(w)])
    return w, h, rows


# Primitives, read back through the decoder.
c = pp.Canvas(23, 11)
c.rect(2, 3, 4, 5, (10, 20, 30))
c.line(0, 10, 22, 10, (200, 0, 0))
c.line(20, 0, 20, 8, (0, 0, 250))
c.set(-1, 50, (1, 2, 3))  # clipped, no error
w, h, rows = decode(pp.encode_png(c))
check((w, h) == (23, 11), "dimensions %r" % ((w, h),))
check(rows[3][2] == rows[5][4] == (10, 20, 30) and rows[2][2] == rows[3][5] == pp.WHITE, "rect corners")
check(all(rows[10][x] == (200, 0, 0) for x in range(23)), "horizontal line")
check(all(rows[y][20] == (0, 0, 250) for y in range(9)) and rows[9][20] == pp.WHITE, "vertical line and its end")
check(sum(px != pp.WHITE for r in rows for px in r) == 9 + 23 + 9, "no stray pixels")
c.line(0, 0, 6, 3, (0, 0, 0))
check(c.get(0, 0) == c.get(6, 3) == (0, 0, 0) and sum(c.get(x, y) == (0, 0, 0) for x in range(7) for y in range(4)) == 7,
      "a slanted line: one pixel per column")

# Text: the glyph of "1" at scale 1 and 2, and a missing character drawn as "?".
t = pp.Canvas(40, 20)
t.text(0, 0, "1", (0, 0, 0))
ones = [(x, y) for y in range(9) for x in range(5) if t.get(x, y) == (0, 0, 0)]
want = [(x, y) for y, m in enumerate(png_font.glyph("1")) for x in range(5) if m >> (4 - x) & 1]
check(ones == want and len(ones) == 10, "glyph 1: %r" % ones)
t2 = pp.Canvas(40, 20)
t2.text(0, 0, "1", (0, 0, 0), 2)
check(sum(t2.get(x, y) == (0, 0, 0) for x in range(40) for y in range(20)) == 40, "scale 2: four pixels a font pixel")
check(png_font.glyph("§") == png_font.glyph("?") and png_font.text_width("ab", 2) == 22, "fallback glyph, width")

check(pp.nice_ticks(0.33, 0.97) == [0.2, 0.4, 0.6, 0.8, 1.0], "ticks %r" % pp.nice_ticks(0.33, 0.97))
check(pp.nice_ticks(86.4, 92.2) == [86.0, 88.0, 90.0, 92.0, 94.0], "ticks %r" % pp.nice_ticks(86.4, 92.2))

# A figure: the file decodes to the canvas; each point's disc is at its data coordinates in its colour.
pts = [{"label": "a", "x": 1.0, "y": 90.0, "yerr": (89.0, 91.0), "color": (214, 39, 40)},
       {"label": "b", "x": 2.0, "y": 88.0, "xerr": (1.5, 2.5), "color": (44, 160, 44)}]
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "f.png")
    canvas, axes = pp.figure(path, "which attention should I use on a CPU?",
                             [(pts, "one", "x", "y"), ([], "two", "x", "y")], width=400, height=240)
    with open(path, "rb") as f:
        data = f.read()
    w, h, rows = decode(data)
    check((w, h) == (400, 240) and bytes(canvas.px) == b"".join(bytes(p) for r in rows for p in r), "file = canvas")
    ax = axes[0]
    for p in pts:
        check(rows[ax.py(p["y"])][ax.px(p["x"])] == p["color"], "point %s not at its place" % p["label"])
    check(rows[ax.py(91.0)][ax.px(1.0)] == (214, 39, 40), "a's error bar top")
    check(rows[ax.py(88.0)][ax.px(1.5)] == (44, 160, 44), "b's error bar left end")
    check(axes[1] is None, "an empty panel has no axes")
    pp.figure(path, "which attention should I use on a CPU?", [(pts, "one", "x", "y"), ([], "two", "x", "y")],
              width=400, height=240)
    with open(path, "rb") as f:
        check(f.read() == data, "the same input, other bytes")
try:
    decode(b"\x89PNG\r\n\x1a\n" + pp.chunk(b"IHDR", b"\x00" * 13)[:-1] + b"\x00")
    check(False, "the decoder accepts a bad CRC")
except ValueError:
    pass

finish()
