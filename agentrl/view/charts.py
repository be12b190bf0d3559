"""Inline SVG line charts of per-iteration metrics (no JavaScript, no chart library).

``line_chart`` returns an SVG string: one polyline over the iterations, round tick values on
both axes (``nice_ticks``) with margins sized from the labels so none is clipped, an
"iteration" axis title, and a ``<title>`` per point so hovering shows ``iteration: value``.
"""

from __future__ import annotations

import math
from html import escape
from typing import Sequence

#: Preferred order of metric names on the run page: names containing these come first.
PRIORITY = ("success", "return", "adv", "kl", "entropy", "loss")


def order_metrics(names: Sequence[str]) -> list[str]:
    """``names`` sorted by the first ``PRIORITY`` word they contain, then alphabetically."""
    def rank(n: str) -> tuple[int, str]:
        low = n.lower()
        return next((i for i, w in enumerate(PRIORITY) if w in low), len(PRIORITY)), n
    return sorted(names, key=rank)


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def nice_ticks(lo: float, hi: float, most: int = 5, *, integer: bool = False) -> tuple[list[float], float]:
    """At most ``most`` (≥ 2) evenly spaced round tick values covering ``[lo, hi]`` (lo < hi),
    with the step (1, 2, 2.5 or 5 × 10^k; ``integer``: a whole step of 1, 2 or 5 × 10^k) ;
    the first tick is ≤ lo and the last ≥ hi."""
    raw = (hi - lo) / max(most - 1, 1)
    if integer:
        raw = max(raw, 1.0)
    mag = 10.0 ** math.floor(math.log10(raw))
    mults = (1.0, 2.0, 5.0, 10.0) if integer else (1.0, 2.0, 2.5, 5.0, 10.0)
    step = next(m * mag for m in mults if m * mag >= raw * (1 - 1e-9))
    while True:
        first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
        if last - first + 1 <= most:
            break
        step *= 2.0
    digits = max(0, 1 - math.floor(math.log10(step))) + 1
    return [round(k * step, digits) for k in range(first, last + 1)], step


def _tick_label(v: float, step: float) -> str:
    """``v`` with enough significant digits to tell ticks ``step`` apart (at least 4)."""
    if v == 0:
        return "0"
    mag = math.floor(math.log10(abs(v)))
    digits = max(4, mag - math.floor(math.log10(step)) + 1, mag + 1 if 0 <= mag < 6 else 0)
    return f"{v:.{digits}g}"


#: Approximate width of one 10 px label character (px), for the margins.
CHAR_W = 6.2


def line_chart(name: str, xs: Sequence[int], ys: Sequence[float], *, width: int = 340, height: int = 180,
               max_points: int = 2000) -> str:
    """SVG of ``ys`` (float, any unit) against iterations ``xs`` (int, ascending, same length).

    Non-finite values are skipped. More than ``max_points`` points are thinned to every k-th
    (the last point is always kept) so the SVG stays small on long runs.

    Raises:
        ValueError: ``xs`` and ``ys`` differ in length.
    """
    if len(xs) != len(ys):
        raise ValueError(f"line_chart {name!r}: {len(xs)} iterations but {len(ys)} values; pass one value per iteration")
    pts = [(int(x), float(y)) for x, y in zip(xs, ys) if math.isfinite(y)]
    if len(pts) > max_points:
        step = math.ceil(len(pts) / max_points)
        pts = pts[::step] + ([pts[-1]] if (len(pts) - 1) % step else [])
    if not pts:
        return (f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
                f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(name)}">'
                f'<text x="8" y="14" class="chart-title">{escape(name)}</text>'
                f'<text x="8" y="{height // 2}">no finite values</text></svg>')
    x0, x1 = pts[0][0], pts[-1][0]
    y0, y1 = min(p[1] for p in pts), max(p[1] for p in pts)
    if y0 == y1:
        half = abs(y0) * 0.5 or 1.0
        y0, y1 = y0 - half, y1 + half
    yt, ystep = nice_ticks(y0, y1)
    y0, y1 = min(y0, yt[0]), max(y1, yt[-1])
    xt = [x0] if x1 == x0 else [int(v) for v in nice_ticks(x0, x1, 6, integer=True)[0] if x0 <= v <= x1]
    ylabels = [_tick_label(v, ystep) for v in yt]
    # margins from the labels themselves, so none is clipped: y labels right-aligned left of the axis,
    # x labels centred under their tick (half of the last one sticks out to the right)
    pad_l = int(max(len(t) for t in ylabels) * CHAR_W) + 10
    pad_r = int(max(len(str(xt[-1])) * CHAR_W / 2, 4)) + 6
    pad_t, pad_b = 24, 32
    w, h = width - pad_l - pad_r, height - pad_t - pad_b

    def sx(x: int) -> float:
        return pad_l + (0.5 * w if x1 == x0 else (x - x0) / (x1 - x0) * w)

    def sy(y: float) -> float:
        return pad_t + (1 - (y - y0) / (y1 - y0)) * h

    head = (f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(name)}">'
            f'<text x="{pad_l}" y="14" class="chart-title">{escape(name)}</text>')
    grid = "".join(f'<line x1="{pad_l}" y1="{sy(v):.1f}" x2="{pad_l + w}" y2="{sy(v):.1f}" class="grid"/>'
                   f'<text x="{pad_l - 5}" y="{sy(v) + 3.5:.1f}" text-anchor="end">{lab}</text>'
                   for v, lab in zip(yt, ylabels))
    grid += "".join(f'<line x1="{sx(v):.1f}" y1="{pad_t + h}" x2="{sx(v):.1f}" y2="{pad_t + h + 4}" class="axis"/>'
                    f'<text x="{sx(v):.1f}" y="{pad_t + h + 15}" text-anchor="middle">{v}</text>' for v in xt)
    line = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
    dots = "".join(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2"><title>iteration {x}: {_fmt(y)}</title></circle>'
                   for x, y in pts[:: max(1, len(pts) // 200)])
    axes = (f'<line x1="{pad_l}" y1="{pad_t + h}" x2="{pad_l + w}" y2="{pad_t + h}" class="axis"/>'
            f'<line x1="{pad_l}" y1="{pad_t}" x2="{pad_l}" y2="{pad_t + h}" class="axis"/>'
            f'<text x="{pad_l + w / 2:.1f}" y="{height - 4}" text-anchor="middle" class="axis-title">iteration</text>')
    return head + grid + axes + f'<polyline fill="none" stroke="#2563eb" stroke-width="1.5" points="{line}"/>' + dots + "</svg>"
