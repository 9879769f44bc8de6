"""Object state above one DynamoDB item (400 KB): every value a handler sets is kept, on both stores.

Real restate-sdk handlers (`Sequence/{key}/fill`, `Sequence/{key}/digests`) over HTTP, `torpor dev`
wiring on the SQLite store and on a moto server. A commit whose state writes do not fit in the
object's key item spills them to items of their own; the answer, the admin API's state and the
handler's own reads agree on every key and value.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from adapters.local.dev import DevServer
from control_plane.settings import Settings
from examples.fixtures.bench import fill_value
from tests.helpers.dev import describe, unique
from tests.helpers.moto import moto_server, unique_table_name

# eager state up to 4 MB: the handler's reads of ~1 MB of state come with its StartMessage
SETTINGS = Settings(inactivity_timeout_ms=20_000, lease_margin_ms=2_000, call_wait_ms=100_000,
                    eager_state_max_bytes=4 * 1024 * 1024)  # fmt: skip


@pytest.fixture(scope="module", params=["sqlite", "dynamodb"])
def dev(
    request: pytest.FixtureRequest, examples_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DevServer]:
    with contextlib.ExitStack() as stack:
        if request.param == "sqlite":
            store: dict[str, Any] = {"data_dir": tmp_path_factory.mktemp("data")}
        else:  # a serial moto, as `torpor dev` embeds
            store = {"dynamodb_endpoint": stack.enter_context(moto_server(serial=True)), "table": unique_table_name()}
        server = DevServer(ingress_port=0, admin_port=0, settings=SETTINGS, **store)
        server.start()
        stack.callback(server.stop)
        reply = httpx.post(f"{server.admin_url}/deployments", json={"uri": examples_url}, timeout=30)
        assert reply.status_code == 201, reply.text
        yield server


def _fill(dev: DevServer, key: str, prefix: str, count: int, size: int) -> httpx.Response:
    body = {"prefix": prefix, "count": count, "size": size}
    return httpx.post(f"{dev.ingress_url}/Sequence/{key}/fill", json=body, timeout=120)


def _expected(*fills: tuple[str, int, int]) -> dict[str, str]:
    return {f"{p}{i}": fill_value(p, i, size) for p, count, size in fills for i in range(count)}


def _assert_all_kept(dev: DevServer, key: str, expected: dict[str, str]) -> None:
    """Every key and value is readable: through the admin API and through a handler's `ctx.get`."""
    state = httpx.get(f"{dev.admin_url}/services/Sequence/state/{key}", timeout=30).json()["state"]
    assert sorted(state) == sorted(expected)
    for name, value in expected.items():  # the admin API shows the first 200 bytes of each value
        shown = state[name]
        assert shown == value or (shown.endswith("…") and ('"' + value).startswith(shown[:-1])), name
    digests = httpx.post(f"{dev.ingress_url}/Sequence/{key}/digests", json=None, timeout=120)
    assert digests.status_code == 200, digests.text
    assert digests.json() == {k: hashlib.sha256(v.encode()).hexdigest() for k, v in expected.items()}


def test_390_values_of_1_kb_in_one_call_are_all_kept(dev: DevServer) -> None:
    key = unique("many")
    reply = _fill(dev, key, "v", 390, 1024)
    assert reply.status_code == 200, reply.text
    assert reply.json() == 390
    assert describe(dev, reply.headers["x-restate-id"])["completion_result"] == "success"
    _assert_all_kept(dev, key, _expected(("v", 390, 1024)))


def test_three_calls_of_ten_values_of_30_kb_are_all_kept(dev: DevServer) -> None:
    key = unique("big")
    fills = [(f"c{n}_", 10, 30 * 1024) for n in range(3)]
    for n, (prefix, count, size) in enumerate(fills):
        reply = _fill(dev, key, prefix, count, size)
        assert reply.status_code == 200, reply.text
        assert reply.json() == 10 * (n + 1)
    _assert_all_kept(dev, key, _expected(*fills))
