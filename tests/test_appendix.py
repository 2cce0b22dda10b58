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

from lab_site import LabError, claims, generated, labels, store  # noqa: E402
from lab_site import markdown as render  # noqa: E402
from lab_site.fmt import NBSP  # noqa: E402
from examples.lab.records import RUNS_PER_KIND  # noqa: E402
from tests.fixtures import make_records as mk  # noqa: E402
from tests.hook_support import entry, grouped  # noqa: E402
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


def chapter_of_package() -> dict[str, str]:
    """package -> its chapter's page, read apart from the hook: each ``examples/<package>/__init__.py``
    says "Chapter N: ...", and the nav says which page is "N. ..."."""
    from tests.test_cross_references import chapter_pages

    page_of = {number: page for page, number in chapter_pages().items()}
    found = {}
    for init in sorted((REPO / "examples").glob("*/__init__.py")):
        number = re.match(r'"""Chapter (\d+):', init.read_text(encoding="utf-8"))
        if number:
            found[init.parent.name] = page_of[int(number[1])]
    return found


def test_every_run_is_listed_on_its_chapter_s_page_with_provenance_and_the_commands_that_reproduce_it(book):
    loaded, pages = book
    chapter_of = chapter_of_package()
    texts = {src: generated.records(loaded, pages, PRIMARY, generated.relative_link(f"appendix-records/{src}"), src)
             for src in dict.fromkeys(chapter_of.values())}
    assert not generated.records(loaded, pages, PRIMARY, generated.relative_link("appendix-records/index.md"), None)
    for group in loaded.groups:
        chapter = chapter_of[group.record.source.split("/")[1]]
        assert sum(f"### `{group.topic}` " in text for text in texts.values()) == 1, group.topic
        section = _section(texts[chapter], group.topic)  # on its chapter's page, and only there
        assert section.startswith(f" {{ #{group.topic.replace('.', '')} .lab-record }}")
        assert f'"{group.label}"' in section  # the machine's tab
        for entry in group.runs:
            run = entry.record.run
            assert f"`{run.command}`" in section
            assert f"| [`{entry.run_id}`](../{entry.site_uri}) | {run.date[:10]} |" in section
        assert f"`python -m examples.lab run {group.topic} --out DIR`" in section
        assert ("**stale**" in section) == any(g.stale for g in loaded.groups if g.topic == group.topic)
        for row in group.runs[-1].record.results:  # every figure: a line with its metric
            for name in row.metrics:
                # The metric in words, its identifier on hover (what a shortcode names).
                assert f'| <span title="{name}">{labels.metric_or_name(group.topic, name)}</span> |' in section, \
                    (group.topic, name)
    # Each page's topics in topic order.
    for text in texts.values():
        shown = re.findall(r"^### `(.+?)` ", text, re.M)
        assert shown == sorted(shown)


def test_a_summary_counts_figures_and_noisy_ones_per_machine(book, fixtures):
    loaded, pages = book
    head = generated.summary(loaded)
    total, noisy = map(int, re.match(r"(\d+) figures, (\d+) noisy \(their runs differ by more than 15 %", head).groups())
    # One line per machine of the book, whose figures add up to the total.
    per_machine = re.findall(r"^- .* \(`([a-z0-9-]+)`\): (\d+) figures? of (\d+) topics?, runs per topic: ([0-9–]+), "
                             r"(\d+) noisy", head, flags=re.M)
    assert {slug for slug, *_ in per_machine} == {g.slug for g in loaded.groups if g.root.index == 0}
    assert sum(int(f) for _, f, *_ in per_machine) == total
    assert sum(int(n) for *_, n in per_machine) == noisy < total
    # The book's figures come from at least 3 runs each, or their machine's line names them as
    # provisional (a multi-GPU machine lent too briefly to run them on two machines yet).
    for slug, _, _, runs, _ in per_machine:
        line = next(line for line in head.splitlines() if f"(`{slug}`)" in line)
        few = [g for g in loaded.groups if g.root.index == 0 and g.slug == slug and g.provisional]
        assert (int(runs.split("–")[0]) >= RUNS_PER_KIND) == (not few), slug
        for g in few:
            assert f"`{g.topic}` ({len(g.runs)} run" in line.split("provisional", 1)[1], (slug, g.topic)
    summary = generated.summary(fixtures)
    assert summary.startswith("14 figures, 1 noisy")
    assert "- NVIDIA H200 (`nvidia-h200`): 6 figures of 1 topic, runs per topic: 3, 1 noisy" in summary
    assert "- CPU: AMD EPYC 9654 96-Core Processor (`cpu-amd-epyc-9654-96-core-processor`): 2 figures" in summary
    assert "A100" not in summary  # it measured nothing


def test_figures_show_their_run_to_run_range_and_flag_noisy_ones(fixtures):
    text = generated.records(fixtures, [], "nvidia-h200", lambda e: e.site_uri, None)  # no chapter shows it
    h200 = text.split('"NVIDIA H200"', 1)[1].split('=== "', 1)[0]
    lines = h200.splitlines()
    assert any(line.strip().startswith("| layers | mode | metric | median, run to run | runs | > 15 % |")
               for line in lines)
    noisy = next(line for line in lines if '| 8 | eager | <span title="time">time</span> |' in line)
    assert "400–480\u00a0µs</span> | 3 |" in noisy and 'class="lab-noisy"' in noisy and "⚠" in noisy
    calm = next(line for line in lines if '| 32 | eager | <span title="time">time</span> |' in line)
    assert "1,610–1,650\u00a0µs</span> | 3 |" in calm and "⚠" not in calm
    assert '??? abstract "6 figures, 1 noisy"' in h200
    # The table's caption says what its ⚠ means, in words.
    assert f"{render.NOISY_LEGEND}\n        {{ .lab-caption }}" in h200
    # Every run, the stale one left out included, with its boot, commit and wall time.
    assert "| [`run-2`](records/nvidia-h200/fixture.launch/run-2.json) | 2026-11-21 | `22222222` | 0123456 | " \
           f"11{NBSP}s | yes |" in h200
    assert "| [`run-0`](records/nvidia-h200/fixture.launch/run-0.json) | 2026-11-10 | `00000000` | 0123456 | " \
           f"30{NBSP}s | no: stale, newer runs exist |" in h200
    h100 = text.split('"NVIDIA H100 80GB HBM3"', 1)[1].split('=== "', 1)[0]
    assert "| [`v1`](records/nvidia-h100-80gb-hbm3/fixture.launch.json) | 2026-11-18 | — | 0123456 | — | " \
           "yes (stale) |" in h100
    iqr = "IQR within a run 31.9\u00a0µs (q3 − q1, median over runs)"  # the spread within a run, on hover
    assert f'| 8 | eager | <span title="time">time</span> | <span title="{iqr}">455\u00a0µs</span> | 1 |' in h100


def test_a_skipped_record_is_listed_as_skipped_not_an_error(fixtures):
    text = generated.records(fixtures, [], "nvidia-h200", lambda e: e.site_uri, None)
    a100 = text.split('=== "NVIDIA A100-SXM4-80GB"', 1)[1]
    assert a100.lstrip().startswith("skipped: one GPU: a collective needs at least two")
    assert "[record (JSON)](records/nvidia-a100-sxm4-80gb/fixture.launch.json)" in a100


def test_every_claim_of_the_pages_has_its_verdict_with_its_runs(book):
    loaded, pages = book
    text = generated.claims(loaded, pages, PRIMARY)
    rows = [line for line in text.splitlines()[2:] if line.startswith("|")]
    written = sorted(claim.describe() for _, claim in page_claims())
    # the chapter's sentence, then "check: words: `the check`"
    shown = sorted(re.search(r"check: [^|`]+: `(.+?)`</small> \|", row).group(1) for row in rows)
    assert shown == written
    for row in rows:
        assert "lab-claim--violated" not in row  # or the build fails
        badges = re.findall(r'<span class="lab-claim lab-claim--(\w+)" title="[^"]*">([^<]+)</span>', row)
        assert badges, row
        for state, badge in badges:
            # A GPU whose stale records lack the claim's figure cannot check it (until it reruns);
            # every other GPU checks it in every run.
            if state == "unverified":
                assert badge.endswith(f"? {claims.UNVERIFIED}"), row
            else:
                assert state == "holds" and re.fullmatch(r".+ ✓ .+ \(\d+ runs?\)", badge), row


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


def test_a_marker_inside_an_admonition_expands_indented_as_it_is():
    page = '!!! note "When"\n\n    <!-- lab:generated measured -->\n'
    out = generated.expand(page, lambda name: "- one\n\n- two\n")
    assert out == '!!! note "When"\n\n\n    - one\n\n    - two\n\n'


def test_when_the_book_was_measured_is_read_from_its_records(book):
    loaded, _ = book
    text = generated.measured(loaded)
    lines = text.splitlines()
    assert lines and all(line.startswith("- ") for line in lines)
    spans = []  # (GPU name, first day, last day) of each line
    for line in lines:
        days = re.findall(r"\d{4}-\d\d-\d\d", line)
        assert days, line
        spans.append((line, days[0], days[-1]))
    for g in loaded.groups:
        if g.root.index == 0 and g.is_gpu:
            name, count = g.runs[0].record.machine.gpu_name, g.runs[0].record.machine.gpu_count
            days = sorted(e.record.run.date[:10] for e in g.runs)
            # its runs' days fall inside the span of a line naming its GPU (and count)
            assert any(name in line and (count > 1) == ("of one host" in line) and first <= days[0]
                       and days[-1] <= last for line, first, last in spans), (g.slug, days)


def test_an_unknown_section_is_an_error(book):
    loaded, _ = book
    with pytest.raises(LabError, match="unknown generated section 'figures'"):
        generated.render_named("figures", store=loaded, primary=PRIMARY, nav=[], docs_dir=REPO / "docs",
                               glossary_path=REPO / "snippets" / "glossary.md", page_src="x.md")


def test_the_pages_use_the_markers():
    overview = (REPO / "docs" / "appendix-records" / "index.md").read_text(encoding="utf-8")
    for name in ("seconds", "chapters", "summary", "elsewhere"):
        assert f"<!-- lab:generated {name} -->" in overview
    for page in chapter_of_package().values():  # one page of Appendix A per chapter, written by the build
        assert "<!-- lab:generated chapter -->" in (REPO / "docs" / "appendix-records" / page).read_text(encoding="utf-8")
    assert "<!-- lab:generated machines -->" in (REPO / "docs" / "index.md").read_text(encoding="utf-8")
    assert "<!-- lab:generated measured -->" in (REPO / "docs" / "index.md").read_text(encoding="utf-8")


# -- what re-measuring costs: seconds per topic and GPU kind ---------------------------------

def _cells(text: str, first: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith(f"| {first} |"))
    return [c.strip() for c in line.strip("|").split(" | ")][1:]


def test_the_seconds_table_renders_from_the_fixture_records(fixtures):
    """Three H200 runs of 12.5, 11.0 and 14.2 s; the H100's legacy record kept no time; a CPU is no GPU kind."""
    text = generated.seconds(fixtures, "nvidia-h200")
    assert text.startswith("| topic | H200 | H100 80GB HBM3 |\n|:--|--:|--:|\n")
    h200, h100 = _cells(text, "`fixture.launch`")
    assert h200 == f'13{NBSP}s <span class="lab-runs" title="the fastest and the slowest of 3 runs">11–14{NBSP}s</span>'
    assert h100 == f'<span title="{generated.NO_SECONDS}">—</span>'
    total_h200, total_h100 = _cells(text, "**one `lab run --all`**")
    assert total_h200.startswith(f"**13{NBSP}s** ") and total_h100 == "—"
    assert "CPU" not in text and generated.STALE_MARK not in text  # the stale H100 run has no time to mark


def test_the_memory_column_shows_each_topic_s_peak_and_a_dash_where_the_table_has_none(fixtures):
    needs = {"fixture.launch": {"gib": 2.345, "runs": 2, "gpus": ["NVIDIA H200", "NVIDIA H100 80GB HBM3"]}}
    text = generated.seconds(fixtures, "nvidia-h200", needs=needs)
    assert text.startswith(f"| topic | H200 | H100 80GB HBM3 | {generated.MEMORY_HEADER} |\n|:--|--:|--:|--:|\n")
    *_, peak = _cells(text, "`fixture.launch`")
    assert peak == ('<span title="the largest peak of 2 runs on NVIDIA H200, NVIDIA H100 80GB HBM3, per GPU">'
                    "2.3 GiB</span>")
    assert _cells(text, "**one `lab run --all`**")[-1] == ""  # no sum of peaks
    assert f"{generated.MEMORY_HEADER}: the most GPU memory" in text
    other = generated.seconds(fixtures, "nvidia-h200", needs={"another.topic": needs["fixture.launch"]})
    assert _cells(other, "`fixture.launch`")[-1] == "—"
    assert generated.MEMORY_HEADER not in generated.seconds(fixtures, "nvidia-h200", needs={})
    # A topic that parks what it can is measured capped; its smaller shapes (--model) follow it.
    capped = {"fixture.launch": {"gib": 21.0, "runs": 1, "gpus": ["NVIDIA H200"], "memory_limit_gib": 24.0},
              "fixture.launch@llama3.2-1b": {"gib": 5.2, "runs": 1, "gpus": ["NVIDIA H200"], "memory_limit_gib": 8.0}}
    *_, peak = _cells(generated.seconds(fixtures, "nvidia-h200", needs=capped), "`fixture.launch`")
    assert peak.startswith('<span title="the largest peak of 1 run on NVIDIA H200, per GPU, capped at 24 GiB')
    assert peak.endswith('21.0 GiB</span><br>llama3.2-1b: <span title="the largest peak of 1 run on NVIDIA H200, '
                         'per GPU, capped at 8 GiB (the topic keeps less on the GPU when it must)">5.2 GiB</span>')


def _run(m, topic, run_id, seconds, *, stale=False):
    record = mk.record(m, mk.rows({8: 100.0}, None, "cuda_event"), "0" * 64, run_id,
                       f"2026-11-2{run_id[-1]}T10:00:00+00:00", boot="0" * 8, wall_s=seconds, topic=topic,
                       source=f"examples/{topic.replace('.', '/')}.py")
    return entry(record, stale=stale)


def test_one_all_adds_up_each_topics_median_and_multi_gpu_topics_stand_apart():
    h200 = mk.machine("nvidia-h200", "cuda", "NVIDIA H200", 132)
    h100 = mk.machine("nvidia-h100-80gb-hbm3", "cuda", "NVIDIA H100 80GB HBM3", 132)
    two, four = (mk.machine("nvidia-h200", "cuda", "NVIDIA H200", 132, gpus=n) for n in (2, 4))
    assert store.min_gpus(REPO / "examples/collectives/ring_allreduce.py") > 1
    s = store.Store(groups=grouped(
        _run(h200, "graphs.launch_cost", "r1", 100.0), _run(h200, "graphs.launch_cost", "r2", 250.0),
        _run(h200, "graphs.launch_cost", "r3", 130.0),
        _run(h200, "stack.roofline", "r1", 50.0, stale=True),  # all its runs stale: still shown, marked
        _run(h100, "graphs.launch_cost", "r1", 3.04),  # the H100 lacks stack.roofline
        _run(two, "collectives.ring_allreduce", "r1", 11.0), _run(two, "collectives.ring_allreduce", "r2", 12.0),
        _run(four, "collectives.ring_allreduce", "r1", 15.0),
    ))
    text = generated.seconds(s, "nvidia-h200")
    single, multi = text.split("\n\n")[0], text.split("\n\n")[2]
    assert single.startswith("| topic | H200 | H100 80GB HBM3 |")
    assert _cells(single, "`graphs.launch_cost`") == [
        f'2{NBSP}min 10{NBSP}s <span class="lab-runs" title="the fastest and the slowest of 3 runs">'
        f'1{NBSP}min 40{NBSP}s – 4{NBSP}min 10{NBSP}s</span>', f"3.0{NBSP}s"]
    assert _cells(single, "`stack.roofline`") == [f"50{NBSP}s †", "—"]
    h200_total, h100_total = _cells(single, "**one `lab run --all`**")
    # 130 + 50 s; the fastest runs add up to 150 s, the slowest to 300 s.
    assert h200_total.startswith(f"**3{NBSP}min** <span") and f">2{NBSP}min 30{NBSP}s – 5{NBSP}min</span>" in h200_total
    assert h200_total.endswith(" †") and h100_total == f"**3.0{NBSP}s** (1 of 2 topics)"
    assert "collectives" not in single
    assert multi.startswith("| topic | 2 × H200 | 4 × H200 |")
    assert _cells(multi, "`collectives.ring_allreduce`")[1] == f"15{NBSP}s"
    assert _cells(multi, "**all of them**")[0].startswith(f"**12{NBSP}s** ")  # the median of 11 and 12: 11.5
    assert "(2 or 4 in these records)" in text
    assert text.endswith(f"† {generated.STALE_SECONDS[0].upper()}{generated.STALE_SECONDS[1:]}.")


def test_the_book_says_what_one_all_costs_on_each_of_its_gpus(book):
    loaded, _ = book
    nav = yaml.load((REPO / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_Loader)["nav"]
    text = generated.render_named("seconds", store=loaded, primary=PRIMARY, nav=nav, docs_dir=REPO / "docs",
                                  glossary_path=REPO / "snippets" / "glossary.md", page_src="appendix-records/index.md")
    single = text.split("\n\n")[0]
    chapter_of = chapter_of_package()
    for group in loaded.groups:
        # Each topic links to its records, on its chapter's page of the appendix (beside this one).
        row = f"| [`{group.topic}`]({chapter_of[group.record.source.split('/')[1]]}#{group.topic.replace('.', '')}) |"
        if group.is_gpu and not group.multi_gpu:
            assert row in single
        elif group.multi_gpu:
            assert row in text and row not in single
    assert single.splitlines()[0].startswith("| topic | H200 |")  # the primary machine first
    assert re.search(r"^\| \*\*one `lab run --all`\*\* \| \*\*\d", single, re.M)
    # Each one-GPU topic's peak GPU memory, from the runner's committed table, in the last column.
    needs = generated.memory_needs()
    assert single.splitlines()[0].endswith(f"| {generated.MEMORY_HEADER} |")
    for group in loaded.groups:
        if group.is_gpu and not group.multi_gpu:
            row = next(line for line in single.splitlines() if f"[`{group.topic}`]" in line)
            assert row.endswith(" |") and f'{needs[group.topic]["gib"]:.1f} GiB</span>' in row.rsplit(" | ", 1)[1], row
    assert "<!-- lab:generated seconds -->" in (REPO / "docs" / "appendix-records" / "index.md").read_text(encoding="utf-8")


# -- one page per chapter -----------------------------------------------------------------------

def _nav_appendix() -> list[str]:
    nav = yaml.load((REPO / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_Loader)["nav"]
    (section,) = [value for item in nav for title, value in item.items() if title.startswith("A. ")]
    return section


def test_the_nav_has_the_overview_then_a_page_per_chapter_in_chapter_order():
    from tests.test_cross_references import chapter_pages

    chapters = sorted(chapter_pages(), key=chapter_pages().get)
    assert _nav_appendix() == ["appendix-records/index.md", *(f"appendix-records/{page}" for page in chapters)]


def test_each_chapter_s_appendix_page_holds_exactly_its_topics_its_claims_and_the_filter(built_site, book):
    import html as html_mod

    from tests.test_cross_references import chapter_pages

    loaded, _ = book
    chapter_of = chapter_of_package()
    topics = {e.record.topic: chapter_of[e.record.source.split("/")[1]] for e in loaded.entries}
    claims_of = {}
    for page, claim in page_claims():
        claims_of.setdefault(page.name, []).append(claim)
    script = re.compile(r'<script src="(?:\.\./)+javascripts/appendix-filter\.js"></script>')
    seen = set()
    for page, number in chapter_pages().items():
        built = (built_site / "appendix-records" / page.removesuffix(".md") / "index.html").read_text(encoding="utf-8")
        title = re.search(r"<h1[^>]*>(.*?)<a", built, re.S).group(1)
        assert re.sub(r"<[^>]+>", "", title).startswith(f"A.{number} Chapter {number}: "), title
        # Exactly the topics of its chapter's examples, each once, as the filter's blocks.
        shown = re.findall(r'<h3 class="lab-record" id="([^"]+)">', built)
        wanted = sorted(t.replace(".", "") for t, src in topics.items() if src == page)
        assert sorted(shown) == wanted and wanted, page
        seen.update(shown)
        # Exactly the chapter's claims, in the block whose rows the filter shows or hides.
        claims_block = built.split('<div class="lab-appendix-claims">', 1)[1].split("</table>", 1)[0]
        rows = re.findall(r"<tr>(.*?)</tr>", claims_block, re.S)[1:]
        assert len(rows) == len(claims_of.get(page, [])) and rows, page
        checks = sorted(html_mod.unescape(re.search(r"<small>check: .*?<code>(.*?)</code>", row, re.S).group(1))
                        for row in rows)
        assert checks == sorted(c.describe().replace("`", "'") for c in claims_of[page]), page
        # The filter: its box (hidden until the script shows it) and the script, from the site itself.
        assert '<div class="lab-filter" data-lab-filter hidden>' in built
        assert '<input class="lab-filter__input" id="lab-filter-input" type="search"' in built
        assert 'aria-live="polite"' in built and script.search(built), page
    assert seen == {t.replace(".", "") for t in topics}  # every topic has its page
    assert (built_site / "javascripts" / "appendix-filter.js").is_file()
    # The overview stays where Appendix A was, short: the seconds and a link to each chapter's page.
    overview = (built_site / "appendix-records" / "index.html").read_text(encoding="utf-8")
    assert "lab-record" not in overview and "lab-appendix-claims" not in overview
    for page in chapter_pages():
        assert f'href="{page.removesuffix(".md")}/"' in overview


def test_the_filter_script_hides_blocks_and_counts_what_it_shows():
    js = (REPO / "docs" / "javascripts" / "appendix-filter.js").read_text(encoding="utf-8")
    for needle in (".lab-appendix-claims tbody tr", "h3.lab-record", "[data-lab-filter]", "Escape", "hidden",
                   "textContent", "Showing "):
        assert needle in js, needle
    assert not re.search(r"https?://|fetch\(|XMLHttpRequest", js)  # offline: it asks for nothing


def test_a_claim_s_links_lead_where_they_did_on_its_chapter():
    text = 'See [the roofline](stack.md#roof "t"), [above](#launch) and [NVIDIA](https://nvidia.com/a.md).'
    assert generated.rebase_links(text, "blas.md", "appendix-records/blas.md") == (
        'See [the roofline](../stack.md#roof "t"), [above](../blas.md#launch) and [NVIDIA](https://nvidia.com/a.md).')
    assert generated.rebase_links(text, "blas.md", "blas.md") == text


def test_the_chapter_marker_belongs_on_a_chapter_s_appendix_page(book):
    loaded, pages = book
    with pytest.raises(LabError, match="belongs on a chapter's page of Appendix A"):
        generated.chapter_page(loaded, pages, PRIMARY, "appendix-records/glossary.md")
