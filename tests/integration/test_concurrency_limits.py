"""Concurrency limits with real restate-sdk handlers under `torpor dev` (moto over HTTP): at most N
invocations of a limited handler or service hold a slot, the rest wait `pending` and start in
arrival order; cancel, kill and completion give slots back; the admin API refuses bad limits."""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

import boto3
import httpx
import pytest

from adapters.local.dev import DevServer
from control_plane import limits
from control_plane.settings import Settings
from tests.helpers.dev import describe, dev_with_examples, wait_for
from tests.helpers.moto import moto_server

SETTINGS = Settings(inactivity_timeout_ms=10_000, lease_margin_ms=2_000, call_wait_ms=60_000)


@pytest.fixture(scope="module")
def dev(examples_url: str) -> Iterator[DevServer]:
    # slots rest on atomic conditional writes: a serial moto, as `torpor dev` embeds
    with moto_server(serial=True) as endpoint, dev_with_examples(endpoint, examples_url, SETTINGS) as server:
        yield server


def configure(dev: DevServer, body: dict[str, Any]) -> httpx.Response:
    return httpx.patch(f"{dev.admin_url}/services/Waits", json=body, timeout=10)


def send_sleep(dev: DevServer, ms: int) -> str:
    reply = httpx.post(f"{dev.ingress_url}/Waits/sleep/send", json=ms, timeout=10)
    assert reply.status_code == 202, reply.text
    invocation_id: str = reply.json()["invocationId"]
    return invocation_id


def statuses(dev: DevServer, ids: list[str]) -> list[str]:
    """The statuses of `ids` from one SQL query: a snapshot, not one read per id (a grant between two
    reads would show the newcomer starting while the one it replaced still runs)."""
    rows = httpx.post(
        f"{dev.admin_url}/query",
        json={"query": "SELECT id, status FROM sys_invocation WHERE target_service_name = 'Waits'"},
        headers={"accept": "application/json"},
        timeout=10,
    ).json()["rows"]
    found = {row["id"]: row["status"] for row in rows}
    return [found.get(i, "absent") for i in ids]


def at_ms(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000


def test_at_most_n_hold_a_slot_and_the_rest_start_in_arrival_order(dev: DevServer) -> None:
    assert configure(dev, {"handler_concurrency_limits": {"sleep": 2}}).status_code == 200
    try:
        ids = []
        for _ in range(5):
            ids.append(send_sleep(dev, 3_000))  # long enough that none ends while they are sent
            time.sleep(0.02)  # distinct arrival times
        first = statuses(dev, ids)
        assert first[2:] == ["pending"] * 3, first
        shown = describe(dev, ids[4])
        assert shown["concurrency_limit"] == {"pool": "Waits/sleep", "limit": 2}
        rows = httpx.post(
            f"{dev.admin_url}/query",
            json={"query": f"SELECT id, status FROM sys_invocation WHERE id = '{ids[4]}'"},
            headers={"accept": "application/json"},
            timeout=10,
        ).json()["rows"]
        assert rows == [{"id": ids[4], "status": "pending"}]
        most = 0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            now = statuses(dev, ids)
            most = max(most, sum(s not in ("pending", "completed") for s in now))
            if all(s == "completed" for s in now):
                break
            time.sleep(0.05)
        assert most <= 2
        done = [at_ms(describe(dev, i)["completed_at"]) for i in ids]
        assert all(s == "completed" for s in statuses(dev, ids))
        # in arrival order: the third starts once the first is done, and so on
        for i in range(2, 5):
            assert done[i] >= done[i - 2] + 2_900, (i, done)
    finally:
        configure(dev, {"handler_concurrency_limits": {"sleep": None}})


def test_the_services_and_the_handlers_limits_both_count(dev: DevServer) -> None:
    # the handler allows 3, the service 1: each call takes a slot of both pools, so one runs at a time
    assert configure(dev, {"concurrency_limit": 1, "handler_concurrency_limits": {"sleep": 3}}).status_code == 200
    try:
        ids = []
        for _ in range(3):
            ids.append(send_sleep(dev, 1_500))
            time.sleep(0.02)
        assert statuses(dev, ids)[1:] == ["pending", "pending"]
        assert describe(dev, ids[2])["concurrency_limits"] == [
            {"pool": "Waits", "limit": 1},
            {"pool": "Waits/sleep", "limit": 3},
        ]
        most = 0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            now = statuses(dev, ids)
            most = max(most, sum(s not in ("pending", "completed") for s in now))
            if all(s == "completed" for s in now):
                break
            time.sleep(0.05)
        assert most == 1 and all(s == "completed" for s in statuses(dev, ids))
        done = sorted(at_ms(describe(dev, i)["completed_at"]) for i in ids)
        assert done[2] - done[0] >= 2 * 1_450, done  # one after the other
    finally:
        configure(dev, {"concurrency_limit": None, "handler_concurrency_limits": {"sleep": None}})


def pool_items(dev: DevServer, prefix: str) -> set[str]:
    """Partition keys of the table's items that begin with `prefix`, read from moto over the wire."""
    client = boto3.client("dynamodb", endpoint_url=dev.dynamodb_endpoint, region_name=dev.region)
    items = client.scan(
        TableName=dev.table,
        FilterExpression="begins_with(PK, :p)",
        ExpressionAttributeValues={":p": {"S": prefix}},
    )["Items"]
    return {item["PK"]["S"] for item in items}


def test_a_large_limit_spreads_its_slots_over_sub_pools(dev: DevServer, monkeypatch: pytest.MonkeyPatch) -> None:
    # 64 slots: 4 sub-pools (items) of 16, an invocation's chosen by its id
    assert configure(dev, {"handler_concurrency_limits": {"sleep": 64}}).status_code == 200
    try:
        shown = describe(dev, send_sleep(dev, 10))["concurrency_limit"]
        assert re.fullmatch(r"Waits/sleep~s[0-3]", shown["pool"]) and shown["limit"] == 16, shown
        # the same split, smaller: 4 slots in 2 sub-pools of 2 (8 calls: both sub-pools fill)
        monkeypatch.setattr(limits, "SPLIT_AT", 4)
        monkeypatch.setattr(limits, "SUBPOOL_SLOTS", 2)
        assert configure(dev, {"handler_concurrency_limits": {"sleep": 4}}).status_code == 200
        ids = [send_sleep(dev, 1_500) for _ in range(8)]
        pool = {i: describe(dev, i)["concurrency_limit"] for i in ids}
        assert {p["limit"] for p in pool.values()} == {2}
        assert {p["pool"] for p in pool.values()} == {"Waits/sleep~s0", "Waits/sleep~s1"}, pool
        assert len(pool_items(dev, "OBJ#~limit/Waits/sleep~s")) >= 2  # one item per sub-pool
        most: dict[str, int] = {}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            now = dict(zip(ids, statuses(dev, ids), strict=True))
            for sub in ("Waits/sleep~s0", "Waits/sleep~s1"):
                active = sum(s not in ("pending", "completed") for i, s in now.items() if pool[i]["pool"] == sub)
                most[sub] = max(most.get(sub, 0), active)
            if all(s == "completed" for s in now.values()):
                break
            time.sleep(0.05)
        assert all(s == "completed" for s in statuses(dev, ids))
        assert max(most.values()) <= 2, most  # never more than its share in a sub-pool
    finally:
        configure(dev, {"handler_concurrency_limits": {"sleep": None}})


def test_cancel_and_kill_give_slots_back_and_a_cancelled_waiter_never_takes_one(dev: DevServer) -> None:
    assert configure(dev, {"concurrency_limit": 1}).status_code == 200
    try:
        holder = send_sleep(dev, 60_000)
        wait_for(lambda: describe(dev, holder)["status"] == "suspended", 15, "the holder's sleep")
        cancelled = send_sleep(dev, 60_000)
        waiter = send_sleep(dev, 60_000)
        last = send_sleep(dev, 100)
        assert statuses(dev, [cancelled, waiter, last]) == ["pending"] * 3
        assert describe(dev, waiter)["concurrency_limit"] == {"pool": "Waits", "limit": 1}

        assert httpx.patch(f"{dev.admin_url}/invocations/{cancelled}/cancel").status_code == 202
        wait_for(lambda: describe(dev, cancelled)["status"] == "completed", 15, "the waiter's cancel")
        assert describe(dev, waiter)["status"] == "pending"  # the holder still holds the only slot

        assert httpx.patch(f"{dev.admin_url}/invocations/{holder}/kill").status_code == 202
        wait_for(lambda: describe(dev, waiter)["status"] == "suspended", 15, "the next one's start")
        assert describe(dev, last)["status"] == "pending"

        assert httpx.patch(f"{dev.admin_url}/invocations/{waiter}/cancel").status_code == 202
        wait_for(lambda: describe(dev, last)["status"] == "completed", 15, "the last one")
        assert describe(dev, last)["completion_result"] == "success"
    finally:
        configure(dev, {"concurrency_limit": None})
    # without a limit, nothing waits
    ids = [send_sleep(dev, 10_000) for _ in range(3)]
    wait_for(lambda: statuses(dev, ids) == ["suspended"] * 3, 15, "three sleeps at once")
    for i in ids:
        httpx.patch(f"{dev.admin_url}/invocations/{i}/kill")


@pytest.mark.parametrize(
    ("service", "body", "says"),
    [
        ("Waits", {"concurrency_limit": 0}, "at least 1"),
        ("Waits", {"concurrency_limit": "3"}, "whole number"),
        ("Waits", {"handler_concurrency_limits": 3}, "expected an object"),
        ("Counter", {"concurrency_limit": 2}, "exclusive handlers"),
        ("Counter", {"handler_concurrency_limits": {"add": 2}}, "exclusive handler"),
    ],
)
def test_bad_limits_are_refused_with_a_message_naming_the_fix(
    dev: DevServer, service: str, body: dict[str, Any], says: str
) -> None:
    reply = httpx.patch(f"{dev.admin_url}/services/{service}", json=body, timeout=10)
    assert reply.status_code == 400, reply.text
    assert says in reply.json()["message"]


def test_a_shared_handler_of_an_object_may_be_limited(dev: DevServer) -> None:
    reply = httpx.patch(f"{dev.admin_url}/services/Counter", json={"handler_concurrency_limits": {"get": 3}})
    assert reply.status_code == 200, reply.text
    try:
        assert httpx.post(f"{dev.ingress_url}/Counter/limited/get", timeout=30).json() == 0
    finally:
        httpx.patch(f"{dev.admin_url}/services/Counter", json={"handler_concurrency_limits": {"get": None}})


def test_a_rate_limit_spaces_starts_and_the_paced_ones_wait_scheduled(dev: DevServer) -> None:
    assert configure(dev, {"handler_rate_limits": {"sleep": 1}}).status_code == 200
    try:
        with ThreadPoolExecutor(5) as pool:
            ids = list(pool.map(lambda _: send_sleep(dev, 0), range(5)))
        shown = [describe(dev, i) for i in ids]
        paced = [s for s in shown if s["status"] == "scheduled"]
        assert len(paced) >= 2, [s["status"] for s in shown]  # 1 a second, one at a time
        times = sorted(at_ms(s["execution_time"]) for s in paced)
        assert all(b - a >= 999 for a, b in itertools.pairwise(times)), times
        wait_for(lambda: statuses(dev, ids) == ["completed"] * 5, 30, "all five")
        done = sorted(at_ms(describe(dev, i)["completed_at"]) for i in ids)
        assert done[-1] - done[0] >= 2_000, done  # 5 starts 1 s apart: the last ends 4 s after the first starts
    finally:
        configure(dev, {"handler_rate_limits": {"sleep": None}})
    assert httpx.patch(f"{dev.admin_url}/services/Waits", json={"rate_limit": 0}).status_code == 400
