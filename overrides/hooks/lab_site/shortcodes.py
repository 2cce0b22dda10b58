"""Shortcodes in a page: ``<!-- lab:NAME args -->``, found and parsed into requests.

The pattern is the one of Material's own ``overrides/hooks/shortcodes.py``: an HTML
comment, so a page still reads sensibly where the hook does not run. Arguments are
split with :func:`shlex.split`: positional arguments first, then ``key=value``
options. Values parse as JSON scalars when they can (``32`` -> int, ``1.5`` -> float,
``true`` -> bool, ``null`` -> None), otherwise they stay strings; write ``k='"32"'``
for the string ``"32"``. Options that a shortcode does not reserve filter the rows
of the record by their case (``layers=32``).

Shortcodes inside fenced code blocks are left alone, so a page can show the syntax.
"""
from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Union

from lab_site import LabError

Scalar = Union[bool, int, float, str, None]

#: One regex finds every shortcode; group 1 is the name, group 2 the arguments.
SHORTCODE = re.compile(r"<!-- lab:(\w+)(.*?) -->")
_OPTION = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})")

OPS = (">=", ">", "<=", "<")
STATS = ("median", "iqr", "q1", "q3", "n", "sm_mhz", "mem_mhz", "power_w")
#: How lab:value quotes a figure: one number (the median across runs) or the run-to-run range.
SPREADS = ("point", "range")
#: lab:plot's kinds, the units its x values may be written in, and its transforms of them.
PLOT_KINDS = ("line", "bars")
X_UNITS = ("B", "%")
X_TRANSFORMS = ("1-x",)
#: ``series=machine``: a plot with one series per GPU rather than one tab per GPU.
MACHINE = "machine"
#: A plot's ``anchor=`` name, which a calculator's ``plot=`` names (lowercase words and hyphens).
ANCHOR = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")


class ShortcodeError(LabError):
    pass


@dataclass(frozen=True)
class Shortcode:
    """A shortcode as written: its name, positional arguments and options."""

    name: str
    positional: tuple[str, ...]
    options: dict[str, Scalar]
    text: str


def scalar(text: str) -> Scalar:
    """A JSON scalar when ``text`` is one (finite numbers only), else ``text`` itself."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    return text


def parse(match: re.Match[str]) -> Shortcode:
    """The :class:`Shortcode` of one :data:`SHORTCODE` match."""
    name, rest = match.group(1), match.group(2)
    try:
        tokens = shlex.split(rest)
    except ValueError as exc:
        raise ShortcodeError(f"cannot split the arguments ({exc})") from None
    positional: list[str] = []
    options: dict[str, Scalar] = {}
    for token in tokens:
        option = _OPTION.match(token)
        if option is None:
            if options:
                raise ShortcodeError(f"positional argument {token!r} after key=value options")
            positional.append(token)
            continue
        key, value = option.groups()
        if key in options:
            raise ShortcodeError(f"option {key!r} given twice")
        options[key] = scalar(value)
    return Shortcode(name, tuple(positional), options, match.group(0))


def parse_text(text: str) -> Shortcode:
    """Parse one shortcode written out in full (handy in tests and messages)."""
    match = SHORTCODE.fullmatch(text.strip())
    if match is None:
        raise ShortcodeError(f"not a lab shortcode: {text!r}")
    return parse(match)


# -- requests ------------------------------------------------------------------------

@dataclass(frozen=True)
class TableRequest:
    topic: str
    metrics: tuple[str, ...] | None
    where: dict[str, Scalar] = field(default_factory=dict)


@dataclass(frozen=True)
class PlotRequest:
    topic: str
    x: str
    y: str
    xlabel: str  # the axes in words; the y unit is appended
    ylabel: str
    series: str | None = None
    logx: bool = False
    logy: bool = False
    title: str | None = None
    #: Series value (as the table writes it) -> legend text; others show their value.
    legend: dict[str, str] = field(default_factory=dict)
    where: dict[str, Scalar] = field(default_factory=dict)
    kind: str = "line"  # or "bars": horizontal bars per category (lab_site.plot.bar_plot)
    xunit: str | None = None  # "B": bytes in binary prefixes; "%": a fraction as a percentage
    xtransform: str | None = None  # "1-x": plot one minus the case value (zeros -> nonzeros)
    refline: tuple[float, str] | None = None  # a line at a value of the metric, and its label
    ymin: float | None = None  # the metric's axis spans at least ymin to ymax
    ymax: float | None = None
    lines: tuple[str, ...] = ()  # series drawn as a plain line (a roof)
    annotate: tuple[str, ...] = ()  # series drawn as labelled points (a ridge)
    order: tuple[str, ...] | None = None  # the x values drawn, in this order (others left out)
    #: More topics whose rows join the first's: an x value comes from the first topic that has it.
    more_topics: tuple[str, ...] = ()
    #: A name for this plot on its page, which a calculator's ``plot=`` names to mark its result on it.
    anchor: str | None = None

    @property
    def topics(self) -> tuple[str, ...]:
        return (self.topic, *self.more_topics)

    @property
    def per_machine(self) -> bool:
        """``series=machine``: one plot with a series per GPU (group of runs), not a tab per GPU."""
        return self.series == MACHINE


@dataclass(frozen=True)
class ValueRequest:
    topic: str
    metric: str
    machine: str | None = None
    stat: str = "median"
    spread: str = "point"  # "range": quote the run-to-run range, for a figure whose runs differ
    where: dict[str, Scalar] = field(default_factory=dict)


@dataclass(frozen=True)
class ClaimRequest:
    topic: str
    metric: str
    op: str
    bound: float
    where: dict[str, Scalar] = field(default_factory=dict)
    #: ``machine=SLUG``: a claim about one kind of GPU (its one- and multi-GPU machines,
    #: ``SLUG`` and ``SLUG-xN``); without it, a claim about every GPU the records hold.
    machine: str | None = None

    def describe(self) -> str:
        filters = "".join(f" {k}={json.dumps(v)}" for k, v in self.where.items())
        only = f" machine={self.machine}" if self.machine else ""
        return f"{self.topic} {self.metric} {self.op} {self.bound:g}{filters}{only}"


@dataclass(frozen=True)
class NotesRequest:
    topic: str
    keys: tuple[str, ...] | None = None


@dataclass(frozen=True)
class TimelineRequest:
    """A profiler timeline kept in a note of each group's latest run (``lab_site.timeline``)."""

    topic: str
    note: str
    title: str | None = None


@dataclass(frozen=True)
class CalculatorRequest:
    name: str
    machine: str | None = None
    #: The ``anchor=`` of a lab:plot on the same page, on which the widget marks its current result.
    plot: str | None = None


@dataclass(frozen=True)
class GeneratedRequest:
    """A section generated from all the records or the glossary (``lab_site.generated``)."""

    name: str


Request = Union[TableRequest, PlotRequest, ValueRequest, ClaimRequest, NotesRequest, TimelineRequest,
                CalculatorRequest, GeneratedRequest]


def _positional(code: Shortcode, names: tuple[str, ...]) -> tuple[str, ...]:
    if len(code.positional) != len(names):
        wanted = " ".join(n.upper() for n in names)
        raise ShortcodeError(
            f"lab:{code.name} takes {len(names)} positional argument(s) ({wanted}), "
            f"got {len(code.positional)}: {' '.join(code.positional) or 'none'}"
        )
    return code.positional


def _split(code: Shortcode, reserved: tuple[str, ...]) -> tuple[dict[str, Scalar], dict[str, Scalar]]:
    """The options a shortcode reserves, and the rest as case filters."""
    own = {k: v for k, v in code.options.items() if k in reserved}
    where = {k: v for k, v in code.options.items() if k not in reserved}
    return own, where


def _flag(code: Shortcode, own: dict[str, Scalar], key: str) -> bool:
    value = own.get(key, False)
    if not isinstance(value, bool):
        raise ShortcodeError(f"{key}= takes true or false, not {value!r}")
    return value


def _text(code: Shortcode, own: dict[str, Scalar], key: str, required: bool) -> str | None:
    value = own.get(key)
    if value is None:
        if required:
            raise ShortcodeError(f"lab:{code.name} needs {key}=")
        return None
    return value if isinstance(value, str) else json.dumps(value)


def _names(code: Shortcode, own: dict[str, Scalar], key: str) -> tuple[str, ...] | None:
    text = _text(code, own, key, required=False)
    names = tuple(m.strip() for m in text.split(",")) if text is not None else None
    if names is not None and not all(names):
        raise ShortcodeError(f"{key}={text!r} holds an empty name")
    return names


def _table(code: Shortcode) -> TableRequest:
    (topic,) = _positional(code, ("topic",))
    own, where = _split(code, ("metrics",))
    return TableRequest(topic, _names(code, own, "metrics"), where)


def _notes(code: Shortcode) -> NotesRequest:
    (topic,) = _positional(code, ("topic",))
    own, rest = _split(code, ("keys",))
    if rest:
        raise ShortcodeError(f"lab:notes takes only keys=, not {', '.join(rest)} (notes have no cases)")
    return NotesRequest(topic, _names(code, own, "keys"))


def _timeline(code: Shortcode) -> TimelineRequest:
    (topic,) = _positional(code, ("topic",))
    own, rest = _split(code, ("note", "title"))
    if rest:
        raise ShortcodeError(f"lab:timeline takes only note= and title=, not {', '.join(rest)} "
                             "(a timeline has no cases)")
    return TimelineRequest(topic, _text(code, own, "note", required=True), _text(code, own, "title", required=False))


def _legend(code: Shortcode, own: dict[str, Scalar]) -> dict[str, str]:
    """``legend="eager:Eager launches,graph:One graph"`` -> ``{"eager": "Eager launches", ...}``."""
    text = _text(code, own, "legend", required=False)
    if text is None:
        return {}
    out: dict[str, str] = {}
    for item in text.split(","):
        value, sep, shown = item.partition(":")
        if not sep or not value.strip() or not shown.strip():
            raise ShortcodeError(f"legend={text!r}: each entry is value:Text, not {item!r}")
        if value.strip() in out:
            raise ShortcodeError(f"legend={text!r} names {value.strip()!r} twice")
        out[value.strip()] = shown.strip()
    return out


def _number(code: Shortcode, own: dict[str, Scalar], key: str) -> float | None:
    value = own.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ShortcodeError(f"{key}= takes a number, not {value!r}")
    return float(value)


def _choice(code: Shortcode, own: dict[str, Scalar], key: str, choices: tuple[str, ...]) -> str | None:
    value = _text(code, own, key, required=False)
    if value is not None and value not in choices:
        raise ShortcodeError(f"{key}={value!r} is not one of {', '.join(choices)}")
    return value


def _refline(code: Shortcode, own: dict[str, Scalar]) -> tuple[float, str] | None:
    """``refline="1:speed of light"`` -> ``(1.0, "speed of light")``; the label may be left out."""
    text = _text(code, own, "refline", required=False)
    if text is None:
        return None
    number, _, label = text.partition(":")
    value = scalar(number.strip())
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ShortcodeError(f"refline={text!r}: the line's value {number.strip()!r} is not a number "
                             "(write VALUE or VALUE:label)")
    return float(value), label.strip()


def _order(code: Shortcode, own: dict[str, Scalar]) -> tuple[str, ...] | None:
    """``order="eager|static|book kernels+graph, no PDL"``: names may hold commas, so ``|`` parts them."""
    text = _text(code, own, "order", required=False)
    if text is None:
        return None
    names = tuple(n.strip() for n in text.split("|"))
    if not all(names):
        raise ShortcodeError(f"order={text!r} holds an empty value (values are parted by |)")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ShortcodeError(f"order={text!r} names {', '.join(map(repr, twice))} twice")
    return names


def _plot(code: Shortcode) -> PlotRequest:
    (topic_text,) = _positional(code, ("topic",))
    topics = tuple(t.strip() for t in topic_text.split(","))
    if not all(topics) or len(set(topics)) != len(topics):
        raise ShortcodeError(f"topics {topic_text!r}: write TOPIC or TOPIC,TOPIC with each topic once")
    own, where = _split(code, ("x", "y", "xlabel", "ylabel", "series", "logx", "logy", "title", "legend", "kind",
                               "xunit", "xtransform", "refline", "ymin", "ymax", "lines", "annotate", "order",
                               "anchor"))
    request = PlotRequest(
        topics[0],
        x=_text(code, own, "x", required=True),
        y=_text(code, own, "y", required=True),
        xlabel=_text(code, own, "xlabel", required=True),
        ylabel=_text(code, own, "ylabel", required=True),
        series=_text(code, own, "series", required=False),
        logx=_flag(code, own, "logx"),
        logy=_flag(code, own, "logy"),
        title=_text(code, own, "title", required=False),
        legend=_legend(code, own),
        where=where,
        kind=_choice(code, own, "kind", PLOT_KINDS) or "line",
        xunit=_choice(code, own, "xunit", X_UNITS),
        xtransform=_choice(code, own, "xtransform", X_TRANSFORMS),
        refline=_refline(code, own),
        ymin=_number(code, own, "ymin"),
        ymax=_number(code, own, "ymax"),
        lines=_names(code, own, "lines") or (),
        annotate=_names(code, own, "annotate") or (),
        order=_order(code, own),
        more_topics=topics[1:],
        anchor=_anchor(code, own, "anchor"),
    )
    if request.legend and request.series is None:
        raise ShortcodeError("legend= renames series: name series= too")
    if (request.lines or request.annotate) and request.series is None:
        raise ShortcodeError("lines= and annotate= name series: name series= too")
    if request.ymin is not None and request.ymax is not None and request.ymin >= request.ymax:
        raise ShortcodeError(f"ymin={request.ymin:g} is not below ymax={request.ymax:g}")
    if request.logy and request.ymin is not None and request.ymin <= 0:
        raise ShortcodeError(f"ymin={request.ymin:g} cannot start a log axis (logy=true): give one above 0")
    if request.kind == "bars":
        wrong = [k for k in ("logx", "logy", "xunit", "xtransform", "lines", "annotate") if own.get(k)]
        if wrong:
            raise ShortcodeError(f"kind=bars draws categories along a linear axis: it takes no "
                                 f"{', '.join(k + '=' for k in wrong)}")
    if request.order is not None and request.xtransform is not None:
        raise ShortcodeError("order= names case values as written; it does not go with xtransform=")
    if request.more_topics and not request.per_machine:
        raise ShortcodeError(f"several topics ({topic_text}) are drawn as one plot with a series per GPU: "
                             f"name series={MACHINE}")
    return request


def _value(code: Shortcode) -> ValueRequest:
    topic, metric = _positional(code, ("topic", "metric"))
    own, where = _split(code, ("machine", "stat", "spread"))
    stat = _text(code, own, "stat", required=False) or "median"
    if stat not in STATS:
        raise ShortcodeError(f"stat={stat!r} is not one of {', '.join(STATS)}")
    spread = _text(code, own, "spread", required=False) or "point"
    if spread not in SPREADS:
        raise ShortcodeError(f"spread={spread!r} is not one of {', '.join(SPREADS)}")
    if spread == "range" and stat != "median":
        raise ShortcodeError(f"spread=range quotes the range of the medians; it does not go with stat={stat}")
    return ValueRequest(topic, metric, _text(code, own, "machine", required=False), stat, spread, where)


def _claim(code: Shortcode) -> ClaimRequest:
    topic, metric, op, bound_text = _positional(code, ("topic", "metric", "op", "bound"))
    if op not in OPS:
        raise ShortcodeError(f"operator {op!r} is not one of {' '.join(OPS)}")
    bound = scalar(bound_text)
    if isinstance(bound, bool) or not isinstance(bound, (int, float)):
        raise ShortcodeError(f"bound {bound_text!r} is not a number")
    own, where = _split(code, ("machine",))
    return ClaimRequest(topic, metric, op, float(bound), where, _text(code, own, "machine", required=False))


def _anchor(code: Shortcode, own: dict[str, Scalar], key: str) -> str | None:
    """A plot's name on its page (``anchor=roofline``, ``plot=roofline``): lowercase words and hyphens."""
    value = _text(code, own, key, required=False)
    if value is not None and not ANCHOR.fullmatch(value):
        raise ShortcodeError(f"{key}={value!r} is not a name of lowercase letters, digits and hyphens")
    return value


def _calculator(code: Shortcode) -> CalculatorRequest:
    (name,) = _positional(code, ("name",))
    own, rest = _split(code, ("machine", "plot"))
    if rest:
        raise ShortcodeError(f"lab:calculator takes only machine= and plot=, not {', '.join(rest)}")
    return CalculatorRequest(name, _text(code, own, "machine", required=False), _anchor(code, own, "plot"))


def _generated(code: Shortcode) -> GeneratedRequest:
    (name,) = _positional(code, ("name",))
    if code.options:
        raise ShortcodeError(f"lab:generated takes no options, not {', '.join(code.options)}")
    return GeneratedRequest(name)


BUILDERS: dict[str, Callable[[Shortcode], Request]] = {
    "table": _table,
    "plot": _plot,
    "value": _value,
    "claim": _claim,
    "notes": _notes,
    "timeline": _timeline,
    "calculator": _calculator,
    "generated": _generated,  # expanded by lab_site.generated before the others
}
#: Shortcodes that produce blocks (tabs) and so must stand alone on their line.
BLOCK = {"table", "plot", "notes", "timeline", "calculator", "generated"}


def request(code: Shortcode) -> Request:
    """The typed request of a shortcode; an unknown name is an error."""
    builder = BUILDERS.get(code.name)
    if builder is None:
        raise ShortcodeError(f"unknown shortcode lab:{code.name} (known: {', '.join(sorted(BUILDERS))})")
    return builder(code)


# -- expansion -----------------------------------------------------------------------

def expand(markdown: str, render: Callable[[Request, Shortcode], str]) -> str:
    """Replace every shortcode outside fenced code with ``render(request, shortcode)``.

    A block shortcode (table, plot) must be alone on its line; its output is indented
    like the comment, so it may sit inside an admonition or a tab.
    """
    out: list[str] = []
    fence: tuple[str, int] | None = None  # (character, length) of the open fence
    for line in markdown.splitlines(keepends=True):
        opened = _FENCE.match(line)
        if fence is not None:
            if opened and opened["fence"][0] == fence[0] and len(opened["fence"]) >= fence[1] \
                    and not line[opened.end():].strip():
                fence = None
            out.append(line)
            continue
        if opened:
            fence = (opened["fence"][0], len(opened["fence"]))
            out.append(line)
            continue
        out.append(_expand_line(line, render))
    return "".join(out)


def _request_of(match: re.Match[str]) -> tuple[Request, Shortcode]:
    try:
        code = parse(match)
        return request(code), code
    except ShortcodeError as exc:
        raise ShortcodeError(f"{match.group(0)}: {exc}") from None


def _expand_line(line: str, render: Callable[[Request, Shortcode], str]) -> str:
    body = line.rstrip("\r\n")
    whole = SHORTCODE.fullmatch(body.strip())
    if whole is not None and whole.group(1) in BLOCK:
        req, code = _request_of(whole)
        indent = body[: len(body) - len(body.lstrip())]
        lines = render(req, code).strip("\n").split("\n")
        block = "\n".join((indent + text if text.strip() else "") for text in lines)
        return f"\n{block}\n\n"

    def substitute(match: re.Match[str]) -> str:
        req, code = _request_of(match)
        if code.name in BLOCK:
            raise ShortcodeError(f"{match.group(0)}: lab:{code.name} makes a block; put it alone on its line")
        return render(req, code)

    return SHORTCODE.sub(substitute, line)
