"""Line plots as inline SVG that read on the light and on the dark palette.

Text, axes, ticks and grid are drawn in a sentinel colour that is then replaced by
``currentColor``, so they take the colour of the page's text in either palette; text
stays text (``svg.fonttype = 'none'``) in the page's font; the background is
transparent; the series colours have a contrast of at least 3:1 against both Material's
white and its slate background. A point over several runs carries the run-to-run range,
drawn as a shaded band around its series; a point of one run carries its quartiles,
drawn as error bars from q1 to q3.

Tick labels are human units, never e-notation (:func:`tick_text`: ``2 MiB`` for bytes,
``0.1 %`` for a fraction, ``10,000`` or ``20M`` for a plain number). Every point (a
marker, a bar, a timeline's event) carries an SVG ``<title>``, which a browser shows
on hover: its value, the run-to-run range and the number of runs (:func:`hover_text`).

A bar plot (:func:`bar_plot`) draws categories as horizontal bars, one per series in
each category, so long category names read at the column's width; a reference line
(``refline``) marks a value of the metric such as a roof at 1.0 or a break-even at 1.

A line plot's ``<svg>`` says how it maps data to its own coordinates (:func:`scale_attributes`):
``data-lab-x`` and ``data-lab-y`` hold the axis' scale (``log`` or ``linear``), its data
limits and the SVG coordinates they fall at, and ``data-lab-y-si`` what one unit of its
metric is in SI units (``1e-06`` for µs), so that a calculator's live marker
(``docs/javascripts/calculators.js``) lands where a point of the same value is drawn.

A profiler timeline (:func:`timeline_plot`) is drawn the same way: one subplot per
panel on one shared time scale, one row of bars per lane, one colour per lane.
"""
from __future__ import annotations

import html
import io
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
import matplotlib.ticker  # noqa: E402

from lab_site import LabError  # noqa: E402
from lab_site.fmt import format_number, format_quantity, format_range, plural, unit_text  # noqa: E402
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
_BINARY = (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))
_DECIMAL = (("T", 1e12), ("G", 1e9), ("M", 1e6))
#: The id a hover target is drawn with; :func:`_clean` gives each its ``<title>``. A series'
#: points and a timeline's lane are one artist each (fast to draw: one artist per point made a
#: timeline 5x slower), whose elements :func:`_title_elements` gives theirs, in order.
_HOVER_ID = "labhover{}"
_GROUP_ID = "labgroup{}"
#: A bar plot: inches per bar and between categories, and around the axes.
BAR_IN, CATEGORY_GAP_IN, BAR_FRAME_IN = 0.14, 0.12, 1.1
#: A metric's unit -> (its SI unit, what one of it is in that unit): how a calculator's result
#: in one unit lands on a plot of the same quantity in another (``s`` on an axis in µs).
SI_UNITS: dict[str, tuple[str, float]] = {
    "s": ("s", 1.0), "ms": ("s", 1e-3), "us": ("s", 1e-6), "µs": ("s", 1e-6), "ns": ("s", 1e-9),
    "FLOP/s": ("FLOP/s", 1.0), "GFLOP/s": ("FLOP/s", 1e9), "TFLOP/s": ("FLOP/s", 1e12),
    "B/s": ("B/s", 1.0), "GB/s": ("B/s", 1e9), "TB/s": ("B/s", 1e12),
    "B": ("B", 1.0), "KB": ("B", 1e3), "MB": ("B", 1e6), "GB": ("B", 1e9),
    "KiB": ("B", 2.0**10), "MiB": ("B", 2.0**20), "GiB": ("B", 2.0**30),
    "FLOP/B": ("FLOP/B", 1.0), "tokens/s": ("tokens/s", 1.0),
}


@dataclass(frozen=True)
class Point:
    x: float | str
    y: float
    q1: float | None = None  # quartiles of one run's repetitions: error bars
    q3: float | None = None
    low: float | None = None  # lowest and highest run median: the band
    high: float | None = None
    runs: int = 1  # how many runs the median is of (the hover says so)
    # The topic it comes from, where a plot draws several: for the CSV, never the hover, which
    # a reader reads (a topic's identifier is the code's name, not the page's).
    source: str | None = None


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


def tick_text(value: float, unit: str | None = None) -> str:
    """A tick label in human units, never in e-notation.

    ``unit="B"``: bytes with binary prefixes (``2097152 -> '2 MiB'``); ``unit="%"``: a
    fraction as a percentage (``0.001 -> '0.1 %'``); otherwise a plain number, with
    thousands separated and ``M``/``G``/``T`` from a million up (``1e4 -> '10,000'``,
    ``2e7 -> '20M'``, ``5e-5 -> '0.00005'``).
    """
    if not math.isfinite(value):
        return ""
    if unit == "B":
        for prefix, size in _BINARY:
            if abs(value) >= size:
                return f"{_plain(value / size)} {prefix}"
        return f"{_plain(value)} B"
    if unit == "%":
        return f"{_plain(value * 100)} %"
    for suffix, size in _DECIMAL:
        if abs(value) >= size:
            return f"{_plain(value / size)}{suffix}"
    return _plain(value)


def _plain(value: float) -> str:
    """Six significant figures at most, positional (``'0.00005'``, ``'12,500'``), no trailing zeros."""
    rounded = float(f"{value:.6g}")
    if rounded == 0:
        return "0"
    text = f"{Decimal(repr(rounded)):f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    whole, dot, fraction = text.partition(".")
    if abs(rounded) >= 1e4:  # 10,000 reads; 1,000 on an axis of 500 and 2000 does not
        whole = f"{int(whole):,}"
    return (whole + dot + fraction).replace("-", "−")


def hover_text(label: str | None, point: Point, *, xunit: str | None, yunit: str) -> str:
    """What a point says on hover: series, x, the median, the run-to-run range and the runs (or the IQR),
    in words: not the topic it comes from (the x value says which rung; the CSV names the topic)."""
    x = point.x if isinstance(point.x, str) else tick_text(point.x, xunit)
    head = f"{label} · {x}" if label else str(x)
    text = f"{head}: {format_quantity(point.y, yunit)}"
    if point.runs > 1 and point.low is not None and point.high is not None:
        text += f", median of {plural(point.runs, 'run')}, range {format_range(point.low, point.high, yunit)}"
    else:
        text += f", {plural(point.runs, 'run')}"
        if point.q1 is not None and point.q3 is not None:
            text += f", quartiles {format_range(point.q1, point.q3, yunit)}"
    return text


@dataclass(frozen=True)
class RefLine:
    """A reference line at a value of the metric (a roof at 1.0, a break-even at 1), labelled."""

    value: float
    label: str = ""


def _refline(ax, ref: RefLine | None, horizontal: bool) -> None:
    if ref is None:
        return
    draw = ax.axhline if horizontal else ax.axvline
    draw(ref.value, color=SENTINEL, linewidth=1.1, linestyle=(0, (5, 3)), alpha=0.75, zorder=1)
    if ref.label:
        if horizontal:  # the label above the line at the right end
            ax.annotate(_literal(ref.label), (1, ref.value), xycoords=("axes fraction", "data"), xytext=(-2, 3),
                        textcoords="offset points", ha="right", va="bottom", fontsize=9)
        else:  # the label beside the line at the top
            ax.annotate(_literal(ref.label), (ref.value, 1), xycoords=("data", "axes fraction"), xytext=(-3, -2),
                        textcoords="offset points", ha="right", va="top", fontsize=9, rotation=90)


def _limits(values: list[float], low: float | None, high: float | None) -> tuple[float | None, float | None]:
    """An axis range that holds ``low`` to ``high`` (``ymin=``, ``ymax=``) and every value; ``(None, None)``
    (matplotlib's own) where neither is given. It starts at ``low`` exactly (bars from 0), with a margin
    above the highest of ``high`` and the values (a roof at ``high`` stays inside the frame)."""
    if low is None and high is None:
        return None, None
    finite = [v for v in values if math.isfinite(v)]
    lo, hi = min(finite + ([low] if low is not None else [])), max(finite + ([high] if high is not None else []))
    margin = (hi - lo or abs(hi) or 1.0) * 0.04
    return (lo if low is not None and lo >= low else lo - margin), hi + margin


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
    xunit: str | None = None,
    yunit: str = "",
    refline: RefLine | None = None,
    ymin: float | None = None,
    ymax: float | None = None,
    lines: Sequence[str] = (),
    annotate: Sequence[str] = (),
) -> str:
    """The SVG markup (no XML prologue) of one line per series; ``uid`` keeps ids unique on a page.

    Series whose key is in ``lines`` are drawn as a plain line (a roof, a model), those
    in ``annotate`` as marked points labelled with their x value (a ridge point).
    """
    if not series or not any(s.points for s in series):
        raise LabError("nothing to plot")
    numeric = all(isinstance(p.x, (int, float)) and not isinstance(p.x, bool) for s in series for p in s.points)
    if logx and not numeric:
        raise LabError("logx=true needs numeric x values")
    if xunit is not None and not numeric:
        raise LabError("xunit= needs numeric x values")
    if logx and any(p.x <= 0 for s in series for p in s.points):
        raise LabError("logx=true needs x values above 0")
    categories: list = []
    if not numeric:
        for s in series:
            for p in s.points:
                if p.x not in categories:
                    categories.append(p.x)
    hovers: list[list[str]] = []  # the hover text of each point, series by series
    with plt.rc_context({**_style(), "svg.hashsalt": uid}):
        fig, ax = plt.subplots(figsize=(6.4, 3.6), layout="constrained")
        try:
            for i, s in enumerate(series):
                xs = [p.x if numeric else categories.index(p.x) for p in s.points]
                ys = [p.y for p in s.points]
                color = COLORS[i % len(COLORS)]
                plain_line = s.key is not None and s.key in lines
                marked = s.key is not None and s.key in annotate
                if plain_line:
                    ax.plot(xs, ys, linewidth=1.4, linestyle=(0, (6, 2)), color=color, label=s.label)
                elif marked:
                    ax.plot(xs, ys, linestyle="none", marker=MARKERS[i % len(MARKERS)], markersize=7,
                            color=color, label=s.label)
                    # One label per series, at its middle point: runs that each measured their own
                    # point (a ridge per run) are labelled once, with the range of their x.
                    ordered = sorted(zip(xs, s.points), key=lambda xp: xp[0])
                    first, last = (str(p.x) if not numeric else tick_text(p.x, xunit) if xunit
                                   else format_number(p.x) for _, p in (ordered[0], ordered[-1]))
                    where = first if first == last else f"{first}–{last}"
                    middle = ordered[len(ordered) // 2]
                    # In the page's text colour, not the series': the teal series on either
                    # palette's background is under 4.5:1, too faint for text (the marker keeps it).
                    ax.annotate(_literal(f"{s.label or s.key} {where}"), (middle[0], middle[1].y), xytext=(-8, 6),
                                textcoords="offset points", ha="right", va="bottom", fontsize=9, color=SENTINEL)
                else:
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
                # Hover targets, drawn invisible over the markers: each one's <title> is its value. The
                # axis limits hold every point, so matplotlib writes one marker per point, in order.
                ax.plot(xs, ys, linestyle="none", marker="o", markersize=9, alpha=0, gid=_GROUP_ID.format(len(hovers)))
                hovers.append([hover_text(s.label, p, xunit=xunit if numeric else None, yunit=yunit)
                               for p in s.points])
            _refline(ax, refline, horizontal=True)
            if logx:
                ax.set_xscale("log", base=10 if xunit == "%" else 2)
                ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            if numeric:
                ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: tick_text(v, xunit)))
            if logy:
                ax.set_yscale("log")
                # Label the minor ticks at 2 and 5 of each decade, as plain numbers
                # (matplotlib's default writes them in mathtext, "2 × 10^1").
                ax.yaxis.set_minor_formatter(matplotlib.ticker.FuncFormatter(_two_and_five))
            ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: tick_text(v)))
            bottom, top = _limits([v for s in series for p in s.points for v in (p.y, p.low, p.high)
                                   if v is not None] + ([refline.value] if refline else []), ymin, ymax)
            if top is not None:
                ax.set_ylim(bottom, top)
            if not numeric:
                ax.set_xticks(range(len(categories)), [str(c) for c in categories])
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel)
            ax.grid(True, which="major")
            if title:
                ax.set_title(title, wrap=True)
            if any(s.label for s in series):
                ax.legend()
            buffer = io.StringIO()
            fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
            scales = scale_attributes(fig, ax, yunit) if numeric else ""
        finally:
            plt.close(fig)
    svg = _clean(_title_elements(buffer.getvalue(), hovers), uid, description or title or f"{ylabel} against {xlabel}")
    head = svg.index(">", svg.index("<svg"))  # after the attributes _clean gave it
    return svg[:head] + scales + svg[head:]


def _axis_text(value: float) -> str:
    return repr(float(value))


def scale_attributes(fig, ax, yunit: str) -> str:
    """The attributes that map a line plot's data to its SVG coordinates, as drawn (after the layout).

    ``data-lab-x="log 0.1 10000 49.45 457.8"``: the x axis is logarithmic, from 0.1 at SVG x
    49.45 to 10000 at SVG x 457.8 (in the viewBox, which is the figure in points); ``data-lab-y``
    the same for y (its first coordinate at the bottom, so the larger); ``data-lab-y-si`` the SI
    value of one unit of the metric, where :data:`SI_UNITS` knows it.
    """
    width, height = fig.get_size_inches() * 72  # an SVG's user unit is the point
    box = ax.get_position()  # in figure fractions, as the layout left it when the SVG was drawn
    out = []
    for name, scale, (lo, hi), (start, end) in (
            ("x", ax.get_xscale(), ax.get_xlim(), (box.x0 * width, box.x1 * width)),
            ("y", ax.get_yscale(), ax.get_ylim(), ((1 - box.y0) * height, (1 - box.y1) * height))):
        if scale not in ("log", "linear"):
            raise LabError(f"a {scale} {name} axis has no marker scale")
        out.append(f' data-lab-{name}="{scale} {_axis_text(lo)} {_axis_text(hi)} {start:.6f} {end:.6f}"')
    si = SI_UNITS.get(yunit)
    if si is not None:
        out.append(f' data-lab-y-si="{si[1]!r}" data-lab-y-base="{html.escape(si[0], quote=True)}"')
    return "".join(out)


def bar_plot(
    series: Sequence[Series],
    *,
    xlabel: str,
    ylabel: str,
    title: str | None = None,
    uid: str,
    description: str = "",
    yunit: str = "",
    refline: RefLine | None = None,
    ymin: float | None = None,
    ymax: float | None = None,
) -> str:
    """The SVG markup of grouped horizontal bars: the categories (x) down the side, top to bottom
    in the order of their first appearance, one bar per series in each, the metric (y) along the
    bottom; a whisker spans the run-to-run range (several runs) or the quartiles (one)."""
    if not series or not any(s.points for s in series):
        raise LabError("nothing to plot")
    categories: list = []
    for s in series:
        for p in s.points:
            if p.x not in categories:
                categories.append(p.x)
    n = len(series)
    slot = BAR_IN * n + CATEGORY_GAP_IN  # inches per category
    hovers: list[str] = []
    with plt.rc_context({**_style(), "svg.hashsalt": uid}):
        fig, ax = plt.subplots(figsize=(6.4, BAR_FRAME_IN + slot * len(categories) + (0.3 if title else 0)),
                               layout="constrained")
        try:
            height = BAR_IN / slot  # in category units
            for i, s in enumerate(series):
                color = COLORS[i % len(COLORS)]
                offset = (i - (n - 1) / 2) * height
                for j, p in enumerate(s.points):
                    y = categories.index(p.x) + offset
                    ax.barh([y], [p.y], height=height * 0.92, color=color, label=s.label if j == 0 else None,
                            gid=_HOVER_ID.format(len(hovers)))
                    hovers.append(hover_text(s.label, p, xunit=None, yunit=yunit))
                    low, high = (p.low, p.high) if p.low is not None else (p.q1, p.q3)
                    if low is not None and high is not None and high > low:
                        ax.plot([low, high], [y, y], color=SENTINEL, linewidth=1, alpha=0.7)
            _refline(ax, refline, horizontal=False)
            left, right = _limits([v for s in series for p in s.points for v in (p.y, p.low, p.high)
                                   if v is not None] + ([refline.value] if refline else []), ymin, ymax)
            if right is not None:
                ax.set_xlim(left, right)
            ax.set_yticks(range(len(categories)), [_literal(str(c)) for c in categories])
            ax.set_ylim(len(categories) - 0.5, -0.5)  # the first category on top
            ax.tick_params(axis="y", length=0)
            ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: tick_text(v)))
            ax.set_xlabel(ylabel)
            ax.set_ylabel(xlabel)
            ax.grid(True, axis="x", which="major")
            ax.set_axisbelow(True)
            if title:
                ax.set_title(title, wrap=True)
            if any(s.label for s in series):  # above the bars, in a row: inside, it would hide some
                fig.legend(loc="outside upper center", ncols=min(n, 4))
            buffer = io.StringIO()
            fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
        finally:
            plt.close(fig)
    return _clean(buffer.getvalue(), uid, description or title or f"{ylabel} by {xlabel}", hovers)


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

    Every panel is drawn on one time scale, from the earliest start of any panel's span
    to the latest end, so that a step twice as long is a bar twice as long. Lanes read
    top to bottom in the note's order and keep one colour across panels; a bar is drawn
    at least :data:`MIN_BAR` of that scale wide; an event's label is written inside its
    bar where it fits; each bar's ``<title>`` is its label, start, end and duration.
    """
    colours = {name: COLORS[i % len(COLORS)] for i, name in enumerate(timeline.lane_names)}
    unit = unit_text(timeline.unit)
    xlabel = f"time from the start of the range ({unit})"
    shared = (min(p.span[0] for p in timeline.panels), max(p.span[1] for p in timeline.panels))
    heights = [len(p.lanes) for p in timeline.panels]
    size = (6.4, sum(h * LANE_IN + PANEL_IN for h in heights) + (0.3 if title else 0.0))
    lanes: list[list[str]] = []  # the hover text of each bar, lane by lane
    with plt.rc_context({**_style(), "svg.hashsalt": uid}):
        fig, axes = plt.subplots(len(heights), 1, figsize=size, layout="constrained", squeeze=False,
                                 sharex=True,
                                 gridspec_kw={"height_ratios": [h * LANE_IN + PANEL_IN for h in heights]})
        try:
            lo, hi = shared
            inch = (hi - lo) / (size[0] * AXES_SHARE)  # x units per inch, roughly
            for ax, panel in zip(axes[:, 0], timeline.panels):
                for y, lane in enumerate(panel.lanes):
                    for e in lane.events:
                        fits = len(e.label) * BAR_FONT * 0.6 / 72 + 0.1 < (e.end - e.start) / inch
                        if e.label and fits:
                            ax.text((e.start + e.end) / 2, y, _literal(e.label), ha="center", va="center",
                                    fontsize=BAR_FONT, color="#ffffff", clip_on=True)
                    if lane.events:
                        ax.broken_barh(bars(lane.events, shared), (y - 0.35, 0.7), facecolors=colours[lane.name],
                                       linewidth=0, gid=_GROUP_ID.format(len(lanes)))
                        lanes.append([f"{lane.name}: {e.label or 'event'}, {tick_text(e.start)}–{tick_text(e.end)} "
                                      f"{unit} ({format_quantity(e.end - e.start, timeline.unit)}) · {panel.title}"
                                      for e in lane.events])
                ax.set_xlim(lo, hi)
                ax.set_ylim(len(panel.lanes) - 0.5, -0.5)  # the first lane on top
                ax.set_yticks(range(len(panel.lanes)), [_literal(lane.name) for lane in panel.lanes])
                ax.tick_params(axis="y", length=0)
                ax.tick_params(axis="x", labelbottom=True)  # sharex hides all but the last row's labels
                ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: tick_text(v)))
                ax.grid(True, axis="x", which="major")
                ax.set_axisbelow(True)
                ax.set_title(_literal(panel.title))
            axes[-1, 0].set_xlabel(xlabel)
            if title:
                fig.suptitle(_literal(title))
            buffer = io.StringIO()
            fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
        finally:
            plt.close(fig)
    return _clean(_title_elements(buffer.getvalue(), lanes), uid, description)


def _title_elements(svg: str, groups: Sequence[Sequence[str]]) -> str:
    """The elements drawn by artist k (``<g id="labgroup{k}">``) titled ``groups[k][i]``, in order.

    Matplotlib writes a collection of distinct paths (a lane's bars) as one ``<path/>`` each,
    and a line's markers as one ``<use/>`` each after their ``<defs>``, inside the artist's
    group and before its first ``</g>``. A count that differs is an error, not a shifted title.
    """
    for k, texts in enumerate(groups):
        start = svg.find(f'<g id="{_GROUP_ID.format(k)}">')
        end = svg.find("</g>", start)
        defs = svg.find("</defs>", start, end)
        head = max(start, defs)  # a marker's shape in <defs> is not a point
        body = svg[head:end]
        drawn = re.findall(r"<(?:path|use) [^>]*?/>", body)
        if start < 0 or len(drawn) != len(texts):
            raise LabError(f"hover group {k}: {len(texts)} points, {len(drawn)} drawn")
        titled = iter(texts)
        # Each in a group of its own with its title (as a bar's is): the form every browser shows on hover.
        body = re.sub(r"<(?:path|use) [^>]*?/>", lambda m: f'<g class="lab-plot__point">'
                      f"<title>{html.escape(next(titled), quote=False)}</title>{m[0]}</g>", body)
        svg = svg[:head] + body + svg[end:]
    return svg


def _clean(svg: str, uid: str, description: str, hovers: Sequence[str] = ()) -> str:
    """Inline-ready SVG: no prologue, scalable, page colours and font, ids unique to ``uid``, and
    ``hovers[i]`` as the ``<title>`` of the i-th hover target (every one must be in the SVG)."""
    svg = svg[svg.index("<svg"):]
    found: list[int] = []

    def titled(match: re.Match[str]) -> str:
        i = int(match[1])
        found.append(i)
        text = html.escape(hovers[i], quote=False) if i < len(hovers) else ""
        return f'{match[0][:-1]} class="lab-plot__point"><title>{text}</title>'

    # One pass over the SVG (a timeline has hundreds of targets); each target exactly once.
    svg = re.sub(r'<g id="' + _HOVER_ID.format(r"(\d+)") + '">', titled, svg)
    if sorted(found) != list(range(len(hovers))):
        missing = sorted(set(range(len(hovers))) - set(found))
        raise LabError(f"hover target {missing[0] if missing else found[-1]} of {len(hovers)} is not once in the SVG")
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
    return tick_text(value) if round(leading, 6) in (2.0, 5.0) else ""
