"""One writer per object key on dynalite: concurrent exclusive calls on one key never overlap.

dynalite serialises conditional writes as DynamoDB does, so the lock and inbox hand-over (the
`pump` in control_plane/keyed.py) is tested where a lost race would show.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from adapters.local.dev import DevServer
from control_plane.settings import Settings
from examples.side_effects import read_side_effects
from tests.helpers.services import serve_examples
from tests.helpers.stores import STORE_KINDS, dev_store_options

CALLS = 30


@pytest.fixture(scope="module")
def effects_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("effects") / "side_effects.jsonl"


@pytest.fixture(scope="module", params=STORE_KINDS)
def dev(request: pytest.FixtureRequest, effects_file: Path) -> Iterator[DevServer]:
    """A dev server on each store (dynalite, SQLite in a file) with the examples registered."""
    with serve_examples(side_effects_file=effects_file) as (url, _process):
        server = DevServer(
            ingress_port=0,
            admin_port=0,
            **dev_store_options(request, effects_file.parent),
            settings=Settings(inactivity_timeout_ms=10_000, lease_margin_ms=2_000, call_wait_ms=60_000),
        )
        server.start()
        try:
            server.control_plane.registry.register(url)
            yield server
        finally:
            server.stop()


def test_concurrent_exclusive_calls_on_one_key_run_one_at_a_time_in_full(dev: DevServer, effects_file: Path) -> None:
    key = f"race-{time.time_ns()}"
    barrier = threading.Barrier(CALLS)
    replies: list[httpx.Response] = []

    def add() -> None:
        barrier.wait()
        replies.append(httpx.post(f"{dev.ingress_url}/Counter/{key}/add", json=1, timeout=120))

    threads = [threading.Thread(target=add) for _ in range(CALLS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert sorted(r.json() for r in replies) == list(range(1, CALLS + 1))
    spans = sorted((e["start"], e["end"]) for e in read_side_effects(effects_file) if e.get("key") == key)
    assert len(spans) == CALLS
    assert all(end <= start for (_, end), (start, _) in itertools.pairwise(spans))
    assert dev.store.key_status("Counter", key) == (None, None)
