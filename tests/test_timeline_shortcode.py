"""``lab:timeline``: a profiler timeline kept in a note of a record, drawn as inline SVG.

The fixture records (``tests/fixtures/records/``, see ``tests/test_site_hook.py``) carry
no timeline; these tests put one in the notes of the latest run of the H200 and of the
H100 (the CPU has none, so its tab is left out), the way a profiling example would.
"""
from __future__ import annotations

import copy
import dataclasses
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.hook_support import H100, H200, REPO, TOPIC, fixture_store, req  # noqa: F401 (a fixture)

from mkdocs.config import load_config  # noqa: E402
from mkdocs.exceptions import PluginError  # noqa: E402

from lab_site import LabError, figures, markdown, plot, shortcodes, store, timeline  # noqa: E402

KEY = "trace"

#: A timeline as a profiling example would note it: two panels of three lanes.
NOTE = {
    "unit": "us",
    "panels": [
        {"title": "eager decode step, batch 1", "span": [0.0, 812.5], "lanes": [
            {"name": "NVTX", "events": [[0.0, 812.5, "decode step"]]},
            {"name": "CPU: CUDA API", "events": [[3.1, 9.8, "cudaLaunchKernel"], [20.0, 26.4, "cudaLaunchKernel"]]},
            {"name": "GPU: kernels", "events": [[15.0, 17.2, "gemv"], [30.0, 30.0, "tiny"]]}]},
        {"title": "CUDA graph replay, batch 1", "span": [0.0, 300.0], "lanes": [
            {"name": "NVTX", "events": [[0.0, 300.0, "decode step"]]},
            {"name": "CPU: CUDA API", "events": [[1.0, 12.0, "cudaGraphLaunch"]]},
            {"name": "GPU: kernels", "events": []}]},
    ],
}
LANES = ("NVTX", "CPU: CUDA API", "GPU: kernels")
TITLES = ("eager decode step, batch 1", "CUDA graph replay, batch 1")


def with_notes(s: store.Store, notes: dict[str, dict]) -> store.Store:
    """``s`` with ``notes[slug]`` added to the notes of that group's latest run.

    The record is copied without validation, as the renderer sees a loaded record.
    """
    groups = []
    for g in s.groups:
        if g.slug in notes:
            latest = g.runs[-1]
            record = latest.record.model_copy(update={"notes": {**latest.record.notes, KEY: notes[g.slug]}})
            g = dataclasses.replace(g, runs=(*g.runs[:-1], dataclasses.replace(latest, record=record)))
        groups.append(g)
    return store.Store(entries=s.entries, groups=groups)


@pytest.fixture(scope="module")
def traced(fixture_store) -> store.Store:
    return with_notes(fixture_store, {H200: NOTE, H100: NOTE})


def link(e) -> str:
    return f"../{e.site_uri}"


def drawn(svgs: dict[str, str]):
    """A placeholder for ``markdown.timeline`` that draws each timeline into ``svgs``."""
    def placeholder(group, t):
        token = f"TOKEN{len(svgs)}"
        svgs[token] = plot.timeline_plot(t, uid=f"u{len(svgs)}", description=f"Timeline on {group.label}")
        return token
    return placeholder


def tab(text: str, label: str) -> str:
    return re.split(r'^===!? "', text.split(f'"{label}"\n', 1)[1], flags=re.M)[0]


# -- the shortcode -------------------------------------------------------------------------

def test_the_shortcode_becomes_its_request():
    assert req('<!-- lab:timeline t.x note=trace title="One step" -->') == \
        shortcodes.TimelineRequest("t.x", "trace", "One step")
    assert req("<!-- lab:timeline t.x note=trace -->") == shortcodes.TimelineRequest("t.x", "trace", None)
    assert "timeline" in shortcodes.BLOCK


@pytest.mark.parametrize("text, message", [
    ("<!-- lab:timeline t.x -->", "lab:timeline needs note="),
    ("<!-- lab:timeline note=trace -->", "takes 1 positional argument(s) (TOPIC), got 0"),
    ("<!-- lab:timeline t.x note=trace mode=eager -->",
     "lab:timeline takes only note= and title=, not mode (a timeline has no cases)"),
])
def test_malformed_timeline_shortcodes_are_errors(text, message):
    with pytest.raises(shortcodes.ShortcodeError, match=re.escape(message)):
        req(text)


def test_a_timeline_inside_a_sentence_is_an_error():
    with pytest.raises(shortcodes.ShortcodeError, match="makes a block; put it alone on its line"):
        shortcodes.expand("See <!-- lab:timeline a.b note=x --> here.\n", lambda r, c: "")


# -- the note --------------------------------------------------------------------------------

def test_a_note_parses_into_panels_of_lanes_of_events():
    t = timeline.parse(NOTE)
    assert t.unit == "us" and [p.title for p in t.panels] == list(TITLES)
    assert t.lane_names == list(LANES)
    assert t.panels[0].span == (0.0, 812.5)
    assert t.panels[0].lanes[1].events[0] == timeline.Event(3.1, 9.8, "cudaLaunchKernel")
    assert t.panels[1].lanes[2].events == ()


def broken(path: tuple, value) -> dict:
    """``NOTE`` with the item at ``path`` set to ``value`` (or removed, for ``...``)."""
    note = copy.deepcopy(NOTE)
    *parents, last = path
    at = note
    for p in parents:
        at = at[p]
    if value is ...:
        del at[last]
    else:
        at[last] = value
    return note


@pytest.mark.parametrize("note, message", [
    (broken(("panels", 0, "lanes", 2, "events", 0), [20.0, 10.0, "gemv"]),
     "panels[0].lanes[2].events[0] ('gemv') starts after it ends (20 > 10)"),
    (broken(("panels",), ...), "the note has no 'panels' (it needs panels, unit)"),
    (broken(("panels",), []), "the note's panels are not a non-empty list"),
    (broken(("unit",), "cycles"), "the note's unit 'cycles' is not one of ns, us, ms, s"),
    (broken(("colour",), "red"), "the note has unknown key(s) 'colour' (it takes panels, unit)"),
    (broken(("panels", 1, "span"), [300.0, 0.0]), "panels[1].span is not [start, end] with start < end"),
    (broken(("panels", 1, "lanes"), []), "panels[1].lanes is not a non-empty list"),
    (broken(("panels", 0, "lanes", 0, "name"), ...), "panels[0].lanes[0] has no 'name'"),
    (broken(("panels", 0, "lanes", 1, "name"), "NVTX"),
     "panel 'eager decode step, batch 1' has two lanes named 'NVTX'"),
    (broken(("panels", 0, "lanes", 2, "events", 0), [15.0, 17.2]), "events[0] is not [start, end, label]"),
    (broken(("panels", 0, "lanes", 2, "events", 0), [15.0, "17.2", "gemv"]), "events[0] is not [start, end, label]"),
    (broken(("panels", 0, "lanes", 2, "events", 0), [True, 17.2, "gemv"]), "events[0] is not [start, end, label]"),
    (broken(("panels", 0, "lanes", 2, "events", 0), [15.0, 17.2, 3]), "events[0] is not [start, end, label]"),
    (broken(("panels", 0, "lanes", 2, "events", 0), [800.0, 900.0, "gemv"]),
     "('gemv', 800 to 900) lies outside the panel's span 0 to 812.5"),
    ("trace.json", "the note is not a mapping (unit, panels), but str"),
])
def test_a_note_that_is_not_a_timeline_says_what_is_wrong(note, message):
    with pytest.raises(LabError, match=re.escape(message)):
        timeline.parse(note)


def test_a_malformed_note_names_the_topic_and_the_machine(fixture_store):
    bad = with_notes(fixture_store, {H200: broken(("panels", 0, "lanes", 2, "events", 0), [20.0, 10.0, "gemv"])})
    with pytest.raises(LabError, match=re.escape(
            f"note 'trace' of topic {TOPIC} on {H200} (run run-3) is not a timeline: "
            "panels[0].lanes[2].events[0] ('gemv') starts after it ends (20 > 10)")) as info:
        markdown.timeline(req(f"<!-- lab:timeline {TOPIC} note={KEY} -->"), bad.topic(TOPIC, H200), link, drawn({}))
    assert "\n" not in str(info.value)
    # A malformed note fails even where another machine's note is fine: it is not skipped.
    mixed = with_notes(fixture_store, {H200: NOTE, H100: broken(("panels",), ...)})
    with pytest.raises(LabError, match=rf"on {H100} \(run v1\) is not a timeline: the note has no 'panels'"):
        markdown.timeline(req(f"<!-- lab:timeline {TOPIC} note={KEY} -->"), mixed.topic(TOPIC, H200), link, drawn({}))


def test_a_missing_note_is_an_error_naming_the_topic_and_machine(fixture_store):
    with pytest.raises(figures.SelectionError, match=re.escape(
            f"topic {TOPIC} on {H200} has no note 'trace' in its latest run run-3 "
            "(notes: item, cpu, kernel, sizes)")):
        markdown.timeline(req(f"<!-- lab:timeline {TOPIC} note={KEY} -->"), fixture_store.topic(TOPIC, H200),
                          link, drawn({}))


# -- drawing -----------------------------------------------------------------------------------

def test_timeline_tabs_draw_one_svg_per_machine_with_its_run(traced):
    svgs: dict[str, str] = {}
    text = markdown.timeline(req(f"<!-- lab:timeline {TOPIC} note={KEY} -->"), traced.topic(TOPIC, H200), link,
                             drawn(svgs))
    assert re.findall(r'^===!? "(.*)"$', text, flags=re.M) == ["NVIDIA H200", "NVIDIA H100 80GB HBM3"]  # no CPU
    assert len(svgs) == 2
    h200 = tab(text, "NVIDIA H200")
    assert "NVIDIA H200 · 132 SMs" in h200 and '??? lab-provenance "NVIDIA H200 · 3 runs' in h200  # provenance above
    assert "\n    TOKEN0\n\n" in h200  # a paragraph of its own, for on_page_content
    assert (f'Timeline of the latest run, run-3 of 2026-11-22 ([JSON](../records/{H200}/{TOPIC}/run-3.json '
            '"run run-3, 2026-11-22"))\n    { .lab-caption }') in h200
    h100 = tab(text, "NVIDIA H100 80GB HBM3")
    assert "TOKEN1" in h100 and "Timeline of the latest run, v1 of 2026-11-18" in h100 and markdown.STALE_TITLE in h100
    for svg in svgs.values():
        assert svg.startswith('<svg class="lab-plot__svg" role="img" aria-label="Timeline on NVIDIA H')
        for name in (*LANES, *TITLES, "time from the start of the range (µs)"):
            assert f">{name}<" in svg, name
        assert ">decode step<" in svg and ">tiny<" not in svg  # labels only where they fit
        assert plot.SENTINEL not in svg and "currentColor" in svg
        assert all(colour in svg for colour in plot.COLORS[:3])  # one colour per lane


def test_the_svg_is_deterministic_and_scoped_to_its_uid():
    t = timeline.parse(NOTE)
    one = plot.timeline_plot(t, uid="tl-1", description="d", title="Decode")
    assert one == plot.timeline_plot(t, uid="tl-1", description="d", title="Decode")
    ids = re.findall(r'id="([^"]+)"', one)
    assert ids and all(i.startswith("tl-1-") for i in ids) and ">Decode<" in one
    assert not re.search(r'<svg[^>]* width=', one) and "<metadata>" not in one
    ms = plot.timeline_plot(timeline.parse({**NOTE, "unit": "ms"}), uid="tl-2", description="d")
    assert ">time from the start of the range (ms)<" in ms
    dollars = broken(("panels", 0, "title"), "kernel $a$ of $b$")
    assert ">kernel $a$ of $b$<" in plot.timeline_plot(timeline.parse(dollars), uid="tl-3", description="d")


def test_a_short_event_still_gets_a_visible_bar_inside_the_span():
    events = [timeline.Event(15.0, 17.2, "gemv"), timeline.Event(30.0, 30.0, "empty"),
              timeline.Event(1000.0, 1000.0, "at the end")]
    (a, b, c) = plot.bars(events, (0.0, 1000.0))
    assert a == pytest.approx((15.0, 2.2))
    assert b == pytest.approx((30.0, 1000.0 * plot.MIN_BAR)) and plot.MIN_BAR == 0.0015
    assert c == pytest.approx((1000.0 - 1000.0 * plot.MIN_BAR, 1000.0 * plot.MIN_BAR))


# -- the hook as MkDocs calls it -------------------------------------------------------------

@pytest.fixture
def hook(tmp_path, monkeypatch, traced):
    config = load_config(str(REPO / "mkdocs.yml"))
    module = config.hooks["overrides/hooks/records.py"]
    monkeypatch.setitem(config.extra, "lab", {"record_roots": ["tests/fixtures/records"], "primary_machine": H200})
    config.site_dir = str(tmp_path / "site")
    (tmp_path / "site").mkdir()
    module.on_config(config)
    module.on_pre_build(config)
    module.state.store = traced  # the fixture records, with the timelines
    return SimpleNamespace(module=module, config=config)


def page(src: str = "chapter.md"):
    return SimpleNamespace(file=SimpleNamespace(src_uri=src), url=src.replace(".md", "/"))


def test_the_hook_inlines_one_svg_per_machine(hook):
    src = "part/chapter.md"
    out = hook.module.on_page_markdown(f'<!-- lab:timeline {TOPIC} note={KEY} title="One decode step" -->\n',
                                       page=page(src), config=hook.config, files=None)
    tokens = re.findall(r"LABPLOT[0-9a-f]{8}", out)
    assert len(tokens) == 2 and f"[JSON](../records/{H200}/{TOPIC}/run-3.json" in out
    html = hook.module.on_page_content("".join(f"<p>{t}</p>" for t in tokens), page=page(src),
                                       config=hook.config, files=None)
    assert re.findall(r'<figure class="lab-plot" id="([^"]+)"><div class="lab-plot__scroll" data-search-exclude><svg', html) == ["figure-1", f"figure-1-{H100}"]
    assert "LABPLOT" not in html
    assert (f'aria-label="One decode step: Timeline of {"; ".join(TITLES)} on NVIDIA H200 (run run-3): '
            f'lanes {", ".join(LANES)}"') in html
    assert all(html.count(f">{name}<") >= 2 for name in (*LANES, *TITLES))
    # The title is the numbered caption's text, not drawn in the SVG.
    assert html.count('href="#figure-1">Figure 1</a>. One decode step (NVIDIA H200)') == 1
    assert ">One decode step<" not in html
    hook.module.on_post_build(hook.config)
    rows = (Path(hook.config.site_dir) / "part" / "chapter" / "chapter-figure-1.csv").read_text().splitlines()
    assert rows[0] == "panel,lane,start,end,unit,label"
    assert rows[1] == '"eager decode step, batch 1",NVTX,0.0,812.5,us,decode step'  # quoted: it holds a comma
    assert len(rows) - 1 == sum(len(lane["events"]) for p in NOTE["panels"] for lane in p["lanes"])


def test_panels_share_one_time_scale_and_every_bar_has_its_title():
    svg = plot.timeline_plot(timeline.parse(NOTE), uid="tl-s", description="d")
    # The 300 µs panel is drawn on the 812.5 µs panel's scale: both label 800 µs.
    assert svg.count(">800<") == 2
    titles = re.findall(r'<g class="lab-plot__point"><title>([^<]*)</title><path ', svg)
    assert len(titles) == sum(len(lane["events"]) for p in NOTE["panels"] for lane in p["lanes"])
    assert "CPU: CUDA API: cudaGraphLaunch, 1–12 µs (11.0\u00a0µs) · CUDA graph replay, batch 1" in titles


@pytest.mark.parametrize("notes, message", [
    ({}, f"chapter.md: <!-- lab:timeline {TOPIC} note={KEY} -->: topic {TOPIC} on {H200} has no note 'trace'"),
    ({H200: broken(("panels", 0, "lanes", 2, "events", 0), [20.0, 10.0, "gemv"])},
     f"chapter.md: <!-- lab:timeline {TOPIC} note={KEY} -->: note 'trace' of topic {TOPIC} on {H200} (run run-3) "
     "is not a timeline: panels[0].lanes[2].events[0] ('gemv') starts after it ends (20 > 10)"),
    ({H100: broken(("panels",), ...)}, f"on {H100} (run v1) is not a timeline: the note has no 'panels'"),
])
def test_the_hook_fails_naming_the_page_and_the_problem(hook, fixture_store, notes, message):
    hook.module.state.store = with_notes(fixture_store, notes)
    with pytest.raises(PluginError, match=re.escape(message)):
        hook.module.on_page_markdown(f"<!-- lab:timeline {TOPIC} note={KEY} -->\n", page=page(),
                                     config=hook.config, files=None)
