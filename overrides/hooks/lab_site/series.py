"""The rows of a group of runs shaped for a plot: one series per value of a case key.

Each point is the median across runs; with several runs it carries the run-to-run
range (drawn as a band), with one run the quartiles of its repetitions (error bars).
``series=machine`` makes one series per GPU instead (:func:`machine_series`), from one
topic or several: the capstone's ladder joins two topics' rungs. :func:`csv_text` is
what a plot's download holds: one row per point drawn.
"""
from __future__ import annotations

import csv
import io
from collections.abc import Sequence

from lab_site import LabError, labels
from lab_site.figures import Figure, SelectionError, select
from lab_site.fmt import case_value
from lab_site.plot import Point, Series
from lab_site.shortcodes import PlotRequest
from lab_site.store import Group


def _point(x, figure: Figure, source: str | None = None) -> Point:
    a = figure.across
    if a.count > 1:
        return Point(x, a.median, low=a.low, high=a.high, runs=a.count, source=source)
    m = figure.metrics[0]
    return Point(x, a.median, q1=m.q1, q3=m.q3, runs=1, source=source)


def _x(request: PlotRequest, value, where: str):
    """The x drawn for a case value: itself, or ``1 - value`` (``xtransform="1-x"``)."""
    if request.xtransform is None:
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise LabError(f"{where}: xtransform={request.xtransform} needs numeric {request.x} values, not {value!r}")
    return 1 - value


def series_of(request: PlotRequest, group: Group, source: str | None = None
              ) -> tuple[list[Series], str, list[Figure]]:
    """The series of ``request`` in ``group``, the unit of its y metric, and the figures drawn.

    Rows without the y metric are left out, but at least one must have it; every row
    that has it must have the x key (and the series key, if one is named), unless
    ``order=`` names the x values to draw: then rows at any other x, or with no x, are
    left out, and the points follow that order. Two rows at the same x of the same
    series mean the filters leave a key free: that is an error. A series is labelled
    with its value as a table prints it (``eager``; ``all-gather`` for ``all_gather``,
    ``64 Mi`` for a count of ``67108864`` elements: :func:`lab_site.labels.case`), a number after its
    key's words (``size k = 1024``), or as ``legend=`` renames it.
    """
    rows = select(group, request.where)
    where = f"topic {group.topic} on {group.slug}"
    series_key = None if request.per_machine else request.series
    groups: dict[object, list[Point]] = {}
    seen: set[tuple] = set()
    units: set[str] = set()
    figures: list[Figure] = []
    for row in rows:
        figure = row.metrics.get(request.y)
        if figure is None:
            continue
        if request.order is not None and case_value(row.case.get(request.x)) not in request.order:
            continue
        for key in (request.x, series_key):
            if key is not None and key not in row.case:
                raise LabError(f"{where}: a row has no case key {key!r} (keys: {', '.join(row.case)})")
        x = row.case[request.x]
        value = row.case[series_key] if series_key else None
        if (value, x) in seen:
            free = [k for k in row.case if k not in (request.x, series_key) and k not in request.where]
            raise LabError(
                f"{where}: several rows at {request.x}={x!r}"
                + (f" {series_key}={value!r}" if series_key else "")
                + f"; filter on {', '.join(free) or 'another key'} or name series="
            )
        seen.add((value, x))
        units.add(figure.unit)
        figures.append(figure)
        groups.setdefault(value, []).append(_point(_x(request, x, where), figure, source))
    if not groups:
        raise SelectionError(f"{where}: no selected row has the metric {request.y!r}")
    if len(units) > 1:
        raise LabError(f"{where}: metric {request.y!r} comes in several units ({', '.join(sorted(units))})")
    out = []
    for value, points in groups.items():
        if request.order is not None:
            points = sorted(points, key=lambda p: request.order.index(case_value(p.x)))
        elif all(isinstance(p.x, (int, float)) and not isinstance(p.x, bool) for p in points):
            points = sorted(points, key=lambda p: p.x)
        key = case_value(value) if series_key else None
        label = (request.legend.get(key) or _legend(request.topic, series_key, value)) if key is not None else None
        out.append(Series(label, tuple(points), key))
    return out, units.pop(), figures


def _legend(topic: str, key: str, value) -> str:
    """A series' label where the page gives none: its value as a table prints it (``all-gather``), and a
    number with its key's words (``size k = 1024``, not a bare ``1024`` that says nothing of what it counts)."""
    shown = labels.case(key, value, topic)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{labels.key(topic, key)} = {shown}"
    return shown


def machine_series(request: PlotRequest, topics: Sequence[Sequence[Group]]
                   ) -> tuple[list[Series], str, list[tuple[Group, list[Figure]]]]:
    """``series=machine``: one series per GPU, its points from the groups of that GPU in every topic.

    ``topics`` holds each topic's groups, in the shortcode's order. An x value comes from
    the first topic that has it on that GPU (a later topic re-measuring a rung adds
    nothing); each point's CSV row names its topic where there are several. A stale group or
    a CPU's with no row to draw is left out (a current GPU's is an error, as for a tab); the
    groups drawn come back with their figures (for their provenance). Returns the series,
    the y unit, and those groups.
    """
    by_machine: dict[str, list[Point]] = {}
    labels: dict[str, str] = {}
    drawn: list[tuple[Group, list[Figure]]] = []
    units: set[str] = set()
    lacking: list[SelectionError] = []
    for groups in topics:
        for group in groups:
            try:
                found, unit, figures = series_of(request, group, group.topic if len(topics) > 1 else None)
            except SelectionError as exc:
                if group.is_gpu and not group.stale:
                    raise  # as a tab would: the page asks a current GPU run for what it does not measure
                lacking.append(exc)
                continue
            machine = f"{group.root.index}/{group.slug}"  # a reader's records beside the book's are another series
            labels.setdefault(machine, request.legend.get(group.slug, group.short_label))
            points = by_machine.setdefault(machine, [])
            have = {p.x for p in points}
            new = [p for s in found for p in s.points if p.x not in have]
            if new:
                points.extend(new)
                units.add(unit)
                drawn.append((group, figures))
    if not by_machine:
        raise lacking[0] if lacking else LabError(f"no record of topic {', '.join(request.topics)}")
    if len(units) > 1:
        raise LabError(f"metric {request.y!r} comes in several units across topics ({', '.join(sorted(units))})")
    out = []
    for machine, points in by_machine.items():
        if request.order is not None:
            points = sorted(points, key=lambda p: request.order.index(case_value(p.x)))
        out.append(Series(labels[machine], tuple(points), machine.split("/", 1)[1]))
    return out, units.pop(), drawn


def csv_text(series: Sequence[Series], request: PlotRequest, unit: str) -> str:
    """The points drawn, one row each: series, x as drawn, the median, and its spread and runs."""
    x_name = request.x if request.xtransform is None else request.xtransform.replace("x", request.x)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["series", x_name, request.y, "unit", "runs", "low", "high", "q1", "q3", "topic"])
    blank = lambda v: "" if v is None else repr(v)  # noqa: E731  (full precision; empty where none)
    for s in series:
        for p in s.points:
            writer.writerow([s.label or "", p.x, repr(p.y), unit, p.runs, blank(p.low), blank(p.high),
                             blank(p.q1), blank(p.q3), p.source or request.topic])
    return buffer.getvalue()
