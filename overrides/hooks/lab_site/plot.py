"""Line plots as inline SVG that read on the light and on the dark palette.

Text, axes, ticks and grid are drawn in a sentinel colour that is then replaced by
``currentColor``, so they take the colour of the page's text in either palette; text
stays text (``svg.fonttype = 'none'``) in the page's font; the background is
transparent; the series colours have a contrast of at least 3:1 against both Material's
white and its slate background. A point over several runs carries the run-to-run range,
drawn as a shaded band around its series; a point of one run carries its quartiles,
drawn as error bars from q1 to q3.
"""
from __future__ import annotations

import html
import io
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
import matplotlib.ticker  # noqa: E402

from lab_site import LabError  # noqa: E402

#: Drawn for "the page's text colour" and replaced by currentColor.
SENTINEL = "#010203"
#: Series colours, each at least 3:1 against #ffffff and against Material's slate #1e2129.
COLORS = ("#2f7fc1", "#d9480f", "#2b8a3e", "#ae3ec9", "#c28800", "#0c8599", "#e03131", "#8a63f0")
#: Backgrounds the colours are chosen against (Material default and slate).
BACKGROUNDS = ("#ffffff", "#1e2129")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


@dataclass(frozen=True)
class Point:
    x: float | str
    y: float
    q1: float | None = None  # quartiles of one run's repetitions: error bars
    q3: float | None = None
    low: float | None = None  # lowest and highest run median: the band
    high: float | None = None


@dataclass(frozen=True)
class Series:
    label: str | None
    points: tuple[Point, ...]
    key: str | None = None  # the case value it stands for (legend= renames it by this)


def _style() -> dict:
    return {
        "svg.fonttype": "none",
        "svg.hashsalt": None,
        "font.family": "sans-serif",
        "font.size": 10,
        "text.color": SENTINEL,
        "axes.edgecolor": SENTINEL,
        "axes.labelcolor": SENTINEL,
        "axes.facecolor": "none",
        "figure.facecolor": "none",
        "savefig.facecolor": "none",
        "savefig.transparent": True,
        "xtick.color": SENTINEL,
        "ytick.color": SENTINEL,
        "grid.color": SENTINEL,
        "grid.alpha": 0.15,
        "legend.frameon": False,
        "axes.spines.top": False,
        "axes.spines.right": False,
    }


def line_plot(
    series: Sequence[Series],
    *,
    xlabel: str,
    ylabel: str,
    logx: bool = False,
    logy: bool = False,
    title: str | None = None,
    uid: str,
    description: str = "",
) -> str:
    """The SVG markup (no XML prologue) of one line per series; ``uid`` keeps ids unique on a page."""
    if not series or not any(s.points for s in series):
        raise LabError("nothing to plot")
    numeric = all(isinstance(p.x, (int, float)) and not isinstance(p.x, bool) for s in series for p in s.points)
    if logx and not numeric:
        raise LabError("logx=true needs numeric x values")
    categories: list = []
    if not numeric:
        for s in series:
            for p in s.points:
                if p.x not in categories:
                    categories.append(p.x)
    with plt.rc_context({**_style(), "svg.hashsalt": uid}):
        fig, ax = plt.subplots(figsize=(6.4, 3.6), layout="constrained")
        try:
            for i, s in enumerate(series):
                xs = [p.x if numeric else categories.index(p.x) for p in s.points]
                ys = [p.y for p in s.points]
                color = COLORS[i % len(COLORS)]
                ax.plot(xs, ys, marker=MARKERS[i % len(MARKERS)], markersize=4, linewidth=1.6,
                        color=color, label=s.label)
                if any(p.low is not None for p in s.points):  # a point of fewer runs: no width
                    lows = [p.y if p.low is None else p.low for p in s.points]
                    highs = [p.y if p.high is None else p.high for p in s.points]
                    ax.fill_between(xs, lows, highs, color=color, alpha=0.18, linewidth=0)
                elif all(p.q1 is not None and p.q3 is not None for p in s.points):
                    low = [max(p.y - p.q1, 0.0) for p in s.points]
                    high = [max(p.q3 - p.y, 0.0) for p in s.points]
                    ax.errorbar(xs, ys, yerr=[low, high], fmt="none", ecolor=color, elinewidth=1, capsize=2)
            plain = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
            if logx:
                ax.set_xscale("log", base=2)
                ax.xaxis.set_major_formatter(plain)
            if logy:
                ax.set_yscale("log")
                ax.yaxis.set_major_formatter(plain)
                # Label the minor ticks at 2 and 5 of each decade, as plain numbers
                # (matplotlib's default writes them in mathtext, "2 × 10^1").
                ax.yaxis.set_minor_formatter(matplotlib.ticker.FuncFormatter(_two_and_five))
            if not numeric:
                ax.set_xticks(range(len(categories)), [str(c) for c in categories])
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel)
            ax.grid(True, which="major")
            if title:
                ax.set_title(title)
            if any(s.label for s in series):
                ax.legend()
            buffer = io.StringIO()
            fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
        finally:
            plt.close(fig)
    return _clean(buffer.getvalue(), uid, description or title or f"{ylabel} against {xlabel}")


def _clean(svg: str, uid: str, description: str) -> str:
    """Inline-ready SVG: no prologue, scalable, page colours and font, ids unique to ``uid``."""
    svg = svg[svg.index("<svg"):]
    svg = re.sub(r"<metadata>.*?</metadata>\s*", "", svg, flags=re.S)
    svg = re.sub(r"\s*<!--.*?-->", "", svg, flags=re.S)
    # Matplotlib's stylesheet says "*{...}": keep it inside this plot.
    svg = svg.replace("*{stroke-linejoin", ".lab-plot__svg *{stroke-linejoin")
    svg = svg.replace(SENTINEL, "currentColor")
    # Text in the page's font: drop the family matplotlib names, keep the size.
    svg = re.sub(r"font-family:[^;\"]*;?", "font-family: inherit;", svg)
    svg = re.sub(r"font: ([0-9.]+px) [^;\"]*", r"font-size: \1; font-family: inherit", svg)
    # Scale with the column: keep the viewBox, drop the fixed size.
    svg = re.sub(r'<svg([^>]*?) width="[^"]*" height="[^"]*"', r"<svg\1", svg, count=1)
    # Element ids such as "figure_1" repeat in every plot: prefix them all.
    svg = re.sub(r'id="([^"]+)"', rf'id="{uid}-\1"', svg)
    svg = re.sub(r'(xlink:href|href)="#([^"]+)"', rf'\1="#{uid}-\2"', svg)
    svg = re.sub(r"url\(#([^)]+)\)", rf"url(#{uid}-\1)", svg)
    label = html.escape(description, quote=True)
    return svg.replace("<svg", f'<svg class="lab-plot__svg" role="img" aria-label="{label}"', 1)


def _luminance(hex_colour: str) -> float:
    channels = [int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def contrast(a: str, b: str) -> float:
    """WCAG contrast ratio of two ``#rrggbb`` colours."""
    la, lb = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def _two_and_five(value: float, _position) -> str:
    """A plain label for minor log ticks whose leading digit is 2 or 5."""
    if value <= 0:
        return ""
    leading = value / 10 ** math.floor(math.log10(value))
    return f"{value:g}" if round(leading, 6) in (2.0, 5.0) else ""
