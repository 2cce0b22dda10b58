"""The rows of a group of runs shaped for a line plot: one series per value of a case key.

Each point is the median across runs; with several runs it carries the run-to-run
range (drawn as a band), with one run the quartiles of its repetitions (error bars).
"""
from __future__ import annotations

from lab_site import LabError
from lab_site.figures import Figure, SelectionError, select
from lab_site.fmt import case_value
from lab_site.plot import Point, Series
from lab_site.shortcodes import PlotRequest
from lab_site.store import Group


def _point(x, figure: Figure) -> Point:
    a = figure.across
    if a.count > 1:
        return Point(x, a.median, low=a.low, high=a.high)
    m = figure.metrics[0]
    return Point(x, a.median, q1=m.q1, q3=m.q3)


def series_of(request: PlotRequest, group: Group) -> tuple[list[Series], str, list[Figure]]:
    """The series of ``request`` in ``group``, the unit of its y metric, and the figures drawn.

    Rows without the y metric are left out, but at least one must have it; every row
    that has it must have the x key (and the series key, if one is named). Two rows at
    the same x of the same series mean the filters leave a key free: that is an error.
    A series is labelled with its value alone (``eager``), or as ``legend=`` renames it.
    """
    rows = select(group, request.where)
    where = f"topic {group.topic} on {group.slug}"
    groups: dict[object, list[Point]] = {}
    seen: set[tuple] = set()
    units: set[str] = set()
    figures: list[Figure] = []
    for row in rows:
        figure = row.metrics.get(request.y)
        if figure is None:
            continue
        for key in (request.x, request.series):
            if key is not None and key not in row.case:
                raise LabError(f"{where}: a row has no case key {key!r} (keys: {', '.join(row.case)})")
        x = row.case[request.x]
        value = row.case[request.series] if request.series else None
        if (value, x) in seen:
            free = [k for k in row.case if k not in (request.x, request.series) and k not in request.where]
            raise LabError(
                f"{where}: several rows at {request.x}={x!r}"
                + (f" {request.series}={value!r}" if request.series else "")
                + f"; filter on {', '.join(free) or 'another key'} or name series="
            )
        seen.add((value, x))
        units.add(figure.unit)
        figures.append(figure)
        groups.setdefault(value, []).append(_point(x, figure))
    if not groups:
        raise SelectionError(f"{where}: no selected row has the metric {request.y!r}")
    if len(units) > 1:
        raise LabError(f"{where}: metric {request.y!r} comes in several units ({', '.join(sorted(units))})")
    out = []
    for value, points in groups.items():
        if all(isinstance(p.x, (int, float)) and not isinstance(p.x, bool) for p in points):
            points = sorted(points, key=lambda p: p.x)
        key = case_value(value) if request.series else None
        label = request.legend.get(key, key) if key is not None else None
        out.append(Series(label, tuple(points), key))
    return out, units.pop(), figures

