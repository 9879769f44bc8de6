"""The pure rules of concurrency limits (`control_plane.limits`): which pool an invocation counts
against, the admission rule, and the rule book's upserts and deletes as the rules API applies them."""

from __future__ import annotations

import pytest

from control_plane.errors import BadRequest, Conflict, Unprocessable
from control_plane.limits import (
    check_limits,
    delete_rules,
    pacing,
    pools_of,
    rate_of,
    reserve,
    rule_pools,
    slot_free,
    sub_pool,
    subpools,
    taking_order,
    upsert_rules,
)


def rule(n: int, disabled: bool = False) -> dict[str, object]:
    return {"limits": {"concurrency": n}, "disabled": disabled, "version": 0}


def test_a_services_and_a_handlers_limits_both_count_and_exclusive_handlers_are_never_limited() -> None:
    overrides = {"concurrencyLimit": 5, "handlerConcurrencyLimits": {"slow": 2}}
    assert pools_of("Svc", "slow", overrides, exclusive=False) == [("~limit/Svc", 5), ("~limit/Svc/slow", 2)]
    assert pools_of("Svc", "fast", overrides, exclusive=False) == [("~limit/Svc", 5)]
    assert pools_of("Svc", "slow", overrides, exclusive=True) == []
    assert pools_of("Svc", "slow", {}, exclusive=False) == []


def test_a_newcomer_starts_only_with_a_free_slot_and_nobody_waiting() -> None:
    assert slot_free(1, 2, waiting=False)
    assert not slot_free(2, 2, waiting=False)
    assert not slot_free(0, 2, waiting=True)


def test_every_level_of_the_calls_identity_with_an_enabled_rule_gives_a_pool() -> None:
    rules = {"*": rule(10), "s": rule(5), "s/*": rule(3), "s/k": rule(2), "s/off": rule(1, disabled=True)}
    # per level the rule with the fewest `*` wins (`s` over `*`, `s/k` over `s/*`); all levels count
    assert rule_pools(rules, "s", "k") == [("~limit/rule/s", 5), ("~limit/rule/s/k", 2)]
    assert rule_pools(rules, "s", "other") == [("~limit/rule/s", 5), ("~limit/rule/s/other", 3)]  # one pool per key
    assert rule_pools(rules, "s", "off") == [("~limit/rule/s", 5), ("~limit/rule/s/off", 3)]  # disabled: passed over
    assert rule_pools(rules, "s", "") == [("~limit/rule/s", 5)]
    assert rule_pools(rules, "t", "k") == [("~limit/rule/t", 10)]
    assert rule_pools(rules, "s", "k/sub") == [("~limit/rule/s", 5), ("~limit/rule/s/k", 2)]  # two-level key
    assert rule_pools(rules, "", "") == []
    assert rule_pools({"s/k/x": rule(1)}, "s", "k") == []  # more segments than the identity has


def test_slots_are_taken_in_one_global_order_each_pool_once() -> None:
    pools = [("~limit/rule/s/k", 2), ("~limit/Svc", 5), ("~limit/rule/s", 3), ("~limit/Svc", 5)]
    assert taking_order(pools) == [("~limit/Svc", 5), ("~limit/rule/s", 3), ("~limit/rule/s/k", 2)]


def test_upsert_versions_rules_and_honours_preconditions_all_or_nothing() -> None:
    book, out = upsert_rules({}, [{"pattern": "s/*", "limits": {"concurrency": 3}}], 1_000)
    # restate-server 1.7.12's answer, side by side: first version 1, no description when none
    assert out == [{"pattern": "s/*", "limits": {"concurrency": 3}, "disabled": False,
                    "version": 1, "last_modified_millis_since_epoch": 1_000}]  # fmt: skip
    book, out = upsert_rules(book, [{"pattern": "s/*", "limits": {"concurrency": 4}, "description": "d",
                                     "precondition": {"type": "matches", "version": 1}}], 2_000)  # fmt: skip
    assert out[0]["version"] == 2 and out[0]["description"] == "d" and book["s/*"]["limits"] == {"concurrency": 4}
    with pytest.raises(Conflict):
        upsert_rules(book, [{"pattern": "x", "limits": {"concurrency": 1}},
                            {"pattern": "s/*", "precondition": {"type": "does_not_exist"}}], 3_000)  # fmt: skip
    with pytest.raises(Unprocessable):
        upsert_rules(book, [{"pattern": "s/a*b", "limits": {"concurrency": 1}}], 3_000)
    with pytest.raises(Unprocessable):
        upsert_rules(book, [{"pattern": "s/a b", "limits": {"concurrency": 1}}], 3_000)
    with pytest.raises(Unprocessable):
        upsert_rules(book, [{"pattern": "s", "limits": {"concurrency": 0}}], 3_000)
    with pytest.raises(Unprocessable):
        upsert_rules(book, {"pattern": "s"}, 3_000)


def test_bulk_delete_skips_absent_rules_unless_a_version_is_expected() -> None:
    book = {"a": {**rule(1), "version": 2}, "b": rule(1)}
    new, removed = delete_rules(book, [{"pattern": "a"}, {"pattern": "gone"}])
    assert removed == ["a"] and set(new) == {"b"}
    with pytest.raises(Conflict):
        delete_rules(book, [{"pattern": "a", "expected_version": 1}])
    with pytest.raises(Conflict):
        delete_rules(book, [{"pattern": "gone", "expected_version": 0}])


def test_limits_on_exclusive_object_handlers_are_refused() -> None:
    handlers = [{"name": "add"}, {"name": "get", "ty": "SHARED"}]
    check_limits("VIRTUAL_OBJECT", handlers, {"handlerConcurrencyLimits": {"get": 2}})
    with pytest.raises(BadRequest):
        check_limits("VIRTUAL_OBJECT", handlers, {"concurrencyLimit": 2})
    with pytest.raises(BadRequest):
        check_limits("VIRTUAL_OBJECT", handlers, {"handlerConcurrencyLimits": {"add": 2}})
    check_limits("SERVICE", [{"name": "add"}], {"concurrencyLimit": 2})


def test_a_rate_limit_lets_a_burst_through_then_spaces_starts_in_arrival_order() -> None:
    interval, burst = pacing(2.0)
    assert (interval, burst) == (500, 2)
    tat, starts = 0, []
    for _ in range(5):  # five arrivals at t = 10,000 ms
        start, tat = reserve(tat, 10_000, interval, burst)
        starts.append(start)
    assert starts == [10_000, 10_000, 10_500, 11_000, 11_500]
    start, tat = reserve(tat, 20_000, interval, burst)  # after a quiet spell: at once again
    assert start == 20_000
    assert pacing(0.5) == (2_000, 1)
    assert rate_of("Svc", "h", {"rateLimit": 3, "handlerRateLimits": {"h": 0.5}}) == ("~rate/Svc/h", 0.5)
    assert rate_of("Svc", "g", {"rateLimit": 3, "handlerRateLimits": {"h": 0.5}}) == ("~rate/Svc", 3.0)
    assert rate_of("Svc", "g", {}) is None


def test_a_large_limit_is_split_into_sub_pools_whose_shares_add_up_and_a_small_one_is_not() -> None:
    assert sub_pool("~limit/Svc", 63, "inv_1") == ("~limit/Svc", 63)  # below 64: one item
    assert [subpools(n) for n in (1, 63, 64, 100, 512, 10_000)] == [1, 1, 4, 6, 32, 32]
    for limit in (64, 100, 1_000):
        shares: dict[str, int] = {}
        for n in range(2_000):
            scope, share = sub_pool("~limit/Svc", limit, f"inv_{n}")
            assert shares.setdefault(scope, share) == share  # one share per sub-pool, whoever asks
        assert len(shares) == subpools(limit) and sum(shares.values()) == limit
        assert all(scope.startswith("~limit/Svc~s") for scope in shares)
