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


def test_every_record_is_listed_with_provenance_and_the_commands_that_reproduce_it(book):
    loaded, pages = book
    text = generated.records(loaded, pages, PRIMARY, generated.relative_link("appendix-records.md"))
    for entry in loaded.entries:
        topic = entry.record.topic
        assert f"### `{topic}`" in text
        section = text.split(f"### `{topic}`", 1)[1].split("\n### ", 1)[0]
        assert f'"{entry.label}"' in section  # the machine's tab
        assert f"`{entry.record.run.command}`" in section
        assert f"`python -m examples.lab run {topic} --out DIR`" in section
        assert f"record (JSON)]({entry.site_uri})" in section
        assert ("**stale**" in section) == any(e.stale for e in loaded.entries if e.record.topic == topic)
        for row in entry.record.results:  # every figure: each metric a column of the topic's table
            for name in row.metrics:
                assert f" {name} |" in section, (topic, name)
    # Grouped under the chapter that first shows the topic, in the order of the book.
    chapters = re.findall(r"^## \[(.+?)\]\((.+?)\)$", text, re.M)
    order = [p.src for p in pages]
    assert [src for _, src in chapters] == sorted({src for _, src in chapters}, key=order.index)


def test_every_claim_of_the_pages_has_its_verdict(book):
    loaded, pages = book
    text = generated.claims(loaded, pages, PRIMARY)
    rows = [line for line in text.splitlines()[2:] if line.startswith("|")]
    written = sorted(claim.describe() for _, claim in page_claims())
    shown = sorted(re.search(r"\| `(.+?)` \|", row).group(1) for row in rows)
    assert shown == written
    for row in rows:
        assert "lab-claim--holds" in row and "lab-claim--violated" not in row  # or the build fails


def test_the_machines_table_comes_from_the_records(book):
    loaded, _ = book
    text = generated.machines(loaded, PRIMARY)
    rows = text.splitlines()[2:]
    slugs = {e.slug for e in loaded.entries}
    assert len(rows) == len(slugs) and rows[0].startswith(f"| `{PRIMARY}` |")
    h200 = next(e for e in loaded.entries if e.slug == PRIMARY).record.machine
    for value in (h200.gpu_name, h200.driver, h200.cuda, h200.torch, str(h200.sm_count)):
        assert f"| {value} |" in rows[0]
    assert rows[0].split("|")[-3].strip() == str(sum(e.slug == PRIMARY for e in loaded.entries))


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
