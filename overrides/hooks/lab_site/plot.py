"""Line plots as inline SVG that read on the light and on the dark palette.

Text, axes, ticks and grid are drawn in a sentinel colour that is then replaced by
``currentColor``, so they take the colour of the page's text in either palette; text
stays text (``svg.fonttype = 'none'``) in the page's font; the background is
transparent; the series colours have a contrast of at least 3:1 against both Material's
white and its slate background. A point over several runs carries the run-to-run range,
drawn as a shaded band around its series; a point of one run carries its quartiles,
drawn as error bars from q1 to q3.

A profiler timeline (:func:`timeline_plot`) is drawn the same way: one subplot per
panel, one row of bars per lane, one colour per lane.
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
from lab_site.fmt import unit_text  # noqa: E402
from lab_site.timeline import Event, Timeline  # noqa: E402

#: Drawn for "the page's text colour" and replaced by currentColor.
SENTINEL = "#010203"
#: Series colours, each at least 3:1 against #ffffff and against Material's slate #1e2129.
COLORS = ("#2f7fc1", "#d9480f", "#2b8a3e", "#ae3ec9", "#c28800", "#0c8599", "#e03131", "#8a63f0")
#: Backgrounds the colours are chosen against (Material default and slate).
BACKGROUNDS = ("#ffffff", "#1e2129")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
#: A timeline's bar is drawn at least this share of its panel's span wide, so a short kernel shows.
MIN_BAR = 0.0015
#: Height of one lane and the room a panel's title, ticks and axis label take (inches).
LANE_IN, PANEL_IN = 0.55, 1.0
#: Event labels inside bars: font size (pt); the share of the figure's width the axes get, roughly.
BAR_FONT, AXES_SHARE = 7, 0.72


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


def _literal(text: str) -> str:
    """Text as written: a profiler's names may hold ``$``, which matplotlib would read as mathtext."""
    return text.replace("$", r"\$")


def bars(events: Sequence[Event], span: tuple[float, float]) -> list[tuple[float, float]]:
    """``(start, width)`` of each event's bar: at least :data:`MIN_BAR` of the span wide, inside the span."""
    lo, hi = span
    least = (hi - lo) * MIN_BAR
    out = []
    for e in events:
        width = max(e.end - e.start, least)
        out.append((max(lo, min(e.start, hi - width)), width))
    return out


def timeline_plot(timeline: Timeline, *, title: str | None = None, uid: str, description: str) -> str:
    """The SVG markup of a timeline: one subplot per panel, stacked, each lane a row of bars.

    Lanes read top to bottom in the note's order and keep one colour across panels; a bar
    is drawn at least :data:`MIN_BAR` of its span wide; an event's label is written inside
    its bar where it fits.
    """
    colours = {name: COLORS[i % len(COLORS)] for i, name in enumerate(timeline.lane_names)}
    xlabel = f"time from the start of the range ({unit_text(timeline.unit)})"
    heights = [len(p.lanes) for p in timeline.panels]
    size = (6.4, sum(h * LANE_IN + PANEL_IN for h in heights) + (0.3 if title else 0.0))
    with plt.rc_context({**_style(), "svg.hashsalt": uid}):
        fig, axes = plt.subplots(len(heights), 1, figsize=size, layout="constrained", squeeze=False,
                                 gridspec_kw={"height_ratios": [h * LANE_IN + PANEL_IN for h in heights]})
        try:
            for ax, panel in zip(axes[:, 0], timeline.panels):
                lo, hi = panel.span
                inch = (hi - lo) / (size[0] * AXES_SHARE)  # x units per inch, roughly
                for y, lane in enumerate(panel.lanes):
                    for e in lane.events:
                        fits = len(e.label) * BAR_FONT * 0.6 / 72 + 0.1 < (e.end - e.start) / inch
                        if e.label and fits:
                            ax.text((e.start + e.end) / 2, y, _literal(e.label), ha="center", va="center",
                                    fontsize=BAR_FONT, color="#ffffff", clip_on=True)
                    if lane.events:
                        ax.broken_barh(bars(lane.events, panel.span), (y - 0.35, 0.7),
                                       facecolors=colours[lane.name], linewidth=0)
                ax.set_xlim(lo, hi)
                ax.set_ylim(len(panel.lanes) - 0.5, -0.5)  # the first lane on top
                ax.set_yticks(range(len(panel.lanes)), [_literal(lane.name) for lane in panel.lanes])
                ax.tick_params(axis="y", length=0)
                ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
                ax.grid(True, axis="x", which="major")
                ax.set_axisbelow(True)
                ax.set_xlabel(xlabel)
                ax.set_title(_literal(panel.title))
            if title:
                fig.suptitle(_literal(title))
            buffer = io.StringIO()
            fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
        finally:
            plt.close(fig)
    return _clean(buffer.getvalue(), uid, description)


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
