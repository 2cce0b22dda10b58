"""The live calculators: the widgets against their Python examples.

``<!-- lab:calculator NAME -->`` (``overrides/hooks/lab_site/calculators.py``) writes a
form pre-filled from the records; ``docs/javascripts/calculators.js`` computes in the
browser. The unit tests check the form the hook writes (start values from the records
and from each example's ``EXAMPLE_ARGV``, its command line, its errors). The browser
tests type the same inputs into each widget, in Chromium on the built site, and into
its Python example (``--json``), and require the same numbers (relative 1e-9) and the
same bound; bad input must show a message under the form and no NaN.
"""
from __future__ import annotations

import functools
import importlib
import json
import math
import re
import statistics
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
for path in (REPO, REPO / "overrides" / "hooks"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from examples.lab.records import load_records  # noqa: E402
from lab_site import LabError, calculators, shortcodes, store  # noqa: E402
from tests.hook_support import served  # noqa: E402

RECORDS = REPO / "docs" / "records"
PRIMARY = "nvidia-h200"
from site_server import CHROMIUM  # noqa: E402 - overrides/, on the path hook_support puts it
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update"]
PAGES = {"launch_budget": "cuda-graphs", "dispatch_budget": "dispatcher",
         "roofline": "stack", "ring_allreduce": "collectives", "speed_of_light": "capstone",
         "two_level_allreduce": "collectives"}
#: The calculators that mark their result on a plot of their page: (page, the plot's anchor=).
#: dispatch_budget's page has no plot; speed_of_light's plots draw fractions of the speed of
#: light per rung and rates per prompt length, not a model's tokens per second.
MARKED = {"roofline": ("stack", "roofline"), "ring_allreduce": ("collectives", "allreduce-time"),
          "launch_budget": ("cuda-graphs", "launch-cost")}


def python_result(name: str, values: dict[str, str], tmp_path: Path) -> dict:
    """What the Python example answers for the inputs ``values`` (as typed)."""
    calc = calculators.CALCULATORS[name]
    out = tmp_path / f"{name}.json"
    module = importlib.import_module(calc.module)
    assert module.main([*calc.argv(values), "--json", str(out)]) == 0
    return json.loads(out.read_text())


def load_store(records: Path) -> store.Store:
    """The records under ``records`` as a build loads them (the book's: once, for every test that reads them)."""
    if records == RECORDS:
        return _book_store()
    return store.load(store.roots_from(REPO, REPO / "docs", [str(records)], None), REPO)


@functools.cache
def _book_store() -> store.Store:
    return store.load(store.roots_from(REPO, REPO / "docs", [str(RECORDS)], None), REPO)


@functools.cache
def _book_records() -> tuple:
    return tuple(load_records(RECORDS))


def render(name: str, machine: str | None = None, records: Path = RECORDS) -> str:
    loaded = load_store(records)
    return calculators.render(
        shortcodes.CalculatorRequest(name, machine),
        lambda topic, slug: loaded.machine(topic, slug, PRIMARY),
        lambda group: "../" + group.site_uri,
    )


def across_runs(records: Path, topic: str, where: dict, metric: str, case_key: bool) -> float:
    """What an input should start at, worked out here from the files: the median of the runs' medians."""
    values = []
    mine = [r for r in (_book_records() if records == RECORDS else load_records(records))
            if r.machine.slug == PRIMARY and r.topic == topic]
    # A multi-GPU topic's runs on 2 and on 4 GPUs are separate machines; the page's is the fewest GPUs.
    fewest = min((r.machine.gpu_count for r in mine), default=0)
    # As on the pages: the runs counted_runs counts (today's code where it has runs, else the
    # newest version measured).
    from examples.lab.provenance import source_sha256
    from examples.lab.records import counted_runs
    from examples.lab.registry import EXAMPLES_ROOT

    code = source_sha256(EXAMPLES_ROOT.joinpath(*topic.split(".")).with_suffix(".py"))
    mine = sorted((r for r in mine if r.machine.gpu_count == fewest), key=lambda r: (r.run.date, r.run.id))
    for record in counted_runs(mine, version=lambda r: r.source_sha256, is_current=lambda r: r.source_sha256 == code):
        (row,) = [r for r in record.results if all(r.case.get(k) == v for k, v in where.items())]
        values.append(row.case[metric] if case_key else row.metrics[metric].median)
    assert values, (topic, where)
    return statistics.median(values)


def across_runs_of(records: list, where: dict, metric: str) -> float:
    values = [row.metrics[metric].median for record in records for row in record.results
              if all(row.case.get(k) == v for k, v in where.items())]
    assert len(values) == len(records), where
    return statistics.median(values)


def start_values(html: str) -> dict[str, str]:
    return dict(re.findall(r'name="(\w+)" value="([^"]*)"', html))


# -- the form the hook writes ------------------------------------------------------------

def test_every_calculator_is_on_its_page():
    for name, page in PAGES.items():
        text = (REPO / "docs" / f"{page}.md").read_text(encoding="utf-8")
        plot = f" plot={MARKED[name][1]}" if name in MARKED else ""
        assert text.count(f"<!-- lab:calculator {name}{plot} -->") == 1, page
        assert len(re.findall(rf"<!-- lab:calculator {name}\b", text)) == 1, page
    assert set(PAGES) == set(calculators.CALCULATORS)


@pytest.mark.parametrize("name", sorted(calculators.CALCULATORS))
def test_measured_inputs_come_from_the_records(name):
    calc = calculators.CALCULATORS[name]
    values = start_values(render(name))
    assert set(values) == {f.name for f in calc.fields}
    measured = [f for f in calc.fields if f.source]
    assert measured, f"{name} has no input taken from a record"
    for f in measured:
        expected = across_runs(RECORDS, f.source.topic, f.source.where, f.source.metric, f.source.case_key)
        assert float(values[f.name]) == pytest.approx(expected, rel=5e-3), f.name
        assert float(values[f.name]) != 0


def test_a_measured_input_is_the_median_across_runs(tmp_path):
    """Three runs of the launch cost, the latest the slowest: the input takes the median of the runs."""
    calc = calculators.CALCULATORS["launch_budget"]
    (field,) = [f for f in calc.fields if f.source]
    records = tmp_path / "records"
    book = [r for r in _book_records() if r.machine.slug == PRIMARY and r.topic == field.source.topic]
    base = max(book, key=lambda r: r.run.date)  # one of the book's runs, scaled into three
    single = across_runs_of([base], field.source.where, field.source.metric)
    for i, scale in enumerate((1.0, 1.2, 1.5), 1):
        data = json.loads(base.model_dump_json())
        data["run"]["id"] = f"run-{i}"
        data["run"]["date"] = f"2026-12-0{i}T00:00:00+00:00"
        for row in data["results"]:
            for m in row["metrics"].values():
                for key in ("median", "q1", "q3", "min", "max"):
                    if m[key] is not None:
                        m[key] *= scale
        path = records / PRIMARY / base.topic / f"run-{i}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data))
    html = render("launch_budget", records=records)
    assert float(start_values(html)[field.name]) == pytest.approx(single * 1.2, rel=5e-3)  # not the latest run, 1.5
    # Its link is the latest run's record (a root outside docs/ is served under lab-records/).
    title = re.search(rf'href="\.\./lab-records/0-records/{PRIMARY}/{field.source.topic}/run-3\.json" '
                      r'title="([^"]*)"', html)[1]
    assert "median of 3 runs" in title and "run-to-run range" in title


@pytest.mark.parametrize("name", sorted(calculators.CALCULATORS))
def test_stated_inputs_come_from_example_argv(name, tmp_path):
    """The inputs no record fills start where the example's EXAMPLE_ARGV does."""
    calc = calculators.CALCULATORS[name]
    module = importlib.import_module(calc.module)
    given = dict(zip(module.EXAMPLE_ARGV[::2], module.EXAMPLE_ARGV[1::2]))
    values = start_values(render(name))
    for f in calc.fields:
        if f.source is None:
            typed = f"{values[f.name]}{f.suffix}"
            assert f.flag in given
            if f.from_argv is None:
                assert typed == given[f.flag]
            else:  # a unit the widget converts: the same quantity
                assert f.from_argv(typed) == pytest.approx(f.from_argv(given[f.flag]), rel=1e-12)
    result = python_result(name, values, tmp_path)
    assert {o.key for o in calc.outputs} | {calc.label_key} <= set(result)


def test_shortcode_errors():
    code = shortcodes.parse_text("<!-- lab:calculator roofline -->")
    assert shortcodes.request(code) == shortcodes.CalculatorRequest("roofline")
    assert "calculator" in shortcodes.BLOCK
    with pytest.raises(shortcodes.ShortcodeError, match="only machine="):
        shortcodes.request(shortcodes.parse_text("<!-- lab:calculator roofline gpus=8 -->"))
    with pytest.raises(shortcodes.ShortcodeError, match="1 positional"):
        shortcodes.request(shortcodes.parse_text("<!-- lab:calculator -->"))
    with pytest.raises(LabError, match="unknown calculator 'rooflin'"):
        render("rooflin")
    with pytest.raises(LabError, match="no record of topic"):
        render("roofline", machine="no-such-gpu")


def test_bound_labels_of_the_python_side(tmp_path):
    from examples.collectives.ring_model import ring_bound
    from examples.graphs.launch_budget import launch_budget, verdict

    assert ring_bound(gpus=1, nbytes=1e9, bandwidth=1e9) is None
    assert ring_bound(gpus=8, nbytes=1e9, bandwidth=450e9, latency=5e-6) == "bandwidth"
    assert ring_bound(gpus=512, nbytes=4096, bandwidth=50e9, latency=5e-6) == "latency"
    kw = dict(layers=32, kernels_per_layer=8, tokens_per_second=50)
    assert verdict(launch_budget(launch_us=10, **kw)) == "within budget"
    assert verdict(launch_budget(launch_us=78.125, **kw)) == "over budget"  # exactly the budget


TWO_LEVEL = "examples.collectives.two_level"


@pytest.mark.parametrize(("flag", "bad", "message"), [
    ("--nodes", "1.5", "expected a whole number"), ("--nodes", "0", "at least 1"),
    ("--gpus-per-node", "eight", "expected a whole number"),
    ("--nvlink-bandwidth", "0GB/s", "must be positive"), ("--network-bandwidth", "-50GB/s", "expected one argument"),
    ("--network-bandwidth", "50GB", "expected a rate"), ("--call", "1 fortnight", "expected a time"),
    ("--bytes", "0", "must be positive")])
def test_the_two_level_command_line_refuses_bad_input_in_one_line(flag, bad, message, capsys):
    module = importlib.import_module(TWO_LEVEL)
    argv = list(module.EXAMPLE_ARGV)
    argv[argv.index(flag) + 1] = bad
    with pytest.raises(SystemExit) as caught:
        module.main(argv)
    err = capsys.readouterr().err
    assert caught.value.code == 2 and err.count("\n") == 1 and flag in err and message in err, err
    assert "Traceback" not in err


def test_the_two_level_crossover_is_where_the_two_times_meet():
    from examples.collectives.two_level import compare

    link = dict(nodes=2, gpus_per_node=8, intra_bandwidth=350e9, inter_bandwidth=50e9, intra_latency=2e-6,
                inter_latency=5e-6, call=10e-6)
    at = compare(nbytes=1e6, **link)["crossover_bytes"]
    meet = compare(nbytes=at, **link)
    assert meet["two_level_seconds"] == pytest.approx(meet["flat_rings_seconds"], rel=1e-9)
    assert compare(nbytes=at / 2, **link)["faster"] == "two-level"
    assert compare(nbytes=at * 2, **link)["faster"] == "flat rings"
    one_node = compare(nbytes=1e6, **{**link, "nodes": 1})  # the same ring in two calls: never faster
    assert one_node["faster"] == "flat rings" and one_node["crossover_bytes"] is None
    assert compare(nbytes=1e6, **{**link, "nodes": 1, "gpus_per_node": 1}) == {
        "two_level_seconds": 0.0, "flat_rings_seconds": 0.0, "faster": None, "crossover_bytes": None}


# -- the widgets in a browser ------------------------------------------------------------

#: Inputs typed into each widget and into its example: the page's start values ({}),
#: then cases on either side of the bound.
CASES = {
    "launch_budget": [
        {},
        {"layers": "80", "kernels_per_layer": "12", "launch_us": "25.5", "tokens_per_second": "100"},
        {"layers": "1", "kernels_per_layer": "3", "launch_us": "0.7", "tokens_per_second": "1e3"},
    ],
    "dispatch_budget": [
        {},
        {"ops": "1200", "cpu_us": "4", "gpu_us": "7.5", "fusion": "2.5", "graph_us": "0"},
        {"ops": "7", "cpu_us": ".3", "gpu_us": "0", "fusion": "1", "graph_us": "12.25"},
    ],
    "roofline": [
        {},
        {"flops": "1e9", "bytes": "4e9", "peak_tflops": "989", "bandwidth_gbs": "4800"},
        {"flops": "3.3e12", "bytes": "17", "peak_tflops": "0.5", "bandwidth_gbs": "1.25"},
        {"flops": "150", "bytes": "1", "peak_tflops": "989", "bandwidth_gbs": "4800"},  # just under the ridge
    ],
    "ring_allreduce": [
        {},
        {"gpus": "64", "mbytes": "0.004", "bandwidth_gbs": "50", "latency_us": "5"},
        {"gpus": "8", "mbytes": "4096", "bandwidth_gbs": "450", "latency_us": "0"},
        {"gpus": "1", "mbytes": "1000", "bandwidth_gbs": "450", "latency_us": "5"},
    ],
    # The page's worked example (its start values but the measured NVLink), small messages,
    # one node, one GPU per node, one GPU in all, no latencies, a cost per call.
    "two_level_allreduce": [
        {},
        {"mbytes": "1", "nvlink_gbs": "450"},
        {"mbytes": "1000", "nvlink_gbs": "450", "call_us": "10"},
        {"nodes": "1", "gpus_per_node": "8", "mbytes": "0.064", "call_us": "6.6"},
        {"nodes": "16", "gpus_per_node": "1", "mbytes": "64"},
        {"nodes": "1", "gpus_per_node": "1"},
        {"nodes": "4", "mbytes": "4096", "nvlink_latency_us": "0", "network_latency_us": "0"},
        {"nodes": "128", "gpus_per_node": "4", "mbytes": "0.004", "network_gbs": "25", "network_latency_us": "8.5",
         "call_us": "12"},
    ],
    "speed_of_light": [
        {},
        {"layers": "80", "hidden": "8192", "ffn": "28672", "heads": "64", "kv_heads": "8", "head_dim": "128",
         "vocab": "128256", "weight_bytes": "0.5", "context": "8192", "batch": "64", "bandwidth_gbs": "4800"},
        {"layers": "2", "hidden": "64", "ffn": "160", "heads": "4", "kv_heads": "2", "head_dim": "16",
         "vocab": "512", "weight_bytes": "1", "context": "0", "batch": "1", "bandwidth_gbs": "1.5"},
    ],
}

#: Bad input in one field: the widget says so and shows no number.
BAD = [
    ("launch_budget", "layers", "", "enter a number"),
    ("launch_budget", "layers", "2.5", "not a whole number"),
    ("dispatch_budget", "cpu_us", "abc", "not a number"),
    ("dispatch_budget", "fusion", "0.5", "at least 1"),
    ("roofline", "bytes", "-4", "greater than 0"),
    ("roofline", "flops", "1e999", "too large"),
    ("ring_allreduce", "gpus", "0", "at least 1"),
    ("ring_allreduce", "bandwidth_gbs", "NaN", "not a number"),
    ("ring_allreduce", "mbytes", "1e303", "too large"),
    ("speed_of_light", "heads", "4.5", "not a whole number"),
    ("two_level_allreduce", "nodes", "1.5", "not a whole number"),
    ("two_level_allreduce", "nodes", "0", "at least 1"),
    ("two_level_allreduce", "network_gbs", "0", "greater than 0"),
    ("two_level_allreduce", "nvlink_gbs", "-450", "greater than 0"),
    ("two_level_allreduce", "call_us", "-1", "at least 0"),
    ("speed_of_light", "bandwidth_gbs", "0", "greater than 0"),
    ("launch_budget", "layers", "2^0.5", "not a whole number"),
    ("launch_budget", "layers", "2^60", "too large"),
    ("roofline", "flops", "2^", "not a number"),
    ("roofline", "flops", "1,00", "not a number"),
    ("roofline", "flops", "(2^3", "not a number"),
    ("roofline", "flops", "2**3 + 1", "not a number"),
]

READ_JS = """(widget) => ({
  state: widget.dataset.state,
  error: widget.querySelector(".lab-calc__error").hidden ? null
         : widget.querySelector(".lab-calc__error").textContent,
  values: Object.fromEntries([...widget.querySelectorAll("output[data-key]")]
            .map(o => [o.dataset.key, o.dataset.value === undefined ? undefined : o.dataset.value])),
  text: [...widget.querySelectorAll(".lab-calc__outputs, .lab-calc__bound")].map(e => e.textContent).join(" "),
})"""


@pytest.fixture(scope="module")
def site(built_site) -> Path:
    return built_site


#: Open every folded section (a closed ``details``, such as an "In depth" section) around an element,
#: as a reader does by tapping its summary: a calculator may sit in one.
OPEN_FOLDS_JS = """(selector) => {
  const el = document.querySelector(selector);
  for (let d = el && el.closest("details"); d; d = d.parentElement.closest("details")) d.open = true;
  return !!el;
}"""


def open_calculator(page, name: str) -> None:
    """Wait for calculator ``name`` to be attached, open any fold around it, and wait until it is ready."""
    selector = f'[data-lab-calculator="{name}"]'
    page.wait_for_selector(selector, state="attached", timeout=20_000)
    page.evaluate(OPEN_FOLDS_JS, selector)
    page.wait_for_selector(f'{selector}[data-state="ok"]', timeout=20_000)


@pytest.fixture(scope="module")
def pages(site):
    """One open Chromium page per calculator, on the built site served locally."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: 'make test' installs Debian's chromium", pytrace=False)
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    with served(site) as origin, sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        opened = {}
        for name, page_name in PAGES.items():
            page = chromium.new_page()
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on("console", lambda m: m.type == "error" and errors.append(m.text))
            page.goto(f"{origin}/{page_name}/")
            open_calculator(page, name)
            opened[name] = page
        yield opened, errors
        chromium.close()


#: The inputs of a widget that do not hold their start value: ``[name, start value]``.
CHANGED_JS = """(widget) => [...widget.querySelectorAll("input[name]")]
  .filter(input => input.value !== input.dataset.default).map(input => [input.name, input.dataset.default])"""


def widget_result(page, name: str, typed: dict[str, str]) -> dict:
    widget = page.locator(f'[data-lab-calculator="{name}"]')
    # Back to the page's start values: only the inputs that left theirs are typed again. The widget
    # recomputes from all its inputs on each input event, so typing a start value into a field that
    # holds it changed nothing; it was most of this module's browser time (each fill waits for the
    # field to be visible, stable and editable, then recomputes and redraws the widget and its plot).
    for key, start in widget.evaluate(CHANGED_JS):
        widget.locator(f'input[name="{key}"]').fill(start)
    for key, text in typed.items():
        widget.locator(f'input[name="{key}"]').fill(text)
    return widget.evaluate(READ_JS)


def same_number(widget_text, python_value) -> bool:
    if python_value is None:
        return widget_text == "null"
    w = float(widget_text)
    return math.isclose(w, python_value, rel_tol=1e-9, abs_tol=0 if python_value else 1e-300)


@pytest.mark.browser
@pytest.mark.parametrize("name", sorted(CASES))
def test_widget_matches_python(name, pages, tmp_path):
    opened, errors = pages
    calc = calculators.CALCULATORS[name]
    page = opened[name]
    starts = page.locator(f'[data-lab-calculator="{name}"]').evaluate(
        "w => Object.fromEntries([...w.querySelectorAll('input[name]')].map(i => [i.name, i.dataset.default]))")
    labels = set()
    for typed in CASES[name]:
        shown = widget_result(page, name, typed)
        assert shown["state"] == "ok" and shown["error"] is None, (typed, shown)
        expected = python_result(name, {**starts, **typed}, tmp_path)
        for o in calc.outputs:
            assert same_number(shown["values"][o.key], expected[o.key]), (typed, o.key, shown["values"], expected)
        label = expected[calc.label_key]
        assert shown["values"][calc.label_key] == ("none" if label is None else label), (typed, shown, expected)
        labels.add(shown["values"][calc.label_key])
        assert "NaN" not in shown["text"] and "Infinity" not in shown["text"]
    assert len(labels) >= 2, f"the cases of {name} never cross its bound: {labels}"
    assert not errors, errors


@pytest.mark.browser
@pytest.mark.parametrize(("name", "field", "text", "message"), BAD)
def test_bad_input_shows_a_message(name, field, text, message, pages):
    opened, errors = pages
    shown = widget_result(opened[name], name, {field: text})
    assert shown["state"] == "error"
    assert shown["error"] and message in shown["error"], shown["error"]
    assert all(v is None for v in shown["values"].values()), shown["values"]
    assert "NaN" not in shown["text"] and "Infinity" not in shown["text"]
    assert not errors, errors
    # Fixing the input brings the results back.
    assert widget_result(opened[name], name, {})["state"] == "ok"


@pytest.mark.browser
def test_the_two_level_widget_shows_times_and_sizes_in_readable_units(pages):
    opened, errors = pages
    page = opened["two_level_allreduce"]
    widget = page.locator('[data-lab-calculator="two_level_allreduce"]')
    shown = lambda key: widget.locator(f'output[data-key="{key}"]').text_content()  # noqa: E731
    widget_result(page, "two_level_allreduce", {"mbytes": "1000"})
    assert shown("two_level_seconds").endswith("\u00a0ms") and shown("crossover_bytes").endswith("\u00a0MB")
    widget_result(page, "two_level_allreduce", {"mbytes": "1"})
    assert shown("two_level_seconds").endswith("\u00a0µs")
    widget_result(page, "two_level_allreduce", {"nodes": "1"})  # one node: the flat ring at every size
    assert shown("crossover_bytes") == "—"
    assert not errors, errors


#: Numbers as a reader writes them, and what they are.
WRITTEN = [("1,000", 1000), ("1,000,000.5", 1000000.5), ("2^37", 2 ** 37), ("8192**3", 8192 ** 3),
           ("4096*4096*2", 4096 * 4096 * 2), ("2**3**2", 2 ** 3 ** 2), ("(2^10)^3", (2 ** 10) ** 3),
           ("1.5e9", 1.5e9), (" 2 ^ 10 ", 1024), ("8 × 1024", 8192)]


@pytest.mark.browser
@pytest.mark.parametrize(("text", "value"), WRITTEN)
def test_inputs_take_numbers_as_a_reader_writes_them(text, value, pages):
    opened, errors = pages
    page = opened["roofline"]
    written = widget_result(page, "roofline", {"flops": text})
    plain = widget_result(page, "roofline", {"flops": repr(float(value))})
    assert written["state"] == "ok", written["error"]
    assert written["values"] == plain["values"]
    assert not errors, errors


@pytest.mark.browser
def test_reset_brings_back_the_measured_values_and_the_address_keeps_what_the_reader_changed(pages):
    opened, errors = pages
    page = opened["launch_budget"]
    widget = page.locator('[data-lab-calculator="launch_budget"]')
    start = widget_result(page, "launch_budget", {})
    field = widget.locator('input[name="layers"]')
    field.fill("64")
    # history.replaceState: read the address from the page, waiting for it
    page.wait_for_function("() => location.search.includes('launch_budget.layers=64')", timeout=5_000)
    page.reload()
    open_calculator(page, "launch_budget")
    assert widget.locator('input[name="layers"]').input_value() == "64", "the address restored it"
    widget.locator(".lab-calc__reset").click()
    assert widget.evaluate(READ_JS)["values"] == start["values"]
    page.wait_for_function("() => !location.search.includes('launch_budget.layers')", timeout=5_000)
    assert not errors, errors


def test_presets_offer_each_gpu_s_measured_values_and_the_models_and_precisions():
    from lab_site.calculators import _LLAMA3

    loaded = load_store(RECORDS)
    gpus = sorted({g.slug: g for g in loaded.groups if g.is_gpu and g.runs[0].record.machine.gpu_count == 1}.values(),
                  key=lambda g: g.slug != PRIMARY)
    html = calculators.render(shortcodes.CalculatorRequest("speed_of_light", None),
                              lambda topic, slug: loaded.machine(topic, slug, PRIMARY),
                              lambda group: "../" + group.site_uri, gpus=gpus)
    lists = dict(re.findall(r'<select data-preset="(\w+)">(.*?)</select>', html))
    current = [g for g in gpus if not loaded.machine("capstone.decode", g.slug, PRIMARY).stale]
    # With every GPU's records stale (the capstone's code just changed), no GPU is offered.
    assert set(lists) == {"Model", "Weights"} | ({"GPU"} if current else set())
    offered = lists.get("GPU", "")
    for g in gpus:  # each GPU with current records fills the bandwidth with its own measured copy rate
        group = loaded.machine("capstone.decode", g.slug, PRIMARY)
        if group.stale:  # a preset fills silently: a figure of older code is not offered
            assert f'value="{g.short_label}"' not in offered
            continue
        want = calculators._measured(calculators.CALCULATORS["speed_of_light"],
                                     calculators.CALCULATORS["speed_of_light"].fields[-1], group)[0]
        assert f'data-values="{{&quot;bandwidth_gbs&quot;: &quot;{want}&quot;}}"' in lists["GPU"]
    if any(g.slug == PRIMARY for g in current):
        assert re.search(r'value="H200" [^>]*selected', lists["GPU"]), "the page's GPU is the one chosen"
    assert re.search(r'value="Llama 3 8B" [^>]*selected', lists["Model"]), "the example's shape is Llama 3 8B"
    assert [p.label for p in _LLAMA3] == ["Llama 3 8B", "Llama 3 70B"]
    assert "selected" in lists["Weights"].split("bf16")[1].split("</option>")[0]


@pytest.mark.browser
def test_a_preset_fills_its_inputs_and_the_widget_agrees_with_python(pages, tmp_path):
    opened, errors = pages
    page = opened["speed_of_light"]
    widget = page.locator('[data-lab-calculator="speed_of_light"]')
    widget_result(page, "speed_of_light", {})
    widget.locator('select[data-preset="Model"]').select_option("Llama 3 70B")
    widget.locator('select[data-preset="Weights"]').select_option("int8")
    gpu = widget.locator('select[data-preset="GPU"]')
    other_gpu = gpu.locator("option").count() > 2  # "as typed", the page's GPU, another with current records
    if other_gpu:
        gpu.select_option(index=2)  # the second GPU: not the page's
    typed = widget.evaluate("w => Object.fromEntries([...w.querySelectorAll('input[name]')].map(i => [i.name, i.value]))")
    assert typed["layers"] == "80" and typed["hidden"] == "8192" and typed["weight_bytes"] == "1"
    if other_gpu:
        assert widget.locator(".lab-calc__source").first.is_hidden(), "the page GPU's record no longer applies"
    shown = widget.evaluate(READ_JS)
    expected = python_result("speed_of_light", typed, tmp_path)
    for o in calculators.CALCULATORS["speed_of_light"].outputs:
        assert same_number(shown["values"][o.key], expected[o.key]), o.key
    widget.locator('input[name="layers"]').fill("81")
    assert widget.locator('select[data-preset="Model"]').input_value() == "", "a typed change is 'as typed'"
    widget.locator(".lab-calc__reset").click()
    assert widget.locator('select[data-preset="Model"]').input_value() == "Llama 3 8B"
    assert not errors, errors


# -- the live marker on a plot (plot=) ---------------------------------------------------------

def test_plot_option_parses_and_names_an_anchor():
    parse = lambda text: shortcodes.request(shortcodes.parse_text(text))  # noqa: E731
    assert parse("<!-- lab:calculator roofline plot=roofline -->") == \
        shortcodes.CalculatorRequest("roofline", None, "roofline")
    assert parse("<!-- lab:calculator roofline machine=nvidia-h200 plot=a-b2 -->").plot == "a-b2"
    assert parse('<!-- lab:plot t x=a y=b xlabel=x ylabel=y anchor=roofline -->').anchor == "roofline"
    assert parse('<!-- lab:plot t x=a y=b xlabel=x ylabel=y -->').anchor is None
    assert "anchor" not in parse('<!-- lab:plot t x=a y=b xlabel=x ylabel=y anchor=r -->').where
    for bad in ("<!-- lab:calculator roofline plot=Roof_line -->", "<!-- lab:calculator roofline plot=-r -->",
                '<!-- lab:plot t x=a y=b xlabel=x ylabel=y anchor="a b" -->'):
        with pytest.raises(shortcodes.ShortcodeError, match="lowercase letters, digits and hyphens"):
            parse(bad)


def test_plot_option_is_checked_against_the_plots_of_the_page():
    Info = calculators.PlotInfo
    ring = shortcodes.CalculatorRequest("ring_allreduce", None, "allreduce-time")
    good = {"allreduce-time": Info("line", "B", frozenset({"us"}))}
    calculators.check_plot(ring, good)
    calculators.check_plot(ring, {"allreduce-time": Info("line", "B", frozenset())})  # no tab drawn
    calculators.check_plot(shortcodes.CalculatorRequest("ring_allreduce"), {})  # no plot=: nothing to check
    cases = [
        ({}, "plot=allreduce-time: no lab:plot on this page has anchor=allreduce-time (anchors on this page: none)"),
        ({"roof": Info("line", None, frozenset({"TFLOP/s"}))}, "(anchors on this page: roof)"),
        ({"allreduce-time": Info("bars", None, frozenset({"us"}))}, "a marker goes on a line plot, not on kind=bars"),
        ({"allreduce-time": Info("line", None, frozenset({"us"}))}, "with x in B; the plot's x is in plain numbers"),
        ({"allreduce-time": Info("line", "B", frozenset({"GB/s"}))}, "the plot's metric is in GB/s, not a s quantity"),
        ({"allreduce-time": Info("line", "B", frozenset({"widgets"}))}, "the plot's metric is in widgets"),
    ]
    for plots, message in cases:
        with pytest.raises(LabError, match=re.escape(message)) as caught:
            calculators.check_plot(ring, plots)
        assert "\n" not in str(caught.value)
    with pytest.raises(LabError, match="calculator dispatch_budget has no marker to draw: it takes no plot="):
        render_marked("dispatch_budget", "anything")


def render_marked(name: str, plot: str) -> str:
    loaded = load_store(RECORDS)
    return calculators.render(shortcodes.CalculatorRequest(name, None, plot),
                              lambda topic, slug: loaded.machine(topic, slug, PRIMARY),
                              lambda group: "../" + group.site_uri)


@pytest.mark.parametrize("name", sorted(MARKED))
def test_a_marked_calculator_says_which_plot_and_its_unit(name):
    from lab_site import plot as plot_mod

    html = render_marked(name, MARKED[name][1])
    head = re.match(r"<div [^>]*>", html).group(0)
    assert f'data-plot="{MARKED[name][1]}"' in head
    si = plot_mod.SI_UNITS[calculators.CALCULATORS[name].marker.y_unit][1]
    assert float(re.search(r'data-marker-y-si="([^"]+)"', head).group(1)) == si
    assert '<p class="lab-calc__marked" hidden></p>' in html
    plain = render(name)
    assert "data-plot" not in plain and "lab-calc__marked" not in plain


def _mapper(attr: str):
    """The data -> SVG map that data-lab-x / data-lab-y describe, worked out here (not the page's JS)."""
    kind, lo, hi, start, end = attr.split()
    lo, hi, start, end = map(float, (lo, hi, start, end))
    f = math.log if kind == "log" else (lambda v: v)
    return lambda v: start + (f(v) - f(lo)) / (f(hi) - f(lo)) * (end - start)


@pytest.mark.parametrize(("logx", "logy"), [(True, True), (False, False), (True, False)])
def test_a_line_plot_says_the_scale_it_was_drawn_with(logx, logy):
    """Every point maps, through the <svg>'s data-lab-x/-y, to where matplotlib drew its marker."""
    from lab_site import plot as plot_mod

    series = [plot_mod.Series("a", (plot_mod.Point(0.5, 2.0), plot_mod.Point(10, 300.0), plot_mod.Point(3000, 50.0)),
                              "a"),
              plot_mod.Series("b", (plot_mod.Point(1, 1.0), plot_mod.Point(100, 700.0)), "b")]
    svg = plot_mod.line_plot(series, xlabel="x", ylabel="y", logx=logx, logy=logy, uid="t", yunit="us", title="T")
    head = re.match(r"<svg [^>]*>", svg).group(0)
    x = _mapper(re.search(r'data-lab-x="([^"]+)"', head).group(1))
    y = _mapper(re.search(r'data-lab-y="([^"]+)"', head).group(1))
    assert re.search(r'data-lab-x="(\w+)', head).group(1) == ("log" if logx else "linear")
    assert 'data-lab-y-si="1e-06" data-lab-y-base="s"' in head
    drawn = re.findall(r'<g class="lab-plot__point"><title>[^<]*</title><use [^>]*? x="([-\d.]+)" y="([-\d.]+)"', svg)
    points = [p for s in series for p in s.points]
    assert len(drawn) == len(points)
    for p, (sx, sy) in zip(points, drawn):
        assert x(p.x) == pytest.approx(float(sx), abs=1e-3) and y(p.y) == pytest.approx(float(sy), abs=1e-3)
    # The corners of the axes' frame are the ends of the two ranges.
    frame = re.search(r'axes_1">\s*<g id="t-patch_2">\s*<path d="M ([\d.]+) ([\d.]+) \s*L ([\d.]+)', svg)
    assert frame, "the axes' frame"
    left, bottom, right = map(float, frame.groups())
    assert (x(min(_limits(head, "x"))), y(min(_limits(head, "y"))), x(max(_limits(head, "x")))) == \
        pytest.approx((left, bottom, right), abs=1e-3)
    bars = plot_mod.bar_plot(series, xlabel="x", ylabel="y", uid="u")
    assert "data-lab-x" not in bars, "bars have no marker scale"


def _limits(head: str, axis: str) -> tuple[float, float]:
    _, lo, hi, _, _ = re.search(rf'data-lab-{axis}="([^"]+)"', head).group(1).split()
    return float(lo), float(hi)


@pytest.fixture(scope="module")
def book_hook():
    """The records hook on the book's records, as MkDocs loads it."""
    from mkdocs.config import load_config

    config = load_config(str(REPO / "mkdocs.yml"))
    module = config.hooks["overrides/hooks/records.py"]
    module.on_config(config)
    module.on_pre_build(config)
    return module, config


def _page(src: str):
    from types import SimpleNamespace

    return SimpleNamespace(file=SimpleNamespace(src_uri=src), url=src.replace(".md", "/"))


ROOF_PLOT = ('<!-- lab:plot stack.roofline x=intensity y=rate series=op lines=roof annotate=ridge {anchor}'
             'xlabel="intensity" ylabel="rate" logx=true logy=true -->\n')


def test_the_build_ties_a_calculator_to_its_plot_and_fails_on_an_unknown_anchor(book_hook):
    from mkdocs.exceptions import PluginError

    module, config = book_hook
    run = lambda text, src: module.on_page_markdown(text, page=_page(src), config=config, files=None)  # noqa: E731
    calc = "\n<!-- lab:calculator roofline plot=roofline -->\n"
    # The plot before the calculator or after it.
    for src, text in (("a.md", ROOF_PLOT.format(anchor="anchor=roofline ") + calc),
                      ("b.md", calc + ROOF_PLOT.format(anchor="anchor=roofline "))):
        out = run(text, src)
        assert 'data-lab-calculator="roofline" data-label-key="bound" data-plot="roofline"' in out
        figures = list(module.state.plots[src].values())
        assert figures and all('data-lab-anchor="roofline"' in f for f in figures)
        assert all(re.search(r'<svg class="lab-plot__svg" [^>]* data-lab-x="log [^"]+" data-lab-y="log [^"]+" '
                             r'data-lab-y-si="1000000000000.0"', f)
                   for f in figures)
        assert all('class="lab-plot__csv"' in f and "<title>" in f for f in figures)
    with pytest.raises(PluginError) as caught:
        run(ROOF_PLOT.format(anchor="anchor=roofline ") + calc.replace("plot=roofline", "plot=rooflin"), "c.md")
    message = str(caught.value)
    assert message == ("c.md: <!-- lab:calculator roofline plot=rooflin -->: plot=rooflin: no lab:plot on this "
                       "page has anchor=rooflin (anchors on this page: roofline)")
    with pytest.raises(PluginError, match=r"d\.md: .*plot=roofline: no lab:plot on this page has anchor=roofline "
                                          r"\(anchors on this page: none\)"):
        run(ROOF_PLOT.format(anchor="") + calc, "d.md")
    with pytest.raises(PluginError, match=r"anchor=roofline names another plot of this page already"):
        run(ROOF_PLOT.format(anchor="anchor=roofline ") * 2, "e.md")
    with pytest.raises(PluginError, match=r"with y in TFLOP/s; the plot's metric is in GB/s, not a FLOP/s quantity"):
        run('<!-- lab:plot stack.roofline x=intensity y=bandwidth op=gemm xlabel=i ylabel=b logx=true '
            'anchor=roofline -->\n' + calc, "f.md")


# -- the marker in a browser -----------------------------------------------------------------

MARK_JS = """([anchor, name]) => [...document.querySelectorAll(`figure[data-lab-anchor="${anchor}"]`)].map(f => {
  const svg = f.querySelector("svg.lab-plot__svg")
  const g = svg.querySelector(`g.lab-plot__marker[data-for="${name}"]`)
  return {
    x: svg.dataset.labX, y: svg.dataset.labY, si: svg.dataset.labYSi,
    shown: !!g && g.getAttribute("display") !== "none",
    cx: g && g.dataset.x, cy: g && g.dataset.y, off: g && g.dataset.off,
    circle: g && g.querySelector("circle") ? [g.querySelector("circle").getAttribute("cx"),
                                            g.querySelector("circle").getAttribute("cy")] : null,
    arrow: !!(g && g.querySelector(".lab-plot__marker-arrow")),
    roof: g && g.querySelector(".lab-plot__marker-roof") ? g.querySelector(".lab-plot__marker-roof").getAttribute("d") : null,
    label: g && g.querySelector("text") ? g.querySelector("text").textContent : null,
    titles: svg.querySelectorAll(".lab-plot__point > title").length,
    csv: !!f.querySelector("a.lab-plot__csv[download]"),
    pointer: g ? getComputedStyle(g).pointerEvents : null,
  }
})"""


def _expected_mark(name: str, values: dict[str, float], result: dict) -> tuple[float, float, str]:
    """The point a widget marks, from its Python example's result: (x, y in the marker's unit)."""
    if name == "roofline":
        return result["intensity"], result["attainable_tflops"], "TFLOP/s"
    if name == "ring_allreduce":
        return values["mbytes"] * 1e6, result["seconds"], "s"
    return values["layers"] * values["kernels_per_layer"], values["launch_us"], "us"


#: What a reader types into each marked widget: a point on the plot's axes.
MARK_CASES = {
    "roofline": {"flops": "3e10", "bytes": "1e9", "peak_tflops": "500", "bandwidth_gbs": "2000"},
    "ring_allreduce": {"gpus": "4", "mbytes": "64", "bandwidth_gbs": "300", "latency_us": "20"},
    "launch_budget": {"layers": "8", "kernels_per_layer": "4", "launch_us": "9.5"},
}


@pytest.mark.browser
@pytest.mark.parametrize("name", sorted(MARKED))
def test_typing_moves_the_marker_to_the_model_s_point_on_the_plot(name, pages, tmp_path):
    from lab_site import plot as plot_mod

    opened, errors = pages
    page = opened[name]
    anchor = MARKED[name][1]
    starts = page.locator(f'[data-lab-calculator="{name}"]').evaluate(
        "w => Object.fromEntries([...w.querySelectorAll('input[name]')].map(i => [i.name, i.dataset.default]))")
    widget_result(page, name, {})  # the page's start values (an earlier test typed others)
    before = page.evaluate(MARK_JS, [anchor, name])
    assert before and all(m["shown"] and m["off"] == "false" for m in before), before
    typed = MARK_CASES[name]
    shown = widget_result(page, name, typed)
    assert shown["state"] == "ok"
    values = {**starts, **typed}
    result = python_result(name, values, tmp_path)
    x, y, unit = _expected_mark(name, {k: float(v) for k, v in values.items()}, result)
    marks = page.evaluate(MARK_JS, [anchor, name])
    assert len(marks) == len(before) >= 1, "a mark on every tab of the plot"
    for m in marks:
        assert m["shown"] and m["off"] == "false" and not m["arrow"], m
        plotted_y = y * plot_mod.SI_UNITS[unit][1] / float(m["si"])
        want = (_mapper(m["x"])(x), _mapper(m["y"])(plotted_y))
        assert (float(m["cx"]), float(m["cy"])) == pytest.approx(want, abs=0.01), (m, want)
        assert tuple(map(float, m["circle"])) == pytest.approx(want, abs=0.01)
        assert m["label"].startswith("your input: ") and "NaN" not in m["label"]
        assert m["pointer"] == "none" and m["csv"] and m["titles"] == before[marks.index(m)]["titles"] > 0
        if name == "roofline":  # the roof of the inputs: up the memory roof to the ridge, then flat
            corner = re.findall(r"[ML] ([-\d.]+) ([-\d.]+)", m["roof"])
            ridge = 500e12 / 2000e9
            assert len(corner) == 3
            assert (float(corner[1][0]), float(corner[1][1])) == pytest.approx(
                (_mapper(m["x"])(ridge), _mapper(m["y"])(500 * 1e12 / float(m["si"]))), abs=0.01)
    note = page.locator(f'[data-lab-calculator="{name}"] .lab-calc__marked')
    assert note.is_visible() and note.text_content().startswith("Marked on Figure ")
    assert not errors, errors


#: Inputs whose point lies off the plot's axes, and bad input: an arrow at the edge, or no mark; no error.
OFF_CASES = {
    "roofline": {"flops": "1e30", "bytes": "1"},
    "ring_allreduce": {"gpus": "1"},  # one GPU: no time at all, below a log axis
    "launch_budget": {"layers": "100000"},
}


@pytest.mark.browser
@pytest.mark.parametrize("name", sorted(MARKED))
def test_a_point_off_the_axes_is_drawn_at_the_edge_and_bad_input_hides_it(name, pages):
    opened, errors = pages
    page = opened[name]
    anchor = MARKED[name][1]
    widget_result(page, name, OFF_CASES[name])
    for m in page.evaluate(MARK_JS, [anchor, name]):
        assert m["shown"] and m["off"] == "true" and m["arrow"] and m["circle"] is None, m
        assert "(off the plot)" in m["label"] and "NaN" not in m["label"]
        lo_x, hi_x = sorted(map(float, m["x"].split()[3:]))
        lo_y, hi_y = sorted(map(float, m["y"].split()[3:]))
        assert lo_x - 0.01 <= float(m["cx"]) <= hi_x + 0.01 and lo_y - 0.01 <= float(m["cy"]) <= hi_y + 0.01
    note = page.locator(f'[data-lab-calculator="{name}"] .lab-calc__marked')
    assert note.text_content().startswith("Off the axes of Figure ")
    shown = widget_result(page, name, {next(iter(OFF_CASES[name])): "abc"})
    assert shown["state"] == "error"
    assert all(not m["shown"] for m in page.evaluate(MARK_JS, [anchor, name]))
    assert note.is_hidden()
    assert widget_result(page, name, {})["state"] == "ok"
    assert all(m["shown"] for m in page.evaluate(MARK_JS, [anchor, name]))
    assert not errors, errors


@pytest.mark.browser
def test_the_marker_reads_on_a_phone_in_either_palette(pages):
    """At 390 px wide, light and dark: the mark is drawn in the text colour, its label haloed in the
    background's; nothing is fetched from outside the site."""
    opened, errors = pages
    browser = opened["roofline"].context.browser
    origin = opened["roofline"].url.split("/stack/")[0]
    page = browser.new_page(viewport={"width": 390, "height": 844})
    try:
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        requests: list[str] = []
        page.on("request", lambda r: requests.append(r.url))
        page.goto(f"{origin}/stack/")
        open_calculator(page, "roofline")
        page.locator('[data-lab-calculator="roofline"] input[name="bytes"]').fill("4e9")
        for scheme in ("default", "slate"):
            page.evaluate(f"document.body.setAttribute('data-md-color-scheme', '{scheme}')")
            colours = page.evaluate("""() => {
              const g = document.querySelector('figure[data-lab-anchor="roofline"] g.lab-plot__marker')
              const text = getComputedStyle(g.querySelector('text'))
              return { fill: text.fill, halo: text.stroke, fg: getComputedStyle(g).color,
                       bg: getComputedStyle(document.body).backgroundColor,
                       point: getComputedStyle(g.querySelector('circle')).stroke,
                       page: getComputedStyle(document.querySelector('.md-typeset')).color }
            }""")
            assert colours["fill"] == colours["fg"] == colours["point"] == colours["page"], colours
            assert colours["halo"] == colours["bg"] and colours["halo"] != colours["fill"], (scheme, colours)
        assert page.locator('[data-lab-calculator="roofline"] .lab-calc__marked').is_visible()
        assert not [u for u in requests if not u.startswith(origin)], "offline: no request leaves the site"
        assert not errors, errors
    finally:
        page.close()
