"""The records a build can show: where they live, which are current, which rows a page asks for.

Records live in ``<root>/<machine slug>/<topic>.json``. The book's own root comes first
(``docs/records``); further roots (a reader's own runs) follow and are labelled with their
folder name. Every file is validated with the lab's own loader; a file that does not
load is kept as *broken* with its message, so the page that asks for its topic can
say which page and which file, and the build can still fail on broken files no page uses.
"""
from __future__ import annotations

import math
import os
import posixpath
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from examples.lab.provenance import source_sha256
from examples.lab.records import Metric, Record, RecordError, Row, load_record

from lab_site import LabError
from lab_site.shortcodes import Scalar


class SelectionError(LabError):
    pass


@dataclass(frozen=True)
class Root:
    """One folder of records and where its files appear in the built site."""

    index: int  # position in the list of roots; the book's own is 0
    path: Path
    site_prefix: str  # src_uri prefix of its files in the site
    label: str | None  # None for the book's own records
    generated: bool  # True when the files are added to the site by the hook (root outside docs/)


@dataclass(frozen=True)
class Entry:
    """One loaded record, with where it came from and whether its code has changed since."""

    record: Record
    path: Path
    root: Root
    site_uri: str
    stale: bool
    stale_reason: str | None = None

    @property
    def slug(self) -> str:
        return self.record.machine.slug

    @property
    def is_gpu(self) -> bool:
        return self.record.machine.device == "cuda"

    @property
    def label(self) -> str:
        """The tab title: the GPU's name, or the host CPU for a CPU record."""
        m = self.record.machine
        name = m.gpu_name if self.is_gpu and m.gpu_name else f"CPU: {m.host_cpu}"
        return f"{name} · {self.root.label}" if self.root.label else name

    @property
    def short_label(self) -> str:
        name = self.label
        return name[len("NVIDIA "):] if name.startswith("NVIDIA ") else name


@dataclass
class Store:
    entries: list[Entry] = field(default_factory=list)
    #: Files that did not load: path -> message.
    broken: dict[Path, str] = field(default_factory=dict)

    def broken_for(self, topic: str) -> dict[Path, str]:
        return {p: msg for p, msg in self.broken.items() if p.stem == topic}

    def topic(self, topic: str, primary: str | None = None) -> list[Entry]:
        """The records of ``topic``: GPUs first (the primary machine first of all), then CPUs."""
        broken = self.broken_for(topic)
        if broken:
            path, message = next(iter(broken.items()))
            raise LabError(f"record {path} of topic {topic} is malformed: {message}")
        found = [e for e in self.entries if e.record.topic == topic]
        return sorted(found, key=lambda e: (not e.is_gpu, e.slug != primary, e.root.index, e.label))

    def gpu(self, topic: str, primary: str | None = None) -> list[Entry]:
        return [e for e in self.topic(topic, primary) if e.is_gpu]

    def machine(self, topic: str, slug: str | None, primary: str | None) -> Entry:
        """The record of ``topic`` on ``slug``; with no slug, the primary machine's, or else the first GPU's."""
        entries = self.topic(topic, primary)
        if not entries:
            raise LabError(f"no record of topic {topic} in any records folder")
        if slug is not None:
            for e in entries:
                if e.slug == slug:
                    return e
            have = ", ".join(sorted({e.slug for e in entries}))
            raise LabError(f"no record of topic {topic} on machine {slug} (machines with it: {have})")
        gpus = [e for e in entries if e.is_gpu]
        if not gpus:
            raise LabError(f"no GPU record of topic {topic} (only {', '.join(e.slug for e in entries)})")
        return gpus[0]  # the primary machine sorts first when it has the topic


def roots_from(config_dir: Path, docs_dir: Path, paths: Sequence[str], env_value: str | None) -> list[Root]:
    """The record roots: ``paths`` (relative to the config), then those in ``env_value``.

    ``env_value`` is a list of folders separated by ``os.pathsep`` (as ``PATH`` is).
    A root inside ``docs_dir`` is copied to the site by MkDocs itself; any other root's
    files are added by the hook under ``lab-records/<n>-<folder name>/``.
    """
    extra = [p for p in (env_value or "").split(os.pathsep) if p.strip()]
    roots: list[Root] = []
    for index, text in enumerate([*paths, *extra]):
        path = (config_dir / text).resolve()
        if not path.is_dir():
            source = "the environment" if index >= len(paths) else "extra.lab.record_roots"
            raise LabError(f"records folder {path} (from {source}) does not exist")
        label = None if index == 0 else path.name
        try:
            prefix = path.relative_to(docs_dir.resolve()).as_posix()
            generated = False
        except ValueError:
            prefix = f"lab-records/{index}-{path.name}"
            generated = True
        roots.append(Root(index, path, prefix, label, generated))
    return roots


def load(roots: Iterable[Root], repo_root: Path) -> Store:
    """Load and validate every record under ``roots``; check each against its source file."""
    store = Store()
    for root in roots:
        for path in sorted(root.path.glob("*/*.json")):
            try:
                record = load_record(path)
            except RecordError as exc:
                store.broken[path] = str(exc)
                continue
            stale, reason = staleness(record, repo_root)
            uri = posixpath.join(root.site_prefix, path.relative_to(root.path).as_posix())
            store.entries.append(Entry(record, path, root, uri, stale, reason))
    return store


def staleness(record: Record, repo_root: Path) -> tuple[bool, str | None]:
    """Whether the record was measured by code that has changed since (or is gone)."""
    source = repo_root / record.source
    if not source.is_file():
        return True, f"{record.source} no longer exists"
    if source_sha256(source) != record.source_sha256:
        return True, f"{record.source} has changed since this record was made"
    return False, None


# -- rows and metrics ------------------------------------------------------------------

def _same(a: Scalar, b: Scalar) -> bool:
    """Equal as JSON values: ``True`` is not ``1``, ``32`` is ``32.0``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return a == b


def select(entry: Entry, where: dict[str, Scalar]) -> list[Row]:
    """The rows of ``entry`` whose case has every ``key=value`` of ``where``; at least one."""
    rows = entry.record.results
    keys = {k for r in rows for k in r.case}
    for key in where:
        if key not in keys:
            raise SelectionError(
                f"topic {entry.record.topic} on {entry.slug} has no case key {key!r} "
                f"(keys: {', '.join(sorted(keys)) or 'none'})"
            )
    chosen = [r for r in rows if all(k in r.case and _same(r.case[k], v) for k, v in where.items())]
    if not chosen:
        seen = "; ".join(
            f"{k}: {', '.join(sorted({repr(r.case.get(k)) for r in rows}))}" for k in where
        )
        wanted = " ".join(f"{k}={v!r}" for k, v in where.items())
        raise SelectionError(
            f"no row of topic {entry.record.topic} on {entry.slug} has {wanted} (values seen: {seen})"
        )
    return chosen


def metric(entry: Entry, row: Row, name: str) -> Metric:
    found = row.metrics.get(name)
    if found is None:
        case = " ".join(f"{k}={v!r}" for k, v in row.case.items())
        raise SelectionError(
            f"topic {entry.record.topic} on {entry.slug} has no metric {name!r} for {case} "
            f"(metrics: {', '.join(row.metrics) or 'none'})"
        )
    return found


def stat(m: Metric, which: str) -> float:
    """One statistic of a metric: median, iqr, q1, q3 or n."""
    value = m.iqr if which == "iqr" else getattr(m, which)
    if value is None:
        raise SelectionError(f"the metric has no {which} (computed figures carry only a median)")
    if isinstance(value, float) and not math.isfinite(value):
        raise SelectionError(f"the metric's {which} is not finite")
    return value
