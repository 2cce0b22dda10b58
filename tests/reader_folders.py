"""Readers' folders made from the book's real records: odd ones the book cannot use, and broken ones.

A reader's ``lab run`` may be a quick run, an older or newer version of an example, a GPU the book
has never seen; its folder may hold a file cut short or edited by hand. :func:`odd_folder` writes
such a folder from the book's own H200 runs, one machine slug per kind of oddity (so each is its
own group of runs, its own tab): every record in it is valid, or, under ``broken/``, deliberately
not (a renamed metric also loses its declaration as a signed difference, so a negative one
is refused: that file is left out as it loads). ``tests/test_reader_records.py`` builds the book with it, strictly, and checks that the build
passes, that each record that could not be used is reported with its file and reason, and that
the usable ones show.
"""
from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path

from examples.lab.records import BOOK_RECORDS, load_records

#: The oddities, each a change to one record's JSON; every result is a valid record.
def _renamed_metrics(data: dict) -> None:
    """An older or newer example: every figure under another name (no shortcode finds its figure)."""
    for row in data["results"]:
        row["metrics"] = {f"{name}_v2": m for name, m in row["metrics"].items()}


def _renamed_cases(data: dict) -> None:
    """Every case key under another name (no row matches a shortcode's case)."""
    for row in data["results"]:
        row["case"] = {f"{key}_v2": value for key, value in row["case"].items()}


def _texts(data: dict) -> None:
    """Every case value a string (``"8"`` where the book has ``8``): plots cannot place them on an axis."""
    for row in data["results"]:
        row["case"] = {key: str(value) for key, value in row["case"].items()}


def _zeros(data: dict) -> None:
    """Every figure zero (a log axis cannot draw it; a ratio of two is undefined)."""
    for row in data["results"]:
        for m in row["metrics"].values():
            for stat in ("median", "q1", "q3", "min", "max"):
                if m.get(stat) is not None:
                    m[stat] = 0.0


def _other_units(data: dict) -> None:
    """Every figure in a unit the book does not use for it (``furlongs``)."""
    for row in data["results"]:
        for m in row["metrics"].values():
            m["unit"] = "furlongs"


def _notes_only(data: dict) -> None:
    """Figures gone, notes kept (an example that failed half way, say)."""
    data["results"] = []
    data["notes"] = data["notes"] or {"observed": "nothing measured"}


def _odd_notes(data: dict) -> None:
    """Every note replaced by a number (a timeline or a table of notes cannot be read from it)."""
    data["notes"] = {key: 1 for key in data["notes"]} or {"observed": 1}


ODDITIES: dict[str, Callable[[dict], None]] = {
    "renamed-metrics": _renamed_metrics,
    "renamed-cases": _renamed_cases,
    "text-cases": _texts,
    "zeros": _zeros,
    "other-units": _other_units,
    "notes-only": _notes_only,
    "odd-notes": _odd_notes,
}

#: Files the loader refuses, under ``broken/`` (a machine slug of their own): name -> (text, reason said).
def _broken(good: dict) -> dict[str, tuple[str, str]]:
    negative = copy.deepcopy(good)
    metric = next(m for row in negative["results"] for m in row["metrics"].values() if m["unit"] in ("us", "ms"))
    metric["min"] = -abs(metric["median"])
    unordered = copy.deepcopy(good)
    metric = next(m for row in unordered["results"] for m in row["metrics"].values() if m.get("q1") is not None)
    metric["q1"], metric["q3"] = metric["q3"], metric["q1"]
    return {
        "cut-short": (json.dumps(good)[:200], "not JSON"),
        "negative-duration": (json.dumps(negative), "is negative"),
        "quartiles-swapped": (json.dumps(unordered), "out of the order"),
    }


def book_runs(slug: str = "nvidia-h200") -> dict[str, dict]:
    """One run per one-GPU topic of the book's ``slug`` records, as JSON data (the latest run of each)."""
    latest: dict[str, dict] = {}
    for record in sorted(load_records(BOOK_RECORDS), key=lambda r: r.run.date):
        if record.machine.slug == slug and record.machine.gpu_count == 1:
            latest[record.topic] = json.loads(record.model_dump_json())
    return latest


def odd_folder(root: Path, topics: list[str] | None = None,
               oddities: list[str] | None = None) -> dict[str, list[Path]]:
    """Write the readers' odd records under ``root``: ``<root>/reader-<oddity>/<topic>/<run>.json`` for
    every oddity (or those of ``oddities``) and topic (every one-GPU topic of the book, or ``topics``),
    and the broken files under ``<root>/reader-broken/``. Returns the files written per oddity (and
    ``"broken"``)."""
    runs = book_runs()
    written: dict[str, list[Path]] = {}
    for oddity, change in ODDITIES.items():
        if oddities is not None and oddity not in oddities:
            continue
        slug = f"reader-{oddity}"
        for topic, good in runs.items():
            if topics is not None and topic not in topics:
                continue
            data = copy.deepcopy(good)
            change(data)
            run_id = f"odd-{oddity}"
            data["machine"].update(slug=slug, gpu_name=f"Reader GPU ({oddity})")
            data["run"]["id"] = run_id
            if not data["results"] and not data["notes"]:
                continue
            path = root / slug / topic / f"{run_id}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(data, indent=1), encoding="utf-8")
            written.setdefault(oddity, []).append(path)
    good = runs["graphs.launch_cost"]
    for name, (text, _) in _broken(good).items():
        path = root / "reader-broken" / "graphs.launch_cost" / f"{name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.setdefault("broken", []).append(path)
    return written


def broken_reasons() -> dict[str, str]:
    """What the report says of each broken file (by its name)."""
    return {name: reason for name, (_, reason) in _broken(book_runs()["graphs.launch_cost"]).items()}
