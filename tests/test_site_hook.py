"""The site's hooks without a build: shortcodes, record selection, formatting, claims, rendering.

Fixture records (``tests/fixtures/records/``, made by ``tests/fixtures/make_records.py``)
hold invented numbers for the made-up topic ``fixture.launch`` on three machines: an H200
and a CPU whose source hash is current, and an H100 whose hash is not (stale).
"""
from __future__ import annotations

import json
import logging
import re
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[1]
HOOKS = REPO / "overrides" / "hooks"
for path in (REPO, HOOKS):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from mkdocs.config import load_config  # noqa: E402
from mkdocs.exceptions import PluginError  # noqa: E402

from lab_site import LabError, claims, markdown, plot, shortcodes, store  # noqa: E402
from lab_site.fmt import NBSP, format_number, format_quantity, short_commit  # noqa: E402
from lab_site.series import series_of  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures"
TOPIC = "fixture.launch"
H200, H100 = "nvidia-h200", "nvidia-h100-80gb-hbm3"
CPU = "cpu-amd-epyc-9654-96-core-processor"


def req(text: str):
    return shortcodes.request(shortcodes.parse_text(text))


def root(path: Path, index: int = 0, prefix: str = "records") -> store.Root:
    return store.Root(index, path, prefix, None if index == 0 else path.name, False)


@pytest.fixture(scope="module")
def fixture_store() -> store.Store:
    return store.load([root(FIXTURES / "records")], REPO)


def entry(s: store.Store, slug: str) -> store.Entry:
    return next(e for e in s.entries if e.slug == slug)


# -- shortcode parsing -------------------------------------------------------------------

def test_options_parse_as_json_scalars_or_stay_strings():
    code = shortcodes.parse_text(
        '<!-- lab:table t.x a=32 b=1.5 c=true d=null e=eager f=NaN g=\'"32"\' h="two words" -->')
    assert code.name == "table" and code.positional == ("t.x",)
    assert code.options == {"a": 32, "b": 1.5, "c": True, "d": None, "e": "eager", "f": "NaN",
                            "g": "32", "h": "two words"}
    assert type(code.options["a"]) is int and type(code.options["b"]) is float


def test_each_shortcode_becomes_its_request():
    assert req("<!-- lab:table t.x metrics=time,speedup layers=32 -->") == \
        shortcodes.TableRequest("t.x", ("time", "speedup"), {"layers": 32})
    assert req('<!-- lab:plot t.x x=layers y=time series=mode logx=true title="A b" mode=eager -->') == \
        shortcodes.PlotRequest("t.x", "layers", "time", "mode", True, False, "A b", {"mode": "eager"})
    assert req("<!-- lab:value t.x time machine=nvidia-h200 stat=iqr layers=8 -->") == \
        shortcodes.ValueRequest("t.x", "time", "nvidia-h200", "iqr", {"layers": 8})
    assert req("<!-- lab:claim t.x speedup >= 2 mode=graph -->") == \
        shortcodes.ClaimRequest("t.x", "speedup", ">=", 2.0, {"mode": "graph"})
    assert req("<!-- lab:notes t.x keys=item,cpu -->") == shortcodes.NotesRequest("t.x", ("item", "cpu"))


@pytest.mark.parametrize("text, message", [
    ("<!-- lab:tabel t.x -->", "unknown shortcode lab:tabel (known: calculator, claim, "),
    ("<!-- lab:table -->", "takes 1 positional argument(s) (TOPIC), got 0"),
    ("<!-- lab:table t.x layers=8 extra -->", "positional argument 'extra' after key=value options"),
    ("<!-- lab:table t.x a=1 a=2 -->", "option 'a' given twice"),
    ("<!-- lab:table t.x metrics=a,,b -->", "holds an empty name"),
    ("<!-- lab:plot t.x y=time -->", "lab:plot needs x="),
    ("<!-- lab:plot t.x x=a y=b logx=yes -->", "logx= takes true or false"),
    ("<!-- lab:value t.x time stat=mean -->", "stat='mean' is not one of median, iqr, q1, q3, n"),
    ("<!-- lab:claim t.x speedup => 2 -->", "operator '=>' is not one of >= > <= <"),
    ("<!-- lab:claim t.x speedup >= fast -->", "bound 'fast' is not a number"),
    ("<!-- lab:claim t.x speedup >= -->", "takes 4 positional argument(s)"),
    ('<!-- lab:table t.x title="open -->', "cannot split the arguments"),
    ("<!-- lab:notes t.x mode=eager -->", "lab:notes takes only keys=, not mode (notes have no cases)"),
])
def test_malformed_shortcodes_are_errors(text, message):
    with pytest.raises(shortcodes.ShortcodeError, match=re.escape(message)):
        req(text)


def _echo(request, code):
    return f"<{code.name}:{request.topic}>" if code.name not in shortcodes.BLOCK else f"=== \"{code.name}\"\n\n    body"


def test_expand_leaves_fenced_code_alone_and_indents_blocks():
    page = (
        "Value <!-- lab:value a.b m --> and <!-- lab:claim a.b m < 1 -->.\n"
        "```text\n<!-- lab:value not.expanded m -->\n```\n"
        "~~~~\n```\n<!-- lab:tabel still.code -->\n~~~~\n"
        "!!! note\n    <!-- lab:table a.b -->\n"
    )
    out = shortcodes.expand(page, _echo)
    assert out.startswith("Value <value:a.b> and <claim:a.b>.\n")
    assert "<!-- lab:value not.expanded m -->" in out and "<!-- lab:tabel still.code -->" in out
    assert '!!! note\n\n    === "table"\n\n        body\n\n' in out


def test_a_block_shortcode_inside_a_sentence_is_an_error():
    with pytest.raises(shortcodes.ShortcodeError, match="makes a block; put it alone on its line"):
        shortcodes.expand("See <!-- lab:table a.b --> here.\n", _echo)


# -- formatting --------------------------------------------------------------------------

@pytest.mark.parametrize("value, text", [
    (12345, "12,300"), (1630.0, "1,630"), (412.0, "412"), (2.5, "2.50"), (9.996, "10.0"),
    (0.0123456, "0.0123"), (0.001, "0.00100"), (1234567, "1.23 × 10⁶"), (0.00012345, "1.23 × 10⁻⁴"),
    (-3.14159, "−3.14"), (0, "0"),
])
def test_three_significant_figures(value, text):
    assert format_number(value) == text


def test_units_as_the_page_writes_them():
    assert format_quantity(12.345, "us") == f"12.3{NBSP}µs"
    assert format_quantity(2.5, "x") == "2.50×"
    assert format_quantity(12.8, "%") == "12.8%"
    assert format_quantity(3.35, "TB/s") == f"3.35{NBSP}TB/s"
    assert format_quantity(7.5, "") == "7.50"
    assert format_quantity(80.0, "") == "80" and format_quantity(12345, "") == "12,345"  # counts stay whole
    with pytest.raises(LabError, match="not a finite number"):
        format_number(float("inf"))


def test_commit_with_its_state():
    assert short_commit("0123456789abcdef", False) == "0123456"
    assert short_commit("0123456789abcdef", True) == "0123456 (uncommitted changes)"
    assert short_commit(None, None) == "commit unknown"


# -- loading, staleness and selection ------------------------------------------------------

def test_records_load_ordered_gpus_first_and_primary_first(fixture_store):
    assert [e.slug for e in fixture_store.topic(TOPIC, primary=H200)] == [H200, H100, CPU]
    assert [e.slug for e in fixture_store.topic(TOPIC, primary=H100)] == [H100, H200, CPU]
    assert [e.slug for e in fixture_store.gpu(TOPIC, primary=None)] == [H100, H200]  # by name
    assert fixture_store.topic("other.topic") == []


def test_a_record_of_changed_code_is_stale(fixture_store, tmp_path):
    assert not entry(fixture_store, H200).stale and not entry(fixture_store, CPU).stale
    stale = entry(fixture_store, H100)
    assert stale.stale and stale.stale_reason == "tests/fixtures/fixture_source.txt has changed since this record was made"
    gone = stale.record.model_copy(update={"source": "examples/gone.py"})
    assert store.staleness(gone, REPO) == (True, "examples/gone.py no longer exists")


def test_rows_are_selected_by_case_with_json_equality(fixture_store):
    h200 = entry(fixture_store, H200)
    assert [r.case for r in store.select(h200, {"layers": 32})] == [
        {"layers": 32, "mode": "eager"}, {"layers": 32, "mode": "graph"}]
    assert len(store.select(h200, {"layers": 32.0, "mode": "graph"})) == 1
    with pytest.raises(store.SelectionError, match=r"no row of topic fixture\.launch on nvidia-h200 has "
                                                   r"mode=True \(values seen: mode: 'eager', 'graph'\)"):
        store.select(h200, {"mode": True})
    with pytest.raises(store.SelectionError, match=r"has no case key 'batch' \(keys: layers, mode\)"):
        store.select(h200, {"batch": 1})


def test_the_machine_of_a_value(fixture_store, tmp_path):
    assert fixture_store.machine(TOPIC, None, primary=H200).slug == H200
    assert fixture_store.machine(TOPIC, CPU, primary=H200).slug == CPU
    # No primary machine with the topic: the first GPU record.
    assert fixture_store.machine(TOPIC, None, primary="nvidia-b200").is_gpu
    with pytest.raises(LabError, match="no record of topic fixture.launch on machine nvidia-a100"):
        fixture_store.machine(TOPIC, "nvidia-a100", primary=H200)
    only_cpu = tmp_path / "cpu"
    shutil.copytree(FIXTURES / "records" / CPU, only_cpu / CPU)
    with pytest.raises(LabError, match="no GPU record of topic fixture.launch"):
        store.load([root(only_cpu)], REPO).machine(TOPIC, None, primary=H200)
    with pytest.raises(LabError, match="no record of topic none.such in any records folder"):
        fixture_store.machine("none.such", None, primary=H200)


def test_a_malformed_record_is_kept_with_its_message(tmp_path):
    bad = tmp_path / "records" / H200 / f"{TOPIC}.json"
    bad.parent.mkdir(parents=True)
    data = json.loads((FIXTURES / "records" / H200 / f"{TOPIC}.json").read_text())
    data["results"][0]["metrics"]["time"]["median"] = "fast"
    bad.write_text(json.dumps(data))
    s = store.load([root(tmp_path / "records")], REPO)
    assert s.entries == [] and list(s.broken) == [bad]
    with pytest.raises(LabError, match=rf"record {re.escape(str(bad))} of topic fixture.launch is malformed: "
                                       r".*results\.0\.metrics\.time\.median"):
        s.topic(TOPIC)


def test_roots_come_from_the_config_then_the_environment(tmp_path):
    docs = tmp_path / "docs"
    (docs / "records").mkdir(parents=True)
    (tmp_path / "mine").mkdir()
    (tmp_path / "theirs").mkdir()
    import os
    roots = store.roots_from(tmp_path, docs, ["docs/records"], os.pathsep.join(["mine", str(tmp_path / "theirs")]))
    assert [(r.site_prefix, r.label, r.generated) for r in roots] == [
        ("records", None, False), ("lab-records/1-mine", "mine", True), ("lab-records/2-theirs", "theirs", True)]
    with pytest.raises(LabError, match="from the environment"):
        store.roots_from(tmp_path, docs, ["docs/records"], "missing")


# -- claims --------------------------------------------------------------------------------

def check(s, text):
    request = req(text)
    return claims.evaluate("chapter.md", request, s.gpu(request.topic, H200))


def test_a_claim_holds_when_every_selected_row_on_every_gpu_satisfies_it(fixture_store):
    result = check(fixture_store, "<!-- lab:claim fixture.launch speedup >= 2 mode=graph -->")
    assert result.holds
    assert [(v.machine, v.worst, v.rows) for v in result.verdicts] == [(H200, 2.5, 2), (H100, 2.2, 2)]
    assert [v.stale for v in result.verdicts] == [False, True]


@pytest.mark.parametrize("text, violated", [
    ("speedup >= 3 mode=graph", {H200: 2.5, H100: 2.2}),
    ("speedup <= 3 mode=graph", {H200: 3.1}),
    ("speedup > 2.5 mode=graph layers=8", {H200: 2.5, H100: 2.2}),  # 2.5 > 2.5 is false
    ("speedup < 2.5 mode=graph layers=8", {H200: 2.5}),
    ("time < 500 mode=eager layers=8", {}),
])
def test_violations_name_the_machine_and_the_value_nearest_the_bound(fixture_store, text, violated):
    result = check(fixture_store, f"<!-- lab:claim fixture.launch {text} -->")
    assert {v.machine: v.worst for v in result.violated} == violated
    assert result.holds == (not violated)


def test_a_claim_on_a_missing_metric_or_row_is_an_error(fixture_store):
    with pytest.raises(store.SelectionError, match=r"no metric 'speedup' for layers=8 mode='eager'"):
        check(fixture_store, "<!-- lab:claim fixture.launch speedup >= 2 -->")
    with pytest.raises(store.SelectionError, match="has layers=64"):
        check(fixture_store, "<!-- lab:claim fixture.launch time < 1 layers=64 -->")


def test_a_claim_without_gpu_records_does_not_hold():
    result = claims.evaluate("chapter.md", req("<!-- lab:claim x.y m > 1 -->"), [])
    assert not result.holds
    assert "no GPU record" in markdown.claim(result, {})
    assert result.to_json()["verdicts"] == [] and result.to_json()["claim"] == "x.y m > 1"


# -- rendering -----------------------------------------------------------------------------

def link(e: store.Entry) -> str:
    return f"../{e.site_uri}"


def test_table_tabs_with_provenance_link_and_table(fixture_store):
    text = markdown.table(req("<!-- lab:table fixture.launch -->"), fixture_store.topic(TOPIC, H200), link)
    labels = re.findall(r'^===!? "(.*)"$', text, flags=re.M)
    assert labels == ["NVIDIA H200", "NVIDIA H100 80GB HBM3", "CPU: AMD EPYC 9654 96-Core Processor"]
    assert text.startswith('===! "NVIDIA H200"') and text.count("===!") == 1
    h200 = text.split('=== "')[0]
    for part in ("NVIDIA H200 · 132 SMs · driver 580.95.05 · CUDA 12.8 · torch 2.13.0 · Triton 3.6.0",
                 "run 2026-11-20", "commit 0123456", "60 repetitions after 25 warm-up, timer `cuda_event`",
                 f"[record (JSON)](../records/{H200}/{TOPIC}.json)",
                 "    | layers | mode | time | speedup |", "    |:--|:--|--:|--:|",
                 f'    | 32 | graph | 526{NBSP}µs <span class="lab-iqr"', "| 3.10× |", "| 8 | eager | 412"):
        assert part in h200, part
    assert "| — |" in h200  # eager rows have no speedup
    assert markdown.STALE_TITLE not in h200
    h100 = text.split('=== "NVIDIA H100 80GB HBM3"')[1].split('=== "CPU')[0]
    assert f'!!! warning "{markdown.STALE_TITLE}"' in h100 and "python -m examples.lab run fixture.launch" in h100


def test_machines_without_the_rows_asked_for_are_left_out(fixture_store):
    text = markdown.table(req("<!-- lab:table fixture.launch metrics=speedup mode=graph -->"),
                          fixture_store.topic(TOPIC, H200), link)
    assert re.findall(r'^===!? "(.*)"$', text, flags=re.M) == ["NVIDIA H200", "NVIDIA H100 80GB HBM3"]
    assert text.count("    | layers | mode | speedup |\n    |:--|:--|--:|\n") == 2 and "| time |" not in text
    with pytest.raises(store.SelectionError, match="no metric 'latency'"):
        markdown.table(req("<!-- lab:table fixture.launch metrics=latency -->"), fixture_store.topic(TOPIC), link)
    with pytest.raises(store.SelectionError, match="has mode='replay'"):
        markdown.table(req("<!-- lab:table fixture.launch mode=replay -->"), fixture_store.topic(TOPIC), link)


def test_naming_metrics_drops_rows_that_have_none_of_them(fixture_store):
    text = markdown.table(req("<!-- lab:table fixture.launch metrics=speedup -->"),
                          fixture_store.topic(TOPIC, H200), link)
    h200 = text.split('=== "NVIDIA H100')[0]
    assert "| graph |" in h200 and "| eager |" not in h200  # eager rows have no speedup


def test_notes_spread_mappings_over_columns(fixture_store):
    text = markdown.notes(req("<!-- lab:notes fixture.launch -->"), fixture_store.topic(TOPIC, H200), link)
    assert re.findall(r'^===!? "(.*)"$', text, flags=re.M) == ["NVIDIA H200"]  # only it has notes
    assert "    | note | raised | then, ending the capture | value |\n    |:--|:--|:--|:--|\n" in text
    assert ("    | item | RuntimeError: operation not permitted when stream is capturing | RuntimeError: "
            "operation failed due to a previous error during capture | — |") in text
    assert "| cpu | RuntimeError: cannot copy to pageable memory \\| while capturing | — | — |" in text
    assert "| kernel | — | — | void at::native::vectorized_elementwise_kernel&lt;4&gt; |" in text
    assert "| sizes | — | — | 8; 32 |" in text
    only = markdown.notes(req("<!-- lab:notes fixture.launch keys=sizes -->"), fixture_store.topic(TOPIC), link)
    assert "| note | value |" in only and "item" not in only
    with pytest.raises(store.SelectionError, match="has no note 'nope' \\(notes: item, cpu, kernel, sizes\\)"):
        markdown.notes(req("<!-- lab:notes fixture.launch keys=nope -->"), fixture_store.topic(TOPIC, H200), link)


def test_a_record_of_notes_only_claims_no_timer(fixture_store):
    import dataclasses

    h200 = entry(fixture_store, H200)
    timed = markdown.provenance(h200, "x.json")
    notes_only = dataclasses.replace(h200, record=h200.record.model_copy(update={"results": []}))
    assert "repetitions" in timed and "repetitions" not in markdown.provenance(notes_only, "x.json")


def test_value_is_one_number_with_its_provenance_in_the_title(fixture_store):
    h200 = entry(fixture_store, H200)
    html = markdown.value(req("<!-- lab:value fixture.launch time layers=32 mode=graph -->"), h200)
    title = re.search(r'title="([^"]*)"', html)[1]
    assert html.endswith(f">526{NBSP}µs</span>") and 'class="lab-value"' in html
    assert title.startswith("NVIDIA H200 (nvidia-h200) · median 526") and "IQR 36.8" in title
    assert "n = 60" in title and "run 2026-11-20" in title
    n = markdown.value(req("<!-- lab:value fixture.launch time layers=32 mode=graph stat=n -->"), h200)
    assert n.endswith(">60</span>")
    stale = markdown.value(req("<!-- lab:value fixture.launch speedup layers=8 mode=graph -->"), entry(fixture_store, H100))
    assert "lab-value--stale" in stale and stale.endswith(">2.20×</span>")
    with pytest.raises(LabError, match="needs exactly one row .* the filters select 2"):
        markdown.value(req("<!-- lab:value fixture.launch time layers=32 -->"), h200)
    with pytest.raises(store.SelectionError, match="has no iqr"):
        markdown.value(req("<!-- lab:value fixture.launch speedup layers=8 mode=graph stat=iqr -->"), h200)


def test_claim_badges(fixture_store):
    result = check(fixture_store, "<!-- lab:claim fixture.launch speedup >= 3 mode=graph layers=32 -->")
    labels = {e.site_uri: e.short_label for e in fixture_store.entries}
    html = markdown.claim(result, labels)
    assert ">H200 ✓ 3.10×</span>" in html and ">H100 80GB HBM3 ✗ VIOLATED: 2.80×</span>" in html
    assert html.count("lab-claim--holds") == 1 and html.count("lab-claim--violated") == 1


def test_plot_series_and_svg(fixture_store):
    h200 = entry(fixture_store, H200)
    request = req("<!-- lab:plot fixture.launch x=layers y=time series=mode logx=true -->")
    series, unit = series_of(request, h200)
    assert unit == "us" and [s.label for s in series] == ["mode=eager", "mode=graph"]
    assert [p.x for p in series[0].points] == [8, 32] and series[0].points[0].q1 is not None
    svg = plot.line_plot(series, xlabel="layers", ylabel="time (µs)", logx=True, uid="t1")
    assert svg.startswith('<svg class="lab-plot__svg" role="img" aria-label="time (µs) against layers"')
    assert plot.SENTINEL not in svg and "currentColor" in svg
    assert "<text" in svg and "font-family: inherit" in svg and "DejaVu" not in svg
    assert not re.search(r'<svg[^>]* width=', svg) and "viewBox" in svg
    ids = re.findall(r'id="([^"]+)"', svg)
    assert ids and all(i.startswith("t1-") for i in ids)
    assert all(ref[1:] in ids for ref in re.findall(r'href="(#[^"]+)"', svg))
    assert plot.COLORS[0] in svg and plot.COLORS[1] in svg
    with pytest.raises(LabError, match=r"several rows at layers=8; filter on mode or name series="):
        series_of(req("<!-- lab:plot fixture.launch x=layers y=time -->"), h200)
    with pytest.raises(store.SelectionError, match="no selected row has the metric 'speedup'"):
        series_of(req("<!-- lab:plot fixture.launch x=layers y=speedup mode=eager -->"), h200)


def test_series_colours_read_on_both_palettes():
    for colour in plot.COLORS:
        for background in plot.BACKGROUNDS:
            assert plot.contrast(colour, background) >= 3, (colour, background)


# -- the hook as MkDocs calls it -------------------------------------------------------------

@pytest.fixture
def hook(tmp_path, monkeypatch):
    """The records hook, loaded the way MkDocs loads it, reading the fixture records."""
    config = load_config(str(REPO / "mkdocs.yml"))
    module = config.hooks["overrides/hooks/records.py"]
    monkeypatch.setitem(config.extra, "lab", {"record_roots": ["tests/fixtures/records"],
                                             "primary_machine": H200})
    config.site_dir = str(tmp_path / "site")
    (tmp_path / "site").mkdir()
    module.on_config(config)
    module.on_pre_build(config)
    return SimpleNamespace(module=module, config=config)


def page(src: str = "chapter.md"):
    return SimpleNamespace(file=SimpleNamespace(src_uri=src))


def run(hook, text: str, src: str = "chapter.md") -> str:
    return hook.module.on_page_markdown(text, page=page(src), config=hook.config, files=None)


def test_the_hook_expands_and_records_claims(hook, caplog):
    with caplog.at_level(logging.INFO, logger="mkdocs.plugins.lab"):
        out = run(hook, "It holds: <!-- lab:claim fixture.launch speedup >= 3 mode=graph -->\n\n"
                        "<!-- lab:plot fixture.launch x=layers y=time series=mode -->\n", src="part/chapter.md")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "part/chapter.md: claim 'fixture.launch speedup >= 3 mode=\"graph\"' is VIOLATED on nvidia-h200: "
        f"measured 2.50×, bound >= 3 (record lab-records/0-records/{H200}/{TOPIC}.json)",
        "part/chapter.md: claim 'fixture.launch speedup >= 3 mode=\"graph\"' is VIOLATED on nvidia-h100-80gb-hbm3: "
        f"measured 2.20×, bound >= 3 (record lab-records/0-records/{H100}/{TOPIC}.json)",
    ]
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert any("nvidia-h100-80gb-hbm3" in m and "earlier version of this code" in m for m in infos)
    # A root outside docs/ is served under lab-records/; the link is relative to the page.
    assert f"(../lab-records/0-records/{H200}/{TOPIC}.json)" in out
    tokens = re.findall(r"LABPLOT[0-9a-f]{8}", out)
    assert len(tokens) == 3  # one plot per machine
    html = hook.module.on_page_content("".join(f"<p>{t}</p>" for t in tokens), page=page("part/chapter.md"),
                                       config=hook.config, files=None)
    assert html.count('<figure class="lab-plot"><svg') == 3
    hook.module.on_post_build(hook.config)
    report = json.loads((Path(hook.config.site_dir) / "claims.json").read_text())
    [only] = report["claims"]
    assert only["page"] == "part/chapter.md" and only["holds"] is False
    assert [v["machine"] for v in only["verdicts"]] == [H200, H100]


def test_a_claim_with_no_gpu_record_is_a_warning(hook, caplog, tmp_path):
    cpu_only = tmp_path / "cpu-only"
    shutil.copytree(FIXTURES / "records" / CPU, cpu_only / CPU)
    hook.config.extra["lab"] = {"record_roots": [str(cpu_only)]}
    hook.module.on_config(hook.config)
    hook.module.on_pre_build(hook.config)
    with caplog.at_level(logging.WARNING, logger="mkdocs.plugins.lab"):
        out = run(hook, "<!-- lab:claim fixture.launch time < 1000 -->\n")
    assert "no GPU record" in out
    assert [r.getMessage() for r in caplog.records] == [
        "chapter.md: claim 'fixture.launch time < 1000' has no GPU record to check it against"]


@pytest.mark.parametrize("text, message", [
    ("<!-- lab:tabel fixture.launch -->", "chapter.md: <!-- lab:tabel fixture.launch -->: unknown shortcode lab:tabel"),
    ("<!-- lab:table none.such -->", "chapter.md: <!-- lab:table none.such -->: no record of topic none.such"),
    ("<!-- lab:value fixture.launch time layers=64 mode=eager -->",
     "chapter.md: <!-- lab:value fixture.launch time layers=64 mode=eager -->: no row of topic fixture.launch "
     "on nvidia-h200 has layers=64 mode='eager'"),
    ("<!-- lab:value fixture.launch latency layers=8 mode=eager -->",
     "chapter.md: <!-- lab:value fixture.launch latency layers=8 mode=eager -->: topic fixture.launch on "
     "nvidia-h200 has no metric 'latency'"),
    ("<!-- lab:claim fixture.launch speedup >= 2 -->", "no metric 'speedup' for layers=8 mode='eager'"),
])
def test_errors_name_the_page_and_the_shortcode(hook, text, message):
    with pytest.raises(PluginError, match=re.escape(message)):
        run(hook, text + "\n")


def test_a_malformed_record_fails_naming_the_page_and_the_file(hook, tmp_path):
    records = tmp_path / "records"
    shutil.copytree(FIXTURES / "records", records)
    broken = records / H200 / f"{TOPIC}.json"
    broken.write_text(broken.read_text().replace('"schema_version": 1', '"schema_version": 2'))
    hook.config.extra["lab"] = {"record_roots": [str(records)], "primary_machine": H200}
    hook.module.on_config(hook.config)
    hook.module.on_pre_build(hook.config)
    with pytest.raises(PluginError, match=rf"chapter\.md: .*record {re.escape(str(broken))} of topic "
                                          r"fixture\.launch is malformed: .*schema_version 2"):
        run(hook, "<!-- lab:table fixture.launch -->\n")
    with pytest.raises(PluginError, match="malformed record.*that no page uses yet"):
        hook.module.on_post_build(hook.config)


def test_unknown_settings_are_errors(hook):
    hook.config.extra["lab"] = {"record_root": ["docs/records"]}
    with pytest.raises(PluginError, match="extra.lab: unknown setting.*record_root"):
        hook.module.on_config(hook.config)


# -- the vendor hook -------------------------------------------------------------------------

def _vendor():
    config = load_config(str(REPO / "mkdocs.yml"))
    return config.hooks["overrides/hooks/vendor.py"]


def test_without_node_modules_the_build_says_to_run_npm_ci(tmp_path):
    shutil.copy(REPO / "package.json", tmp_path / "package.json")
    with pytest.raises(PluginError, match=r"node_modules/(mermaid|katex) is missing: run `npm ci` in "):
        _vendor().check(tmp_path)


def test_node_modules_of_other_versions_are_refused(tmp_path):
    wanted = json.loads((REPO / "package.json").read_text())["dependencies"]
    (tmp_path / "package.json").write_text(json.dumps({"dependencies": wanted}))
    for name in wanted:
        (tmp_path / "node_modules" / name).mkdir(parents=True)
        (tmp_path / "node_modules" / name / "package.json").write_text(json.dumps({"version": "0.0.1"}))
    with pytest.raises(PluginError, match=r"node_modules has \w+ 0\.0\.1, package\.json pins .*npm ci"):
        _vendor().check(tmp_path)


def test_vendored_files_include_katex_fonts_and_mermaid():
    vendor = _vendor()
    if not (REPO / "node_modules").is_dir():
        pytest.fail("node_modules/ is missing: run `npm ci` (the site build needs it too)")
    uris = [uri for uri, _ in vendor.site_files(vendor.check(REPO))]
    assert "assets/vendor/mermaid/mermaid.min.js" in uris
    assert "assets/vendor/katex/contrib/auto-render.min.js" in uris
    assert any(re.fullmatch(r"assets/vendor/katex/fonts/KaTeX_Main-Regular\.woff2", u) for u in uris)


# -- the glossary ------------------------------------------------------------------------------

def test_glossary_lines_are_abbreviations_each_defined_once():
    lines = (REPO / "snippets" / "glossary.md").read_text(encoding="utf-8").splitlines()
    terms = []
    for n, line in enumerate(lines, start=1):
        match = re.fullmatch(r"\*\[([^\]]+)\]: (\S.*)", line)
        assert match, f"snippets/glossary.md:{n} is not an abbreviation (*[TERM]: meaning): {line!r}"
        terms.append(match[1])
    assert len(terms) == len(set(terms)), sorted(t for t in terms if terms.count(t) > 1)
    assert {"GPU", "SM", "HBM", "IQR", "TF32", "KV", "cuBLAS"} <= set(terms)
