"""Ids round-trip and carry their kind; the retry policy follows Restate's defaults."""

from __future__ import annotations

import pytest

from control_plane import ids
from control_plane.admin import service_overrides
from control_plane.durations import parse_duration_ms
from control_plane.errors import BadRequest
from control_plane.retry import RetryPolicy


def test_invocation_id_round_trips_through_its_bytes() -> None:
    invocation_id = ids.new_invocation_id()
    raw = ids.invocation_id_bytes(invocation_id)
    assert invocation_id.startswith("inv_1")
    assert len(invocation_id) == 27
    assert len(raw) == 16
    assert ids.invocation_id_from_bytes(raw) == invocation_id


def test_extreme_id_bytes_round_trip() -> None:
    for raw in (bytes(16), b"\xff" * 16, bytes(range(16))):
        assert ids.invocation_id_bytes(ids.invocation_id_from_bytes(raw)) == raw


@pytest.mark.parametrize("bad", ["inv_1", "dp_123", "inv_1" + "!" * 22, "inv_1" + "z" * 23])
def test_malformed_invocation_id_is_a_400(bad: str) -> None:
    with pytest.raises(BadRequest, match="bad invocation id"):
        ids.invocation_id_bytes(bad)


def test_derived_ids_are_deterministic_and_distinct() -> None:
    parent = ids.new_invocation_id()
    assert ids.derived_invocation_id(parent, 3) == ids.derived_invocation_id(parent, 3)
    assert ids.derived_invocation_id(parent, 3) != ids.derived_invocation_id(parent, 4)


def test_awakeable_id_is_sign_1_base64url_of_id_and_index() -> None:
    invocation_id = ids.invocation_id_from_bytes(bytes(range(16)))
    awakeable = ids.awakeable_id(invocation_id, 17)
    # 16 id bytes then u32 big-endian 17, base64url without padding
    assert awakeable == "sign_1AAECAwQFBgcICQoLDA0ODwAAABE"
    assert ids.parse_awakeable_id(awakeable) == (invocation_id, 17)


@pytest.mark.parametrize("bad", ["prom_1abc", "sign_1", "sign_1!!!!", "sign_1AAEC"])
def test_malformed_awakeable_id_is_a_400(bad: str) -> None:
    with pytest.raises(BadRequest, match="malformed awakeable id"):
        ids.parse_awakeable_id(bad)


def test_default_retry_policy_backs_off_exponentially_up_to_the_cap() -> None:
    policy = RetryPolicy()
    assert [policy.delay_ms(n) for n in (1, 2, 3, 4)] == [50, 100, 200, 400]
    assert policy.delay_ms(30) == 60_000
    assert policy.delay_ms(2, next_retry_delay_ms=1234) == 1234
    assert not policy.exhausted(69)
    assert policy.exhausted(70)
    assert policy.on_max_attempts == "pause"


def test_a_huge_factor_or_attempt_count_caps_the_delay_instead_of_overflowing() -> None:
    assert RetryPolicy(exponentiation_factor=1e308, max_attempts=5).delay_ms(4) == 60_000
    assert RetryPolicy(max_attempts=3000).delay_ms(1026) == 60_000
    assert RetryPolicy(max_interval_ms=10**30).delay_ms(10_000) == 365 * 24 * 3600 * 1000
    assert RetryPolicy().delay_ms(3, next_retry_delay_ms=10**20) == 365 * 24 * 3600 * 1000


@pytest.mark.parametrize(
    "text", ["99999999999999999999999999999999999999999999999999d", "1000000000000000000000", "P40000D"]
)
def test_durations_longer_than_a_century_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="longer than 100 years"):
        parse_duration_ms(text)
    assert parse_duration_ms("36500d") == 36500 * 86_400_000


def test_a_service_override_longer_than_a_century_is_a_400() -> None:
    with pytest.raises(BadRequest, match="longer than 100 years"):
        service_overrides({"journal_retention": 10**30})
    with pytest.raises(BadRequest, match="longer than 100 years"):
        service_overrides({"idempotency_retention": "99999999999999999999999999999999999999999999999999d"})
