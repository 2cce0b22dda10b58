"""Numbers as the book prints them: three significant figures and a unit."""
from __future__ import annotations

import math
import re

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


def duration(seconds: float) -> str:
    """Seconds as a reader says them: ``4.2 s``, ``42 s``, ``3 min 40 s``, ``1 h 5 min``.

    Below ten seconds one decimal (a topic's set-up shows there), whole seconds up to a
    minute, then minutes and seconds, then hours and minutes.

    >>> [duration(s) for s in (0.04, 4.24, 9.96, 12.5, 59.6, 220.0, 180.2, 3900.0)]
    ['< 0.1\\xa0s', '4.2\\xa0s', '10\\xa0s', '13\\xa0s', '1\\xa0min', '3\\xa0min 40\\xa0s', '3\\xa0min', '1\\xa0h 5\\xa0min']
    """
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) \
            or seconds < 0:
        raise LabError(f"not a duration in seconds: {seconds!r}")
    if seconds < 0.05:
        return f"< 0.1{NBSP}s"
    if round(seconds, 1) < 10:
        return f"{seconds:.1f}{NBSP}s"
    whole = math.floor(seconds + 0.5)  # half up: 12.5 s reads "13 s", as a reader rounds
    if whole < 60:
        return f"{whole}{NBSP}s"
    if whole < 3600:
        minutes, rest = divmod(whole, 60)
        return f"{minutes}{NBSP}min" + (f" {rest}{NBSP}s" if rest else "")
    hours, minutes = divmod(math.floor(seconds / 60 + 0.5), 60)
    return f"{hours}{NBSP}h" + (f" {minutes}{NBSP}min" if minutes else "")


def duration_range(low: float, high: float) -> str:
    """``'38–42 s'`` (the unit once, where both ends are plain seconds), ``'3 min 40 s – 4 min 2 s'``;
    one value where both ends read the same.

    >>> duration_range(38.2, 41.7), duration_range(55, 65), duration_range(12.04, 11.96)
    ('38–42\\xa0s', '55\\xa0s – 1\\xa0min 5\\xa0s', '12\\xa0s')
    """
    first, last = duration(low), duration(high)
    if first == last:
        return last
    plain = f"{NBSP}s"
    if first.endswith(plain) and last.endswith(plain) and " " not in first + last and "<" not in first:
        return f"{first.removesuffix(plain)}–{last}"
    return f"{first} – {last}"


#: Binary units, each 1024 times the one before: sizes in memory print in these.
BINARY_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def format_size(value, unit: str = "B") -> str:
    """A size in memory, recorded in ``unit`` (one of :data:`BINARY_UNITS`), in the largest binary
    unit it fills: three significant figures at most, no trailing zeros.

    >>> [format_size(v) for v in (262144, 4 * 2**30, 1536, 1000, 0)]
    ['256\\xa0KiB', '4\\xa0GiB', '1.5\\xa0KiB', '1,000\\xa0B', '0\\xa0B']
    >>> format_size(2048.0, "MiB"), format_size(16.0, "MiB")
    ('2\\xa0GiB', '16\\xa0MiB')
    """
    if unit not in BINARY_UNITS:
        raise LabError(f"not a binary unit: {unit!r} (known: {', '.join(BINARY_UNITS)})")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise LabError(f"not a size: {value!r}")
    size = float(value) * 1024 ** BINARY_UNITS.index(unit)
    step = 0
    while step < len(BINARY_UNITS) - 1 and size >= 1024:
        size /= 1024
        step += 1
    if size.is_integer():
        number = f"{int(size):,}"
    else:
        number = format_number(size).rstrip("0").rstrip(".")
    return f"{number}{NBSP}{BINARY_UNITS[step]}"


def format_bare(value: float, unit: str) -> str:
    """A figure in a column whose header carries its unit: the number alone, as
    :func:`format_quantity` would write it with the unit (a count stays whole)."""
    return format_number(value) if unit_text(unit) else format_quantity(value, unit)


def bare_range(low: float, high: float, unit: str) -> str:
    """:func:`format_range` without the unit, for a column whose header carries it: ``'400–420'``."""
    first, last = format_bare(low, unit), format_bare(high, unit)
    return last if first == last else f"{first}–{last}"


#: A whole count from this many up prints with a prefix (``64 Mi``), below it whole (``4096``).
COUNT_FROM = 10_000
#: Prefixes of a count: binary (each 1024 times the one before) and decimal (each 1000 times).
_COUNT_PREFIXES = ((1024, ("Ki", "Mi", "Gi", "Ti", "Pi")), (1000, ("k", "M", "G", "T", "P")))


def format_count(value) -> str:
    """A whole count as a reader says it: below :data:`COUNT_FROM` whole (``4096``), from there with
    the binary prefix that writes it exactly in at most two decimals (``1 Mi`` elements, ``64 Mi``,
    ``14 Ki``), else the decimal one (``10 k``, ``1.5 M``), else whole with separators: a case
    value names its case, so it is never rounded.

    >>> [format_count(v) for v in (4096, 16384, 14336, 2**20, 64 * 2**20, 3 * 2**29, 10_000, 123_457, 38_547_456)]
    ['4096', '16\\xa0Ki', '14\\xa0Ki', '1\\xa0Mi', '64\\xa0Mi', '1.5\\xa0Gi', '10\\xa0k', '123,457', '37,644\\xa0Ki']
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not float(value).is_integer():
        raise LabError(f"not a whole count: {value!r}")
    whole = int(value)
    sign = "−" if whole < 0 else ""
    whole = abs(whole)
    if whole < COUNT_FROM:
        return f"{sign}{whole}"
    for base, prefixes in _COUNT_PREFIXES:
        k = len(prefixes)
        while base ** k > whole:
            k -= 1
        scaled = whole / base ** k
        if round(scaled, 2) == scaled:
            number = f"{scaled:,.2f}".rstrip("0").rstrip(".")
            return f"{sign}{number}{NBSP}{prefixes[k - 1]}"
    # A smaller binary prefix that writes it whole (38,547,456 elements: 37,644 Ki).
    for k in range(len(_COUNT_PREFIXES[0][1]), 0, -1):
        if 1024 ** k <= whole and whole % 1024 ** k == 0:
            return f"{sign}{whole // 1024 ** k:,}{NBSP}{_COUNT_PREFIXES[0][1][k - 1]}"
    return f"{sign}{whole:,}"


#: A size in bytes written into a note's text as a raw count by the book's code: ``logged as
#: 1073741824 B``. A log line quoted as it was printed (NCCL's ``33554432 Bytes``) is left as it is.
_RAW_BYTES = re.compile(r"(?<![\w.,])(\d{4,}) B\b")


def sizes_in_text(text: str) -> str:
    """A note's text with each raw count of bytes from 1,000 up written ``N B`` in binary units:
    ``'logged as 1073741824 B' -> 'logged as 1 GiB'``; NCCL's own ``33554432 Bytes`` (a log line,
    quoted) and a number without ``B`` are left alone.

    >>> sizes_in_text("RING/SIMPLE, 24 channel(s), logged as 1073741824 B")
    'RING/SIMPLE, 24 channel(s), logged as 1\\xa0GiB'
    >>> sizes_in_text("default, 65536 B: AllReduce: 33554432 Bytes, workFifoBytes 1048576, 512 B")
    'default, 64\\xa0KiB: AllReduce: 33554432 Bytes, workFifoBytes 1048576, 512 B'
    """
    return _RAW_BYTES.sub(lambda m: format_size(int(m[1])), text)
