"""Inline SVG line charts of per-iteration metrics (no JavaScript, no chart library).

``line_chart`` returns an SVG string: one polyline over the iterations, min/max labels on
both axes, and a ``<title>`` per point so hovering shows ``iteration: value``.
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


def line_chart(name: str, xs: Sequence[int], ys: Sequence[float], *, width: int = 300, height: int = 140,
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
    pad_l, pad_r, pad_t, pad_b = 44, 8, 18, 18
    head = (f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(name)}">'
            f'<text x="{pad_l}" y="12" class="chart-title">{escape(name)}</text>')
    if not pts:
        return head + f'<text x="{pad_l}" y="{height // 2}">no finite values</text></svg>'
    x0, x1 = pts[0][0], pts[-1][0]
    y0, y1 = min(p[1] for p in pts), max(p[1] for p in pts)
    if y0 == y1:
        y0, y1 = y0 - 1.0, y1 + 1.0
    w, h = width - pad_l - pad_r, height - pad_t - pad_b

    def sx(x: int) -> float:
        return pad_l + (0.5 * w if x1 == x0 else (x - x0) / (x1 - x0) * w)

    def sy(y: float) -> float:
        return pad_t + (1 - (y - y0) / (y1 - y0)) * h

    line = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
    dots = "".join(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2"><title>iteration {x}: {_fmt(y)}</title></circle>'
                   for x, y in pts[:: max(1, len(pts) // 200)])
    axes = (f'<line x1="{pad_l}" y1="{pad_t + h}" x2="{pad_l + w}" y2="{pad_t + h}" class="axis"/>'
            f'<line x1="{pad_l}" y1="{pad_t}" x2="{pad_l}" y2="{pad_t + h}" class="axis"/>'
            f'<text x="{pad_l - 4}" y="{pad_t + 8}" text-anchor="end">{_fmt(y1)}</text>'
            f'<text x="{pad_l - 4}" y="{pad_t + h}" text-anchor="end">{_fmt(y0)}</text>'
            f'<text x="{pad_l}" y="{height - 4}">{x0}</text>'
            f'<text x="{pad_l + w}" y="{height - 4}" text-anchor="end">{x1}</text>')
    return head + axes + f'<polyline fill="none" stroke="#2563eb" stroke-width="1.5" points="{line}"/>' + dots + "</svg>"
