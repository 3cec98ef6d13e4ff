"""The link utilization histogram that ``loom check --plot FILE`` writes, as SVG or PNG.

:func:`utilization_bins` counts links per utilization bin (10 % wide from 0 to
at least 100 %, the last bin taking any overload); :func:`write_histogram`
draws one or more series side by side (the plan alone, or before and after a
change) to ``FILE`` by its extension: ``.svg`` is written here by hand (no
dependency), ``.png`` with matplotlib's Agg backend (no display needed).
Values are a plan's per-link utilization, the busier direction of each link.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from xml.sax.saxutils import escape

__all__ = ["FORMATS", "Series", "utilization_bins", "write_histogram"]

FORMATS = (".svg", ".png")
Series = tuple[str, Sequence[float]]  # (label, utilizations)
_COLOURS = ("#7f8fa6", "#e8772e", "#2e9d5b", "#7b52c4")


def utilization_bins(values: Sequence[float], step: float = 0.1, top: float = 1.0) -> list[int]:
    """Links per bin ``[i*step, (i+1)*step)``; bins reach at least ``top`` and cover the largest value.

    >>> utilization_bins([0.0, 0.05, 0.25, 1.3])
    [2, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]
    """
    hi = max([top, *(math.ceil(v / step - 1e-9) * step for v in values)])
    n = max(1, round(hi / step))
    counts = [0] * n
    for v in values:
        counts[min(n - 1, max(0, math.floor(v / step - 1e-9)))] += 1
    return counts


def _binned(series: Sequence[Series], step: float) -> list[list[int]]:
    every = [v for _, vals in series for v in vals]
    n = len(utilization_bins(every, step))
    out = []
    for _, vals in series:
        c = utilization_bins(vals, step)
        out.append(c + [0] * (n - len(c)))
    return out


def _svg(series: Sequence[Series], title: str, step: float) -> str:
    counts = _binned(series, step)
    n = len(counts[0])
    peak = max(1, *(c for row in counts for c in row))
    W, H, L, R, T, B = 720, 320, 50, 20, 50, 46
    pw, ph = W - L - R, H - T - B
    bw = pw / n
    k = len(series)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
           'font-family="sans-serif" font-size="11">',
           f'<rect width="{W}" height="{H}" fill="#fff"/>',
           f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="14">{escape(title)}</text>',
           f'<line x1="{L}" y1="{T + ph}" x2="{L + pw}" y2="{T + ph}" stroke="#888"/>',
           f'<line x1="{L}" y1="{T}" x2="{L}" y2="{T + ph}" stroke="#888"/>']
    for frac in (0.0, 0.5, 1.0):
        v = round(peak * frac)
        y = T + ph - v / peak * ph
        out.append(f'<text x="{L - 6}" y="{y + 4:.1f}" text-anchor="end" fill="#555">{v}</text>')
    for i in range(n + 1):
        if n > 12 and i % 2:
            continue
        out.append(f'<text x="{L + i * bw:.1f}" y="{T + ph + 15}" text-anchor="middle" fill="#555">'
                   f'{round(i * step * 100)}%</text>')
    out.append(f'<text x="{L + pw / 2}" y="{H - 8}" text-anchor="middle" fill="#555">'
               'link utilization (busier direction)</text>')
    out.append(f'<text x="14" y="{T + ph / 2}" text-anchor="middle" fill="#555" '
               f'transform="rotate(-90 14 {T + ph / 2})">links</text>')
    for j, row in enumerate(counts):
        colour = _COLOURS[j % len(_COLOURS)]
        for i, c in enumerate(row):
            if not c:
                continue
            h = c / peak * ph
            x = L + i * bw + 2 + j * (bw - 4) / k
            lo, hi = round(i * step * 100), round((i + 1) * step * 100)
            out.append(f'<rect x="{x:.1f}" y="{T + ph - h:.1f}" width="{max(1.0, (bw - 4) / k - 1):.1f}" '
                       f'height="{h:.1f}" fill="{colour}"><title>{escape(series[j][0])}: {c} link(s) at '
                       f'{lo}-{hi}%</title></rect>')
    for j, (label, vals) in enumerate(series):
        x = L + 10 + j * 150
        out.append(f'<rect x="{x}" y="30" width="12" height="12" fill="{_COLOURS[j % len(_COLOURS)]}"/>')
        out.append(f'<text x="{x + 16}" y="40">{escape(label)} ({len(vals)} links)</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _png(path: Path, series: Sequence[Series], title: str, step: float) -> None:
    import matplotlib  # lazy: matplotlib (about 0.4 s), for a .png only

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: as above, after the backend is chosen

    counts = _binned(series, step)
    n = len(counts[0])
    k = len(series)
    fig, ax = plt.subplots(figsize=(7.2, 3.2), dpi=100)
    try:
        width = 0.9 / k
        for j, ((label, vals), row) in enumerate(zip(series, counts, strict=True)):
            ax.bar([i + (j - (k - 1) / 2) * width for i in range(n)], row, width=width,
                   color=_COLOURS[j % len(_COLOURS)], label=f"{label} ({len(vals)} links)")
        ax.set_xticks([i - 0.5 for i in range(n + 1)], [f"{round(i * step * 100)}%" for i in range(n + 1)],
                      fontsize=8)
        ax.set_xlabel("link utilization (busier direction)")
        ax.set_ylabel("links")
        ax.set_title(title)
        ax.legend(loc="upper right", fontsize=8)
        fig.tight_layout()
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)


def write_histogram(path: Path, series: Sequence[Series], *, title: str = "link utilization",
                    step: float = 0.1) -> None:
    """Write the histogram of ``series`` to ``path``: SVG or PNG by its extension.

    Raises ``ValueError`` for another extension or no series, ``OSError`` when
    the file cannot be written.
    """
    if not series:
        raise ValueError("nothing to plot")
    suffix = path.suffix.lower()
    if suffix == ".svg":
        path.write_text(_svg(series, title, step))
    elif suffix == ".png":
        _png(path, series, title, step)
    else:
        raise ValueError(f"{path}: unknown plot format {suffix or '(none)'}: use .svg or .png")
