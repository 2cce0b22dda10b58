"""Appendix A and the landing page's machines: generated from the records, complete.

``lab_site.generated`` turns ``<!-- lab:generated NAME -->`` into Markdown from the loaded
records; these tests load the book's own records the way the build does.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "overrides" / "hooks"))

from lab_site import LabError, generated, store  # noqa: E402
from tests.test_build import page_claims  # noqa: E402

PRIMARY = "nvidia-h200"


class _Loader(yaml.SafeLoader):
    pass


_Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)


@pytest.fixture(scope="module")
def book():
    roots = store.roots_from(REPO, REPO / "docs", ["docs/records"], None)
    loaded = store.load(roots, REPO)
    assert not loaded.broken, loaded.broken
    nav = yaml.load((REPO / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_Loader)["nav"]
    return loaded, generated.nav_pages(nav, REPO / "docs")


@pytest.fixture(scope="module")
def fixtures():
    """The fixture records: three runs of an H200 (one figure noisy, one stale run left out), a skipped A100."""
    return store.load([store.Root(0, REPO / "tests" / "fixtures" / "records", "records", None, False)], REPO)


def _section(text: str, topic: str) -> str:
    return text.split(f"### `{topic}`", 1)[1].split("\n### ", 1)[0]


def test_every_run_is_listed_with_provenance_and_the_commands_that_reproduce_it(book):
    loaded, pages = book
    text = generated.records(loaded, pages, PRIMARY, generated.relative_link("appendix-records.md"))
    for group in loaded.groups:
        section = _section(text, group.topic)
        assert f'"{group.label}"' in section  # the machine's tab
        for entry in group.runs:
            run = entry.record.run
            assert f"`{run.command}`" in section
            assert f"| [`{entry.run_id}`]({entry.site_uri}) | {run.date[:10]} |" in section
        assert f"`python -m examples.lab run {group.topic} --out DIR`" in section
        assert ("**stale**" in section) == any(g.stale for g in loaded.groups if g.topic == group.topic)
        for row in group.runs[-1].record.results:  # every figure: a line with its metric
            for name in row.metrics:
                assert f"| {name} |" in section, (group.topic, name)
    # Grouped under the chapter that first shows the topic, in the order of the book.
    chapters = re.findall(r"^## \[(.+?)\]\((.+?)\)$", text, re.M)
    order = [p.src for p in pages]
    assert [src for _, src in chapters] == sorted({src for _, src in chapters}, key=order.index)


def test_a_summary_counts_figures_and_noisy_ones_per_machine(book, fixtures):
    loaded, pages = book
    head = generated.records(loaded, pages, PRIMARY, generated.relative_link("appendix-records.md")).split("\n## ")[0]
    total, noisy = map(int, re.match(r"(\d+) figures, (\d+) noisy \(their runs differ by more than 15 %", head).groups())
    # One line per machine of the book, whose figures add up to the total.
    per_machine = re.findall(r"^- .* \(`([a-z0-9-]+)`\): (\d+) figures? of (\d+) topics?, runs per topic: ([0-9–]+), "
                             r"(\d+) noisy", head, flags=re.M)
    assert {slug for slug, *_ in per_machine} == {g.slug for g in loaded.groups if g.root.index == 0}
    assert sum(int(f) for _, f, *_ in per_machine) == total
    assert sum(int(n) for *_, n in per_machine) == noisy < total
    # The book's figures come from at least 3 runs each.
    assert all(int(runs.split("–")[0]) >= 3 for *_, runs, _ in per_machine)
    summary = generated.summary(fixtures)
    assert summary.startswith("14 figures, 1 noisy")
    assert "- NVIDIA H200 (`nvidia-h200`): 6 figures of 1 topic, runs per topic: 3, 1 noisy" in summary
    assert "- CPU: AMD EPYC 9654 96-Core Processor (`cpu-amd-epyc-9654-96-core-processor`): 2 figures" in summary
    assert "A100" not in summary  # it measured nothing


def test_figures_show_their_run_to_run_range_and_flag_noisy_ones(fixtures):
    text = generated.records(fixtures, [], "nvidia-h200", lambda e: e.site_uri)
    h200 = text.split('"NVIDIA H200"', 1)[1].split('=== "', 1)[0]
    lines = h200.splitlines()
    assert any(line.strip().startswith("| layers | mode | metric | median | run to run | runs | > 15 % |")
               for line in lines)
    noisy = next(line for line in lines if "| 8 | eager | time |" in line)
    assert "400–480\u00a0µs | 3 |" in noisy and 'class="lab-noisy"' in noisy and "⚠" in noisy
    calm = next(line for line in lines if "| 32 | eager | time |" in line)
    assert "1,610–1,650\u00a0µs | 3 |" in calm and "⚠" not in calm
    assert '??? abstract "6 figures, 1 noisy"' in h200
    # Every run, the stale one left out included, with its boot, commit and wall time.
    assert "| [`run-2`](records/nvidia-h200/fixture.launch/run-2.json) | 2026-11-21 | `22222222` | 0123456 | 12 s | yes |" \
        in h200
    assert "| [`run-0`](records/nvidia-h200/fixture.launch/run-0.json) | 2026-11-10 | `00000000` | 0123456 | 12 s | " \
           "no: stale, newer runs exist |" in h200
    h100 = text.split('"NVIDIA H100 80GB HBM3"', 1)[1].split('=== "', 1)[0]
    assert "| [`v1`](records/nvidia-h100-80gb-hbm3/fixture.launch.json) | 2026-11-18 | — | 0123456 | — | " \
           "yes (stale) |" in h100
    iqr = "IQR within a run 31.9\u00a0µs (q3 − q1, median over runs)"  # the spread within a run, on hover
    assert f'| 8 | eager | time | <span title="{iqr}">455\u00a0µs</span> | — | 1 |' in h100


def test_a_skipped_record_is_listed_as_skipped_not_an_error(fixtures):
    text = generated.records(fixtures, [], "nvidia-h200", lambda e: e.site_uri)
    a100 = text.split('=== "NVIDIA A100-SXM4-80GB"', 1)[1]
    assert a100.lstrip().startswith("skipped: one GPU: a collective needs at least two")
    assert "[record (JSON)](records/nvidia-a100-sxm4-80gb/fixture.launch.json)" in a100


def test_every_claim_of_the_pages_has_its_verdict_with_its_runs(book):
    loaded, pages = book
    text = generated.claims(loaded, pages, PRIMARY)
    rows = [line for line in text.splitlines()[2:] if line.startswith("|")]
    written = sorted(claim.describe() for _, claim in page_claims())
    shown = sorted(re.search(r"\| `(.+?)` \|", row).group(1) for row in rows)
    assert shown == written
    for row in rows:
        assert "lab-claim--holds" in row and "lab-claim--violated" not in row  # or the build fails
        assert re.search(r"✓ [^<]+ \(\d+ runs?\)</span>", row), row


def test_the_machines_table_comes_from_the_records(book):
    loaded, _ = book
    text = generated.machines(loaded, PRIMARY)
    rows = text.splitlines()[2:]
    slugs = {g.slug for g in loaded.groups}
    assert len(rows) == len(slugs) and rows[0].startswith(f"| `{PRIMARY}` |")
    h200 = next(g for g in loaded.groups if g.slug == PRIMARY).record.machine
    for value in (h200.gpu_name, h200.driver, h200.cuda, h200.torch, str(h200.sm_count)):
        assert value in rows[0]
    cells = [c.strip() for c in rows[0].split("|")]
    assert cells[-4] == str(sum(g.slug == PRIMARY for g in loaded.groups))  # topics
    runs = sorted({len(g.runs) for g in loaded.groups if g.slug == PRIMARY})
    assert cells[-3] == (str(runs[0]) if len(runs) == 1 else f"{runs[0]}–{runs[-1]}")  # runs per topic


def test_markers_expand_alone_on_their_line_and_never_in_code():
    page = "a\n<!-- lab:generated glossary -->\n```\n<!-- lab:generated glossary -->\n```\n"
    out = generated.expand(page, lambda name: f"[{name}]")
    assert out == "a\n\n[glossary]\n\n```\n<!-- lab:generated glossary -->\n```\n"
    with pytest.raises(LabError, match="alone on its line"):
        generated.expand("see <!-- lab:generated records --> here\n", lambda name: "")


def test_an_unknown_section_is_an_error(book):
    loaded, _ = book
    with pytest.raises(LabError, match="unknown generated section 'figures'"):
        generated.render_named("figures", store=loaded, primary=PRIMARY, nav=[], docs_dir=REPO / "docs",
                               glossary_path=REPO / "snippets" / "glossary.md", page_src="x.md")


def test_the_pages_use_the_markers():
    assert "<!-- lab:generated records -->" in (REPO / "docs" / "appendix-records.md").read_text(encoding="utf-8")
    assert "<!-- lab:generated claims -->" in (REPO / "docs" / "appendix-records.md").read_text(encoding="utf-8")
    assert "<!-- lab:generated machines -->" in (REPO / "docs" / "index.md").read_text(encoding="utf-8")
