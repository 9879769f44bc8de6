"""Large payloads: `torpor dev` (SQLite; DynamoDB and S3 on moto) beside restate-server 1.7.12.

    python -m bench.payloads [--rounds 3] [--sizes 65536,1048576,5242880]

One restate-sdk virtual object (`tests.integration.test_large_payloads.big`, served by hypercorn in
this process, request/response mode) takes an input of SIZE bytes, sets it as state, journals a
`ctx.run` result of SIZE bytes and returns it: 3 values of SIZE in the journal, and a replay after
the run (request/response). Each system gets the same calls, round by round on a fresh key each;
latency = the call's answer time. Torpor's figures: `torpor dev` in memory (SQLite), and on an
embedded moto (DynamoDB and S3 over HTTP) with a blob bucket, where a value above an item goes to S3.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
from collections.abc import Callable

import httpx
import restate

from adapters.local.dev import DevServer
from control_plane.settings import Settings
from tests.conformance.harness import RestateRuntime
from tests.helpers.asgi import serve_asgi
from tests.integration.test_large_payloads import _FLIP, OCTETS, big

SETTINGS = Settings(inactivity_timeout_ms=120_000, lease_margin_ms=10_000, call_wait_ms=300_000)


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def _call(ingress: str, key: str, data: bytes) -> float:
    """One round trip (ms); raises if the answer is not the run's result."""
    started = time.perf_counter()
    reply = httpx.post(
        f"{ingress}/BigPayloads/{key}/roundtrip", content=data, headers={"content-type": OCTETS}, timeout=600
    )
    elapsed = (time.perf_counter() - started) * 1000
    if reply.status_code != 200 or reply.content != data.translate(_FLIP):
        raise RuntimeError(f"{ingress}: {reply.status_code} {reply.text[:200]}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    """Print a table of median round trips per size and system, with ratios to restate-server."""
    parser = argparse.ArgumentParser(prog="python -m bench.payloads", description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", default="65536,1048576,5242880")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"load before: {_uptime()}")
    runtime = RestateRuntime()
    runtime.start()
    sqlite = DevServer(ingress_port=0, admin_port=0, in_memory=True, settings=SETTINGS)
    moto = DevServer(ingress_port=0, admin_port=0, moto=True, settings=SETTINGS, blob_bucket="bench-blobs")
    try:
        with serve_asgi(restate.app(services=[big], protocol="request_response")) as url:
            for dev in (sqlite, moto):
                dev.start()
                httpx.post(f"{dev.admin_url}/deployments", json={"uri": url}, timeout=60).raise_for_status()
            body = {"uri": url, "use_http_11": True}
            httpx.post(f"{runtime.admin_url}/v4/deployments", json=body, timeout=60).raise_for_status()
            systems: dict[str, Callable[[str, bytes], float]] = {
                "restate": lambda key, data: _call(runtime.ingress_url, key, data),
                "torpor (SQLite)": lambda key, data: _call(sqlite.ingress_url, key, data),
                "torpor (DynamoDB+S3 on moto)": lambda key, data: _call(moto.ingress_url, key, data),
            }
            print(
                "| size | " + " | ".join(f"{name} p50" for name in systems) + " | SQLite / restate | moto / restate |"
            )
            print("| --- |" + " --- |" * (len(systems) + 2))
            for size in sizes:
                times: dict[str, list[float]] = {name: [] for name in systems}
                for round_ in range(args.rounds):
                    data = os.urandom(size)
                    for name, call in systems.items():  # alternating, round by round
                        times[name].append(call(f"k{size}-{round_}", data))
                p50 = {name: statistics.median(values) for name, values in times.items()}
                restate_ms = p50["restate"]
                cells = " | ".join(f"{value:.0f} ms" for value in p50.values())
                ratios = [p50["torpor (SQLite)"] / restate_ms, p50["torpor (DynamoDB+S3 on moto)"] / restate_ms]
                print(f"| {size:,} B | {cells} | {ratios[0]:.2f} | {ratios[1]:.2f} |", flush=True)
            blobs = moto.store.blobs
            print(f"S3 requests of the moto run: {getattr(blobs, 'requests', {})}")
    finally:
        for dev in (sqlite, moto):
            dev.stop()
        runtime.close()
    print(f"load after: {_uptime()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
