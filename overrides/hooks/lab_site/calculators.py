"""Live calculators: the book's models as small forms that recompute as the reader types.

``<!-- lab:calculator NAME [machine=SLUG] -->`` stands alone on its line and becomes a
form whose inputs are pre-filled from the committed records of the book's GPU (the
inputs this module ties to a record) or from the example's own ``EXAMPLE_ARGV`` (the
stated inputs the page works through). ``docs/javascripts/calculators.js`` does the
arithmetic in the browser, the same as the Python example; ``tests/test_calculators.py``
feeds both the same inputs and requires the same results.

A measured input is the median across the runs of the machine's records, rounded to
three significant figures as ``lab:value`` shows it; it links to the latest run's
record and its title gives the run-to-run range. Where every run of the machine is
stale and lacks that figure, the input starts from the example's ``EXAMPLE_ARGV`` (or
empty, for the reader to fill) and its link says "not yet measured by the current
code"; a current machine lacking it is an error, as everywhere.

``plot=ANCHOR`` ties the widget to a ``lab:plot`` of the same page named ``anchor=ANCHOR``
that draws the same quantity: the browser marks the widget's current result on every tab
of that plot ("your input: ..."), in the plot's own coordinates, as the reader types. The
calculator's :class:`Marker` says what it draws, in which units; the build checks
(:func:`check_plot`) that the anchor names a line plot on the page whose axes are in
those quantities, and fails with one line where it does not.
"""
from __future__ import annotations

import html
import importlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from lab_site import LabError
from lab_site.figures import SelectionError, metric, select
from lab_site.provenance import NOT_MEASURED
from lab_site.fmt import date_span, format_quantity, format_range, plural
from lab_site import plot as plot_mod
from lab_site.shortcodes import CalculatorRequest, Scalar
from lab_site.store import Group

SIG = 3  # significant figures of a measured input, as lab:value shows them


@dataclass(frozen=True)
class Source:
    """The record figure an input starts from: TOPIC METRIC on the row with ``where``."""

    topic: str
    metric: str
    where: dict[str, Scalar]
    case_key: bool = False  # True: ``metric`` names a key of the row's case (a whole number)


@dataclass(frozen=True)
class Field:
    name: str  # the key the browser code reads
    flag: str  # the example's command-line option
    label: str
    unit: str  # the unit the reader types in ("" for a count)
    kind: str = "float"  # "int" or "float"
    minimum: float = 0
    strict: bool = True  # True: greater than minimum; False: at least minimum
    suffix: str = ""  # appended to the number on the command line (ring_model wants units)
    source: Source | None = None  # None: the example's EXAMPLE_ARGV gives the start value
    from_argv: Callable[[str], float] | None = None  # EXAMPLE_ARGV text -> value in ``unit``


@dataclass(frozen=True)
class Output:
    key: str  # key in the example's --json output
    label: str
    unit: str
    scale: float = 1.0  # shown value = raw value / scale
    percent: bool = False
    #: A ladder of (unit, scale), smallest first: the browser shows the value in the largest unit
    #: it reaches (6.43 ms, 44.4 µs), for outputs that span many orders; () shows ``unit`` always.
    ladder: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class Preset:
    """Start values a reader picks from a list instead of typing: a model's shape, a precision."""

    group: str  # the list it is in: "Model", "Weights"
    label: str  # "Llama 3 70B"
    values: dict[str, str]  # field name -> value as typed


@dataclass(frozen=True)
class Marker:
    """What a calculator marks on a plot of the same quantity; ``calculators.js`` (MARKERS) computes it.

    ``x_unit``: the plot's ``xunit=`` its x axis must have (``None``: plain numbers, such as an
    intensity or a count; ``"B"``: bytes). ``y_unit``: the unit of the y the browser computes
    (``"s"``); the plot's metric must be of the same quantity (``us``), and is converted to.
    """

    x_unit: str | None
    y_unit: str
    what: str  # in words, for a message: "(intensity, attainable rate)"


@dataclass(frozen=True)
class PlotInfo:
    """A named plot on a page, as the build drew it: what a calculator's ``plot=`` is checked against."""

    kind: str  # "line" or "bars"
    xunit: str | None
    units: frozenset[str]  # its metric's unit in each tab drawn (none where no tab was drawn)


@dataclass(frozen=True)
class Calculator:
    name: str
    module: str
    title: str
    fields: tuple[Field, ...]
    outputs: tuple[Output, ...]
    label_key: str  # the JSON key of the verdict (the bound)
    labels: dict[str, str] = field(default_factory=dict)  # verdict value -> words shown
    presets: tuple[Preset, ...] = ()
    #: A list of the book's GPUs, each filling the record-fed inputs from its own records.
    gpu_presets: bool = False
    #: What ``plot=`` marks on a plot of the same quantity; None: it takes no ``plot=``.
    marker: Marker | None = None

    def argv(self, values: dict[str, str]) -> list[str]:
        """The example's command line for the inputs ``values`` (as typed)."""
        out: list[str] = []
        for f in self.fields:
            out += [f.flag, f"{values[f.name]}{f.suffix}"]
        return out


#: Two shapes of Meta's Llama 3, from each model card's config.json (num_hidden_layers,
#: hidden_size, intermediate_size, num_attention_heads, num_key_value_heads, vocab_size;
#: head width = hidden / heads): huggingface.co/meta-llama/Meta-Llama-3-8B and -70B.
_LLAMA3 = tuple(
    Preset("Model", name, dict(zip(("layers", "hidden", "ffn", "heads", "kv_heads", "head_dim", "vocab"), shape)))
    for name, shape in (("Llama 3 8B", ("32", "4096", "14336", "32", "8", "128", "128256")),
                        ("Llama 3 70B", ("80", "8192", "28672", "64", "8", "128", "128256"))))


#: Times from microseconds to seconds; sizes from bytes to terabytes (raw values in s and in B).
_TIME_LADDER = (("µs", 1e-6), ("ms", 1e-3), ("s", 1.0))
_SIZE_LADDER = (("B", 1.0), ("kB", 1e3), ("MB", 1e6), ("GB", 1e9), ("TB", 1e12))


def _ring_bytes(text: str) -> float:
    from examples.collectives.ring_model import parse_bytes

    return parse_bytes(text) / 1e6


CALCULATORS: dict[str, Calculator] = {
    c.name: c
    for c in (
        Calculator(
            "launch_budget", "examples.graphs.launch_budget", "Launch-overhead budget",
            fields=(
                Field("layers", "--layers", "Layers per token", "", kind="int"),
                Field("kernels_per_layer", "--kernels-per-layer", "Kernels per layer", "", kind="int"),
                Field("launch_us", "--launch-us", "CPU cost of one launch", "µs",
                      source=Source("graphs.launch_cost", "per_kernel", {"kernels": 1024, "mode": "eager"})),
                Field("tokens_per_second", "--tokens-per-second", "Target rate", "tokens/s"),
            ),
            outputs=(
                Output("overhead_ms", "Launch overhead per token", "ms"),
                Output("budget_ms", "Time budget per token", "ms"),
                Output("fraction", "Share of the budget spent launching", "%", percent=True),
            ),
            label_key="verdict",
            labels={"over budget": "Over budget: the launches alone take longer than a token may",
                    "within budget": "Within budget: the launches fit in a token's time"},
            gpu_presets=True,
            # (kernels per token, launch cost): the budget's assumption against eager and graph launches.
            marker=Marker(None, "us", "(kernels per token, cost of one launch)"),
        ),
        Calculator(
            "dispatch_budget", "examples.dispatch.budget", "CPU-dispatch budget",
            fields=(
                Field("ops", "--ops", "Ops per step", "", kind="int"),
                Field("cpu_us", "--cpu-us", "CPU cost of one op", "µs",
                      source=Source("dispatch.op_cost", "per_op", {"device": "cuda", "mode": "plain"})),
                Field("gpu_us", "--gpu-us", "GPU time of one op", "µs", strict=False),
                Field("fusion", "--fusion", "Ops fused into one", "", minimum=1, strict=False),
                Field("graph_us", "--graph-us", "GPU cost per kernel in a graph", "µs", strict=False,
                      source=Source("graphs.launch_cost", "per_kernel", {"kernels": 1024, "mode": "graph"})),
            ),
            outputs=(
                Output("cpu_ms", "CPU issues the step in", "ms"),
                Output("gpu_ms", "GPU runs the step in", "ms"),
                Output("step_ms", "Step", "ms"),
                Output("fused_step_ms", "Step with fusion", "ms"),
                Output("graph_step_ms", "Step as one CUDA graph", "ms"),
            ),
            label_key="bound",
            labels={"CPU": "CPU-bound: faster kernels would not help", "GPU": "GPU-bound: the CPU keeps ahead"},
            gpu_presets=True,
        ),
        Calculator(
            "roofline", "examples.stack.roofline_model", "Roofline",
            fields=(
                Field("flops", "--flops", "Work of one call", "FLOP"),
                Field("bytes", "--bytes", "Memory traffic of one call", "B"),
                Field("peak_tflops", "--peak-tflops", "Arithmetic roof", "TFLOP/s",
                      source=Source("stack.roofline", "rate", {"op": "gemm", "n": 4096})),
                Field("bandwidth_gbs", "--bandwidth-gbs", "Memory roof", "GB/s",
                      source=Source("stack.roofline", "bandwidth", {"op": "copy"})),
            ),
            outputs=(
                Output("intensity", "Arithmetic intensity", "FLOP/B"),
                Output("ridge", "Ridge point", "FLOP/B"),
                Output("attainable_tflops", "Attainable rate", "TFLOP/s"),
                Output("time_us", "Floor: no version runs faster than", "µs"),
            ),
            label_key="bound",
            labels={"memory": "Memory-bound: below the ridge, bandwidth sets the pace",
                    "compute": "Compute-bound: at or above the ridge, arithmetic sets the pace"},
            gpu_presets=True,
            # (intensity, attainable rate), and the roof of the inputs' two roofs.
            marker=Marker(None, "TFLOP/s", "(arithmetic intensity, attainable rate)"),
        ),
        Calculator(
            "ring_allreduce", "examples.collectives.ring_model", "Ring all-reduce",
            fields=(
                Field("gpus", "--gpus", "GPUs in the ring", "", kind="int", minimum=1, strict=False,
                      source=Source("collectives.ring_allreduce", "gpus", {"part": "link", "bytes": 1073741824},
                                    case_key=True)),
                Field("mbytes", "--bytes", "Message on each GPU", "MB", suffix="MB", from_argv=_ring_bytes),
                Field("bandwidth_gbs", "--bandwidth", "Link bandwidth, one way", "GB/s", suffix="GB/s",
                      source=Source("collectives.ring_allreduce", "bandwidth", {"part": "link", "bytes": 1073741824})),
                Field("latency_us", "--latency", "Latency of one ring step", "µs", strict=False, suffix="us",
                      source=Source("collectives.ring_allreduce", "time", {"part": "link", "bytes": 4})),
            ),
            outputs=(
                Output("seconds", "Predicted all-reduce time", "ms", scale=1e-3),
                Output("algbw_bytes_per_s", "Algorithm bandwidth", "GB/s", scale=1e9),
                Output("busbw_bytes_per_s", "Bus bandwidth", "GB/s", scale=1e9),
            ),
            label_key="bound",
            labels={"latency": "Latency-bound: the per-step cost outweighs moving the bytes",
                    "bandwidth": "Bandwidth-bound: moving the bytes outweighs the per-step cost",
                    "none": "One GPU: nothing to exchange"},
            # (message size per GPU, predicted time).
            marker=Marker("B", "s", "(message size per GPU, predicted all-reduce time)"),
        ),
        Calculator(
            "two_level_allreduce", "examples.collectives.two_level", "Two-level all-reduce against flat rings",
            fields=(
                Field("nodes", "--nodes", "Nodes", "", kind="int", minimum=1, strict=False),
                Field("gpus_per_node", "--gpus-per-node", "GPUs per node", "", kind="int", minimum=1, strict=False),
                Field("mbytes", "--bytes", "Message on each GPU", "MB", suffix="MB", from_argv=_ring_bytes),
                # The page's advice: a measured NVLink figure, this chapter's ring over the link.
                Field("nvlink_gbs", "--nvlink-bandwidth", "NVLink bandwidth per GPU, one way", "GB/s",
                      suffix="GB/s",
                      source=Source("collectives.ring_allreduce", "bandwidth", {"part": "link", "bytes": 1073741824})),
                Field("network_gbs", "--network-bandwidth", "Network bandwidth per GPU, one way", "GB/s",
                      suffix="GB/s"),
                Field("nvlink_latency_us", "--nvlink-latency", "Latency of one NVLink step", "µs", strict=False,
                      suffix="us"),
                Field("network_latency_us", "--network-latency", "Latency of one network step", "µs",
                      strict=False, suffix="us"),
                Field("call_us", "--call", "Fixed cost of each collective call", "µs", strict=False, suffix="us"),
            ),
            outputs=(
                Output("two_level_seconds", "Two-level all-reduce", "s", ladder=_TIME_LADDER),
                Output("flat_rings_seconds", "Flat rings (one per GPU's port)", "s", ladder=_TIME_LADDER),
                Output("crossover_bytes", "The faster one changes at a message of", "B", ladder=_SIZE_LADDER),
            ),
            label_key="faster",
            labels={"two-level": "Two levels are faster at this size: fewer network steps outweigh the NVLink phases",
                    "flat rings": "Flat rings are faster at this size (or as fast): their NVLink hops run "
                                  "under the network's",
                    "none": "One GPU: nothing to exchange"},
        ),
        Calculator(
            "speed_of_light", "examples.capstone.speed_of_light", "Speed of light of token generation",
            fields=(
                Field("layers", "--layers", "Layers", "", kind="int"),
                Field("hidden", "--hidden", "Model width", "", kind="int"),
                Field("ffn", "--ffn", "Feed-forward width", "", kind="int"),
                Field("heads", "--heads", "Query heads", "", kind="int"),
                Field("kv_heads", "--kv-heads", "Key/value heads", "", kind="int"),
                Field("head_dim", "--head-dim", "Width of one head", "", kind="int"),
                Field("vocab", "--vocab", "Vocabulary", "", kind="int"),
                Field("weight_bytes", "--weight-bytes", "Bytes per weight (2 bf16, 1 int8, 0.5 int4)", "B"),
                Field("context", "--context", "Tokens of context in the cache", "", kind="int", strict=False),
                Field("batch", "--batch", "Sequences decoded together", "", kind="int"),
                Field("bandwidth_gbs", "--bandwidth-gbs", "Memory bandwidth (measured copy)", "GB/s",
                      source=Source("capstone.decode", "bandwidth", {"part": "copy"})),
            ),
            outputs=(
                Output("kv_kib_per_token", "KV cache per token of context", "KiB"),
                Output("weight_gb", "Weights read per step", "GB"),
                Output("kv_gb", "KV cache read per step", "GB"),
                Output("ms_per_step", "Floor: no step runs faster than", "ms"),
                Output("tokens_per_s", "Speed of light", "tokens/s"),
            ),
            label_key="bound",
            labels={"weights": "Weight-bound: the weights are most of the bytes",
                    "kv cache": "KV-cache-bound: the cached keys and values are most of the bytes"},
            presets=(*_LLAMA3,
                     Preset("Weights", "bf16", {"weight_bytes": "2"}),
                     Preset("Weights", "int8", {"weight_bytes": "1"}),
                     Preset("Weights", "int4", {"weight_bytes": "0.5"})),
            gpu_presets=True,
        ),
    )
}


def argv_defaults(calc: Calculator) -> dict[str, str]:
    """The start values of the inputs that no record fills, from the example's EXAMPLE_ARGV."""
    argv = importlib.import_module(calc.module).EXAMPLE_ARGV
    given = dict(zip(argv[::2], argv[1::2]))
    out = {}
    for f in calc.fields:
        if f.source is None:
            if f.flag not in given:
                raise LabError(f"calculator {calc.name}: {calc.module}.EXAMPLE_ARGV has no {f.flag}")
            text = given[f.flag]
            if f.from_argv:
                out[f.name] = _plain(f.from_argv(text))
            else:  # "50GB/s" on the command line is "50" in a field whose unit is GB/s
                out[f.name] = text[: -len(f.suffix)] if f.suffix and text.endswith(f.suffix) else text
    return out


def argv_value(calc: Calculator, f: Field) -> str:
    """The example's stated value of a record-filled input (its ``EXAMPLE_ARGV``), as a reader types
    it; ``''`` where it states none: the start value of an input no current record fills."""
    argv = importlib.import_module(calc.module).EXAMPLE_ARGV
    text = dict(zip(argv[::2], argv[1::2])).get(f.flag)
    if text is None:
        return ""
    if f.from_argv is not None:
        return _plain(f.from_argv(text))
    text = text[: -len(f.suffix)] if f.suffix and text.endswith(f.suffix) else text
    try:
        float(text)
    except ValueError:
        return ""
    return text


def _plain(value: float) -> str:
    """A number as a reader types it: ``1000.0 -> '1000'``, ``14.6 -> '14.6'``."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


# -- rendering --------------------------------------------------------------------------

def _measured(calc: Calculator, f: Field, group: Group) -> tuple[str, str]:
    """The start value of a record-filled input (the median across runs), and a title saying where it comes from."""
    src = f.source
    rows = select(group, src.where)
    if len(rows) != 1:
        raise SelectionError(f"calculator {calc.name}: {f.name}: the filters select {len(rows)} rows of {src.topic}")
    where = " ".join(f"{k}={v}" for k, v in src.where.items())
    if src.case_key:
        value = rows[0].case.get(src.metric)
        if not isinstance(value, int) or isinstance(value, bool):
            raise LabError(f"calculator {calc.name}: {f.name}: the row's case has no whole {src.metric!r}")
        return str(value), f"{group.label} ({group.slug}) · {src.topic} {where}: {src.metric} = {value}"
    figure = metric(group, rows[0], src.metric)
    if figure.unit.replace("us", "µs") != f.unit:
        raise LabError(f"calculator {calc.name}: {f.name} is in {f.unit}, the record's {src.metric} in {figure.unit}")
    a = figure.across
    value = float(f"{a.median:.{SIG}g}")
    title = (f"{group.label} ({group.slug}) · {src.topic} {src.metric} {where} · "
             f"median of {plural(a.count, 'run')} {format_quantity(a.median, figure.unit)}")
    if a.count > 1:
        title += f", run-to-run range {format_range(a.low, a.high, figure.unit)}"
    title += f" · runs {date_span([e.record.run.date for e, _ in figure.per_run])}"
    if group.stale:
        title += " · measured on an earlier version of this code"
    return _plain(value), title


def _gpu_presets(calc: Calculator, group_of: Callable[[str, str | None], Group],
                 gpus: Sequence[Group]) -> list[Preset]:
    """One preset per GPU of the book whose records hold every record-fed input of ``calc``."""
    out = []
    for gpu in gpus:
        values = {}
        for f in calc.fields:
            if f.source is None:
                continue
            try:
                group = group_of(f.source.topic, gpu.slug)
                if group.stale:
                    raise SelectionError("stale")
                values[f.name], _ = _measured(calc, f, group)
            except (SelectionError, LabError):  # a GPU without this figure is not offered
                values = None
                break
        if values:
            out.append(Preset("GPU", gpu.short_label, values))
    return out


def _presets_html(presets: Sequence[Preset], start: dict[str, str]) -> str:
    """A list per preset group; the choice whose values are the start values is chosen."""
    esc = lambda s: html.escape(str(s), quote=True)  # noqa: E731
    groups: dict[str, list[Preset]] = {}
    for p in presets:
        groups.setdefault(p.group, []).append(p)
    parts = ['<div class="lab-calc__presets">']
    for name, choices in groups.items():
        options = ['<option value="">as typed</option>']
        for p in choices:
            chosen = " selected" if all(start.get(k) == v for k, v in p.values.items()) else ""
            options.append(f'<option value="{esc(p.label)}" data-values="{esc(json.dumps(p.values))}"{chosen}>'
                           f"{esc(p.label)}</option>")
        parts.append(f'<label class="lab-calc__preset"><span class="lab-calc__label">{esc(name)}</span>'
                     f'<select data-preset="{esc(name)}">{"".join(options)}</select></label>')
    parts.append("</div>")
    return "".join(parts)


def render(req: CalculatorRequest, group_of: Callable[[str, str | None], Group],
           link: Callable[[Group], str], gpus: Sequence[Group] = ()) -> str:
    """The widget; ``gpus``: the book's GPUs (groups of any topic), offered as presets where the
    calculator has ``gpu_presets``."""
    calc = CALCULATORS.get(req.name)
    if calc is None:
        raise LabError(f"unknown calculator {req.name!r} (known: {', '.join(sorted(CALCULATORS))})")
    defaults = argv_defaults(calc)
    esc = lambda s: html.escape(str(s), quote=True)  # noqa: E731
    marker = ""
    if req.plot is not None:
        if calc.marker is None:
            raise LabError(f"calculator {calc.name} has no marker to draw: it takes no plot=")
        marker = (f' data-plot="{esc(req.plot)}" '
                  f'data-marker-y-si="{plot_mod.SI_UNITS[calc.marker.y_unit][1]!r}"')
    parts = [f'<div class="lab-calc" data-lab-calculator="{esc(calc.name)}" '
             f'data-label-key="{esc(calc.label_key)}"{marker}>',
             f'<p class="lab-calc__title">Try it: {esc(calc.title)}</p>',
             '<form class="lab-calc__inputs" autocomplete="off">']
    starts: dict[str, str] = {}
    for f in calc.fields:
        source_html = ""
        if f.source is None:
            value = defaults[f.name]
        else:
            group = group_of(f.source.topic, req.machine)
            try:
                value, title = _measured(calc, f, group)
                shown = f"measured: {group.short_label}"
            except SelectionError as exc:
                if not group.stale:
                    raise
                value = argv_value(calc, f)
                title = (f"{group.label} ({group.slug}) · {exc} · {group.stale_reason} · the start value is "
                         + (f"the example's own ({f.flag} {value})" if value else "left for you to fill"))
                shown = f"{NOT_MEASURED}: {group.short_label}"
            source_html = (f'<a class="lab-calc__source" href="{esc(link(group))}" title="{esc(title)}">'
                           f'{esc(shown)}</a>')
        starts[f.name] = str(value)
        inputmode = "numeric" if f.kind == "int" else "decimal"
        unit = f'<span class="lab-calc__unit">{esc(f.unit)}</span>' if f.unit else ""
        parts.append(
            f'<label class="lab-calc__field"><span class="lab-calc__label">{esc(f.label)}</span>'
            f'<span class="lab-calc__entry"><input type="text" inputmode="{inputmode}" spellcheck="false" '
            f'name="{esc(f.name)}" value="{esc(value)}" data-default="{esc(value)}" data-kind="{f.kind}" '
            f'data-min="{f.minimum:g}" data-strict="{str(f.strict).lower()}" data-flag="{esc(f.flag)}">'
            f'{unit}</span>{source_html}</label>')
    presets = [*(_gpu_presets(calc, group_of, gpus) if calc.gpu_presets else []), *calc.presets]
    if presets:
        parts.insert(3, _presets_html(presets, starts))
    parts.append('</form>')
    parts.append('<p class="lab-calc__error" role="alert" hidden></p>')
    parts.append('<dl class="lab-calc__outputs">')
    for o in calc.outputs:
        parts.append(
            f'<div class="lab-calc__result"><dt>{esc(o.label)}</dt><dd><output data-key="{esc(o.key)}" '
            f'data-scale="{o.scale:g}" data-unit="{esc(o.unit)}" data-percent="{str(o.percent).lower()}"'
            + (f' data-ladder="{esc(json.dumps(o.ladder))}"' if o.ladder else "") + '>'
            f'—</output></dd></div>')
    parts.append('</dl>')
    labels = " ".join(f'data-label-{esc(k.replace(" ", "-"))}="{esc(v)}"' for k, v in calc.labels.items())
    parts.append(f'<p class="lab-calc__bound"><output data-key="{esc(calc.label_key)}" {labels}>—</output></p>')
    if req.plot is not None:  # calculators.js says where the result is marked, or why it is not
        parts.append('<p class="lab-calc__marked" hidden></p>')
    parts.append('<noscript><p>This calculator needs JavaScript; the example named on this page runs '
                 'the same model from the command line.</p></noscript>')
    parts.append('</div>')
    return "\n".join(parts)


def check_plot(req: CalculatorRequest, plots: dict[str, PlotInfo]) -> None:
    """A calculator's ``plot=`` names a line plot of its page (``plots``: anchor -> plot) that draws
    the quantities it marks; otherwise a :class:`LabError` of one line."""
    if req.plot is None:
        return
    calc = CALCULATORS[req.name]
    if calc.marker is None:
        raise LabError(f"calculator {calc.name} has no marker to draw: it takes no plot=")
    info = plots.get(req.plot)
    if info is None:
        raise LabError(f"plot={req.plot}: no lab:plot on this page has anchor={req.plot} "
                       f"(anchors on this page: {', '.join(sorted(plots)) or 'none'})")
    if info.kind != "line":
        raise LabError(f"plot={req.plot}: a marker goes on a line plot, not on kind={info.kind}")
    m = calc.marker
    if info.xunit != m.x_unit:
        raise LabError(f"plot={req.plot}: {calc.name} marks {m.what}, with x in "
                       f"{m.x_unit or 'plain numbers'}; the plot's x is in {info.xunit or 'plain numbers'}")
    want = plot_mod.SI_UNITS[m.y_unit][0]
    wrong = sorted(u for u in info.units if plot_mod.SI_UNITS.get(u, ("",))[0] != want)
    if wrong:
        raise LabError(f"plot={req.plot}: {calc.name} marks {m.what}, with y in {m.y_unit}; the plot's metric "
                       f"is in {', '.join(w or 'no unit' for w in wrong)}, not a {want} quantity")
