"""A profiler timeline kept in a record's notes, read and checked for ``lab:timeline``.

The note (one key of a run's ``notes``) is a mapping::

    {"unit": "us",                                  # ns, us, ms or s
     "panels": [                                    # one subplot each, stacked
       {"title": "eager decode step, batch 1",
        "span": [0.0, 812.5],                       # the panel's x range, in unit
        "lanes": [                                  # rows of bars, top to bottom
          {"name": "NVTX", "events": [[0.0, 812.5, "decode step"]]},
          {"name": "GPU: kernels", "events": [[15.0, 17.2, "gemv"]]}]}]}

An event is ``[start, end, label]``, times relative to the panel's start, with
``span[0] <= start <= end <= span[1]``. A lane may have no events (an idle GPU).
Anything else is a :class:`~lab_site.LabError` that names the topic, the machine and
the place in the note; a group whose latest run has no such note raises
:class:`~lab_site.figures.SelectionError`, so its tab is left out as ``lab:notes`` does.
"""
from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass

from lab_site import LabError
from lab_site.figures import SelectionError
from lab_site.store import Group

UNITS = ("ns", "us", "ms", "s")
_NOTE_KEYS = {"unit", "panels"}
_PANEL_KEYS = {"title", "span", "lanes"}
_LANE_KEYS = {"name", "events"}


@dataclass(frozen=True)
class Event:
    start: float
    end: float
    label: str


@dataclass(frozen=True)
class Lane:
    name: str
    events: tuple[Event, ...]


@dataclass(frozen=True)
class Panel:
    title: str
    span: tuple[float, float]
    lanes: tuple[Lane, ...]


@dataclass(frozen=True)
class Timeline:
    unit: str
    panels: tuple[Panel, ...]

    @property
    def lane_names(self) -> list[str]:
        """Every lane's name once, in order of first appearance (one colour each)."""
        return list(dict.fromkeys(lane.name for panel in self.panels for lane in panel.lanes))


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _keys(where: str, value, wanted: set[str], what: str) -> None:
    if not isinstance(value, dict):
        raise LabError(f"{where} is not a mapping ({what}), but {type(value).__name__}")
    missing = sorted(wanted - set(value))
    if missing:
        raise LabError(f"{where} has no {', '.join(map(repr, missing))} (it needs {', '.join(sorted(wanted))})")
    unknown = sorted(set(value) - wanted)
    if unknown:
        raise LabError(f"{where} has unknown key(s) {', '.join(map(repr, unknown))} "
                       f"(it takes {', '.join(sorted(wanted))})")


def _event(where: str, value, span: tuple[float, float]) -> Event:
    if not (isinstance(value, (list, tuple)) and len(value) == 3 and _number(value[0]) and _number(value[1])
            and isinstance(value[2], str)):
        raise LabError(f"{where} is not [start, end, label] (two numbers and a string): {value!r}")
    start, end, label = float(value[0]), float(value[1]), value[2]
    if start > end:
        raise LabError(f"{where} ({label!r}) starts after it ends ({start:g} > {end:g})")
    if start < span[0] or end > span[1]:
        raise LabError(f"{where} ({label!r}, {start:g} to {end:g}) lies outside the panel's span "
                       f"{span[0]:g} to {span[1]:g}")
    return Event(start, end, label)


def _panel(where: str, value) -> Panel:
    _keys(where, value, _PANEL_KEYS, "title, span, lanes")
    title = value["title"]
    if not isinstance(title, str) or not title.strip():
        raise LabError(f"{where}.title is not a non-empty string: {title!r}")
    span = value["span"]
    if not (isinstance(span, (list, tuple)) and len(span) == 2 and all(map(_number, span)) and span[0] < span[1]):
        raise LabError(f"{where}.span is not [start, end] with start < end: {span!r}")
    span = (float(span[0]), float(span[1]))
    lanes = value["lanes"]
    if not isinstance(lanes, list) or not lanes:
        raise LabError(f"{where}.lanes is not a non-empty list")
    out: list[Lane] = []
    for i, lane in enumerate(lanes):
        at = f"{where}.lanes[{i}]"
        _keys(at, lane, _LANE_KEYS, "name, events")
        name = lane["name"]
        if not isinstance(name, str) or not name.strip():
            raise LabError(f"{at}.name is not a non-empty string: {name!r}")
        if any(lane_.name == name for lane_ in out):
            raise LabError(f"{at}: panel {title!r} has two lanes named {name!r}")
        events = lane["events"]
        if not isinstance(events, list):
            raise LabError(f"{at}.events is not a list")
        out.append(Lane(name, tuple(_event(f"{at}.events[{j}]", e, span) for j, e in enumerate(events))))
    return Panel(title, span, tuple(out))


def parse(note) -> Timeline:
    """The :class:`Timeline` of one note; a :class:`LabError` (saying where) if it is not one."""
    _keys("the note", note, _NOTE_KEYS, "unit, panels")
    unit = note["unit"]
    if unit not in UNITS:
        raise LabError(f"the note's unit {unit!r} is not one of {', '.join(UNITS)}")
    panels = note["panels"]
    if not isinstance(panels, list) or not panels:
        raise LabError("the note's panels are not a non-empty list")
    return Timeline(unit, tuple(_panel(f"panels[{i}]", p) for i, p in enumerate(panels)))


def of_group(group: Group, key: str) -> Timeline:
    """The timeline in note ``key`` of ``group``'s latest run."""
    notes = group.record.notes
    if key not in notes:
        raise SelectionError(f"topic {group.topic} on {group.slug} has no note {key!r} in its latest run "
                             f"{group.runs[-1].run_id} (notes: {', '.join(notes) or 'none'})")
    try:
        return parse(notes[key])
    except LabError as exc:
        raise LabError(f"note {key!r} of topic {group.topic} on {group.slug} (run {group.runs[-1].run_id}) "
                       f"is not a timeline: {exc}") from None


def csv_text(timeline: Timeline) -> str:
    """A timeline's events as a plot's download holds them: one row per event, times in its unit."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["panel", "lane", "start", "end", "unit", "label"])
    for panel in timeline.panels:
        for lane in panel.lanes:
            for e in lane.events:
                writer.writerow([panel.title, lane.name, repr(e.start), repr(e.end), timeline.unit, e.label])
    return buffer.getvalue()
