"""`torpor dev` on the SQLite store: a restart on the same data directory keeps deployments,
invocations, state and timers, and resumes what was running (stopped cleanly, or killed).
"""

from __future__ import annotations

import signal
import subprocess
import time
from contextlib import AbstractContextManager
from pathlib import Path

import httpx

from adapters.local.dev import SQLITE_FILE, DevServer
from adapters.local.sqlite_store import SQLiteStore
from control_plane.settings import Settings
from tests.helpers.dev import torpor_dev_process, wait_for
from tests.helpers.services import serve_examples

SETTINGS = Settings(inactivity_timeout_ms=5_000, lease_margin_ms=1_000, call_wait_ms=30_000)


def status(admin_url: str, invocation_id: str) -> str:
    described: dict[str, str] = httpx.get(f"{admin_url}/invocations/{invocation_id}", timeout=5).json()
    return described["status"]


def test_a_restart_on_the_same_data_dir_keeps_everything_and_resumes_a_sleep(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with serve_examples(side_effects_file=tmp_path / "effects.jsonl") as (services_url, _services):
        # GIVEN a dev server on a data directory, with the examples registered, some object state,
        # and an invocation asleep for 2 s
        first = DevServer(ingress_port=0, admin_port=0, data_dir=data_dir, settings=SETTINGS)
        first.start()
        try:
            assert isinstance(first.store, SQLiteStore)
            assert first.store_location == str(data_dir / SQLITE_FILE)
            registered = httpx.post(f"{first.admin_url}/deployments", json={"uri": services_url}, timeout=30)
            assert registered.status_code == 201, registered.text
            assert httpx.post(f"{first.ingress_url}/Counter/kept/add", json=5, timeout=30).json() == 5
            sleeping = httpx.post(f"{first.ingress_url}/Waits/sleep/send", json=2000, timeout=30).json()
            invocation_id = sleeping["invocationId"]
            wait_for(lambda: status(first.admin_url, invocation_id) == "suspended", 10, "the sleep to suspend")
            deployments = httpx.get(f"{first.admin_url}/deployments", timeout=10).json()
        finally:
            # WHEN it stops while the invocation sleeps
            first.stop()
        assert (data_dir / SQLITE_FILE).is_file()

        # THEN a new server on the same directory knows the deployment, the state and the invocation,
        # and the sleep completes
        second = DevServer(ingress_port=0, admin_port=0, data_dir=data_dir, settings=SETTINGS)
        second.start()
        try:
            assert httpx.get(f"{second.admin_url}/deployments", timeout=10).json() == deployments
            done = httpx.get(f"{second.ingress_url}/restate/invocation/{invocation_id}/attach", timeout=30)
            assert done.status_code == 200, done.text
            assert done.json() == "slept 2000 ms"
            assert httpx.post(f"{second.ingress_url}/Counter/kept/add", json=1, timeout=30).json() == 6
        finally:
            second.stop()


def torpor_dev(data_dir: Path) -> AbstractContextManager[tuple[str, str, subprocess.Popen[bytes]]]:
    """`torpor dev --data-dir DIR` in a subprocess on free ports (see `torpor_dev_process`)."""
    return torpor_dev_process("--data-dir", str(data_dir))


def test_sigkill_mid_sleep_and_mid_object_call_then_a_restart_completes_each_once(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with serve_examples(side_effects_file=tmp_path / "effects.jsonl") as (services_url, _services):
        # GIVEN torpor dev on a data directory with a sleep in flight, and an exclusive object call
        # asleep while it holds its key, with another call queued behind it
        with torpor_dev(data_dir) as (ingress, admin, first):
            assert httpx.post(f"{admin}/deployments", json={"uri": services_url}, timeout=30).status_code == 201
            sleep_id = httpx.post(f"{ingress}/Waits/sleep/send", json=1500, timeout=30).json()["invocationId"]
            holder = {"ms": 1500, "delta": 3}
            sent = httpx.post(f"{ingress}/Counter/killed/add_after_sleep/send", json=holder, timeout=30).json()
            holder_id = sent["invocationId"]
            queued_id = httpx.post(f"{ingress}/Counter/killed/add/send", json=1, timeout=30).json()["invocationId"]
            wait_for(lambda: status(admin, sleep_id) == "suspended", 10, "the sleep to suspend")
            wait_for(lambda: status(admin, holder_id) == "suspended", 10, "the object call's sleep")
            assert status(admin, queued_id) == "pending"
            # WHEN the process is killed without any chance to clean up
            first.send_signal(signal.SIGKILL)
            first.wait(10)
        time.sleep(1.6)  # past the sleeps' due time
        # THEN a new process on the same directory completes the sleep and both object calls, in order, once
        with torpor_dev(data_dir) as (ingress, admin, _second):
            done = httpx.get(f"{ingress}/restate/invocation/{sleep_id}/attach", timeout=30)
            assert done.status_code == 200, done.text
            assert done.json() == "slept 1500 ms"
            held = httpx.get(f"{ingress}/restate/invocation/{holder_id}/attach", timeout=30)
            assert held.json() == 3
            assert httpx.get(f"{ingress}/restate/invocation/{queued_id}/attach", timeout=30).json() == 4
            assert httpx.post(f"{ingress}/Counter/killed/add", json=1, timeout=30).json() == 5
            described = httpx.get(f"{admin}/invocations/{sleep_id}", timeout=5).json()
            assert [e["type"] for e in described["journal"]] == ["Input", "Sleep", "SleepCompletion", "Output"]
