"""Durations as people write them: `500ms`, `10s`, `1m30s`, `2h`, `1d`, ISO-8601 `PT10S`, or plain ms.

Used by the ingress (`?delay=`) and the CLI flags, so both accept the same forms; and times as the
APIs write them (`rfc3339`).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from pydantic import TypeAdapter, ValidationError

_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)")
_UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_ISO = TypeAdapter(timedelta)


def parse_duration_ms(text: str) -> int:
    """Parse a duration into whole milliseconds (rounded down).

    Forms: a number of ms (`1500`), one or more number+unit parts with units `ms`, `s`, `m`, `h`,
    `d` (`500ms`, `1m30s`), or an ISO-8601 duration (`PT10S`, `P1D`).

    Raises:
        ValueError: not one of those forms, negative, or longer than `MAX_DURATION_MS` (100 years);
            the message shows the valid forms.
    """
    value = _parse_ms(text)
    if value > MAX_DURATION_MS:
        raise ValueError(f"{text!r} is longer than 100 years: write a shorter duration, e.g. 30d")
    return value


MAX_DURATION_MS = 100 * 365 * 24 * 3600 * 1000
"""The longest duration accepted (100 years): beyond it, no timer or retention means anything."""


def _parse_ms(text: str) -> int:
    raw = text.strip()
    if raw.isdigit():
        return int(raw)
    if raw[:1] in ("P", "p"):
        try:
            value = _ISO.validate_python(raw.upper())
        except ValidationError:
            pass
        else:
            if value >= timedelta(0):
                return int(value.total_seconds() * 1000)
    else:
        parts = _PART.findall(raw)
        if parts and "".join(n + u for n, u in parts) == raw.replace(" ", ""):
            return int(sum(float(n) * _UNIT_MS[u] for n, u in parts))
    raise ValueError(f"{text!r} is not a duration: write e.g. 500ms, 10s, 1m30s, 2h, PT10S, or a number of ms")


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
