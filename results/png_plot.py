"""Scatter panels with error bars, drawn into an RGB raster and written as a PNG with the standard
library alone (zlib for the compressed stream, struct for the chunks; no matplotlib). The report's
figures (results/practitioner.py) are made here, so the same records give the same bytes.

A PNG is the 8-byte signature, then chunks of (length, type, data, CRC-32 of type and data): IHDR
(width, height, bit depth 8, colour type 2 = RGB, no interlace), one IDAT holding the zlib stream of
the rows, each row prefixed by its filter byte (0: none), and an empty IEND."""
import math
import struct
import zlib

import png_font

WHITE, BLACK, GREY, LIGHT = (255, 255, 255), (0, 0, 0), (110, 110, 110), (225, 225, 225)
# Point colours, one per series, distinct on white.
PALETTE = [(31, 119, 180), (214, 39, 40), (44, 160, 44), (255, 127, 14), (148, 103, 189), (140, 86, 75),
           (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207), (0, 0, 128)]
SIGNATURE = b"\x89PNG\r\n\x1a\n"


class Canvas:
    """width × height RGB pixels, white to start; (0, 0) is the top left. Drawing outside is clipped."""

    def __init__(self, width, height, bg=WHITE):
        self.width, self.height = width, height
        self.px = bytearray(bytes(bg) * (width * height))

    def set(self, x, y, c):
        if 0 <= x < self.width and 0 <= y < self.height:
            i = 3 * (y * self.width + x)
            self.px[i:i + 3] = bytes(c)

    def get(self, x, y):
        i = 3 * (y * self.width + x)
        return tuple(self.px[i:i + 3])

    def rect(self, x0, y0, x1, y1, c):
        """Fills the rectangle of corners (x0, y0) and (x1, y1), both included."""
        for y in range(max(0, min(y0, y1)), min(self.height, max(y0, y1) + 1)):
            for x in range(max(0, min(x0, x1)), min(self.width, max(x0, x1) + 1)):
                self.set(x, y, c)

    def line(self, x0, y0, x1, y1, c):
        """Bresenham's line from (x0, y0) to (x1, y1), both ends included."""
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        err = dx + dy
        while True:
            self.set(x0, y0, c)
            if x0 == x1 and y0 == y1:
                return
            e2 = 2 * err
            if e2 >= dy:
                err, x0 = err + dy, x0 + sx
            if e2 <= dx:
                err, y0 = err + dx, y0 + sy

    def disc(self, cx, cy, r, c):
        for y in range(-r, r + 1):
            for x in range(-r, r + 1):
                if x * x + y * y <= r * r + r:
                    self.set(cx + x, cy + y, c)

    def text(self, x, y, s, c, scale=1):
        """s with its top left at (x, y), each font pixel a scale × scale square."""
        for k, ch in enumerate(s):
            for row, mask in enumerate(png_font.glyph(ch)):
                for col in range(png_font.WIDTH):
                    if mask >> (png_font.WIDTH - 1 - col) & 1:
                        px, py = x + (k * png_font.ADVANCE + col) * scale, y + row * scale
                        self.rect(px, py, px + scale - 1, py + scale - 1, c)


def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def encode_png(canvas):
    """The canvas as PNG bytes: 8-bit RGB, every row with filter 0, compressed at zlib's level 9."""
    stride = 3 * canvas.width
    raw = b"".join(b"\x00" + bytes(canvas.px[y * stride:(y + 1) * stride]) for y in range(canvas.height))
    ihdr = struct.pack(">IIBBBBB", canvas.width, canvas.height, 8, 2, 0, 0, 0)
    return SIGNATURE + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


def write_png(path, canvas):
    with open(path, "wb") as f:
        f.write(encode_png(canvas))


def nice_ticks(lo, hi, count=5):
    """Round tick values (1, 2 or 5 times a power of ten apart) covering [lo, hi], about `count` of them."""
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / max(1, count)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.floor(lo / step) * step
    n = int(math.ceil((hi - first) / step - 1e-9))
    return [round(first + i * step, 10) for i in range(n + 1)]


def fmt_tick(v, ticks):
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
    digits = max(0, -int(math.floor(math.log10(step) + 1e-9)))
    return "%.*f" % (digits, v)


class Axes:
    """Data coordinates of the range xr × yr mapped onto the pixel box (left, top, right, bottom)."""

    def __init__(self, box, xr, yr):
        self.box, self.xr, self.yr = box, xr, yr

    def px(self, x):
        left, _, right, _ = self.box
        return int(round(left + (x - self.xr[0]) / (self.xr[1] - self.xr[0]) * (right - left)))

    def py(self, y):
        _, top, _, bottom = self.box
        return int(round(bottom - (y - self.yr[0]) / (self.yr[1] - self.yr[0]) * (bottom - top)))


def extent(points, axis):
    """(least, most) of the points' values on axis "x" or "y", their error bars included."""
    vals = []
    for p in points:
        vals.append(p[axis])
        vals.extend(p.get(axis + "err") or ())
    return min(vals), max(vals)


def frame(canvas, ax, xt, yt):
    """Grid lines at the ticks, the box around the plot and the tick labels."""
    left, top, right, bottom = ax.box
    for v in xt:
        canvas.line(ax.px(v), top, ax.px(v), bottom, LIGHT)
        s = fmt_tick(v, xt)
        canvas.text(ax.px(v) - png_font.text_width(s) // 2, bottom + 5, s, GREY)
    for v in yt:
        canvas.line(left, ax.py(v), right, ax.py(v), LIGHT)
        s = fmt_tick(v, yt)
        canvas.text(left - 5 - png_font.text_width(s), ax.py(v) - 4, s, GREY)
    for a, b, c, d in ((left, top, right, top), (left, bottom, right, bottom), (left, top, left, bottom),
                       (right, top, right, bottom)):
        canvas.line(a, b, c, d, BLACK)


def error_bars(canvas, ax, p, c):
    x, y = ax.px(p["x"]), ax.py(p["y"])
    if p.get("xerr"):
        a, b = ax.px(p["xerr"][0]), ax.px(p["xerr"][1])
        canvas.line(a, y, b, y, c)
        canvas.line(a, y - 3, a, y + 3, c)
        canvas.line(b, y - 3, b, y + 3, c)
    if p.get("yerr"):
        a, b = ax.py(p["yerr"][0]), ax.py(p["yerr"][1])
        canvas.line(x, a, x, b, c)
        canvas.line(x - 3, a, x + 3, a, c)
        canvas.line(x - 3, b, x + 3, b, c)


def place_label(ax, x, y, s, taken):
    """Where to write s beside the point (x, y): right, left, above or below it, then further down or
    up, the first spot inside the plot that overlaps nothing in `taken` (which it joins); and whether
    it is away from the point (past the four beside it). The spot right of the point if none is free."""
    w, h = png_font.text_width(s), png_font.HEIGHT
    left, top, right, bottom = ax.box
    tries = [(x + 6, y - 4), (x - 6 - w, y - 4), (x - w // 2, y - 8 - h), (x - w // 2, y + 8)]
    tries += [(x + 6, y - 4 + k * (h + 1)) for k in range(1, 8)] + [(x + 6, y - 4 - k * (h + 1)) for k in range(1, 8)]
    for k, (tx, ty) in enumerate(tries):
        r = (tx, ty, tx + w, ty + h)
        inside = r[0] > left and r[2] < right and r[1] > top and r[3] < bottom
        if inside and not any(r[0] <= o[2] and o[0] <= r[2] and r[1] <= o[3] and o[1] <= r[3] for o in taken):
            taken.append(r)
            return tx, ty, k >= 4
    return tries[0] + (False,)


def panel(canvas, box, points, title, xlabel, ylabel):
    """One scatter panel in the pixel box (left, top, right, bottom): points are dicts of label, x, y,
    color, and optional xerr / yerr (low, high) drawn as bars; the axes cover their ticks."""
    left, top, right, bottom = box
    plot = (left + 48, top + 34, right - 10, bottom - 36)
    canvas.text(left + 4, top + 2, title, BLACK)
    canvas.text(plot[0] - 40, top + 18, ylabel, GREY)
    canvas.text((plot[0] + plot[2] - png_font.text_width(xlabel)) // 2, bottom - 12, xlabel, GREY)
    if not points:
        canvas.text(plot[0] + 10, (plot[1] + plot[3]) // 2, "no variant has this measurement", GREY)
        return None
    (x0, x1), (y0, y1) = extent(points, "x"), extent(points, "y")
    padx, pady = 0.08 * (x1 - x0 or abs(x0) or 1.0), 0.08 * (y1 - y0 or abs(y0) or 1.0)
    xt, yt = nice_ticks(x0 - padx, x1 + padx), nice_ticks(y0 - pady, y1 + pady)
    ax = Axes(plot, (xt[0], xt[-1]), (yt[0], yt[-1]))
    frame(canvas, ax, xt, yt)
    at = [(ax.px(p["x"]), ax.py(p["y"])) for p in points]
    taken = [(x - 4, y - 4, x + 4, y + 4) for x, y in at]  # labels keep off every point
    for p, (x, y) in zip(points, at):
        error_bars(canvas, ax, p, p["color"])
        canvas.disc(x, y, 3, p["color"])
    for p, (x, y) in zip(points, at):
        tx, ty, far = place_label(ax, x, y, p["label"], taken)
        if far:  # a label moved away from its point gets a line to it
            canvas.line(x, y, tx - 2, ty + png_font.HEIGHT // 2, p["color"])
        canvas.rect(tx - 1, ty - 1, tx + png_font.text_width(p["label"]), ty + png_font.HEIGHT - 1, WHITE)
        canvas.text(tx, ty, p["label"], p["color"])
    return ax


def figure(path, title, panels, width=1040, height=560):
    """A title over panels side by side, each (points, title, xlabel, ylabel); written to path as a PNG.
    Returns the canvas and each panel's Axes (None for an empty panel)."""
    canvas = Canvas(width, height)
    canvas.text((width - png_font.text_width(title, 2)) // 2, 8, title, BLACK, 2)
    step = width // max(1, len(panels))
    axes = [panel(canvas, (i * step + 6, 36, (i + 1) * step - 6, height - 6), *spec) for i, spec in enumerate(panels)]
    write_png(path, canvas)
    return canvas, axes
