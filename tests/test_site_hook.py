"""The site's hooks without a build: shortcodes, runs, record selection, formatting, claims, rendering.

Fixture records (``tests/fixtures/records/``, made by ``tests/fixtures/make_records.py``)
hold invented numbers for the made-up topic ``fixture.launch``: three current runs on an
H200 (one figure noisy) and a stale older one, a legacy (schema 1) stale record of an
H100, one current run of a CPU, and a legacy record of an A100 that skipped the topic.
"""
from __future__ import annotations

import json
import logging
import math
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.hook_support import (  # noqa: F401 (fixture_store: a fixture)
    A100, CPU, FIXTURES, H100, H200, REPO, TOPIC, entry, fixture_store, grouped, req, root,
)

from mkdocs.config import load_config  # noqa: E402
from mkdocs.exceptions import PluginError  # noqa: E402

from lab_site import LabError, claims, figures, markdown, plot, provenance, runs, shortcodes, store  # noqa: E402
from lab_site.fmt import NBSP, format_number, format_quantity, format_range, short_commit  # noqa: E402
from lab_site.series import series_of  # noqa: E402

US = f"{NBSP}µs"


def group(s: store.Store, slug: str) -> store.Group:
    return next(g for g in s.groups if g.slug == slug)


def figure(s: store.Store, slug: str, metric: str, **case) -> figures.Figure:
    g = group(s, slug)
    (row,) = figures.select(g, case)
    return figures.metric(g, row, metric)


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
    assert req('<!-- lab:plot t.x x=layers y=time xlabel="layers of the model" ylabel=time series=mode '
               'logx=true title="A b" legend="eager:Eager launches,graph:One graph" mode=eager -->') == \
        shortcodes.PlotRequest("t.x", "layers", "time", "layers of the model", "time", "mode", True, False, "A b",
                               {"eager": "Eager launches", "graph": "One graph"}, {"mode": "eager"})
    assert req("<!-- lab:value t.x time machine=nvidia-h200 stat=iqr layers=8 -->") == \
        shortcodes.ValueRequest("t.x", "time", "nvidia-h200", "iqr", "point", {"layers": 8})
    assert req("<!-- lab:value t.x time spread=range layers=8 -->").spread == "range"
    assert req("<!-- lab:claim t.x speedup >= 2 mode=graph -->") == \
        shortcodes.ClaimRequest("t.x", "speedup", ">=", 2.0, {"mode": "graph"})
    assert req("<!-- lab:notes t.x keys=item,cpu -->") == shortcodes.NotesRequest("t.x", ("item", "cpu"))


@pytest.mark.parametrize("text, message", [
    ("<!-- lab:tabel t.x -->", "unknown shortcode lab:tabel (known: calculator, claim, "),
    ("<!-- lab:table -->", "takes 1 positional argument(s) (TOPIC), got 0"),
    ("<!-- lab:table t.x layers=8 extra -->", "positional argument 'extra' after key=value options"),
    ("<!-- lab:table t.x a=1 a=2 -->", "option 'a' given twice"),
    ("<!-- lab:table t.x metrics=a,,b -->", "holds an empty name"),
    ("<!-- lab:plot t.x y=time xlabel=a ylabel=b -->", "lab:plot needs x="),
    ("<!-- lab:plot t.x x=a y=b ylabel=b -->", "lab:plot needs xlabel="),
    ("<!-- lab:plot t.x x=a y=b xlabel=a -->", "lab:plot needs ylabel="),
    ("<!-- lab:plot t.x x=a y=b xlabel=a ylabel=b logx=yes -->", "logx= takes true or false"),
    ('<!-- lab:plot t.x x=a y=b xlabel=a ylabel=b series=s legend="eager" -->', "each entry is value:Text"),
    ('<!-- lab:plot t.x x=a y=b xlabel=a ylabel=b series=s legend="a:A,a:B" -->', "names 'a' twice"),
    ('<!-- lab:plot t.x x=a y=b xlabel=a ylabel=b legend="a:A" -->', "legend= renames series: name series="),
    ("<!-- lab:value t.x time stat=mean -->", "stat='mean' is not one of median, iqr, q1, q3, n, sm_mhz, mem_mhz, power_w"),
    ("<!-- lab:value t.x time spread=wide -->", "spread='wide' is not one of point, range"),
    ("<!-- lab:value t.x time spread=range stat=iqr -->", "does not go with stat=iqr"),
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
    assert format_quantity(12.345, "us") == f"12.3{US}"
    assert format_quantity(2.5, "x") == "2.50×"
    assert format_quantity(12.8, "%") == "12.8%"
    assert format_quantity(3.35, "TB/s") == f"3.35{NBSP}TB/s"
    assert format_quantity(7.5, "") == "7.50"
    assert format_quantity(80.0, "") == "80" and format_quantity(12345, "") == "12,345"  # counts stay whole
    with pytest.raises(LabError, match="not a finite number"):
        format_number(float("inf"))


def test_ranges_write_the_unit_once():
    assert format_range(400, 480, "us") == f"400–480{US}"
    assert format_range(2.4, 2.6, "x") == "2.40–2.60×"
    assert format_range(80, 96, "") == "80–96"  # counts
    assert format_range(412.0, 412.2, "us") == f"412{US}"  # equal as shown: one value


def test_commit_with_its_state():
    assert short_commit("0123456789abcdef", False) == "0123456"
    assert short_commit("0123456789abcdef", True) == "0123456 (uncommitted changes)"
    assert short_commit(None, None) == "commit unknown"


# -- figures across runs (lab_site.runs) -----------------------------------------------------

def test_a_figure_is_the_median_of_the_run_medians_with_their_range():
    a = runs.across([412.0, 400.0, 480.0])
    assert (a.count, a.median, a.low, a.high) == (3, 412.0, 400.0, 480.0)
    assert a.spread == pytest.approx(80 / 412) and a.noisy
    even = runs.across([1.0, 2.0, 3.0, 10.0])
    assert even.median == 2.5 and even.spread == pytest.approx(9 / 2.5)


def test_one_run_has_no_spread_and_noise_starts_above_fifteen_percent():
    assert runs.across([5.0]).spread == 0 and not runs.across([5.0]).noisy
    assert not runs.across([100.0, 100.0, 115.0]).noisy  # exactly 15 %: not noisy
    assert runs.across([100.0, 100.0, 115.1]).noisy
    assert runs.across([-2.0, -2.1, -1.9]).spread == pytest.approx(0.1)  # |median|
    assert runs.across([0.0, 0.0]).spread == 0 and runs.across([-1.0, 0.0, 1.0]).spread == math.inf
    with pytest.raises(ValueError, match="at least one run"):
        runs.across([])
    with pytest.raises(ValueError, match="finite"):
        runs.across([1.0, float("nan")])


# -- loading, grouping, staleness and selection ------------------------------------------------

def test_records_of_both_layouts_load_and_group_by_machine(fixture_store):
    assert len(fixture_store.entries) == 7 and not fixture_store.broken
    assert [g.slug for g in fixture_store.topic(TOPIC, primary=H200)] == [H200, H100, CPU]
    assert [g.slug for g in fixture_store.topic(TOPIC, primary=H100)] == [H100, H200, CPU]
    assert [g.slug for g in fixture_store.gpu(TOPIC, primary=None)] == [H100, H200]  # by name
    assert fixture_store.topic("other.topic") == []
    h100 = group(fixture_store, H100)
    assert [e.run_id for e in h100.runs] == ["v1"] and h100.runs[0].site_uri == f"records/{H100}/{TOPIC}.json"
    h200 = group(fixture_store, H200)
    assert [e.run_id for e in h200.runs] == ["run-1", "run-2", "run-3"]  # oldest first
    assert h200.site_uri == f"records/{H200}/{TOPIC}/run-3.json" and h200.record.notes


def test_stale_runs_are_left_out_where_current_ones_exist(fixture_store, tmp_path):
    h200 = group(fixture_store, H200)
    assert not h200.stale and [e.run_id for e in h200.left_out] == ["run-0"]
    h100 = group(fixture_store, H100)  # its only run is stale: shown, with the warning
    assert h100.stale and not h100.left_out
    assert h100.stale_reason == "tests/fixtures/fixture_source.txt has changed since this record was made"
    gone = h100.record.model_copy(update={"source": "examples/gone.py"})
    assert store.staleness(gone, REPO) == (True, "examples/gone.py no longer exists")
    # All runs stale: the newest measured version's count (run-1's), the older version's are left out.
    only_stale = tmp_path / "records"
    shutil.copytree(FIXTURES / "records" / H200 / TOPIC, only_stale / H200 / TOPIC)
    for path in (only_stale / H200 / TOPIC).glob("run-[123].json"):
        path.unlink()
    shutil.copy(FIXTURES / "records" / H200 / TOPIC / "run-1.json", only_stale / H200 / TOPIC / "run-1.json")
    data = json.loads((only_stale / H200 / TOPIC / "run-1.json").read_text())
    (only_stale / H200 / TOPIC / "run-1.json").write_text(json.dumps({**data, "source_sha256": "2" * 64}))
    g = store.load([root(only_stale)], REPO).groups[0]
    assert g.stale and [e.run_id for e in g.runs] == ["run-1"] and [e.run_id for e in g.left_out] == ["run-0"]
    # Two runs of that newest version: both count.
    shutil.copy(only_stale / H200 / TOPIC / "run-1.json", only_stale / H200 / TOPIC / "run-1b.json")
    again = json.loads((only_stale / H200 / TOPIC / "run-1b.json").read_text())
    again["run"]["id"] = "run-1b"
    (only_stale / H200 / TOPIC / "run-1b.json").write_text(json.dumps(again))
    g = store.load([root(only_stale)], REPO).groups[0]
    assert g.stale and [e.run_id for e in g.runs] == ["run-1", "run-1b"] and [e.run_id for e in g.left_out] == ["run-0"]


def test_a_skipped_legacy_record_belongs_to_no_group(fixture_store):
    (skipped,) = fixture_store.skipped
    assert skipped.slug == A100 and skipped.skipped == "one GPU: a collective needs at least two"
    assert A100 not in {g.slug for g in fixture_store.groups}
    assert skipped in fixture_store.entries  # still served, for Appendix A's link


def test_labels_name_the_gpu_and_the_gpus_of_a_multi_gpu_topic(fixture_store):
    h200 = group(fixture_store, H200)
    assert h200.label == "NVIDIA H200" and h200.short_label == "H200"
    assert group(fixture_store, CPU).label == "CPU: AMD EPYC 9654 96-Core Processor"
    two = h200.record.model_copy(update={"machine": h200.record.machine.model_copy(update={"gpu_count": 2})})
    run = h200.runs[0].__class__(two, h200.runs[0].path, h200.root, "x.json", False)
    assert store.Group(h200.root, TOPIC, (run,), multi_gpu=True).label == "2 × NVIDIA H200"
    assert store.Group(h200.root, TOPIC, (run,), multi_gpu=False).label == "NVIDIA H200"  # a one-GPU topic
    reader = store.Root(1, Path("/tmp/my-run"), "lab-records/1-my-run", "my-run", True)
    assert store.Group(reader, TOPIC, (run,), multi_gpu=True).label == "2 × NVIDIA H200 · my-run"
    assert store.min_gpus(REPO / "examples" / "collectives" / "ring_allreduce.py") == 2
    assert store.min_gpus(REPO / "examples" / "graphs" / "launch_cost.py") == 1


def test_the_primary_kind_s_multi_gpu_machines_come_before_another_kind_s(fixture_store):
    # Unqualified values on a page quote the primary machine: for a multi-GPU topic its slug
    # has a GPU count, and the primary's kind must still win over an alphabetically earlier GPU.
    h200 = group(fixture_store, H200)

    def on(gpu_slug, count):
        machine = h200.record.machine.model_copy(update={"slug": gpu_slug, "gpu_count": count})
        run = h200.runs[0].__class__(h200.record.model_copy(update={"machine": machine}), h200.runs[0].path,
                                     h200.root, "x.json", False)
        return store.Group(h200.root, "fixture.multi", (run,), multi_gpu=True)

    groups = [on("nvidia-a100", 2), on("nvidia-h100-80gb-hbm3", 4), on(H200, 4), on(H200, 2)]
    shelf = SimpleNamespace(groups=groups, broken_for=lambda topic: {}, hidden=frozenset())
    shelf.topic = lambda topic, primary=None: store.Store.topic(shelf, topic, primary)
    ordered = store.Store.topic(shelf, "fixture.multi", primary=H200)
    assert [g.slug for g in ordered[:2]] == [f"{H200}-x2", f"{H200}-x4"]
    assert store.Store.machine(shelf, "fixture.multi", None, H200).slug == f"{H200}-x2"


def test_rows_merge_across_runs_and_are_selected_by_case_with_json_equality(fixture_store):
    h200 = group(fixture_store, H200)
    assert [r.case for r in figures.select(h200, {"layers": 32})] == [
        {"layers": 32, "mode": "eager"}, {"layers": 32, "mode": "graph"}]
    (row,) = figures.select(h200, {"layers": 32.0, "mode": "graph"})
    speedup = row.metrics["speedup"]
    assert [e.run_id for e, _ in speedup.per_run] == ["run-1", "run-2", "run-3"]  # not the stale run-0
    assert (speedup.median, speedup.across.low, speedup.across.high) == (3.1, 3.0, 3.2)
    with pytest.raises(figures.SelectionError, match=r"no row of topic fixture\.launch on nvidia-h200 has "
                                                     r"mode=True \(values seen: mode: 'eager', 'graph'\)"):
        figures.select(h200, {"mode": True})
    with pytest.raises(figures.SelectionError, match=r"has no case key 'batch' \(keys: layers, mode\)"):
        figures.select(h200, {"batch": 1})


def test_statistics_across_runs_are_medians_of_each_runs(fixture_store):
    time = figure(fixture_store, H200, "time", layers=8, mode="eager")
    assert time.median == 412.0 and time.across.noisy
    assert figures.stat(time, "median") == 412.0
    assert figures.stat(time, "q1") == pytest.approx(412.0 * 0.97)
    assert figures.stat(time, "iqr") == pytest.approx(412.0 * 0.07)
    assert figures.stat(time, "n") == 60
    with pytest.raises(figures.SelectionError, match="has no iqr"):
        figures.stat(figure(fixture_store, H200, "speedup", layers=8, mode="graph"), "iqr")


def test_the_machine_of_a_value(fixture_store, tmp_path):
    assert fixture_store.machine(TOPIC, None, primary=H200).slug == H200
    assert fixture_store.machine(TOPIC, CPU, primary=H200).slug == CPU
    # No primary machine with the topic: the first GPU group.
    assert fixture_store.machine(TOPIC, None, primary="nvidia-b200").is_gpu
    with pytest.raises(LabError, match="no record of topic fixture.launch on machine nvidia-b200"):
        fixture_store.machine(TOPIC, "nvidia-b200", primary=H200)
    with pytest.raises(LabError, match=f"no record of topic fixture.launch on machine {A100}"):
        fixture_store.machine(TOPIC, A100, primary=H200)  # it skipped the topic
    only_cpu = tmp_path / "cpu"
    shutil.copytree(FIXTURES / "records" / CPU, only_cpu / CPU)
    with pytest.raises(LabError, match="no GPU record of topic fixture.launch"):
        store.load([root(only_cpu)], REPO).machine(TOPIC, None, primary=H200)
    with pytest.raises(LabError, match="no record of topic none.such in any records folder"):
        fixture_store.machine("none.such", None, primary=H200)


@pytest.mark.parametrize("relative", [f"{H200}/{TOPIC}/run-9.json", f"{H200}/{TOPIC}.json"])
def test_a_malformed_record_is_kept_with_its_message(tmp_path, relative):
    bad = tmp_path / "records" / relative
    bad.parent.mkdir(parents=True)
    data = json.loads((FIXTURES / "records" / H200 / TOPIC / "run-1.json").read_text())
    data["run"]["id"] = "run-9"
    data["results"][0]["metrics"]["time"]["median"] = "fast"
    bad.write_text(json.dumps(data))
    s = store.load([root(tmp_path / "records")], REPO)
    assert s.entries == [] and list(s.broken) == [bad] and s.broken_topics == {bad: TOPIC}
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


def test_a_claim_holds_when_every_selected_row_of_every_run_on_every_gpu_satisfies_it(fixture_store):
    result = check(fixture_store, "<!-- lab:claim fixture.launch speedup >= 2 mode=graph -->")
    assert result.holds
    assert [(v.machine, v.worst, v.rows, v.runs) for v in result.verdicts] == [(H200, 2.4, 2, 3), (H100, 2.2, 2, 1)]
    assert [v.stale for v in result.verdicts] == [False, True]
    h200 = result.verdicts[0]
    assert [(r.run, r.worst, r.holds) for r in h200.per_run] == [
        ("run-1", 2.5, True), ("run-2", 2.4, True), ("run-3", 2.6, True)]
    report = result.to_json()
    assert report["holds"] is True and report["runs_min"] == 1
    assert report["verdicts"][0]["runs"] == 3 and report["verdicts"][0]["per_run"][1] == {
        "run": "run-2", "worst": 2.4, "holds": True, "record": f"records/{H200}/{TOPIC}/run-2.json"}


def test_one_run_that_breaks_a_claim_breaks_it_though_the_median_keeps_it(fixture_store):
    result = check(fixture_store, "<!-- lab:claim fixture.launch speedup >= 2.45 mode=graph layers=8 -->")
    (h200,) = [v for v in result.verdicts if v.machine == H200]
    assert figure(fixture_store, H200, "speedup", layers=8, mode="graph").median == 2.5  # the median holds
    assert not h200.holds and h200.worst == 2.4 and h200.failing == 1
    assert h200.record == f"records/{H200}/{TOPIC}/run-2.json"  # the run that breaks it


@pytest.mark.parametrize("text, violated", [
    ("speedup >= 3 mode=graph", {H200: 2.4, H100: 2.2}),
    ("speedup <= 3 mode=graph", {H200: 3.2}),
    ("speedup > 2.5 mode=graph layers=8", {H200: 2.4, H100: 2.2}),  # 2.5 > 2.5 is false
    ("speedup < 2.5 mode=graph layers=8", {H200: 2.6}),
    ("time < 500 mode=eager layers=8", {}),
    ("time < 470 mode=eager layers=8", {H200: 480}),  # run-3 only
])
def test_violations_name_the_machine_and_the_value_nearest_the_bound(fixture_store, text, violated):
    result = check(fixture_store, f"<!-- lab:claim fixture.launch {text} -->")
    assert {v.machine: v.worst for v in result.violated} == violated
    assert result.holds == (not violated)


def test_a_claim_about_one_kind_of_gpu_is_asked_only_of_that_kind(fixture_store):
    # H100 breaks "speedup >= 2.3" (2.2) and H200 keeps it: said of the H200 alone, it holds.
    assert not check(fixture_store, "<!-- lab:claim fixture.launch speedup >= 2.3 mode=graph -->").holds
    only_h200 = check(fixture_store, f"<!-- lab:claim fixture.launch speedup >= 2.3 mode=graph machine={H200} -->")
    assert only_h200.holds and [v.machine for v in only_h200.verdicts] == [H200]
    assert only_h200.request.where == {"mode": "graph"} and only_h200.to_json()["machine"] == H200
    assert only_h200.request.describe().endswith(f"mode=\"graph\" machine={H200}")
    assert store.of_kind("nvidia-h200-x4", "nvidia-h200") and store.of_kind("nvidia-h200", "nvidia-h200")
    assert not store.of_kind("nvidia-h200-x4", "nvidia-h20") and not store.of_kind("nvidia-h200-sxm", "nvidia-h200")


def test_a_claim_on_a_missing_metric_or_row_is_an_error(fixture_store):
    with pytest.raises(figures.SelectionError, match=r"no metric 'speedup' for layers=8 mode='eager'"):
        check(fixture_store, "<!-- lab:claim fixture.launch speedup >= 2 -->")
    with pytest.raises(figures.SelectionError, match="has layers=64"):
        check(fixture_store, "<!-- lab:claim fixture.launch time < 1 layers=64 -->")


def test_a_claim_without_gpu_records_does_not_hold():
    result = claims.evaluate("chapter.md", req("<!-- lab:claim x.y m > 1 -->"), [])
    assert not result.holds
    assert "no GPU record" in markdown.claim(result, {})
    report = result.to_json()
    assert report["verdicts"] == [] and report["claim"] == "x.y m > 1" and report["runs_min"] == 0


# -- rendering -----------------------------------------------------------------------------

def link(e) -> str:
    return f"../{e.site_uri}"


def tab(text: str, label: str) -> str:
    """The body of one tab of a rendered set."""
    return re.split(r'^===!? "', text.split(f'"{label}"\n', 1)[1], flags=re.M)[0]


def test_table_tabs_carry_the_provenance_of_every_run(fixture_store):
    text = markdown.table(req("<!-- lab:table fixture.launch -->"), fixture_store.topic(TOPIC, H200), link)
    labels = re.findall(r'^===!? "(.*)"$', text, flags=re.M)
    assert labels == ["NVIDIA H200", "NVIDIA H100 80GB HBM3", "CPU: AMD EPYC 9654 96-Core Processor"]  # no A100
    assert text.startswith('===! "NVIDIA H200"') and text.count("===!") == 1
    h200 = tab(text, "NVIDIA H200")
    for part in ("NVIDIA H200 · 132 SMs · driver 580.95.05 · CUDA 12.8 · torch 2.13.0 · Triton 3.6.0",
                 "3 runs 2026-11-20 to 2026-11-22, commit 0123456 (1 stale run of older code left out)",
                 f"SM 1,410–1,755{NBSP}MHz, 690 W of 700 W under load",
                 "timer `cuda_event` (60 repetitions after 25 warm-up)",
                 # The summary a reader sees before opening it: machine, runs, days, the records.
                 f'    ??? lab-provenance "NVIDIA H200 · 3 runs · 20–22 Nov 2026 · '
                 f'JSON: [1](../records/{H200}/{TOPIC}/run-1.json "run run-1, 2026-11-20") '
                 f'[2](../records/{H200}/{TOPIC}/run-2.json "run run-2, 2026-11-21") [3](',
                 "    | layers | mode | time (µs) | speed-up (×) |", "    |:--|:--|--:|--:|", "| 3.10 <span"):
        assert part in h200, part
    assert "run-0" not in h200 and markdown.STALE_TITLE not in h200
    assert "| — |" in h200  # eager rows have no speedup
    h100 = tab(text, "NVIDIA H100 80GB HBM3")
    assert f'!!! warning "{markdown.STALE_TITLE}"' in h100 and "python -m examples.lab run fixture.launch" in h100
    assert "1 run 2026-11-18" in h100 and f"[1](../records/{H100}/{TOPIC}.json" in h100
    assert "timer `cuda_event` (60 repetitions)" in h100  # a legacy record has no per-metric warm-up


def test_a_table_that_shows_a_noisy_flag_says_what_it_means_in_its_caption(fixture_store):
    """⚠ is explained in words under every table that shows one, not only beside a page's first."""
    def caption(text: str) -> str:
        return next(line for line in tab(text, "NVIDIA H200").splitlines() if line.strip() == "{ .lab-caption }"
                    or line.strip().startswith(("Each figure", "Every row")))

    noisy = markdown.table(req("<!-- lab:table fixture.launch metrics=time layers=8 -->"),
                           fixture_store.topic(TOPIC, H200), link)
    assert "⚠</span> 412" in noisy and markdown.NOISY_LEGEND in caption(noisy)
    assert "runs differ by more than 15 %; the range beneath its median shows by how much." in markdown.NOISY_LEGEND
    calm = markdown.table(req("<!-- lab:table fixture.launch metrics=time layers=32 -->"),
                          fixture_store.topic(TOPIC, H200), link)
    assert 'class="lab-noisy"' not in calm and "lab-noisy-legend" not in calm and "Each figure" in caption(calm)


def test_the_provenance_is_one_closed_line_whose_body_holds_the_rest(fixture_store):
    """A closed ``details``: the summary says machine, runs, days and links every record; opened,
    the software, commits, clocks and timers, each only once (the links stay in the summary)."""
    [h200] = [g for g in fixture_store.topic(TOPIC, H200) if g.label == "NVIDIA H200"]
    folded = provenance.line(h200, link, figures.metric(h200, figures.rows(h200)[0], "time").metrics)
    head, body = folded.split("\n\n", 1)
    assert head.startswith('??? lab-provenance "') and not head.startswith("???+")  # closed
    assert head.endswith('")"') and "\n" not in head
    summary = head[len('??? lab-provenance "'):-1]
    assert summary.startswith("NVIDIA H200 · 3 runs · 20–22 Nov 2026 · JSON: [1](")
    assert summary.count("](../records/") == 3 and "run run-3, 2026-11-22" in summary
    assert body.startswith(provenance.INDENT) and "\n" not in body.strip()
    full = provenance.text(h200, link, figures.metric(h200, figures.rows(h200)[0], "time").metrics)
    assert full == body.strip() + " · " + provenance.run_links(h200.runs, link)  # nothing dropped
    # A lead (a plot of every GPU names the topic) goes before the summary.
    assert provenance.line(h200, link, lead="`t.x` · ").startswith('??? lab-provenance "`t.x` · NVIDIA H200 · ')
    assert provenance.days(["2026-11-27T01:00:00+00:00"]) == "27 Nov 2026"
    assert provenance.days(["2026-11-30", "2026-12-02"]) == "30 Nov – 2 Dec 2026"
    assert provenance.days(["2026-12-30", "2027-01-02", "2026-12-31"]) == "30 Dec 2026 – 2 Jan 2027"


def test_cells_show_the_run_to_run_range_and_flag_noisy_figures(fixture_store):
    text = markdown.table(req("<!-- lab:table fixture.launch metrics=time layers=8 -->"),
                          fixture_store.topic(TOPIC, H200), link)
    h200 = tab(text, "NVIDIA H200")
    eager = next(line for line in h200.splitlines() if "| eager |" in line)
    graph = next(line for line in h200.splitlines() if "| graph |" in line)
    # The header carries the unit, so a cell holds numbers; the range beneath the median (tables.css).
    assert f'<span class="lab-noisy" title="{markdown.NOISY_TITLE}: here 19 % of the median">⚠</span> 412 <' in eager
    assert markdown.NOISY_TITLE == "runs differ by more than 15 %"
    assert f'<span class="lab-runs" title="run-to-run range: the lowest and highest median of 3 independent runs; ' \
           f'within a run, IQR 28.8{US} (q3 − q1, median over runs)">400–480</span>' in eager
    assert "lab-noisy" not in graph and ">165–185<" in graph
    assert "Each figure: the median of 3 runs, the lowest and highest run beneath it." in h200
    # One run: no range, the IQR of its repetitions instead.
    cpu = tab(text, "CPU: AMD EPYC 9654 96-Core Processor")
    assert "lab-runs" not in cpu and 'IQR 6.65</span>' in cpu


def test_machines_without_the_rows_asked_for_are_left_out(fixture_store):
    text = markdown.table(req("<!-- lab:table fixture.launch metrics=speedup mode=graph -->"),
                          fixture_store.topic(TOPIC, H200), link)
    assert re.findall(r'^===!? "(.*)"$', text, flags=re.M) == ["NVIDIA H200", "NVIDIA H100 80GB HBM3"]
    # mode is graph on every row: said once above the table, not in a column.
    assert text.count("    Every row: mode graph.") == 2
    assert text.count("    | layers | speed-up (×) |\n    |:--|--:|\n") == 2 and "| time" not in text
    assert "timer" not in text  # computed figures name no timer
    with pytest.raises(figures.SelectionError, match="no metric 'latency'"):
        markdown.table(req("<!-- lab:table fixture.launch metrics=latency -->"), fixture_store.topic(TOPIC), link)
    with pytest.raises(figures.SelectionError, match="has mode='replay'"):
        markdown.table(req("<!-- lab:table fixture.launch mode=replay -->"), fixture_store.topic(TOPIC), link)


def test_naming_metrics_drops_rows_that_have_none_of_them(fixture_store):
    text = markdown.table(req("<!-- lab:table fixture.launch metrics=speedup -->"),
                          fixture_store.topic(TOPIC, H200), link)
    h200 = tab(text, "NVIDIA H200")
    assert "Every row: mode graph." in h200 and "eager" not in h200  # eager rows have no speedup


def test_notes_come_from_the_latest_run_and_spread_mappings_over_columns(fixture_store):
    text = markdown.notes(req("<!-- lab:notes fixture.launch -->"), fixture_store.topic(TOPIC, H200), link)
    assert re.findall(r'^===!? "(.*)"$', text, flags=re.M) == ["NVIDIA H200"]  # only it has notes
    # The mappings spread over their keys' columns in one table, the notes of one value in another
    # (a table of both left a column empty on every row: Appendix A's collectives ran past the column).
    assert "    | note | raised | then, ending the capture |\n    |:--|:--|:--|\n" in text
    assert ("    | item | RuntimeError: operation not permitted when stream is capturing | RuntimeError: "
            "operation failed due to a previous error during capture |\n") in text
    assert "| cpu | RuntimeError: cannot copy to pageable memory \\| while capturing | — |\n\n" in text
    assert "    | note | value |\n    |:--|:--|\n" in text
    # A long kernel name may break after its separators, so the table fits the column.
    assert ("| kernel | void at:<wbr>:<wbr>native:<wbr>:<wbr>vectorized_<wbr>elementwise_<wbr>"
            "kernel&lt;<wbr>4&gt; |") in text
    assert "| sizes | 8; 32 |" in text
    assert text.index("| item |") < text.index("| cpu |") < text.index("| note | value |") < text.index("| kernel |")
    only = markdown.notes(req("<!-- lab:notes fixture.launch keys=sizes -->"), fixture_store.topic(TOPIC), link)
    assert "| note | value |" in only and "item" not in only
    with pytest.raises(figures.SelectionError, match="has no note 'nope' \\(notes: item, cpu, kernel, sizes\\)"):
        markdown.notes(req("<!-- lab:notes fixture.launch keys=nope -->"), fixture_store.topic(TOPIC, H200), link)


def test_notes_keep_their_order_in_one_table_per_run_of_one_kind():
    """A note of one value between two spread mappings splits them: three tables, in the notes' order,
    none with a column that is '—' on every row."""
    notes = {"settings": {"default": "NCCL's own", "CTAS=2": "2"}, "model": "24 x Linear",
             "buckets": [32, 0.01], "choice": {"default": "RING/LL"}}
    group = SimpleNamespace(topic=TOPIC, slug=H200, record=SimpleNamespace(notes=notes))
    text = markdown.notes_markdown(req("<!-- lab:notes fixture.launch -->"), group)
    tables = text.split("\n\n")
    assert [t.split("\n")[0] for t in tables] == ["| note | default | CTAS=2 |", "| note | value |", "| note | default |"]
    assert "| settings | NCCL's own | 2 |" in tables[0] and "| choice | RING/LL |" in tables[2]
    assert "| model | 24 x Linear |\n| buckets | 32; 0.01 |" in tables[1]
    for table in tables:
        rows = [line.split(" | ") for line in table.split("\n")[2:]]
        assert not any(all(r[i].strip(" |") == "—" for r in rows) for i in range(1, len(rows[0]))), table


def test_the_timers_named_are_those_of_the_metrics_shown():
    def m(method, n=None, warmup=None, inner=None):
        from examples.lab.records import Metric
        return Metric(unit="us", median=1.0, method=method, n=n, warmup=warmup, inner=inner)

    assert provenance.methods([]) is None and provenance.methods([m("computed")]) is None
    assert provenance.methods([m("cuda_event", 60, 25), m("cuda_event", 20, 25, 10), m("computed")]) == \
        "timer `cuda_event` (20–60 repetitions after 25 warm-up 10 calls per sample)"
    assert provenance.methods([m("cuda_event", 60, 25), m("cuda_event, rank 0", 50)]) == \
        "timer `cuda_event` (60 repetitions after 25 warm-up); timer `cuda_event, rank 0` (50 repetitions)"


def test_value_is_the_median_across_runs_with_the_range_in_its_title(fixture_store):
    h200 = group(fixture_store, H200)
    html = markdown.value(req("<!-- lab:value fixture.launch time layers=32 mode=graph -->"), h200)
    title = re.search(r'title="([^"]*)"', html)[1]
    assert html.endswith(f">526{US}</span>") and 'class="lab-value"' in html
    assert title.startswith("time (layers 32, mode graph) · ")  # the metric in words, then its case
    assert title.split(" · ", 1)[1].startswith(f"NVIDIA H200 (nvidia-h200) · median of 3 runs 526{US} · "
                            f"run-to-run range 516–537{US} (4 % of the median) · IQR within a run 36.8{US}")
    assert "n = 60" in title and "runs 2026-11-20 to 2026-11-22" in title
    n = markdown.value(req("<!-- lab:value fixture.launch time layers=32 mode=graph stat=n -->"), h200)
    assert n.endswith(">60</span>")
    ranged = markdown.value(req("<!-- lab:value fixture.launch time layers=8 mode=eager spread=range -->"), h200)
    assert ranged.endswith(f">400–480{US}</span>")
    stale = markdown.value(req("<!-- lab:value fixture.launch speedup layers=8 mode=graph -->"), group(fixture_store, H100))
    assert "lab-value--stale" in stale and stale.endswith(">2.20×</span>") and "median of 1 run 2.20×" in stale
    with pytest.raises(LabError, match="needs exactly one row .* the filters select 2"):
        markdown.value(req("<!-- lab:value fixture.launch time layers=32 -->"), h200)
    with pytest.raises(figures.SelectionError, match="has no iqr"):
        markdown.value(req("<!-- lab:value fixture.launch speedup layers=8 mode=graph stat=iqr -->"), h200)
    with pytest.raises(figures.SelectionError, match="has no sm_mhz: no clocks or power were sampled"):
        markdown.value(req("<!-- lab:value fixture.launch time layers=8 mode=eager stat=sm_mhz -->"), h200)


def test_load_statistics_are_medians_across_runs_in_their_own_units():
    from examples.lab.records import Load, Metric

    def run(sm, watts):
        load = Load(sm_mhz=sm, mem_mhz=2619, power_w=watts, samples=40) if sm else None
        return None, Metric(unit="us", median=100.0, method="cuda_event", load=load)

    figure = figures.Figure("us", (run(1410, 690.0), run(1455, 700.0), run(1500, 650.0), run(None, 0)))
    assert figures.stat(figure, "sm_mhz") == 1455 and figures.stat(figure, "power_w") == 690.0
    assert figures.stat_unit(figure, "sm_mhz") == "MHz" and figures.stat_unit(figure, "median") == "us"


def test_claim_badges_count_the_runs(fixture_store):
    result = check(fixture_store, "<!-- lab:claim fixture.launch speedup >= 3 mode=graph layers=32 -->")
    labels = {g.key: g.short_label for g in fixture_store.groups}
    html = markdown.claim(result, labels)
    assert ">H200 ✓ 3.00× (3 runs)</span>" in html and ">H100 80GB HBM3 ✗ VIOLATED: 2.80× (1 of 1 run)</span>" in html
    assert html.count("lab-claim--holds") == 1 and html.count("lab-claim--violated") == 1
    title = re.search(r'title="([^"]*)"', html)[1]
    assert "lowest per run: run run-1: 3.10×; run run-2: 3.00×; run run-3: 3.20×" in title


def test_plot_series_are_medians_with_a_band_across_runs(fixture_store):
    h200 = group(fixture_store, H200)
    request = req('<!-- lab:plot fixture.launch x=layers y=time xlabel="layers" ylabel="time per step" '
                  'series=mode legend="graph:CUDA graph" logx=true -->')
    series, unit, drawn = series_of(request, h200)
    assert unit == "us" and [s.label for s in series] == ["eager", "CUDA graph"] and len(drawn) == 4
    assert [s.key for s in series] == ["eager", "graph"]
    first = series[0].points[0]
    assert (first.x, first.y, first.low, first.high, first.q1) == (8, 412.0, 400.0, 480.0, None)
    cpu = series_of(request, group(fixture_store, CPU))[0][0].points[0]  # one run: quartiles, no band
    assert cpu.low is None and cpu.q1 == pytest.approx(95 * 0.97)
    svg = plot.line_plot(series, xlabel="layers", ylabel="time per step (µs)", logx=True, uid="t1")
    assert svg.startswith('<svg class="lab-plot__svg" role="img" aria-label="time per step (µs) against layers"')
    assert ">time per step (µs)<" in svg and ">CUDA graph<" in svg and ">mode=" not in svg
    assert plot.SENTINEL not in svg and "currentColor" in svg
    assert "<text" in svg and "font-family: inherit" in svg and "DejaVu" not in svg
    assert not re.search(r'<svg[^>]* width=', svg) and "viewBox" in svg
    ids = re.findall(r'id="([^"]+)"', svg)
    assert ids and all(i.startswith("t1-") for i in ids)
    assert all(ref[1:] in ids for ref in re.findall(r'href="(#[^"]+)"', svg))
    assert plot.COLORS[0] in svg and plot.COLORS[1] in svg
    assert "fill-opacity: 0.18" in svg or 'fill-opacity="0.18"' in svg  # the bands
    single = plot.line_plot(series_of(request, group(fixture_store, CPU))[0], xlabel="l", ylabel="t", uid="t2")
    assert "0.18" not in single  # one run: no band
    with pytest.raises(LabError, match=r"several rows at layers=8; filter on mode or name series="):
        series_of(req("<!-- lab:plot fixture.launch x=layers y=time xlabel=a ylabel=b -->"), h200)
    with pytest.raises(figures.SelectionError, match="no selected row has the metric 'speedup'"):
        series_of(req("<!-- lab:plot fixture.launch x=layers y=speedup xlabel=a ylabel=b mode=eager -->"), h200)


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
    return SimpleNamespace(file=SimpleNamespace(src_uri=src), url=src.replace(".md", "/"))


def run(hook, text: str, src: str = "chapter.md") -> str:
    return hook.module.on_page_markdown(text, page=page(src), config=hook.config, files=None)


def test_the_hook_expands_and_records_claims(hook, caplog):
    with caplog.at_level(logging.INFO, logger="mkdocs.plugins.lab"):
        out = run(hook, "It holds: <!-- lab:claim fixture.launch speedup >= 3 mode=graph -->\n\n"
                        '<!-- lab:plot fixture.launch x=layers y=time series=mode xlabel="layers" '
                        'ylabel="time per step" -->\n', src="part/chapter.md")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "part/chapter.md: claim 'fixture.launch speedup >= 3 mode=\"graph\"' is VIOLATED on nvidia-h200: "
        f"measured 2.40×, bound >= 3, in 3 of 3 runs (record lab-records/0-records/{H200}/{TOPIC}/run-2.json)",
        "part/chapter.md: claim 'fixture.launch speedup >= 3 mode=\"graph\"' is VIOLATED on nvidia-h100-80gb-hbm3: "
        f"measured 2.20×, bound >= 3, in 1 of 1 run (record lab-records/0-records/{H100}/{TOPIC}.json)",
    ]
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert any("nvidia-h100-80gb-hbm3" in m and "earlier version of this code" in m for m in infos)
    # A root outside docs/ is served under lab-records/; the links are relative to the page.
    assert f"(../lab-records/0-records/{H200}/{TOPIC}/run-1.json" in out
    tokens = re.findall(r"LABPLOT[0-9a-f]{8}", out)
    assert len(tokens) == 3  # one plot per machine
    html = hook.module.on_page_content("".join(f"<p>{t}</p>" for t in tokens), page=page("part/chapter.md"),
                                       config=hook.config, files=None)
    # One figure per machine, all numbered 1 (one shortcode), each with its own anchor and CSV.
    ids = re.findall(r'<figure class="lab-plot" id="([^"]+)"><div class="lab-plot__scroll" data-search-exclude><svg', html)
    assert ids == ["figure-1", f"figure-1-{H100}", f"figure-1-{CPU}"]
    assert html.count('<a class="lab-plot__number" href="#figure-1">Figure 1</a>. time per step (µs) against '
                      'layers (NVIDIA H200)') == 1
    csvs = re.findall(r'<a class="lab-plot__csv" href="([^"]+)" download>', html)
    assert csvs == [f"chapter-{i}.csv" for i in ids]
    assert "median of 3 runs with their range" in html and ">time per step (µs)<" in html
    hook.module.on_post_build(hook.config)
    # The CSVs are in the page's folder of the site, one row per point drawn.
    first = (Path(hook.config.site_dir) / "part" / "chapter" / csvs[0]).read_text().splitlines()
    assert first[0] == "series,layers,time,unit,runs,low,high,q1,q3,topic"
    assert first[1] == "eager,8,412.0,us,3,400.0,480.0,,,fixture.launch"
    assert len(first) - 1 == len(re.findall(r"<title>", html.split("</figure>")[0]))
    report = json.loads((Path(hook.config.site_dir) / "claims.json").read_text())
    [only] = report["claims"]
    assert only["page"] == "part/chapter.md" and only["holds"] is False and only["runs_min"] == 1
    assert [(v["machine"], v["runs"], v["holds"]) for v in only["verdicts"]] == [(H200, 3, False), (H100, 1, False)]


def test_a_noisy_value_warns_unless_it_quotes_the_range(hook, caplog):
    with caplog.at_level(logging.WARNING, logger="mkdocs.plugins.lab"):
        quiet = run(hook, "<!-- lab:value fixture.launch time layers=32 mode=eager -->\n")
        ranged = run(hook, "<!-- lab:value fixture.launch time layers=8 mode=eager spread=range -->\n")
        assert not caplog.records
        noisy = run(hook, "<!-- lab:value fixture.launch time layers=8 mode=eager -->\n", src="part/noisy.md")
    assert f">1,630{US}</span>" in quiet and f">400–480{US}</span>" in ranged and f">412{US}</span>" in noisy
    assert [r.getMessage() for r in caplog.records] == [
        "part/noisy.md: lab:value fixture.launch time (layers=8 mode=eager) on nvidia-h200: the runs differ by "
        f"more than 15 % (400–480{US} over 3 runs); quote the range with spread=range"]


def test_a_plot_without_axis_words_or_with_an_unknown_legend_names_the_page(hook):
    with pytest.raises(PluginError, match=r"part/chapter\.md: .*lab:plot needs xlabel="):
        run(hook, "<!-- lab:plot fixture.launch x=layers y=time series=mode ylabel=time -->\n", src="part/chapter.md")
    with pytest.raises(PluginError, match=r"chapter\.md: .*legend= names 'replay', which no series of mode has "
                                          r"\(values: eager, graph\)"):
        run(hook, '<!-- lab:plot fixture.launch x=layers y=time series=mode xlabel=a ylabel=b '
                  'legend="replay:Replay" -->\n')


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


def test_a_metric_without_words_fails_the_page_in_one_line(hook, monkeypatch):
    """A header never falls back to the identifier: the page fails, naming the file to add the words to."""
    from examples.lab import metrics

    monkeypatch.delitem(metrics.METRICS, "time")
    message = ("chapter.md: <!-- lab:table fixture.launch -->: metric 'time' of topic fixture.launch has no label: "
               "add its words to METRICS in examples/lab/metrics.py")
    with pytest.raises(PluginError) as caught:
        run(hook, "<!-- lab:table fixture.launch -->\n")
    assert str(caught.value) == message and "\n" not in str(caught.value)


def test_a_malformed_record_fails_naming_the_page_and_the_file(hook, tmp_path):
    records = tmp_path / "records"
    shutil.copytree(FIXTURES / "records", records)
    broken = records / H200 / TOPIC / "run-2.json"
    broken.write_text(broken.read_text().replace('"schema_version": 2', '"schema_version": 3'))
    hook.config.extra["lab"] = {"record_roots": [str(records)], "primary_machine": H200}
    hook.module.on_config(hook.config)
    hook.module.on_pre_build(hook.config)
    with pytest.raises(PluginError, match=rf"chapter\.md: .*record {re.escape(str(broken))} of topic "
                                          r"fixture\.launch is malformed: .*schema_version 3"):
        run(hook, "<!-- lab:table fixture.launch -->\n")
    with pytest.raises(PluginError, match="malformed record.*that no page uses yet"):
        hook.module.on_post_build(hook.config)


def test_unknown_settings_are_errors(hook):
    hook.config.extra["lab"] = {"record_root": ["docs/records"]}
    with pytest.raises(PluginError, match="extra.lab: unknown setting.*record_root"):
        hook.module.on_config(hook.config)


# -- stale records that lack what a page asks for --------------------------------------------
# The H100's only run is stale, the H200's counted runs and the CPU's are current.

LACKS = "not yet measured by the current code"
CHANGED = "tests/fixtures/fixture_source.txt has changed since this record was made"


def labels_of(text: str) -> list[str]:
    return re.findall(r'^===!? "(.*)"$', text, flags=re.M)


def test_the_stale_reason_names_what_the_hash_of_an_example_covers(fixture_store):
    h100 = group(fixture_store, H100)
    example = h100.record.model_copy(update={"source": "examples/graphs/launch_cost.py"})
    stale, reason = store.staleness(example, REPO)
    # The hash covers the example, the example modules it imports and the harness: the file
    # itself may be unchanged, so the reason does not blame it alone.
    assert stale and reason == ("the code it measured with (examples/graphs/launch_cost.py, the example modules "
                                "it imports or the lab harness) has changed since this record was made")
    run = store.Entry(example, h100.runs[0].path, h100.root, "x.json", True, reason)
    note = provenance.stale_note(store.Group(h100.root, "graphs.launch_cost", (run,)))
    assert "    The code it measured with (`examples/graphs/launch_cost.py`, the example modules it imports or " \
           "the lab harness) has changed since this record was made: the numbers below" in note
    assert h100.stale_reason == CHANGED  # a stand-in text source is hashed alone, and named alone


@pytest.mark.parametrize("text, lacks", [
    ("<!-- lab:value fixture.launch latency layers=8 mode=graph -->", "no metric &#x27;latency&#x27;"),
    ("<!-- lab:value fixture.launch time layers=64 mode=eager -->", "has layers=64"),
    ("<!-- lab:value fixture.launch time layers=8 -->", "the filters select 2"),  # rows it cannot tell apart
    ("<!-- lab:value fixture.launch time layers=8 mode=eager stat=sm_mhz -->", "has no sm_mhz"),
])
def test_a_stale_value_that_lacks_the_figure_says_so_and_a_current_one_fails(fixture_store, text, lacks):
    html = markdown.value(req(text), group(fixture_store, H100))
    assert html.startswith(f'<span class="lab-value lab-value--missing" title="NVIDIA H100 80GB HBM3 ({H100}) · ')
    assert html.endswith(f">{LACKS}</span>") and lacks in html
    assert f"· {CHANGED} · rerun python -m examples.lab run fixture.launch --out DIR to measure it" in html
    with pytest.raises(figures.SelectionError):
        markdown.value(req(text), group(fixture_store, H200))


def test_a_table_no_group_can_show_is_a_tab_saying_so_only_where_its_groups_are_stale(fixture_store):
    h100, h200, cpu = (group(fixture_store, slug) for slug in (H100, H200, CPU))
    for text, lacks in (("<!-- lab:table fixture.launch metrics=latency -->", "no metric 'latency'"),
                        ("<!-- lab:table fixture.launch mode=replay -->", "has mode='replay'")):
        request = req(text)
        out = markdown.table(request, [h100], link)
        assert labels_of(out) == ["NVIDIA H100 80GB HBM3"]
        assert f'!!! warning "{markdown.NOT_MEASURED_TITLE}"' in out and lacks in out
        assert ("`tests/fixtures/fixture_source.txt` has changed since this record was made, and its records "
                "(made on 2026-11-18) lack what this shows") in out
        assert "Rerun `python -m examples.lab run fixture.launch --out DIR` to measure it" in out
        assert f"[1](../records/{H100}/{TOPIC}.json" in out and "| layers |" not in out
        # A current CPU lacks every CUDA-only figure: beside a stale GPU it is left out, as ever.
        assert labels_of(markdown.table(request, [h100, cpu], link)) == ["NVIDIA H100 80GB HBM3"]
        # A current GPU that lacks it, or only current groups: the page asks for what the code does not measure.
        with pytest.raises(figures.SelectionError, match=f"on {H200} "):
            markdown.table(request, [h200, h100], link)
        with pytest.raises(figures.SelectionError, match=f"on {CPU} "):
            markdown.table(request, [cpu], link)


def test_a_stale_table_keeps_the_metrics_it_has_and_marks_those_it_lacks(fixture_store):
    request = req("<!-- lab:table fixture.launch metrics=time,latency mode=graph -->")
    text = markdown.table(request, [group(fixture_store, H100)], link)
    h100 = tab(text, "NVIDIA H100 80GB HBM3")
    assert f'!!! warning "{markdown.STALE_TITLE}"' in h100 and "    | layers | time (µs) | latency |" in h100
    graph = next(line for line in h100.splitlines() if "| 8 | 207 " in line)
    assert graph.endswith('">not yet measured</span> |') and 'class="lab-missing"' in graph
    assert f"latency: {LACKS} (these runs predate it)." in h100
    # Beside a current group lacking the column, the table fails as it always did.
    with pytest.raises(figures.SelectionError, match=f"{H200} has no metric 'latency'"):
        markdown.table(request, [group(fixture_store, H200), group(fixture_store, H100)], link)


def test_stale_plots_and_notes_that_lack_what_they_show_are_tabs_saying_so(fixture_store):
    h100, h200 = group(fixture_store, H100), group(fixture_store, H200)
    plotted = req("<!-- lab:plot fixture.launch x=layers y=latency xlabel=layers ylabel=latency series=mode -->")
    drawn = lambda g: ("TOKEN", series_of(plotted, g)[2])  # noqa: E731
    out = markdown.plot(plotted, [h100], link, drawn)
    assert labels_of(out) == ["NVIDIA H100 80GB HBM3"] and "TOKEN" not in out
    assert markdown.NOT_MEASURED_TITLE in out and "no selected row has the metric 'latency'" in out
    with pytest.raises(figures.SelectionError, match="no selected row has the metric 'latency'"):
        markdown.plot(plotted, [h200, h100], link, drawn)
    noted = req("<!-- lab:notes fixture.launch keys=sizes -->")  # the legacy H100 record has no notes
    assert markdown.NOT_MEASURED_TITLE in markdown.notes(noted, [h100], link)
    assert labels_of(markdown.notes(noted, [h200, h100], link)) == ["NVIDIA H200"]  # as ever: the H200 has it


def _gpu(slug: str, name: str, speedup: dict | None, *, stale: bool):
    from tests.fixtures import make_records as mk

    record = mk.record(mk.machine(slug, "cuda", name, 132), mk.rows({8: 400.0}, speedup, "cuda_event"),
                       "0" * 64, "r1", "2026-11-21T10:00:00+00:00", boot="0" * 8)
    return entry(record, stale=stale)


def test_a_claim_that_stale_records_lack_is_unverified_and_a_current_lack_is_an_error():
    holds = _gpu(H200, "NVIDIA H200", {8: 2.5}, stale=False)
    lacks = _gpu(H100, "NVIDIA H100 80GB HBM3", None, stale=True)  # earlier code: no graph rows
    request = req("<!-- lab:claim fixture.launch speedup >= 2 mode=graph -->")
    result = claims.evaluate("chapter.md", request, grouped(holds, lacks))
    h200, h100 = result.verdicts
    assert h200.status == "holds" and h200.runs == 1
    assert h100.status == "unverified" and not h100.holds and h100.runs == 0 and h100.worst is None
    assert "has mode='graph'" in h100.missing
    assert result.status == "unverified" and not result.holds and not result.violated
    assert result.unverified == (h100,)
    html = markdown.claim(result, {})
    assert 'class="lab-claim lab-claim--holds"' in html and "lab-claim--violated" not in html
    assert f">{H100} ? unverified: stale records lack this figure</span>" in html
    report = result.to_json()
    assert report["status"] == "unverified" and report["holds"] is False and report["runs_min"] == 0
    assert [v["status"] for v in report["verdicts"]] == ["holds", "unverified"]
    # No GPU has the figure, all of them stale: unverified, not an error.
    only = claims.evaluate("chapter.md", request, grouped(lacks))
    assert only.status == "unverified" and [v.status for v in only.verdicts] == ["unverified"]
    # A current GPU that lacks it: the page claims what the code does not measure.
    current = _gpu(H100, "NVIDIA H100 80GB HBM3", None, stale=False)
    with pytest.raises(figures.SelectionError, match=f"no row of topic {TOPIC} on {H100} has mode='graph'"):
        claims.evaluate("chapter.md", request, grouped(holds, current))
    # A stale run that has the figure and breaks the claim still breaks it.
    broken = _gpu(H100, "NVIDIA H100 80GB HBM3", {8: 1.5}, stale=True)
    assert claims.evaluate("chapter.md", request, grouped(holds, broken)).status == "violated"


def test_a_calculator_input_its_stale_records_lack_starts_from_the_examples_own_value(fixture_store):
    from lab_site import calculators

    request = req("<!-- lab:calculator launch_budget -->")
    html = calculators.render(request, lambda topic, slug: group(fixture_store, H100), lambda g: g.site_uri)
    field = re.search(r'<label class="lab-calc__field"><span class="lab-calc__label">CPU cost of one launch</span>'
                      r'.*?</label>', html).group(0)
    assert 'name="launch_us" value="' + calculators.argv_value(calculators.CALCULATORS["launch_budget"],
                                                                calculators.CALCULATORS["launch_budget"].fields[2]) \
        + '"' in field
    assert f">{LACKS}: H100 80GB HBM3</a>" in field and "no case key &#x27;kernels&#x27;" in field
    with pytest.raises(figures.SelectionError, match="no case key 'kernels'"):
        calculators.render(request, lambda topic, slug: group(fixture_store, H200), lambda g: g.site_uri)


@pytest.fixture
def stale_only(hook, tmp_path):
    """The hook reading only the H100's stale legacy record."""
    records = tmp_path / "stale-only"
    shutil.copytree(FIXTURES / "records" / H100, records / H100)
    hook.config.extra["lab"] = {"record_roots": [str(records)], "primary_machine": H100}
    hook.module.on_config(hook.config)
    hook.module.on_pre_build(hook.config)
    return hook


def test_the_hook_marks_what_stale_records_lack_and_does_not_fail(stale_only, caplog):
    page_text = ("Graph launches cost <!-- lab:value fixture.launch latency layers=8 mode=graph -->; "
                 "<!-- lab:claim fixture.launch latency < 100 layers=8 mode=graph -->\n\n"
                 "<!-- lab:table fixture.launch metrics=latency -->\n\n"
                 '<!-- lab:plot fixture.launch x=layers y=latency series=mode xlabel=a ylabel=b '
                 'legend="graph:Graph" -->\n')
    with caplog.at_level(logging.INFO, logger="mkdocs.plugins.lab"):
        out = run(stale_only, page_text)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]  # --strict passes
    assert any("is unverified on nvidia-h100-80gb-hbm3: its stale records lack this figure" in r.getMessage()
               for r in caplog.records)
    assert f">{LACKS}</span>;" in out and "lab-claim--unverified" in out
    assert out.count(f'!!! warning "{markdown.NOT_MEASURED_TITLE}"') == 2  # the table's tab and the plot's
    stale_only.module.on_post_build(stale_only.config)
    report = json.loads((Path(stale_only.config.site_dir) / "claims.json").read_text())
    assert [c["status"] for c in report["claims"]] == ["unverified"]
    # What a stale run has and contradicts is still a violation, a warning that fails --strict.
    with caplog.at_level(logging.WARNING, logger="mkdocs.plugins.lab"):
        caplog.clear()
        run(stale_only, "<!-- lab:claim fixture.launch speedup >= 3 mode=graph -->\n")
    assert [r.levelno for r in caplog.records] == [logging.WARNING] and "VIOLATED" in caplog.records[0].getMessage()


def test_appendix_a_lists_a_claim_its_stale_records_lack_as_unverified(stale_only):
    from lab_site import generated

    page_ = generated.Page("chapter.md", "A chapter", "<!-- lab:claim fixture.launch latency < 100 -->\n")
    text = generated.claims(stale_only.module.state.store, [page_], H100)
    row = text.splitlines()[2]
    assert row.startswith("| [A chapter](chapter.md) | latency: `fixture.launch latency < 100` | ")
    assert "lab-claim--unverified" in row and "? unverified: stale records lack this figure</span>" in row


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


# -- board power: which reading, and none where a window had none -------------------------------

def _power_run(run_id: str, *, watts: float | None, reading: str | None, summary: bool = True):
    """A one-run H200 record whose time metric (layers=8, eager) and summary carry a power reading."""
    from examples.lab.records import Load, LoadSummary, Metric, Row
    from tests.fixtures import make_records as mk

    load = Load(sm_mhz=1980, mem_mhz=3201, power_w=watts, power_reading=reading if watts is not None else None,
                samples=12)
    metric = Metric(unit="us", median=100.0, q1=99.0, q3=101.0, n=20, method="cuda_event", load=load)
    loads = LoadSummary(sm_mhz_median=1980, sm_mhz_min=1900, sm_mhz_max=1980, mem_mhz_median=3201,
                        power_w_median=watts, power_w_max=None if watts is None else watts + 5,
                        power_reading=reading if watts is not None else None, samples=300, interval_ms=10.0)
    record = mk.record(mk.machine(H200, "cuda", "NVIDIA H200", 132),
                       [Row(case={"layers": 8, "mode": "eager"}, metrics={"time": metric})], "0" * 64, run_id,
                       f"2026-11-2{run_id[-1]}T10:00:00+00:00", boot="0" * 8, load=loads if summary else None)
    return entry(record)


def _power_group(*runs) -> store.Group:
    (g,) = grouped(*runs)
    return g


VALUE = "<!-- lab:value fixture.launch time layers=8 mode=eager stat=power_w -->"


def _title(html: str) -> str:
    return re.search(r'title="([^"]*)"', html)[1]


def test_an_instantaneous_power_figure_says_so_on_the_page_and_in_its_title():
    from lab_site import power

    g = _power_group(*(_power_run(f"r{i}", watts=w, reading="instant") for i, w in enumerate((650.0, 690.0, 700.0))))
    line = provenance.line(g, link)
    explained = power.EXPLAINED["instant"].replace("'", "&#x27;")
    assert f'SM 1,980{NBSP}MHz, 690 W of 700 W under load (power: <span title="{explained}">instantaneous</span>)' \
        in line
    value = markdown.value(req(VALUE), g)
    assert value.endswith(f">690{NBSP}W</span>")
    assert "board power while it was timed (instantaneous): NVML&#x27;s instantaneous board power " \
           "(NVML_FI_DEV_POWER_INSTANT)" in _title(value)


def test_power_of_older_records_is_named_a_one_second_average():
    """Records made before they named their reading took nvmlDeviceGetPowerUsage: say so."""
    g = _power_group(_power_run("r1", watts=120.0, reading=None), _power_run("r2", watts=130.0, reading=None))
    line = provenance.line(g, link)
    assert "125 W of 700 W under load (power: <span title=\"NVML&#x27;s board power averaged over the last " \
           "second (nvmlDeviceGetPowerUsage): records made before they named their power reading took that one" in line
    assert ">one-second average</span>)" in line
    value = markdown.value(req(VALUE), g)
    assert value.endswith(f">125{NBSP}W</span>") and "(one-second average): " in _title(value)
    # The provenance line of the fixture records (made before records named it) says it too.
    table = markdown.table(req("<!-- lab:table fixture.launch -->"), [group(_fixture(), H200)], link)
    assert ">one-second average</span>)" in table


def _fixture() -> store.Store:
    return store.load([root(FIXTURES / "records")], REPO)


def test_no_power_figure_is_a_dash_with_the_reason_and_never_a_crash():
    """An averaged reading gives no figure for a window shorter than a second (power_w is None)."""
    from lab_site import power

    g = _power_group(_power_run("r1", watts=None, reading="one-second average"),
                     _power_run("r2", watts=None, reading=None))
    line = provenance.line(g, link)
    assert f'SM 1,980{NBSP}MHz under load (<span title="' in line and ">no power figure</span>)" in line
    assert " W" not in line.split("under load")[0]
    value = markdown.value(req(VALUE), g)
    assert value.endswith(">—</span>") and _title(value).split(" · ")[2] == power.NO_FIGURE.replace("'", "&#x27;")
    with pytest.raises(figures.SelectionError, match="no power figure"):
        figures.stat(figures.metric(g, figures.rows(g)[0], "time"), "power_w")
    # Some runs with a figure, one without: the median of those that have one, the others counted.
    mixed = _power_group(_power_run("r1", watts=600.0, reading="one-second average"),
                         _power_run("r2", watts=None, reading=None),
                         _power_run("r3", watts=640.0, reading="one-second average"))
    value = markdown.value(req(VALUE), mixed)
    assert value.endswith(f">620{NBSP}W</span>") and "1 of 3 runs have no power figure" in _title(value)
    assert "620 W of 700 W under load (power: " in provenance.line(mixed, link)


def test_runs_that_mix_readings_say_how_many_took_each():
    g = _power_group(_power_run("r1", watts=690.0, reading="instant"), _power_run("r2", watts=700.0, reading=None),
                     _power_run("r3", watts=680.0, reading="instant"))
    assert ">instantaneous in 2 runs, one-second average in 1 run</span>)" in provenance.line(g, link)


def test_a_run_without_load_samples_has_no_power_line_and_a_value_asking_for_it_is_an_error():
    g = _power_group(_power_run("r1", watts=690.0, reading="instant", summary=False))
    assert "under load" not in provenance.line(g, link)
    from examples.lab.records import Metric

    bare = figures.Figure("us", ((None, Metric(unit="us", median=1.0, method="cuda_event")),))
    with pytest.raises(figures.SelectionError, match="has no power_w: no clocks or power were sampled"):
        figures.power(bare)


def test_the_formatting_and_power_modules_doctests_hold():
    import doctest

    from lab_site import fmt, power

    for module in (fmt, power):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.attempted and not result.failed, module.__name__


def test_durations_read_as_a_reader_says_them():
    from lab_site.fmt import duration, duration_range

    assert [duration(s) for s in (1.35, 12.5, 61, 220.4, 616, 3600)] == \
        [f"1.4{NBSP}s", f"13{NBSP}s", f"1{NBSP}min 1{NBSP}s", f"3{NBSP}min 40{NBSP}s", f"10{NBSP}min 16{NBSP}s",
         f"1{NBSP}h"]
    assert duration_range(8.7, 12.4) == f"8.7–12{NBSP}s"
    assert duration_range(125, 145) == f"2{NBSP}min 5{NBSP}s – 2{NBSP}min 25{NBSP}s"
    with pytest.raises(LabError, match="not a duration"):
        duration(-1.0)


def test_a_claim_or_value_reads_the_selected_rows_that_have_its_metric():
    """A filter naming fewer keys than a case may select rows of another case layout (a case
    refined by one more key): those are left out. A row of the metric's own layout that lacks
    it stays, and so do all rows where none has it, so that the missing figure is reported."""
    counted = figures.GroupRow(case={"layers": 4, "grad_mode": "no_grad"}, metrics={"ops": object()})
    timed = figures.GroupRow(case={"layers": 4}, metrics={"step": object(), "waits": object()})
    assert figures.with_metric([counted, timed], "waits") == [timed]
    assert figures.with_metric([counted, timed], "ops") == [counted, timed]
    assert figures.with_metric([counted, timed], "typo") == [counted, timed]
    baseline = figures.GroupRow(case={"layers": 4, "mode": "eager"}, metrics={"step": object()})
    compiled = figures.GroupRow(case={"layers": 4, "mode": "graph"}, metrics={"step": object(), "speedup": object()})
    assert figures.with_metric([baseline, compiled], "speedup") == [baseline, compiled]


def test_a_chapter_says_under_its_title_on_which_gpus_and_days_it_was_measured(fixture_store):
    from lab_site import page_dates

    body = "Text <!-- lab:value fixture.launch speedup mode=graph layers=8 -->.\n"
    chapter = "# 3. A chapter\n\n" + body
    out = page_dates.with_measured_on(chapter, fixture_store, H200)
    title, blank, line, attrs = out.splitlines()[:4]
    assert (title, blank, attrs) == ("# 3. A chapter", "", "{ .lab-measured-on }")
    assert line.startswith("Figures measured on NVIDIA H200 (1 GPU; 20") and line.endswith(", UTC.")
    names = [g.record.machine.gpu_name for g in fixture_store.groups if g.topic == TOPIC and g.is_gpu]
    assert len(set(names)) >= 2 and all(name in line for name in names)  # every GPU of the page's topics
    assert page_dates.with_measured_on("# Appendix\n\n" + body, fixture_store, H200) == "# Appendix\n\n" + body
    assert page_dates.measured_on("# 1. No figures\n", fixture_store, H200) is None
    assert page_dates.page_topics("<!-- lab:plot a.b,c.d x=n y=t -->\n```\n<!-- lab:value e.f m -->\n```") >= {"a.b", "c.d"}
