"""The records a build can show: where they live, which are current, how runs group.

Records live in ``<root>/<machine slug>/<topic>/<run id>.json`` (schema 2; the legacy
``<root>/<machine slug>/<topic>.json`` of schema 1 loads as run ``v1``). The book's own
root comes first (``docs/records``); further roots (a reader's own runs) follow and are
labelled with their folder name. Every file is validated with the lab's own loader; a
file of the book's own that does not load is kept as *broken* with its message, so the page
that asks for its topic can say which page and which file, and the build can still fail on
broken files no page uses. A reader's file that does not load is *left out* instead
(:attr:`Store.left_out`, with its reason): a reader's folder never breaks the book.

A page shows *groups*, not files: the runs of one topic on one kind of machine under
one root (:class:`Group`). When some runs of a group are current and others were made
by code that has changed since, only the current ones count; when none is current, only
the runs of the newest code version that was measured (stale, and shown so). A legacy record that
skipped its topic (empty results, a ``skipped`` note: one-GPU runs of multi-GPU topics
wrote these) belongs to no group; Appendix A lists it.
"""
from __future__ import annotations

import ast
import contextlib
import functools
import os
import posixpath
import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from examples.lab.provenance import source_sha256
from examples.lab.records import Record, RecordError, counted_runs, enough_runs, load_record, record_files

from lab_site import LabError

#: How a tab names runs on a GPU the book does not own, contributed to its records.
CONTRIBUTED = "contributed"


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
    """One loaded record (one run), with where it came from and whether its code has changed since."""

    record: Record
    path: Path
    root: Root
    site_uri: str
    stale: bool
    stale_reason: str | None = None
    #: A GPU the book does not own, whose records a reader contributed to the book's own folder.
    contributed: bool = False

    @property
    def slug(self) -> str:
        return self.record.machine.slug

    @property
    def is_gpu(self) -> bool:
        return self.record.machine.device == "cuda"

    @property
    def run_id(self) -> str:
        return self.record.run.id

    @property
    def skipped(self) -> str | None:
        """Why the run measured nothing, for a record that says it skipped its topic."""
        note = self.record.notes.get("skipped")
        return str(note) if not self.record.results and note is not None else None


@dataclass(frozen=True, eq=False)  # compared (and cached) by identity: its records are large
class Group:
    """The runs of one topic on one kind of machine under one root: what one tab shows."""

    root: Root
    topic: str
    runs: tuple[Entry, ...]  # the runs the figures come from, oldest first
    left_out: tuple[Entry, ...] = ()  # stale runs not counted: current ones, or a newer version's, exist
    multi_gpu: bool = False  # the topic's example runs on several GPUs at once

    @property
    def record(self) -> Record:
        """The latest run's record: the machine and software a tab names."""
        return self.runs[-1].record

    @property
    def site_uri(self) -> str:
        """The latest run's file, for a single link (a calculator's input)."""
        return self.runs[-1].site_uri

    @property
    def slug(self) -> str:
        """The machine's slug; for a multi-GPU topic run on several GPUs, with their count (``nvidia-h200-x4``)."""
        return group_slug(self.runs[-1], self.multi_gpu)

    @property
    def is_gpu(self) -> bool:
        return self.record.machine.device == "cuda"

    @property
    def provisional(self) -> bool:
        """A GPU figure of the book from fewer runs, or fewer machines, than a book figure needs
        (``records.enough_runs``): shown, and said to be provisional until it is measured again."""
        return self.is_gpu and self.root.index == 0 and not enough_runs([e.record.run.boot_id for e in self.runs])

    @property
    def stale(self) -> bool:
        """Every counted run is stale (a group with a current run counts only current runs)."""
        return self.runs[0].stale

    @property
    def stale_reason(self) -> str | None:
        return self.runs[-1].stale_reason

    @property
    def key(self) -> str:
        """Unique per group in a build: the folder of its runs in the site."""
        return f"{self.root.site_prefix}/{self.slug}/{self.topic}"

    @property
    def contributed(self) -> bool:
        """Runs on a GPU the book does not own, contributed to its records (``docs/records/<their gpu>/``)."""
        return self.runs[-1].contributed

    @property
    def label(self) -> str:
        """The tab title: the GPU's name (``2 × `` for a multi-GPU topic), or the host CPU; a reader's
        folder's name after it, or ``contributed``."""
        m = self.record.machine
        if self.is_gpu and m.gpu_name:
            name = f"{m.gpu_count} × {m.gpu_name}" if self.multi_gpu and m.gpu_count > 1 else m.gpu_name
        else:
            name = f"CPU: {m.host_cpu}"
        if self.root.label:
            return f"{name} · {self.root.label}"
        return f"{name} · {CONTRIBUTED}" if self.contributed else name

    @property
    def short_label(self) -> str:
        name = self.label
        return name.replace("NVIDIA ", "", 1)


@dataclass
class Store:
    #: Every record that loaded, skipped ones included (their files are served too).
    entries: list[Entry] = field(default_factory=list)
    #: Files that did not load: path -> message.
    broken: dict[Path, str] = field(default_factory=dict)
    #: The topic each broken file's path names.
    broken_topics: dict[Path, str] = field(default_factory=dict)
    groups: list[Group] = field(default_factory=list)
    #: A reader's files the book cannot use: path -> why. Reported by the hook, never fatal.
    left_out: dict[Path, str] = field(default_factory=dict)
    #: Group keys :meth:`topic` leaves out for now (:meth:`hiding`).
    hidden: frozenset[str] = frozenset()

    @contextlib.contextmanager
    def hiding(self, keys: Iterable[str]):
        """Within the block, :meth:`topic` (and so every lookup) leaves out the groups of ``keys``:
        the hook renders a shortcode again without a reader's group that breaks it."""
        before, self.hidden = self.hidden, frozenset(keys)
        try:
            yield
        finally:
            self.hidden = before

    def drop(self, group: Group, reason: str) -> None:
        """Leave a reader's ``group`` out of the whole build (its files with ``reason``)."""
        assert group.root.index > 0, "the book's own records are never left out"
        self.groups = [g for g in self.groups if g is not group]
        files = {id(e) for e in (*group.runs, *group.left_out)}
        for e in (*group.runs, *group.left_out):
            self.left_out[e.path] = reason
        self.entries = [e for e in self.entries if id(e) not in files]

    @property
    def skipped(self) -> list[Entry]:
        return [e for e in self.entries if e.skipped]

    def broken_for(self, topic: str) -> dict[Path, str]:
        return {p: msg for p, msg in self.broken.items() if self.broken_topics.get(p) == topic}

    def topic(self, topic: str, primary: str | None = None) -> list[Group]:
        """The groups of ``topic``: GPUs first (the primary machine first of all, its multi-GPU
        groups too: ``nvidia-h200-x2`` is the primary's), then CPUs."""
        broken = self.broken_for(topic)
        if broken:
            path, message = next(iter(broken.items()))
            raise LabError(f"record {path} of topic {topic} is malformed: {message}")
        found = [g for g in self.groups if g.topic == topic and g.key not in self.hidden]
        # The primary machine's kind first (its 2- and 4-GPU machines too), that machine itself first.
        return sorted(found, key=lambda g: (not g.is_gpu, primary is None or not of_kind(g.slug, primary),
                                            g.slug != primary, g.root.index, g.label))

    def gpu(self, topic: str, primary: str | None = None) -> list[Group]:
        return [g for g in self.topic(topic, primary) if g.is_gpu]

    def machine(self, topic: str, slug: str | None, primary: str | None) -> Group:
        """The runs of ``topic`` on ``slug``; with no slug, the primary machine's, or else the first GPU's."""
        groups = self.topic(topic, primary)
        if not groups:
            raise LabError(f"no record of topic {topic} in any records folder")
        if slug is not None:
            for g in groups:
                if g.slug == slug:
                    return g
            have = ", ".join(sorted({g.slug for g in groups}))
            raise LabError(f"no record of topic {topic} on machine {slug} (machines with it: {have})")
        gpus = [g for g in groups if g.is_gpu]
        if not gpus:
            raise LabError(f"no GPU record of topic {topic} (only {', '.join(g.slug for g in groups)})")
        return gpus[0]  # the primary machine (or one of its kind) sorts first when it has the topic


def of_kind(slug: str, kind: str) -> bool:
    """``nvidia-h200-x4`` is of kind ``nvidia-h200``; ``nvidia-h200`` is too; ``nvidia-h20`` is not."""
    return slug == kind or re.fullmatch(re.escape(kind) + r"-x\d+", slug) is not None


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


def load(roots: Iterable[Root], repo_root: Path, own: Collection[str] | None = None) -> Store:
    """Load and validate every record under ``roots``; check each against its source file; group the runs.

    ``own``: the kinds of GPU the book measured itself (``extra.lab.own_machines``); a machine of the
    book's own folder that is of none of them was contributed (None: every machine is the book's).
    """
    store = Store()
    hashes = _Hashes(repo_root)
    for root in roots:
        for path in record_files(root.path):
            relative = path.relative_to(root.path)
            try:
                record = load_record(path)
                stale, reason = hashes.staleness(record)
            except (RecordError, LabError, OSError, ValueError) as exc:
                if root.index > 0:  # a reader's file: reported and left out, the book builds
                    store.left_out[path] = " ".join(str(exc).removeprefix(f"{path}: ").split())
                    continue
                if not isinstance(exc, RecordError):
                    raise
                store.broken[path] = str(exc)
                # <slug>/<topic>.json (legacy) or <slug>/<topic>/<run>.json
                store.broken_topics[path] = relative.stem if len(relative.parts) == 2 else relative.parts[1]
                continue
            uri = posixpath.join(root.site_prefix, relative.as_posix())
            contributed = (root.index == 0 and own is not None
                           and not any(of_kind(record.machine.slug, kind) for kind in own))
            store.entries.append(Entry(record, path, root, uri, stale, reason, contributed))
    store.groups = group_runs([e for e in store.entries if not e.skipped], repo_root)
    return store


def group_runs(entries: Iterable[Entry], repo_root: Path) -> list[Group]:
    """One group per (root, machine, topic); current runs only where a group has any, else its newest
    code version's."""
    by_key: dict[tuple[int, str, str], list[Entry]] = {}
    roots: dict[int, Root] = {}
    multi: dict[str, bool] = {}
    for e in entries:
        topic = e.record.topic
        if topic not in multi:
            multi[topic] = min_gpus(repo_root / e.record.source) > 1
        # Runs of a multi-GPU topic on 2 and on 4 GPUs are different machines: separate groups.
        by_key.setdefault((e.root.index, group_slug(e, multi[topic]), topic), []).append(e)
        roots[e.root.index] = e.root
    groups = []
    for (index, _slug, topic), runs in by_key.items():
        runs.sort(key=lambda e: (e.record.run.date, e.run_id))
        shown = tuple(counted_runs(runs, version=lambda e: e.record.source_sha256, is_current=lambda e: not e.stale))
        counted = {id(e) for e in shown}
        left_out = tuple(e for e in runs if id(e) not in counted)
        groups.append(Group(roots[index], topic, shown, left_out, multi[topic]))
    return groups


def group_slug(entry: Entry, multi_gpu: bool) -> str:
    """``nvidia-h200`` for one GPU; ``nvidia-h200-x2`` for a multi-GPU topic that ran on two."""
    count = entry.record.machine.gpu_count
    return f"{entry.slug}-x{count}" if multi_gpu and entry.is_gpu and count > 1 else entry.slug


@functools.lru_cache(maxsize=None)
def min_gpus(source: Path) -> int:
    """``MIN_GPUS`` of an example (read, not imported: importing would pull in torch); 1 if unset or unreadable."""
    try:
        tree = ast.parse(source.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return 1
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "MIN_GPUS" for t in targets) \
                    and isinstance(node.value, ast.Constant) and isinstance(node.value.value, int):
                return node.value.value
    return 1


def source_hash(source: Path) -> str:
    """What a record's ``source_sha256`` is compared with: the runner's own hash
    (``examples.lab.provenance.source_sha256``: the example, every example module it
    imports and the harness), so the site and ``lab run --stale`` agree on what is stale.
    """
    try:
        return source_sha256(source)
    except SyntaxError as exc:
        raise LabError(f"{source}: not valid Python ({exc.msg}, line {exc.lineno}): cannot tell whether "
                       "its records are current") from None


class _Hashes:
    """Source hashes, computed once per file: many runs share one example."""

    def __init__(self, repo_root: Path):
        self.repo_root = repo_root
        self.cache: dict[str, str | None] = {}

    def staleness(self, record: Record) -> tuple[bool, str | None]:
        if record.source not in self.cache:
            source = self.repo_root / record.source
            self.cache[record.source] = source_hash(source) if source.is_file() else None
        return _verdict(record, self.cache[record.source])


def staleness(record: Record, repo_root: Path) -> tuple[bool, str | None]:
    """Whether the record was measured by code that has changed since (or is gone)."""
    source = repo_root / record.source
    return _verdict(record, source_hash(source) if source.is_file() else None)


def _verdict(record: Record, current: str | None) -> tuple[bool, str | None]:
    if current is None:
        return True, f"{record.source} no longer exists"
    if current != record.source_sha256:
        return True, changed_reason(record.source)
    return False, None


def changed_reason(source: str) -> str:
    """Why a record whose hash no longer matches is stale, naming what the hash covers.

    An example's hash covers the example, the example modules it imports and the lab
    harness (:func:`source_hash`), so the example's own file may well be unchanged: the
    reason names all three rather than blaming the file. A source that is not a Python
    module (the tests' stand-in text) is hashed alone, and so named alone.
    """
    if not source.endswith(".py"):
        return f"{source} has changed since this record was made"
    return (f"the code it measured with ({source}, the example modules it imports or the lab harness) "
            "has changed since this record was made")
