"""The rows of a record shaped for a line plot: one series per value of a case key."""
from __future__ import annotations

from lab_site import LabError
from lab_site.plot import Point, Series
from lab_site.shortcodes import PlotRequest
from lab_site.store import Entry, SelectionError, select


def series_of(request: PlotRequest, entry: Entry) -> tuple[list[Series], str]:
    """The series of ``request`` in ``entry`` and the unit of its y metric.

    Every selected row must have the x key (and the series key, if one is named);
    rows without the y metric are left out, but at least one must have it. Two rows at
    the same x of the same series mean the filters leave a key free: that is an error.
    """
    rows = select(entry, request.where)
    where = f"topic {entry.record.topic} on {entry.slug}"
    groups: dict[object, list[Point]] = {}
    seen: set[tuple] = set()
    units: set[str] = set()
    for row in rows:
        for key in (request.x, request.series):
            if key is not None and key not in row.case:
                raise LabError(f"{where}: a row has no case key {key!r} (keys: {', '.join(row.case)})")
        m = row.metrics.get(request.y)
        if m is None:
            continue
        x = row.case[request.x]
        group = row.case[request.series] if request.series else None
        if (group, x) in seen:
            free = [k for k in row.case if k not in (request.x, request.series) and k not in request.where]
            raise LabError(
                f"{where}: several rows at {request.x}={x!r}"
                + (f" {request.series}={group!r}" if request.series else "")
                + f"; filter on {', '.join(free) or 'another key'} or name series="
            )
        seen.add((group, x))
        units.add(m.unit)
        groups.setdefault(group, []).append(Point(x, m.median, m.q1, m.q3))
    if not groups:
        raise SelectionError(f"{where}: no selected row has the metric {request.y!r}")
    if len(units) > 1:
        raise LabError(f"{where}: metric {request.y!r} comes in several units ({', '.join(sorted(units))})")
    out = []
    for group, points in groups.items():
        if all(isinstance(p.x, (int, float)) and not isinstance(p.x, bool) for p in points):
            points = sorted(points, key=lambda p: p.x)
        label = f"{request.series}={group}" if request.series else None
        out.append(Series(label, tuple(points)))
    return out, units.pop()
