"""Torpor and restate-server 1.7.12 agree on which durations they accept, side by side: the same
sample sent as `?delay=` to each ingress and as a service option to each admin API
(`PATCH /services/{name}`), registered with the same example services. Where both accept, the
admin APIs answer the same duration. tests/unit/test_durations.py holds the full table."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from adapters.local.dev import DevServer
from control_plane.durations import parse_duration_ms
from tests.helpers.moto import unique_table_name
from tests.helpers.services import REPO_ROOT

RESTATE_SERVERS = [
    REPO_ROOT / f".cache/{base}/node_modules/@restatedev/restate-server-linux-x64/bin/restate-server"
    for base in ("conformance-restate", "bench/restate")
]
pytestmark = pytest.mark.skipif(
    not any(p.exists() for p in RESTATE_SERVERS), reason="restate-server not installed in .cache/"
)

SAMPLE = [
    # accepted by both
    "10s", "500ms", "1m30s", "1h 30m", "1min", "90sec", "1 hour", "2 days", "1 week", "3 minutes", "1hr",
    "1h, 30m", "10 s", "1.5h", "1,5s", "1h 1.5m", "1d 01:30:00", "+10s", "0", "PT1H30M", "p1dt2h", "P1W",
    "PT1.5S", "1 millis 2 micros",
    # refused by both
    "1y", "1 month", "P1M", "-10s", "10s ago", "10S", "1MIN", "30m 1h", "1h,30m", "10s,", "1.5d", "1.5m 30s",
    " 10s", "1h30", "abc", "PT", "P1D2H", "PT10S ", "1h 01:30:00",
]
"""A sample of the forms tests/unit/test_durations.py lists; bare numbers of ms other than 0 are
Torpor's own and left out."""


@pytest.fixture(scope="module")
def restate_server(examples_url: str) -> Iterator[Any]:
    from tests.conformance.harness import RestateRuntime

    runtime = RestateRuntime()
    runtime.start()
    try:
        body = {"uri": examples_url, "use_http_11": True}
        assert httpx.post(f"{runtime.admin_url}/v4/deployments", json=body, timeout=60).status_code == 201
        yield runtime
    finally:
        runtime.close()


@pytest.fixture(scope="module")
def torpor_dev(moto_endpoint: str, examples_url: str) -> Iterator[DevServer]:
    server = DevServer(ingress_port=0, admin_port=0, dynamodb_endpoint=moto_endpoint, table=unique_table_name())
    server.start()
    try:
        body = {"uri": examples_url, "use_http_11": True}
        assert httpx.post(f"{server.admin_url}/v4/deployments", json=body, timeout=60).status_code == 201
        yield server
    finally:
        server.stop()


def answers(admin_url: str, ingress_url: str, form: str) -> tuple[bool, bool, Any]:
    """(`?delay=form` accepted, `idempotency_retention: form` accepted, the retention the admin API
    shows, in ms: restate-server keeps the µs Torpor rounds down)."""
    delay = httpx.post(f"{ingress_url}/Greeter/greet/send", params={"delay": form}, json="x", timeout=10)
    assert delay.status_code in (202, 400), delay.text
    patch = httpx.patch(f"{admin_url}/v4/services/Greeter", json={"idempotency_retention": form}, timeout=10)
    assert patch.status_code in (200, 400, 422), patch.text
    shown = patch.json().get("idempotency_retention") if patch.status_code == 200 else None
    return delay.status_code == 202, patch.status_code == 200, None if shown is None else parse_duration_ms(shown)


def test_torpor_accepts_and_refuses_the_durations_restate_server_does(
    restate_server: Any, torpor_dev: DevServer
) -> None:
    disagree = []
    for form in SAMPLE:
        theirs = answers(restate_server.admin_url, restate_server.ingress_url, form)
        ours = answers(torpor_dev.admin_url, torpor_dev.ingress_url, form)
        if theirs != ours:
            disagree.append((form, theirs, ours))
    assert not disagree, disagree


def test_a_refused_delay_is_a_400_naming_the_grammar(torpor_dev: DevServer) -> None:
    reply = httpx.post(f"{torpor_dev.ingress_url}/Greeter/greet/send", params={"delay": "1 month"}, json="x")
    assert reply.status_code == 400
    assert "no fixed length" in reply.json()["message"] and "1h 30m" in reply.json()["message"]
