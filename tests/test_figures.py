"""The plots as a reader meets them: axes in human units, a value on hover for every point,
a numbered caption, the points as CSV, bars against a reference line, one series per GPU.

The first part draws plots from the fixture records (``tests/hook_support.py``) and made-up
series; the last part reads the built book (``LAB_BUILT_SITE`` or a build of its own).
"""
from __future__ import annotations

import csv
import dataclasses
import functools
import io
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.hook_support import (CPU, H100, H200, REPO, TOPIC, fixture_store, is_identifier,  # noqa: F401
                                req, root)

from examples.lab import metrics  # noqa: E402

from lab_site import LabError, plot, shortcodes, store  # noqa: E402
from lab_site.series import csv_text, machine_series, series_of  # noqa: E402

#: A number in e-notation, as matplotlib's ``{:g}`` writes 2 MiB: ``2.09715e+06``.
E_NOTATION = re.compile(r"\d(\.\d+)?e[+-]?\d", re.I)


def texts(svg: str) -> list[str]:
    """Every text drawn in an SVG (tick labels, axis labels, legend), not the titles."""
    return [t for t in re.findall(r"<text[^>]*>([^<]*)</text>", svg)]


def hover_titles(svg: str) -> list[str]:
    return re.findall(r'class="lab-plot__point"><title>([^<]*)</title>', svg)


def point(x, y, runs=3):
    return plot.Point(x, y, low=y * 0.9, high=y * 1.1, runs=runs) if runs > 1 else plot.Point(x, y, q1=y, q3=y)


# -- tick labels ---------------------------------------------------------------------------

@pytest.mark.parametrize("value, unit, shown", [
    (4096, "B", "4 KiB"), (2097152, "B", "2 MiB"), (16777216, "B", "16 MiB"), (8589934592, "B", "8 GiB"),
    (512, "B", "512 B"), (1536, "B", "1.5 KiB"), (0.001, "%", "0.1 %"), (0.5, "%", "50 %"),
    (10000, None, "10,000"), (2e7, None, "20M"), (3e9, None, "3G"), (5e-5, None, "0.00005"),
    (0.30000000000000004, None, "0.3"), (0, None, "0"), (-2, None, "−2"), (1e-7, None, "0.0000001"),
])
def test_tick_labels_are_human_units_never_e_notation(value, unit, shown):
    assert plot.tick_text(value, unit) == shown
    assert not E_NOTATION.search(shown)


def test_a_log_byte_axis_reads_in_binary_units():
    sizes = [2 ** k for k in range(12, 34, 3)]  # 4 KiB to 8 GiB, as Chapter 6 sweeps them
    series = [plot.Series("NCCL", tuple(point(b, 10 + b / 1e6) for b in sizes), "nccl")]
    svg = plot.line_plot(series, xlabel="message size per GPU", ylabel="time (µs)", logx=True, logy=True,
                         xunit="B", yunit="us", uid="b")
    shown = texts(svg)
    assert not [t for t in shown if E_NOTATION.search(t)], shown
    assert {"4 KiB", "2 MiB", "1 GiB"} <= set(shown), shown
    # Without the unit, the same axis still prints no e-notation (plain numbers, M and G).
    plain = plot.line_plot(series, xlabel="bytes", ylabel="t", logx=True, uid="p")
    assert not [t for t in texts(plain) if E_NOTATION.search(t)], texts(plain)


# -- hover -----------------------------------------------------------------------------------

def test_every_point_has_a_title_with_its_value_range_and_runs(fixture_store):
    h200 = next(g for g in fixture_store.groups if g.slug == H200)
    request = req('<!-- lab:plot fixture.launch x=layers y=time series=mode xlabel=layers ylabel=time -->')
    series, unit, _ = series_of(request, h200)
    svg = plot.line_plot(series, xlabel="layers", ylabel="time (µs)", uid="h", yunit=unit)
    titles = hover_titles(svg)
    assert len(titles) == sum(len(s.points) for s in series) == 4
    assert titles[0] == "eager · 8: 412\u00a0µs, median of 3 runs, range 400–480\u00a0µs"
    # One run: its quartiles instead of a range.
    one = plot.hover_text("eager", plot.Point(8, 95.0, q1=92.0, q3=97.0), xunit=None, yunit="us")
    assert one == "eager · 8: 95.0\u00a0µs, 1 run, quartiles 92.0–97.0\u00a0µs"
    # Every hover target is drawn: a missing one is an error, not a silent gap or a shifted title.
    with pytest.raises(LabError, match="hover target 1 of 2 is not once in the SVG"):
        plot._clean('<svg><g id="labhover0"></g></svg>', "u", "d", ["a", "b"])
    drawn = '<g id="labgroup0"><defs><path id="m" d="M 0 0"/></defs><g><use x="1"/><use x="2"/></g></g>'
    with pytest.raises(LabError, match="hover group 0: 3 points, 2 drawn"):
        plot._title_elements(drawn, [["a", "b", "c"]])
    assert hover_titles(plot._title_elements(drawn, [["a", "b"]])) == ["a", "b"]  # not the marker's <defs>


def test_lines_and_annotated_series_still_have_their_points_titled():
    roof = plot.Series("roof", tuple(point(x, min(x * 4.0, 650.0)) for x in (0.1, 1, 10, 100, 1000)), "roof")
    ridge = plot.Series("ridge", (point(148.5, 650.0), point(150.2, 651.0)), "ridge")
    svg = plot.line_plot([roof, ridge], xlabel="intensity", ylabel="rate", logx=True, logy=True, uid="r",
                         lines=("roof",), annotate=("ridge",))
    assert len(hover_titles(svg)) == 7
    assert ">ridge 148–150<" in svg  # one label for the ridge of every run, with their range
    assert svg.count(">ridge 1") == 1


# -- bars ------------------------------------------------------------------------------------

def test_bars_start_at_zero_and_draw_the_reference_line_at_one():
    rungs = ["eager", "static", "book kernels+graph, no PDL", "book kernels+graph"]
    h200 = plot.Series("H200", tuple(point(r, f) for r, f in zip(rungs, (0.1, 0.11, 0.89, 0.9))), H200)
    h100 = plot.Series("H100", tuple(point(r, f) for r, f in zip(rungs, (0.12, 0.13, 0.93, 0.94))), H100)
    svg = plot.bar_plot([h200, h100], xlabel="rung", ylabel="fraction of the speed of light", uid="l",
                        refline=plot.RefLine(1.0, "speed of light"), ymin=0, ymax=1)
    shown = texts(svg)
    assert "speed of light" in shown and "0" in shown and "1" in shown  # the axis runs from 0 to past 1
    assert [t for t in shown if t in rungs] == rungs  # every rung, in order, top to bottom
    assert len(hover_titles(svg)) == 8
    # The reference line is a vertical line at x = 1: a path whose two points share one x.
    dashed = re.findall(r'<path d="M ([\d.]+) ([\d.]+) \n?L ([\d.]+) ([\d.]+)[^"]*"[^>]*stroke-dasharray', svg)
    assert any(x0 == x1 and y0 != y1 for x0, y0, x1, y1 in dashed), dashed
    # ... at the tick labelled 1, and every bar starts at the tick labelled 0.
    ticks = dict((t, float(x)) for x, t in re.findall(r'<text[^>]*text-anchor: middle[^>]*x="([\d.]+)"[^>]*>([^<]*)<',
                                                     svg))
    assert any(abs(float(x0) - ticks["1"]) < 0.01 for x0, y0, x1, y1 in dashed if x0 == x1), (ticks, dashed)
    starts = re.findall(r'class="lab-plot__point"><title>[^<]*</title>\s*<path d="M ([\d.]+) ', svg)
    assert len(starts) == 8 and all(abs(float(x) - ticks["0"]) < 0.01 for x in starts), (ticks, starts)


def test_the_reference_line_keeps_a_plot_from_starting_above_it():
    # All speed-ups above 1 still show the break-even line: the axis reaches down to it.
    series = [plot.Series(None, (point(0.001, 16.0), point(0.01, 6.0), point(0.05, 1.6)))]
    svg = plot.line_plot(series, xlabel="nonzeros", ylabel="speed-up", logx=True, logy=True, xunit="%",
                         uid="s", refline=plot.RefLine(1.0, "break-even"), ymin=None, ymax=None)
    assert "break-even" in texts(svg) and "0.1 %" in texts(svg) and "1 %" in texts(svg)


# -- shortcodes ------------------------------------------------------------------------------

def test_the_new_plot_options_parse():
    r = req('<!-- lab:plot a.b,a.c kind=bars x=rung y=f series=machine order="eager|x, y|z" ymin=0 ymax=1 '
            'refline="1:speed of light" xlabel=rung ylabel=fraction -->')
    assert r.topics == ("a.b", "a.c") and r.per_machine and r.kind == "bars"
    assert r.order == ("eager", "x, y", "z") and r.refline == (1.0, "speed of light") and (r.ymin, r.ymax) == (0, 1)
    r = req('<!-- lab:plot a.b x=s y=f series=n xtransform=1-x xunit=% logx=true lines=roof annotate=ridge,top '
            'xlabel=a ylabel=b device=cuda -->')
    assert (r.xtransform, r.xunit, r.lines, r.annotate, r.where) == ("1-x", "%", ("roof",), ("ridge", "top"),
                                                                    {"device": "cuda"})
    assert req('<!-- lab:plot a.b x=s y=f refline=1 xlabel=a ylabel=b -->').refline == (1.0, "")


@pytest.mark.parametrize("options, message", [
    ("kind=pie", "kind='pie' is not one of line, bars"),
    ("xunit=kg", "xunit='kg' is not one of B, %"),
    ("xtransform=log", "xtransform='log' is not one of 1-x"),
    ('refline="one:roof"', "refline='one:roof': the line's value 'one' is not a number"),
    ("ymin=1 ymax=0", "ymin=1 is not below ymax=0"),
    ("ymax=high", "ymax= takes a number, not 'high'"),
    ("logy=true ymin=0", "ymin=0 cannot start a log axis (logy=true): give one above 0"),
    ('order="a||b"', "holds an empty value (values are parted by |)"),
    ('order="a|b|a"', "names 'a' twice"),
    ("kind=bars logx=true", "kind=bars draws categories along a linear axis: it takes no logx="),
    ("lines=roof", "lines= and annotate= name series: name series= too"),
    ('order=a xtransform=1-x', "order= names case values as written; it does not go with xtransform="),
])
def test_a_malformed_option_is_a_one_line_error(options, message):
    text = f"<!-- lab:plot t.x x=a y=b xlabel=a ylabel=b {options} -->"
    with pytest.raises(shortcodes.ShortcodeError, match=re.escape(message)) as info:
        req(text)
    assert "\n" not in str(info.value)


def test_several_topics_need_a_series_per_gpu():
    with pytest.raises(shortcodes.ShortcodeError, match="several topics .* name series=machine"):
        req("<!-- lab:plot a.b,a.c x=a y=b xlabel=a ylabel=b -->")
    with pytest.raises(shortcodes.ShortcodeError, match="each topic once"):
        req("<!-- lab:plot a.b,a.b x=a y=b series=machine xlabel=a ylabel=b -->")


# -- one series per GPU, across topics -------------------------------------------------------

def other_topic(s: store.Store, topic: str, modes: dict[str, float]) -> list[store.Group]:
    """The GPU groups of ``s`` as if a second topic had measured ``modes`` (mode -> time) at 8 layers."""
    out = []
    for g in s.groups:
        if not g.is_gpu:
            continue
        runs = []
        for e in g.runs:
            template = e.record.results[0]
            results = [template.model_copy(update={"case": {"layers": 8, "mode": mode}, "metrics": {
                "time": template.metrics["time"].model_copy(update={"median": value})}}) for mode, value in modes.items()]
            runs.append(dataclasses.replace(e, record=e.record.model_copy(update={"topic": topic, "results": results})))
        out.append(dataclasses.replace(g, topic=topic, runs=tuple(runs)))
    return out


def test_a_series_per_gpu_joins_topics_the_first_topic_first(fixture_store):
    first = fixture_store.topic(TOPIC, H200)
    second = other_topic(fixture_store, "fixture.fused", {"graph": 1.0, "fused": 50.0})
    request = req(f'<!-- lab:plot {TOPIC},fixture.fused kind=bars x=mode y=time series=machine layers=8 '
                  'order="eager|graph|fused" xlabel=mode ylabel=time -->')
    series, unit, drawn = machine_series(request, [first, second])
    assert unit == "us" and [s.key for s in series] == [H200, H100, CPU]
    h200 = series[0]
    assert [p.x for p in h200.points] == ["eager", "graph", "fused"]  # order=, not the records' order
    # "graph" is the first topic's (the second re-measured it: 1.0 is not drawn); "fused" the second's.
    assert h200.points[1].y != 1.0 and h200.points[1].source == TOPIC
    assert (h200.points[2].y, h200.points[2].source) == (50.0, "fixture.fused")
    assert [p.x for p in series[2].points] == ["eager"]  # the CPU ran no graph and no second topic
    assert {(g.topic, g.slug) for g, _ in drawn} == {(TOPIC, H200), (TOPIC, H100), (TOPIC, CPU),
                                                      ("fixture.fused", H200), ("fixture.fused", H100)}
    svg = plot.bar_plot(series, xlabel="mode", ylabel="time (µs)", uid="m", yunit=unit)
    titles = hover_titles(svg)
    assert len(titles) == 7 and any("· fused: 50.0" in t for t in titles)
    # The hover is read: it names the rung, not the topic's identifier (the CSV does, for a program).
    assert not [t for t in titles if TOPIC in t or "fixture.fused" in t], titles


def test_the_csv_holds_one_row_per_point_drawn(fixture_store):
    h200 = next(g for g in fixture_store.groups if g.slug == H200)
    request = req('<!-- lab:plot fixture.launch x=layers y=time series=mode xtransform=1-x xlabel=a ylabel=b -->')
    series, unit, _ = series_of(request, h200)
    rows = list(csv.DictReader(io.StringIO(csv_text(series, request, unit))))
    assert len(rows) == sum(len(s.points) for s in series)
    drawn = [(s.label, p.x, p.y) for s in series for p in s.points]
    assert [(r["series"], float(r["1-layers"]), float(r["time"])) for r in rows] == drawn
    assert drawn[0][1] == 1 - 32  # the transform is what is drawn: 1 - layers, sorted
    assert rows[0]["runs"] == "3" and rows[0]["low"] and rows[0]["topic"] == TOPIC


# -- legends in words --------------------------------------------------------------------------

def test_a_legend_says_a_case_value_in_words_unless_the_page_renames_it():
    book = store.load([root(REPO / "docs" / "records")], REPO)
    group = book.topic("collectives.ring_allreduce", "nvidia-h200")[0]
    plot_of = '<!-- lab:plot collectives.ring_allreduce x=bytes y=busbw series={} part="{}" xlabel=S ylabel=b {} -->'
    found, _, _ = series_of(req(plot_of.format("collective", "collective sweep", "")), group)
    assert {s.label for s in found} == {"all-gather", "reduce-scatter"}  # all_gather, reduce_scatter
    assert {s.key for s in found} == {"all_gather", "reduce_scatter"}  # what legend= and lines= name
    found, _, _ = series_of(req(plot_of.format("impl", "sweep", "")), group)
    assert {s.label for s in found} == {"NCCL all-reduce", "hand ring"}  # dist.all_reduce, hand ring
    renamed = req(plot_of.format("collective", "collective sweep", 'legend="all_gather:gather all"'))
    assert {s.label for s in series_of(renamed, group)[0]} == {"gather all", "reduce-scatter"}
    # The rule that the built book's plots are held to catches what the words replace.
    words = metrics.not_words()
    svg = plot.line_plot(found, xlabel="total size S", ylabel="bus bandwidth (GB/s)", logx=True, xunit="B", uid="w")
    assert not [t for t in texts(svg) if is_identifier(t, words)], texts(svg)
    assert [t for t in ("all_gather", "dist.all_reduce", "algbw", "time per token (ms)", "gpus (GB/s)")
            if is_identifier(t, words)] == ["all_gather", "dist.all_reduce", "algbw", "gpus (GB/s)"]


def test_a_legend_of_numbers_names_what_they_count_unless_the_page_renames_it(fixture_store):
    """A series keyed by a number says which key (``layers = 32``): a bare ``32`` beside a line says nothing."""
    group = fixture_store.topic(TOPIC, H200)[0]
    request = req(f"<!-- lab:plot {TOPIC} x=mode y=time series=layers xlabel=mode ylabel=time -->")
    found, _, _ = series_of(request, group)
    assert sorted(s.label for s in found) == ["layers = 32", "layers = 8"]
    assert sorted(s.key for s in found) == ["32", "8"]  # what legend=, lines= and annotate= name
    renamed = req(f'<!-- lab:plot {TOPIC} x=mode y=time series=layers legend="8:eight layers" xlabel=m ylabel=t -->')
    assert sorted(s.label for s in series_of(renamed, group)[0]) == ["eight layers", "layers = 32"]


# -- the built book --------------------------------------------------------------------------

class _Figures(HTMLParser):
    """Each ``figure.lab-plot`` of a page: its id, caption links and the SVG's text and titles."""

    def __init__(self):
        super().__init__()
        self.figures: list[dict] = []
        self._in: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "figure" and "lab-plot" in (a.get("class") or "").split():
            self.figures.append({"id": a.get("id"), "links": [], "texts": [], "titles": 0, "number": None})
        if not self.figures:
            return
        f = self.figures[-1]
        if tag == "a" and a.get("class") in ("lab-plot__number", "lab-plot__csv"):
            f["links"].append((a["class"], a.get("href")))
        if tag == "g" and a.get("class") == "lab-plot__point":
            f["titles"] += 1
        self._in = tag if tag in ("text", "a") else None

    def handle_data(self, data):
        if self.figures and self._in == "text":
            self.figures[-1]["texts"].append(data)
        if self.figures and self._in == "a" and data.startswith("Figure "):
            self.figures[-1]["number"] = data

    def handle_endtag(self, tag):
        self._in = None


@functools.cache
def book_figures(site: Path) -> tuple[tuple[Path, dict], ...]:
    """Every plot of the built ``site``, with its page: read once a session (its pages are 20 MB
    of HTML), for the tests below to read, not to change."""
    found = []
    for page in sorted(site.rglob("index.html")):
        if page.parent.name == "print_page":  # the print edition: these plots again, their ids prefixed by
            continue                          # the plugin per chapter (tests/test_print_edition.py)
        parser = _Figures()
        parser.feed(page.read_text(encoding="utf-8"))
        found += [(page, f) for f in parser.figures]
    return tuple(found)


def test_every_plot_of_the_book_is_numbered_hoverable_downloadable_and_free_of_e_notation(built_site):
    seen = 0
    for page, f in book_figures(built_site):
        seen += 1
        where = f"{page.relative_to(built_site)} {f['id']}"
        assert f["id"] and re.fullmatch(r"figure-\d+(-[a-z0-9-]+)?", f["id"]), where
        links = dict(f["links"])
        assert links["lab-plot__number"] == f"#{f['id']}", where
        assert f["number"] == f"Figure {f['id'].split('-')[1]}", where
        assert not [t for t in f["texts"] if E_NOTATION.search(t)], (where, f["texts"])
        assert f["titles"] > 0, where
        data = page.parent / links["lab-plot__csv"]
        assert data.is_file(), where
        rows = list(csv.reader(io.StringIO(data.read_text(encoding="utf-8"))))
        assert len(rows) - 1 == f["titles"], f"{where}: {len(rows) - 1} CSV rows, {f['titles']} points on hover"
    assert seen >= 12


def test_no_plot_of_the_book_shows_a_metric_identifier(built_site):
    """Legends, axis labels, tick labels, titles: words, never an identifier of the code or of
    ``examples/lab/metrics.py`` (the rule of the browser test's table headers, over every plot's SVG)."""
    words = metrics.not_words()
    seen, found = 0, []
    for page, f in book_figures(built_site):
        seen += 1
        assert f["texts"], f"{page.relative_to(built_site)} {f['id']}: no text in the SVG"
        found += [f"{page.relative_to(built_site)} {f['id']}: {t!r}" for t in f["texts"] if is_identifier(t, words)]
    assert seen >= 12
    assert not found, (f"{len(found)} identifiers drawn in plots (give the case value words in CASE_VALUES of "
                       "examples/lab/metrics.py, or the plot a legend=):\n" + "\n".join(found))


def test_no_plot_of_the_book_has_a_legend_that_is_a_bare_number(built_site):
    """Each series' label (the CSV's ``series`` column is the legend): words, never ``1024`` alone
    (Chapter 7's CSR-against-BF16 plot named its two shapes by their k)."""
    seen, bare = 0, []
    for page, f in book_figures(built_site):
        rows = list(csv.DictReader(io.StringIO((page.parent / dict(f["links"])["lab-plot__csv"]).read_text())))
        labels = {r["series"] for r in rows if r.get("series")}
        seen += bool(labels)
        bare += [f"{page.relative_to(built_site)} {f['id']}: {label!r}" for label in sorted(labels)
                 if re.fullmatch(r"[\d.,\s]+", label)]
    assert seen >= 10, seen
    assert not bare, "legends that are bare numbers:\n" + "\n".join(bare)


def test_the_capstone_ladder_is_bars_of_every_rung_per_gpu_against_a_roof_at_one(built_site):
    [(page, ladder)] = [(p, f) for p, f in book_figures(built_site)
                        if p.parent.name == "capstone" and f["id"] == "figure-1"]
    assert {"read roof", "eager", "compile+graph", "book kernels+graph", "int8 book kernels+graph",
            "H200", "H100 80GB HBM3"} <= set(ladder["texts"])
    rows = list(csv.DictReader(io.StringIO((page.parent / dict(ladder["links"])["lab-plot__csv"]).read_text())))
    assert {r["series"] for r in rows} == {"H200", "H100 80GB HBM3"}
    assert {r["topic"] for r in rows} == {"capstone.decode", "capstone.fused_decode"}
    assert all(0 < float(r["read_roof_fraction"]) < 1 for r in rows)


# -- the hook as MkDocs calls it ------------------------------------------------------------

@pytest.fixture
def hook(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from mkdocs.config import load_config

    from tests.hook_support import REPO

    config = load_config(str(REPO / "mkdocs.yml"))
    module = config.hooks["overrides/hooks/records.py"]
    monkeypatch.setitem(config.extra, "lab", {"record_roots": ["tests/fixtures/records"], "primary_machine": H200})
    config.site_dir = str(tmp_path / "site")
    (tmp_path / "site").mkdir()
    module.on_config(config)
    module.on_pre_build(config)
    return SimpleNamespace(module=module, config=config)


def expand(hook, text: str, src: str = "part/chapter.md") -> str:
    from types import SimpleNamespace
    page = SimpleNamespace(file=SimpleNamespace(src_uri=src), url=src.replace(".md", "/"))
    return hook.module.on_page_markdown(text, page=page, config=hook.config, files=None)


@pytest.mark.parametrize("options, message", [
    ("kind=pie", "kind='pie' is not one of line, bars"),
    ('order="eager|replay"', "order= names 'replay', which no row drawn has at mode"),
    ("lines=replay", "lines=/annotate= name 'replay', which no series of layers has (values: 32, 8)"),
])
def test_a_malformed_plot_fails_the_build_in_one_line_naming_the_page(hook, options, message):
    from mkdocs.exceptions import PluginError

    series = "series=layers" if "lines" in options else "layers=8"
    text = f"<!-- lab:plot {TOPIC} x=mode y=time {series} xlabel=mode ylabel=time {options} -->\n"
    with pytest.raises(PluginError) as info:
        expand(hook, text)
    assert str(info.value).startswith("part/chapter.md: <!-- lab:plot") and message in str(info.value)
    assert "\n" not in str(info.value)


def test_a_plot_per_gpu_is_one_figure_with_each_groups_provenance(hook):
    out = expand(hook, f'<!-- lab:plot {TOPIC} kind=bars x=mode y=time series=machine layers=8 '
                       'refline="500:a line" xlabel=mode ylabel=time title="Time by mode" -->\n')
    assert "===" not in out  # no tabs: one figure for every GPU
    lines = [line for line in out.splitlines() if line.startswith(f'??? lab-provenance "`{TOPIC}` · ')]
    assert len(lines) == 3 and "NVIDIA H200" in lines[0] and "NVIDIA H100" in lines[1]
    assert "!!! warning" in out  # the H100's runs are stale: said under its provenance
    [token] = re.findall(r"LABPLOT[0-9a-f]{8}", out)
    from types import SimpleNamespace
    page = SimpleNamespace(file=SimpleNamespace(src_uri="part/chapter.md"), url="part/chapter/")
    html = hook.module.on_page_content(f"<p>{token}</p>", page=page, config=hook.config, files=None)
    assert '<figure class="lab-plot" id="figure-1">' in html and ">a line<" in html
    assert 'href="#figure-1">Figure 1</a>. Time by mode · <a class="lab-plot__csv"' in html
    assert len(hover_titles(html)) == 5  # eager and graph on two GPUs, eager on the CPU


def test_a_series_per_gpu_leaves_out_only_stale_or_cpu_groups_that_lack_the_rows(fixture_store):
    from lab_site.figures import SelectionError

    # Only the H200 and H100 measured a graph; the CPU is left out, not an error.
    request = req(f"<!-- lab:plot {TOPIC} kind=bars x=mode y=speedup series=machine layers=8 xlabel=a ylabel=b -->")
    series, _, _ = machine_series(request, [fixture_store.topic(TOPIC, H200)])
    assert [s.key for s in series] == [H200, H100]
    # A current GPU that lacks what the page asks is an error, as it is for a tab.
    request = req(f"<!-- lab:plot {TOPIC} kind=bars x=mode y=speedup series=machine layers=8 mode=eager "
                  "xlabel=a ylabel=b -->")
    with pytest.raises(SelectionError, match="no selected row has the metric 'speedup'"):
        machine_series(request, [fixture_store.topic(TOPIC, H200)])


def test_a_plot_per_gpu_whose_stale_runs_all_lack_it_says_not_yet_measured(hook, fixture_store):
    h100 = [g for g in fixture_store.groups if g.slug == H100]  # its one run is stale
    hook.module.state.store = store.Store(entries=fixture_store.entries, groups=h100)
    out = expand(hook, f"<!-- lab:plot {TOPIC} kind=bars x=mode y=latency series=machine xlabel=a ylabel=b -->\n")
    assert "not yet measured by the current code" in out.lower() and "LABPLOT" not in out


def test_a_plots_svg_stays_out_of_the_search_index_and_its_caption_does_not(built_site):
    import json
    docs = json.loads((built_site / "search" / "search_index.json").read_text(encoding="utf-8"))["docs"]
    text = " ".join(d["text"] for d in docs if d["location"].startswith("measuring/"))
    assert "One step of each kind, under nsys, on one time scale" in text  # the timeline's caption
    assert "GPU: kernels:" not in text  # its ~900 hover titles
