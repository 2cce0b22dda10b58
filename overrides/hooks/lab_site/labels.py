"""Identifiers as a reader reads them: the words of ``examples/lab/metrics.py`` with their units.

The words are defined once, in :mod:`examples.lab.metrics` (bookkeeping: rewording one
stales no record); this module is how the hooks use them, so that a table header, a
value's hover text, a claim's badge and Appendix A say a metric the same way.
"""
from __future__ import annotations

from examples.lab import metrics as words

from lab_site import LabError
from lab_site.fmt import COUNT_FROM, case_value, format_count, format_size, unit_text


def metric(topic: str, name: str) -> str:
    """``'time per token'``: a metric's words; a metric without words is a page error (one line)."""
    try:
        return words.metric_label(topic, name)
    except words.UnknownLabel as exc:
        raise LabError(str(exc)) from None


def metric_or_name(topic: str, name: str) -> str:
    """The words where there are some, else the identifier: for records this book's code did not
    make (a reader's own, in Appendix A), which a page cannot be asked to name in words."""
    try:
        return words.metric_label(topic, name)
    except words.UnknownLabel:
        return name


def with_unit(text: str, unit: str | None) -> str:
    """``('time per token', 'ms') -> 'time per token (ms)'``; no unit, no brackets."""
    shown = unit_text(unit or "")
    return f"{text} ({shown})" if shown else text


def key(topic: str, name: str) -> str:
    """A case key's words (``'message size'`` for ``bytes``), or the key where it is a word already."""
    return words.key_label(topic, name)


def case(name: str, value, topic: str | None = None) -> str:
    """A case value as a table, a hover and a plot's legend print it: an identifier of the code in
    words (``all_gather`` -> ``all-gather``, :data:`examples.lab.metrics.CASE_VALUES`), a size in
    binary units (``256 KiB``), a large count of elements with a binary prefix (``1048576``
    elements -> ``1 Mi``, :func:`examples.lab.metrics.is_count`), any other large whole number
    whole with separators (a matrix side: ``16,384``), anything else as :func:`case_value` does."""
    said = words.value_label(name, value)
    if said is not None:
        return said
    unit = words.size_unit(name)
    if unit is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
        return format_size(value, unit)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= COUNT_FROM:
        return format_count(value) if words.is_count(topic, name) else f"{value:,}".replace("-", "−")
    return case_value(value)
