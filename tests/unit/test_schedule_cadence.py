"""The tick grid of a schedule (`control_plane.schedules.Cadence`) and its inputs."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from control_plane.schedules import Cadence, parse_cron, parse_every, tick_idempotency_key


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


@pytest.mark.parametrize(
    ("cron", "at", "latest", "following"),
    [
        ("0 * * * *", "2026-12-01T10:30:00", "2026-12-01T10:00:00", "2026-12-01T11:00:00"),
        ("0 * * * *", "2026-12-01T10:00:00", "2026-12-01T10:00:00", "2026-12-01T11:00:00"),
        ("*/15 * * * *", "2026-12-01T10:14:59.999", "2026-12-01T10:00:00", "2026-12-01T10:15:00"),
        ("0 9 * * 1-5", "2026-12-05T12:00:00", "2026-12-04T09:00:00", "2026-12-07T09:00:00"),  # Sat -> Fri, Mon
    ],
)
def test_cron_ticks_in_utc(cron: str, at: str, latest: str, following: str) -> None:
    cadence = Cadence(cron=parse_cron(cron))
    assert cadence.latest_at_or_before(ms(at)) == ms(latest)
    assert cadence.next_after(ms(at)) == ms(following)


def test_every_ticks_at_multiples_of_its_period_since_the_epoch() -> None:
    cadence = Cadence(every_ms=parse_every("5m"))
    assert cadence.latest_at_or_before(ms("2026-12-01T10:07:30")) == ms("2026-12-01T10:05:00")
    assert cadence.latest_at_or_before(ms("2026-12-01T10:05:00")) == ms("2026-12-01T10:05:00")
    assert cadence.next_after(ms("2026-12-01T10:05:00")) == ms("2026-12-01T10:10:00")
    assert cadence.describe() == "every 5m"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0 * * *", "has 4 fields"),
        ("0 0 * * * *", "has 6 fields"),
        ("x * * * *", "minute field 'x' is not supported"),
        ("0 25 * * *", "not valid"),
        ("0 0 30 2 *", "'0 0 30 2 \\*' never fires"),  # valid fields, no date matches: was a 500 at the first tick
        ("0 0 31 4,6 *", "never fires"),
        ("0 0 * * 1#2", "day-of-week field '1#2' is not supported"),  # EventBridge's nth weekday: refused everywhere
        ("0 0 L * *", "day-of-month field 'L' is not supported"),
        ("0 0 15W * *", "'15W' is not supported"),
        ("0 0 * * 5L", "'5L' is not supported"),
        ("0 0 ? * MON", "'\\?' is not supported"),
        ("H * * * *", "'H' is not supported"),
        ("0 0 * FOO *", "month field 'FOO' is not supported"),
        ("0 " * 150 + "*", "too long"),
    ],
)
def test_bad_cron_expressions_say_why(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_cron(text)


@pytest.mark.parametrize("cron", ["0 0 29 2 *", "0 9 * JAN-MAR mon-fri", "*/5 1-3 1,15 * *", "0 0 * * 7"])
def test_cron_expressions_that_fire_rarely_or_use_names_are_accepted(cron: str) -> None:
    cadence = Cadence(cron=parse_cron(cron))
    assert cadence.next_after(ms("2026-12-01T00:00:00")) > ms("2026-12-01T00:00:00")


def test_a_period_is_at_least_a_second() -> None:
    assert parse_every("1s") == 1000
    with pytest.raises(ValueError, match="shorter than 1s"):
        parse_every("999ms")


def test_a_ticks_idempotency_key_names_the_schedule_and_the_tick() -> None:
    assert tick_idempotency_key("hourly", 1_800_000_000_000) == "schedule/hourly/1800000000000"
    assert tick_idempotency_key("hourly", 1) != tick_idempotency_key("hourly", 2)
    assert tick_idempotency_key("a", 1) != tick_idempotency_key("b", 1)
