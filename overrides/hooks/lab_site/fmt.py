"""Numbers as the book prints them: three significant figures and a unit."""
from __future__ import annotations

import math

from lab_site import LabError

#: How a record's unit is written on the page.
UNIT_TEXT = {"us": "µs", "x": "×"}
#: Units written against the number, with no space (``2.5×``, ``12%``).
ATTACHED = {"×", "%"}
#: The space between a number and its unit; it does not break across lines.
NBSP = "\u00a0"

_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def format_number(value: float, sig: int = 3) -> str:
    """``value`` to ``sig`` significant figures: ``12345 -> '12,300'``, ``0.0123 -> '0.0123'``.

    Very large or very small magnitudes are written ``1.23 × 10⁶``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise LabError(f"not a number: {value!r}")
    if not math.isfinite(value):
        raise LabError(f"not a finite number: {value!r}")
    if value == 0:
        return "0"
    exponent = math.floor(math.log10(abs(value)))
    rounded = round(value, sig - 1 - exponent)
    if rounded != 0:  # 9.996 rounds to 10.0: one more digit before the point
        exponent = math.floor(math.log10(abs(rounded)))
    if exponent >= 6 or exponent < -3:
        mantissa = rounded / 10**exponent
        text = f"{abs(mantissa):.{sig - 1}f} × 10{str(exponent).translate(_SUPERSCRIPT)}"
    else:
        text = f"{abs(rounded):,.{max(0, sig - 1 - exponent)}f}"
    return ("−" if rounded < 0 else "") + text


def unit_text(unit: str) -> str:
    return UNIT_TEXT.get(unit, unit)


def format_quantity(value: float, unit: str, sig: int = 3) -> str:
    """``(12.345, 'us') -> '12.3 µs'`` (no-break space), ``(2.5, 'x') -> '2.50×'``.

    A whole number without a unit is a count and is written whole: ``(80.0, '') -> '80'``.
    """
    shown = unit_text(unit)
    if not shown and isinstance(value, (int, float)) and float(value).is_integer() and abs(value) < 1e6:
        return f"{int(value):,}".replace("-", "−")
    number = format_number(value, sig)
    if not shown:
        return number
    return f"{number}{shown}" if shown in ATTACHED else f"{number}{NBSP}{shown}"


def run_date(iso: str) -> str:
    """The day of an ISO 8601 timestamp: ``'2026-11-20T09:15:02+00:00' -> '2026-11-20'``."""
    return iso.split("T", 1)[0]


def short_commit(commit: str | None, dirty: bool | None) -> str:
    """``'0123456789ab…', True -> '0123456 (dirty)'``; an unknown commit says so."""
    if not commit:
        return "commit unknown"
    text = commit[:7]
    if dirty:
        text += " (uncommitted changes)"
    elif dirty is None:
        text += " (clean state unknown)"
    return text


def format_range(low: float, high: float, unit: str, sig: int = 3) -> str:
    """``(400, 420, 'us') -> '400–420 µs'``: the unit once, after the high end; one value when they agree."""
    if format_quantity(low, unit, sig) == format_quantity(high, unit, sig):
        return format_quantity(high, unit, sig)
    shown = unit_text(unit)
    # A count (no unit) keeps its whole-number form at both ends.
    first = format_quantity(low, unit, sig) if not shown else format_number(low, sig)
    return f"{first}–{format_quantity(high, unit, sig)}"


def int_span(values) -> str | None:
    """Whole numbers as ``'3'`` or ``'3–4'`` (``None`` ignored); ``None`` when none is known."""
    known = sorted({v for v in values if v is not None})
    if not known:
        return None
    return str(known[0]) if len(known) == 1 else f"{known[0]}–{known[-1]}"


def date_span(isos: list[str]) -> str:
    """The days of some ISO timestamps: ``'2026-11-20'`` or ``'2026-11-20 to 2026-11-22'``."""
    days = sorted({run_date(d) for d in isos})
    return days[0] if len(days) == 1 else f"{days[0]} to {days[-1]}"


def plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def case_value(value) -> str:
    """A case parameter as a table (and a legend) writes it: ``True -> 'true'``, ``None -> '—'``."""
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "—"}[value]
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
