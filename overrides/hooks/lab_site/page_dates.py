"""Under a chapter's title: on which GPUs, and on which days, its figures were measured.

The topics are those the page's shortcodes name; the runs are the ones its figures come
from (each topic's current runs in the book's own records folder, not a reader's).
"""
from __future__ import annotations

import re

from lab_site.fmt import date_span
from lab_site.shortcodes import SHORTCODE
from lab_site.store import Store, of_kind

#: Shortcodes whose first argument is a topic (a plot may name several, comma-separated).
_TOPICAL = {"value", "table", "plot", "claim", "notes", "timeline"}
#: A chapter's title ("# 4. torch.compile: ..."): the landing page and the appendices have their own.
_CHAPTER_TITLE = re.compile(r"^# \d+\. .+$", re.M)


def page_topics(markdown: str) -> set[str]:
    topics: set[str] = set()
    for match in SHORTCODE.finditer(markdown):
        if match.group(1) in _TOPICAL and match.group(2).split():
            topics.update(t for t in match.group(2).split()[0].split(",") if t)
    return topics


def _counts(counts: set[int]) -> str:
    ordered = [str(c) for c in sorted(counts)]
    listed = ordered[0] if len(ordered) == 1 else ", ".join(ordered[:-1]) + " and " + ordered[-1]
    return f"{listed} GPU{'s' if ordered != ['1'] else ''}"


def measured_on(markdown: str, store: Store, primary: str | None = None) -> str | None:
    """The line, or None for a page that shows no GPU figure; the primary GPU first."""
    topics = page_topics(markdown)
    by_gpu: dict[str, tuple[set[int], list[str]]] = {}
    primary_names: set[str] = set()
    for group in store.groups:
        if group.topic not in topics or not group.is_gpu or group.root.index != 0:
            continue
        for entry in group.runs:
            machine = entry.record.machine
            name = machine.gpu_name or group.slug
            if primary and of_kind(group.slug, primary):
                primary_names.add(name)
            counts, dates = by_gpu.setdefault(name, (set(), []))
            counts.add(machine.gpu_count or 1)
            dates.append(entry.record.run.date)
    if not by_gpu:
        return None
    parts = [f"{name} ({_counts(counts)}; {date_span(dates)})"
             for name, (counts, dates) in sorted(by_gpu.items(), key=lambda kv: (kv[0] not in primary_names, kv[0]))]
    listed = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return f"Figures measured on {listed}, UTC."


def with_measured_on(markdown: str, store: Store, primary: str | None = None) -> str:
    """A chapter's ``markdown`` with the line as a paragraph under its title."""
    title = _CHAPTER_TITLE.search(markdown)
    line = measured_on(markdown, store, primary) if title else None
    if line is None:
        return markdown
    return (markdown[:title.end()] + "\n\n" + line + "\n{ .lab-measured-on }\n" + markdown[title.end():])


def built_from(repo) -> str:
    """Which commit of the book the site was built from: ``commit 1a2b3c4 of 2026-11-27``,
    with a note when the working tree differed from it, or that the copy has no git history."""
    from examples.lab.provenance import _run  # a command's output, or None when it fails

    def git(*args: str) -> str | None:
        return _run("git", "-C", str(repo), *args)

    top = git("rev-parse", "--show-toplevel")
    if not top or str(repo.resolve()) != str(type(repo)(top).resolve()):
        return "This site was built from a copy of the book without its git history."
    commit, day = (git("log", "-1", "--format=%h %cs") or " ").split(" ", 1)
    changed = git("status", "--porcelain", "--", "docs", "examples", "overrides", "snippets", "mkdocs.yml")
    note = ", with uncommitted changes to its pages or code" if changed else ""
    return f"This site was built from commit `{commit}` of {day}{note}."
