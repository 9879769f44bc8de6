"""`parse_duration_ms` reads exactly what restate-server 1.7.12 reads (jiff's friendly format and
ISO 8601), plus a bare number of ms. Each row's answer is restate-server's, as it answered
`PATCH /services/{name}` and `?delay=` on loopback (None: it refused the form);
tests/integration/test_durations_restate.py asks the server again for a sample."""

from __future__ import annotations

import pytest

from control_plane.durations import GRAMMAR, parse_duration_ms

S, M, H, D = 1_000, 60_000, 3_600_000, 86_400_000

ACCEPTED: list[tuple[str, int]] = [
    # today's forms
    ("10s", 10 * S),
    ("500ms", 500),
    ("1m30s", 90 * S),
    ("1d", D),
    ("PT10S", 10 * S),
    ("P1D", D),
    # units long, short, plural
    ("1min", M),
    ("2mins", 2 * M),
    ("3 minutes", 3 * M),
    ("2 minute", 2 * M),
    ("90sec", 90 * S),
    ("90 secs", 90 * S),
    ("1secs", S),
    ("1 second", S),
    ("1 hour", H),
    ("2 hours", 2 * H),
    ("1hr", H),
    ("2hrs", 2 * H),
    ("2 days", 2 * D),
    ("1day", D),
    ("1w", 7 * D),
    ("1 week", 7 * D),
    ("2wks", 14 * D),
    ("1 millisecond", 1),
    ("2 millis", 2),
    ("5 msecs", 5),
    ("1msec", 1),
    ("1000ns", 0),
    ("1us", 0),
    ("2\u00b5secs", 0),
    ("1 millis 2 micros", 1),
    # spaces, mixed, commas
    ("1h 30m", 90 * M),
    ("1h30m", 90 * M),
    ("1 h", H),
    ("10 s", 10 * S),
    ("10  s", 10 * S),
    ("1 h 30 m", 90 * M),
    ("1h\t30m", 90 * M),
    ("1hour30minutes", 90 * M),
    ("1 minute 30 seconds", 90 * S),
    ("1 hours 30 minutes 15 seconds 200 milliseconds", H + 30 * M + 15 * S + 200),
    ("1h, 30m", 90 * M),
    ("1h,  30m", 90 * M),
    ("1 day, 2 hours", D + 2 * H),
    ("1d,  2h, 3m", D + 2 * H + 3 * M),
    ("10s ", 10 * S),
    ("007s", 7 * S),
    ("+10s", 10 * S),
    ("0", 0),
    ("0s", 0),
    ("-0s", 0),
    ("0s ago", 0),
    ("0y 1d", D),
    ("0 years 2h", 2 * H),
    # fractions: hours and smaller, on the last part
    ("1.5s", 1500),
    ("1,5s", 1500),
    ("1.5h", 90 * M),
    ("1.5 h", 90 * M),
    ("0.5 min", 30 * S),
    ("1h 1.5m", H + 90 * S),
    ("1.5ms", 1),
    ("1.123456789s", 1123),
    # HH:MM:SS, alone or after days or weeks
    ("01:30:00", 90 * M),
    ("1:30:00", 90 * M),
    ("01:30:00.5", 90 * M + 500),
    ("00:60:00", H),
    ("25:00:00", 25 * H),
    ("1d 01:30:00", D + 90 * M),
    ("1w 01:30:00", 7 * D + 90 * M),
    # ISO 8601
    ("PT1H30M", 90 * M),
    ("P1DT2H", D + 2 * H),
    ("pt10s", 10 * S),
    ("PT10s", 10 * S),
    ("p1dt2h", D + 2 * H),
    ("PT1.5S", 1500),
    ("PT1,5S", 1500),
    ("PT0.5H", 30 * M),
    ("PT1.5M", 90 * S),
    ("PT1H1.5S", H + 1500),
    ("PT1H30M15.5S", H + 30 * M + 15_500),
    ("P1W", 7 * D),
    ("P1W2D", 9 * D),
    ("P1WT1H", 7 * D + H),
    ("P0Y1D", D),
    ("PT36H", 36 * H),
    ("P0D", 0),
    ("PT0S", 0),
    ("+PT10S", 10 * S),
    ("-PT0S", 0),
    # Torpor's own: a bare number of ms
    ("1500", 1500),
    ("00", 0),
]

REFUSED: list[str] = [
    # years and months have no fixed length
    "1y", "1 year", "1mo", "1 month", "P1Y", "P1M", "1mo 01:30:00",
    # negative
    "-10s", "10s ago", "1 s ago", "5m ago",
    # case, signs, stray text
    "10S", "10 S", "1H", "1MIN", "1 Minutes", "+ 10s", "+10s ago", "10x", "abc", "h", "1hh", "1sx", "1 ago",
    # order, repeats, missing units
    "30m 1h", "1h 1h", "1s 1s", "1d 1w", "1m 30", "1h30", "1h-30m", "1_000s", "1 000s",
    # commas and spaces
    "10s,", "10s, ", "1h,30m", "1d,2h", "1h ,30m", "1h , 30m", " 10s",
    # fractions
    "1.5m 30s", "1.5d", "1.5w", "1.s", ".5s", "1 .5h", "1.1234567891s", "1e3ms",
    # HH:MM:SS
    "01:30", "1h 01:30:00",
    # ISO 8601
    "PT", "P", "P1DT", "P1D2H", "P1.5D", "PT1.5H30M", "PT10S ",
]


@pytest.mark.parametrize(("text", "ms"), ACCEPTED)
def test_restate_servers_forms_are_read(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", REFUSED)
def test_forms_restate_server_refuses_are_refused_naming_the_grammar(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration|negative") as raised:
        parse_duration_ms(text)
    assert "1h 30m" in str(raised.value) and "PT1H30M" in str(raised.value)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("1y", "years and months have no fixed length"),
        ("30m 1h", "from the largest to the smallest"),
        ("1.5d", "only hours and smaller units take a fraction"),
        ("10s ago", "negative"),
        ("10x", "a number must be followed by a unit"),
    ],
)
def test_a_refusal_says_why(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_duration_ms(text)


def test_the_grammar_names_every_unit_family() -> None:
    for unit in ("ms", "sec", "min", "hour", "day", "week"):
        assert unit in GRAMMAR
