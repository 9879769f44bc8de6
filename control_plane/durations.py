"""Durations as restate-server reads them, and times as the APIs write them (`rfc3339`).

`parse_duration_ms` reads what restate-server 1.7.12 reads in `?delay=`, service options and its
CLI's flags: jiff's "friendly" format (`500ms`, `1m30s`, `1h 30m`, `90sec`, `1 hour`, `2 days`,
`1.5h`, `1d 01:30:00`) and ISO 8601 (`PT1H30M`, `P1D`); and, beside them, a bare number of ms
(`1500`), which Torpor read before. The ingress (`?delay=`), the admin API (`PATCH
/services/{name}`, schedules) and the CLI flags all use it, so all accept the same forms.
"""

from __future__ import annotations

from datetime import UTC, datetime

_NS_PER_MS = 1_000_000
_MICRO = ("\u00b5secs", "\u00b5sec", "\u00b5s")  # with U+00B5 MICRO SIGN
_UNITS: tuple[tuple[str, tuple[str, ...], int], ...] = (
    # (unit, its designators as jiff's friendly format spells them, nanoseconds; 0: no fixed length)
    ("years", ("years", "year", "yrs", "yr", "y"), 0),
    ("months", ("months", "month", "mos", "mo"), 0),
    ("weeks", ("weeks", "week", "wks", "wk", "w"), 7 * 86_400 * 10**9),
    ("days", ("days", "day", "d"), 86_400 * 10**9),
    ("hours", ("hours", "hour", "hrs", "hr", "h"), 3_600 * 10**9),
    ("minutes", ("minutes", "minute", "mins", "min", "m"), 60 * 10**9),
    ("seconds", ("seconds", "second", "secs", "sec", "s"), 10**9),
    ("milliseconds", ("milliseconds", "millisecond", "millis", "milli", "msecs", "msec", "ms"), 10**6),
    ("microseconds", ("microseconds", "microsecond", "micros", "micro", "usecs", "usec", "us", *_MICRO), 1_000),
    ("nanoseconds", ("nanoseconds", "nanosecond", "nanos", "nano", "nsecs", "nsec", "ns"), 1),
)
_DESIGNATORS = sorted(
    ((name, rank) for rank, (_, names, _) in enumerate(_UNITS) for name in names), key=lambda d: -len(d[0])
)  # longest first, so `ms` is not read as `m` followed by `s`
_HOURS, _WEEKS = 4, 2  # ranks: units from hours down take a fraction; `HH:MM:SS` may follow weeks and days
_WS = " \t\n\f\r"
_DIGITS = "0123456789"
_ISO_DATE = {"Y": 0, "M": 1, "W": 2, "D": 3}
_ISO_TIME = {"H": 4, "M": 5, "S": 6}

GRAMMAR = (
    "write e.g. 500ms, 10s, 1m30s, 1h 30m, 90sec, 2 hours, 1.5h, 1d, 1 week, PT1H30M, or a number of ms "
    "(units: ms/msec(s)/millisecond(s), s/sec(s)/second(s), m/min(s)/minute(s), h/hr(s)/hour(s), d/day(s), "
    "w/wk(s)/week(s); largest first)"
)
"""The forms `parse_duration_ms` reads, as its errors name them."""


class _Bad(ValueError):
    """Why a text is not a duration (the reason `parse_duration_ms` puts before `GRAMMAR`)."""


def parse_duration_ms(text: str) -> int:
    """Parse a duration into whole milliseconds (rounded down: `1500us` is 1 ms).

    Forms, as restate-server reads them (jiff's friendly format and ISO 8601): one or more
    number+unit parts, largest unit first, each unit at most once, with or without spaces between
    number, unit and parts (`1h30m`, `1h 30m`, `1 hour, 30 minutes`); units long, short or plural
    (`s`, `sec`, `secs`, `second`, `seconds`; likewise ms, m, h, d, w, us, ns); a fraction (`.` or
    `,`, up to 9 digits) on the last part if it is hours or smaller (`1.5h`, `1h 1.5m`); a day or
    week part may end in `HH:MM:SS[.f]` (`1d 01:30:00`), which may also stand alone; a leading `+`.
    ISO 8601: `PT1H30M`, `P1DT2H`, `P1W`, `PT1.5S` (any case). Also a bare number of ms (`1500`).
    Years and months are refused, as restate-server refuses them (no fixed length).

    Raises:
        ValueError: not one of those forms (the message gives the reason, then `GRAMMAR`),
            negative (`-10s`, `10s ago`), or longer than `MAX_DURATION_MS` (100 years).
    """
    if text and _digits(text, 0) == len(text):
        ns = _number(text) * _NS_PER_MS
    else:
        try:
            ns = _parse_ns(text)
        except _Bad as exc:
            raise ValueError(f"{text!r} is not a duration ({exc}): {GRAMMAR}") from None
    if ns > MAX_DURATION_MS * _NS_PER_MS:
        raise ValueError(f"{text!r} is longer than 100 years: write a shorter duration, e.g. 30d")
    return ns // _NS_PER_MS


MAX_DURATION_MS = 100 * 365 * 24 * 3600 * 1000
"""The longest duration accepted (100 years): beyond it, no timer or retention means anything."""


def _parse_ns(text: str) -> int:
    negative = text[:1] == "-"
    rest = text[1:] if text[:1] in "+-" else text
    ns = _iso_ns(rest[1:]) if rest[:1] in ("P", "p") else _friendly_ns(rest, signed=text[:1] in "+-")
    if ns < 0 or (negative and ns):
        raise _Bad("it is negative")
    return ns


def _digits(text: str, i: int) -> int:
    """The index after the ASCII digits starting at `i`."""
    while i < len(text) and text[i] in _DIGITS:
        i += 1
    return i


def _number(digits: str) -> int:
    """The value of ASCII digits, capped at 10**25 (over 300 million years even in ns) so that a
    thousand-digit number is refused as too long, not parsed."""
    significant = digits.lstrip("0")
    return int(significant or "0") if len(significant) <= 25 else 10**25


def _fraction(text: str, i: int) -> tuple[int, int]:
    """A fraction at `i` (`.5`, `,25`): (its value in units of 10**-9, the index after it); (0, i) if none."""
    if i < len(text) and text[i] in ".,":
        end = _digits(text, i + 1)
        if end == i + 1:
            raise _Bad("a decimal point must be followed by digits")
        if end - i - 1 > 9:
            raise _Bad("a fraction has at most 9 digits")
        return int(text[i + 1 : end].ljust(9, "0")), end
    return 0, i


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def _friendly_ns(text: str, *, signed: bool) -> int:
    if not text or text[0] not in _DIGITS:
        raise _Bad("it must start with a number")
    total, last_rank, i = 0, -1, 0
    ago = False
    while i < len(text):
        start = i
        i = _digits(text, i)
        if i < len(text) and text[i] == ":":
            if last_rank >= _HOURS:
                raise _Bad("HH:MM:SS may only follow days or weeks, or stand alone")
            total += _hms_ns(text[start:].rstrip(_WS))
            break
        value = _number(text[start:i])
        fraction, i = _fraction(text, i)
        i = _skip_ws(text, i)
        found = next(((name, r) for name, r in _DESIGNATORS if text.startswith(name, i)), None)
        if found is None:
            raise _Bad("a number must be followed by a unit")
        i, rank = i + len(found[0]), found[1]
        if rank <= last_rank:
            raise _Bad("units must be written from the largest to the smallest, each once")
        if fraction and rank < _HOURS:
            raise _Bad("only hours and smaller units take a fraction")
        size = _UNITS[rank][2]
        if size == 0:
            if value or fraction:
                raise _Bad("years and months have no fixed length: use days or smaller")
        total += value * size + fraction * size // 10**9
        last_rank = rank
        if i < len(text) and text[i] == ",":
            if i + 1 >= len(text) or text[i + 1] not in _WS:
                raise _Bad("a comma must be followed by a space")
            i = _skip_ws(text, i + 1)
            if i == len(text):
                raise _Bad("a comma must be followed by another part")
        i = _skip_ws(text, i)
        if text.startswith("ago", i) and not signed:
            ago = True
            i = _skip_ws(text, i + 3)
            if i < len(text):
                raise _Bad("nothing may follow 'ago'")
            break
        if fraction and i < len(text):
            raise _Bad("only the last part takes a fraction")
        if i < len(text) and text[i] not in _DIGITS:
            raise _Bad(f"unexpected {text[i:]!r}")
    return -total if ago else total


def _hms_ns(text: str) -> int:
    parts = text.split(":")
    if len(parts) != 3 or not all(parts):
        raise _Bad("write a time of day span as HH:MM:SS")
    hours, minutes, seconds = parts
    whole = _digits(seconds, 0)
    fraction, end = _fraction(seconds, whole)
    if end != len(seconds) or whole == 0 or _digits(hours, 0) != len(hours) or _digits(minutes, 0) != len(minutes):
        raise _Bad("write a time of day span as HH:MM:SS")
    return (_number(hours) * 3600 + _number(minutes) * 60 + _number(seconds[:whole])) * 10**9 + fraction


def _iso_ns(text: str) -> int:
    """An ISO 8601 duration after its `P`: `[nY][nM][nW][nD][T[nH][nM][n[.f]S]]`, any case."""
    upper = text.upper()
    total, last_rank, i, in_time, parts = 0, -1, 0, False, 0
    while i < len(upper):
        if upper[i] == "T" and not in_time:
            in_time, i = True, i + 1
            if i == len(upper):
                raise _Bad("T must be followed by hours, minutes or seconds")
            continue
        start = i
        i = _digits(upper, i)
        if i == start:
            raise _Bad(f"unexpected {text[i:]!r} in an ISO 8601 duration")
        value = _number(upper[start:i])
        fraction, i = _fraction(upper, i)
        if i >= len(upper):
            raise _Bad("each number of an ISO 8601 duration needs its unit (Y, M, W, D, H, M, S)")
        rank = (_ISO_TIME if in_time else _ISO_DATE).get(upper[i])
        if rank is None or rank <= last_rank:
            raise _Bad(f"unexpected {text[i:]!r} in an ISO 8601 duration")
        if fraction and not in_time:
            raise _Bad("only hours, minutes and seconds take a fraction")
        size = _UNITS[rank][2]
        if size == 0 and (value or fraction):
            raise _Bad("years and months have no fixed length: use days or smaller")
        total += value * size + fraction * size // 10**9
        last_rank, parts, i = rank, parts + 1, i + 1
        if fraction and i < len(upper):
            raise _Bad("only the last part takes a fraction")
    if not parts:
        raise _Bad("an ISO 8601 duration needs at least one part, e.g. PT10S")
    return total


_FORMAT_UNITS = (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1))


def format_duration_ms(ms: int) -> str:
    """A duration in ms written as `parse_duration_ms` reads it back and Restate's admin API shows
    durations (jiff's compact "friendly" format): `0s`, `500ms`, `1m`, `1h 30m`, `1d 2h 3s`."""
    if ms <= 0:
        return "0s"
    parts: list[str] = []
    for unit, size in _FORMAT_UNITS:
        count, ms = divmod(ms, size)
        if count:
            parts.append(f"{count}{unit}")
    return " ".join(parts)


def rfc3339(ms: int) -> str | None:
    """`2026-11-30T17:01:37.123Z` for a time in ms since the epoch; None for 0."""
    if not ms:
        return None
    try:
        return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    except (OverflowError, ValueError, OSError):  # beyond what datetime holds (year 9999)
        return f"@{ms}ms"
