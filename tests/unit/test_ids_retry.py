"""Ids round-trip and carry their kind; the retry policy follows Restate's defaults."""

from __future__ import annotations

import pytest

from control_plane import ids
from control_plane.durations import parse_duration_ms
from control_plane.errors import BadRequest
from control_plane.retry import RetryPolicy
from http_api.admin import service_overrides

# (invocation id, the awakeable id its handler got for signal 17), as restate-server 1.7.12 made them
# on loopback: a service call, an idempotent call, and two calls of virtual object key "a"
RESTATE_SERVER_IDS = [
    ("inv_171coeUmaOsD1iSQ1mcP3oEP6UjFbPZpOD", "sign_1RzsBhcg8wlFP1wNOxES6fGA0khrlW90qAAAAEQ"),
    ("inv_16vnR5MzgZWy3eOFa6NVfCXO0sW91TJz4N", "sign_1ks00q34kyEvddPZOPJ9nlvtehmbZQ2xqAAAAEQ"),
    ("inv_1dceKvwtEc2n16lW9Ta0QCvR9wbUZM02BO", "sign_1E6zONTfWt5kQyTq0hyqkol2alCyMXDkkAAAAEQ"),
    ("inv_1dceKvwtEc2n41v8QQNCRrQx11Mir7Xwod", "sign_1E6zONTfWt5kVllCCrtVSNZcE3TavOzmEAAAAEQ"),
]


def test_invocation_id_round_trips_through_its_bytes() -> None:
    invocation_id = ids.new_invocation_id()
    raw = ids.invocation_id_bytes(invocation_id)
    assert invocation_id.startswith("inv_1")
    assert len(invocation_id) == 38  # inv_1, 11 characters of partition key, 22 of the rest
    assert len(raw) == 24
    assert ids.invocation_id_from_bytes(raw) == invocation_id


@pytest.mark.parametrize(("invocation_id", "awakeable"), RESTATE_SERVER_IDS)
def test_ids_made_by_restate_server_parse_and_print_back_unchanged(invocation_id: str, awakeable: str) -> None:
    raw = ids.invocation_id_bytes(invocation_id)
    assert len(raw) == 24
    assert ids.invocation_id_from_bytes(raw) == invocation_id
    assert ids.parse_awakeable_id(awakeable) == (invocation_id, 17)  # the bytes restate-server sent the SDK
    assert ids.awakeable_id(invocation_id, 17) == awakeable


def test_invocations_of_one_key_share_a_partition_key_prefix() -> None:
    first, second, other = ids.new_invocation_id("a"), ids.new_invocation_id("a"), ids.new_invocation_id("b")
    assert first != second
    assert first[:16] == second[:16] != other[:16]  # inv_1 + the 11 characters of the partition key
    assert ids.invocation_id_bytes(first)[:8] == ids.partition_key("a")


def test_extreme_id_bytes_round_trip() -> None:
    for raw in (bytes(24), b"\xff" * 24, bytes(range(24)), bytes(16), b"\xff" * 16, bytes(range(16))):
        assert ids.invocation_id_bytes(ids.invocation_id_from_bytes(raw)) == raw


def test_an_id_of_16_bytes_from_an_earlier_torpor_stays_valid() -> None:
    legacy = "inv_1" + "0" * 20 + "1F"  # 27 characters: base62 0-9A-Za-z of the 16 bytes, big-endian
    raw = ids.invocation_id_bytes(legacy)
    assert raw == bytes(15) + bytes([77])
    assert ids.invocation_id_from_bytes(raw) == legacy
    assert ids.parse_awakeable_id(ids.awakeable_id(legacy, 17)) == (legacy, 17)
    # its children keep the 16-byte shape they had when its journal was written
    assert len(ids.derived_invocation_id(legacy, 3)) == 27
    assert len(ids.derived_invocation_id(ids.new_invocation_id(), 3)) == 38


@pytest.mark.parametrize(
    "bad",
    ["inv_1", "dp_123", "inv_1" + "!" * 22, "inv_1" + "z" * 23, "inv_1" + "z" * 33, "inv_1" + "0" * 32 + "-"],
)
def test_malformed_invocation_id_is_a_400(bad: str) -> None:
    with pytest.raises(BadRequest, match="bad invocation id") as caught:
        ids.invocation_id_bytes(bad)
    if len(bad) not in (27, 38):  # a wrong length names both forms
        forms = "inv_1 followed by 33 base62 characters (or, for an id made by an earlier Torpor, 22)"
        assert forms in str(caught.value)


def test_derived_ids_are_deterministic_and_distinct() -> None:
    parent = ids.new_invocation_id()
    assert ids.derived_invocation_id(parent, 3) == ids.derived_invocation_id(parent, 3)
    assert ids.derived_invocation_id(parent, 3) != ids.derived_invocation_id(parent, 4)
    assert ids.derived_invocation_id(parent, 3, "k")[:16] == ids.new_invocation_id("k")[:16]


def test_deterministic_ids_have_24_bytes_and_keep_their_legacy_form_apart() -> None:
    run = ids.workflow_run_id("Signup", "alice")
    assert run == ids.workflow_run_id("Signup", "alice")
    assert len(ids.invocation_id_bytes(run)) == 24
    assert run[:16] == ids.new_invocation_id("alice")[:16]
    assert len(ids.legacy_workflow_run_id("Signup", "alice")) == 27
    idem = ids.idempotent_invocation_id("Greeter", "greet", "", "k1")
    assert idem == ids.idempotent_invocation_id("Greeter", "greet", "", "k1")
    assert len(idem) == 38
    assert len(ids.legacy_idempotent_invocation_id("Greeter", "greet", "", "k1")) == 27


def test_awakeable_id_is_sign_1_base64url_of_id_and_index() -> None:
    invocation_id = ids.invocation_id_from_bytes(bytes(range(24)))
    awakeable = ids.awakeable_id(invocation_id, 17)
    # 24 id bytes then u32 big-endian 17, base64url without padding
    assert awakeable == "sign_1AAECAwQFBgcICQoLDA0ODxAREhMUFRYXAAAAEQ"
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


RESTATE_BASE62 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def restate_deployment_id_number(deployment_id: str) -> int | None:
    """The u128 Restate's clients read from `deployment_id`, or None where they fail ("base62 decode
    error"), by their rule (written here from it, not from Torpor's code): `dp_`, the version `1`,
    then 22 characters of base62 in the alphabet `0-9a-zA-Z` whose number fits a u128."""
    body = deployment_id.removeprefix("dp_1")
    if not deployment_id.startswith("dp_1") or len(body) != 22 or any(c not in RESTATE_BASE62 for c in body):
        return None
    number = 0
    for c in body:
        number = number * 62 + RESTATE_BASE62.index(c)
    return number if number < 2**128 else None


def test_every_fresh_deployment_id_decodes_in_restates_clients() -> None:
    fresh = [ids.new_deployment_id() for _ in range(20_000)]
    assert [d for d in fresh if restate_deployment_id_number(d) is None] == []


# 7 * 62**21 + 35 * 62**20: written with `0-9A-Za-z` it begins "7Z", which `0-9a-zA-Z` reads as above 2**128
_BYTES_ONCE_UNDECODABLE = (7 * 62**21 + 35 * 62**20).to_bytes(16, "big")


@pytest.mark.parametrize("raw", [_BYTES_ONCE_UNDECODABLE, b"\xff" * 16, bytes(16)])
def test_a_deployment_id_carries_its_random_bytes_as_restate_reads_them(
    monkeypatch: pytest.MonkeyPatch, raw: bytes
) -> None:
    monkeypatch.setattr(ids.os, "urandom", lambda n: raw)
    deployment_id = ids.new_deployment_id()
    assert restate_deployment_id_number(deployment_id) == int.from_bytes(raw, "little"), deployment_id


def test_a_callee_seed_names_other_children_and_no_seed_names_them_as_before() -> None:
    parent = ids.new_invocation_id()
    # a parent stored before the seed (0) names its children as it always did: its journal names them
    assert ids.derived_invocation_id(parent, 3, "", 0) == ids.derived_invocation_id(parent, 3)
    # a run with a seed names children of its own, the same ones on every retry, its key's partition kept
    assert ids.derived_invocation_id(parent, 3, "", 7) != ids.derived_invocation_id(parent, 3)
    assert ids.derived_invocation_id(parent, 3, "", 7) != ids.derived_invocation_id(parent, 3, "", 9)
    assert ids.derived_invocation_id(parent, 3, "", 7) == ids.derived_invocation_id(parent, 3, "", 7)
    assert ids.derived_invocation_id(parent, 3, "k", 7)[:16] == ids.new_invocation_id("k")[:16]
