"""The end-to-end demo: Torpor driving real Restate-SDK services, journaled in its SQLite store.

Starts the example services (hypercorn, HTTP/1.1, request/response mode) and `torpor dev` (ingress,
admin, the SQLite store in a temporary directory), registers the services, calls them through the ingress, prints
each result; then stops `torpor dev` while an invocation sleeps and starts it again on the same data
directory, where the invocation completes; prints each invocation's journal, and stops what it
started. A port that is taken is replaced by a free one (the demo says which).

    python -m examples.demo [--ingress-port 8080] [--admin-port 9070] [--services-port 9080]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table

from examples.side_effects import read_side_effects

console = Console(width=max(110, Console().width))


def _port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pick(port: int, what: str) -> int:
    """`port` if it is free, else any free port (so the demo runs beside other servers), said aloud."""
    if _port_is_free(port):
        return port
    picked = _free_port()
    console.print(f"port {port} ({what}) is taken: using {picked} instead")
    return picked


def _wait_http(url: str, deadline_s: float, process: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{what} exited with code {process.returncode} before it was ready")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1.0).status_code < 500:
                return
        time.sleep(0.1)
    raise SystemExit(f"{what} did not answer {url} within {deadline_s:.0f} s")


@contextlib.contextmanager
def _process(args: list[str], env: dict[str, str], log_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    with open(log_path, "wb") as log:
        process = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            yield process
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def _journal_table(invocation: dict[str, Any]) -> Table:
    """The journal, one row per entry; a run's stored result is shown on its Run command's row."""
    title = f"{invocation['id']}  {invocation['target']}  [{invocation['status']}, {invocation['attempts']} requests]"
    table = Table(title=title, title_justify="left")
    table.add_column("#", no_wrap=True)
    table.add_column("entry", no_wrap=True)
    table.add_column("touches", no_wrap=True, overflow="ellipsis", max_width=40)
    table.add_column("result", no_wrap=True, overflow="ellipsis", max_width=60)
    rows: list[list[str]] = []
    run_rows: dict[int, list[str]] = {}
    for entry in invocation.get("journal", []):
        detail = entry.get("failure") or entry.get("value", "")
        text = json.dumps(detail) if detail != "" else ""
        if entry["type"] == "RunCompletion" and entry.get("completion_id") in run_rows:
            row = run_rows[entry["completion_id"]]
            row[0] += f"-{entry['index']}"
            row[1] = "Run → stored"
            row[3] = text
            continue
        # what the entry touches: a run's name, a state key, a promise, a call's target (the admin API's names)
        touches = entry.get("name") or entry.get("state_key") or entry.get("promise_name") or ""
        if not touches and entry.get("details"):
            touches = str(entry["details"])
        row = [str(entry["index"]), entry["type"], touches, text]
        if entry["type"] == "Run":
            run_rows[entry.get("result_completion_id", -1)] = row
        rows.append(row)
    for row in rows:
        table.add_row(*row)
    return table


def _restart_mid_sleep(
    stack: contextlib.ExitStack, torpor: list[str], env: dict[str, str], workdir: Path, ingress: str, admin: str
) -> str:
    """Stop `torpor dev` while an invocation sleeps, start it again on the same data directory, and
    wait for the invocation to complete. Returns its id ("" when it did not complete as expected)."""
    sent = httpx.post(f"{ingress}/Waits/sleep/send", json=3000, timeout=30).json()
    invocation_id = sent["invocationId"]
    deadline = time.monotonic() + 10
    while httpx.get(f"{admin}/invocations/{invocation_id}", timeout=10).json()["status"] != "suspended":
        if time.monotonic() > deadline:
            console.print(f"[red]{invocation_id} did not suspend[/]")
            return ""
        time.sleep(0.05)
    console.print(f"\nsend Waits/sleep 3000 -> {invocation_id}, suspended; [bold]stopping torpor dev[/] (SIGTERM)")
    stack.close()  # stops the process (see _process)
    console.print("torpor dev stopped while the invocation sleeps; starting it again on the same data directory")
    started = time.perf_counter()
    process = stack.enter_context(_process(torpor, env, workdir / "torpor-restarted.log"))
    _wait_http(f"{admin}/health", 60, process, "torpor dev (restarted)")
    attached = httpx.get(f"{ingress}/restate/invocation/{invocation_id}/attach", timeout=60)
    ms = (time.perf_counter() - started) * 1000
    console.print(f"restarted; attach {invocation_id} -> {attached.text}  ({ms:.0f} ms after the restart began)")
    return invocation_id if attached.status_code == 200 and attached.json() == "slept 3000 ms" else ""


def run(ingress_port: int, admin_port: int, services_port: int) -> int:
    """Run the demo; returns the process exit code (0 when every step behaved as expected)."""
    workdir = Path(tempfile.mkdtemp(prefix="torpor-demo-"))
    effects = workdir / "side_effects.jsonl"
    env = {**os.environ, "TORPOR_SIDE_EFFECTS_FILE": str(effects), "PYTHONUNBUFFERED": "1"}
    ingress_port, admin_port = _pick(ingress_port, "ingress"), _pick(admin_port, "admin API")
    services_port = _pick(services_port, "example services")
    ingress, admin = f"http://127.0.0.1:{ingress_port}", f"http://127.0.0.1:{admin_port}"
    services_url = f"http://127.0.0.1:{services_port}"
    torpor = [sys.executable, "-m", "adapters.cli", "dev", "--ingress-port", str(ingress_port)]
    torpor += ["--admin-port", str(admin_port), "--data-dir", str(workdir / "data")]
    serve = [sys.executable, "-m", "examples.serve", "--port", str(services_port), "--tutorial-only"]
    failures = 0
    with (
        _process(serve, env, workdir / "services.log") as services_process,
        contextlib.ExitStack() as torpor_stack,
    ):
        torpor_process = torpor_stack.enter_context(_process(torpor, env, workdir / "torpor.log"))
        _wait_http(f"{services_url}/discover", 30, services_process, "the example services")
        _wait_http(f"{admin}/health", 60, torpor_process, "torpor dev")
        console.print(f"[bold]torpor dev[/] ingress {ingress}, admin {admin}; example services at {services_url}")
        console.print(f"logs and data in {workdir} (removed when the demo passes)\n")

        reply = httpx.post(f"{admin}/deployments", json={"uri": services_url}, timeout=30)
        reply.raise_for_status()
        deployment = reply.json()
        names = ", ".join(s["name"] for s in deployment["services"])
        console.print(f"registered deployment [bold]{deployment['id']}[/] with services {names}\n")

        calls: list[tuple[str, Any, int]] = [
            ("Greeter/greet", "World", 200),
            ("OrderService/place", {"id": "order-42", "item": "kettle", "amount": 39.5}, 200),
            ("Steps/ten_steps", "demo", 200),
            ("OrderService/place", {"id": "order-43", "amount": -1}, 400),
        ]
        invocation_ids: list[str] = []
        for path, payload, expected in calls:
            started = time.perf_counter()
            r = httpx.post(f"{ingress}/{path}", json=payload, timeout=60)
            ms = (time.perf_counter() - started) * 1000
            ok = r.status_code == expected
            failures += not ok
            mark = "[green]ok[/]" if ok else f"[red]expected {expected}[/]"
            console.print(f"POST /{path} {json.dumps(payload)} -> {r.status_code} {r.text}  ({ms:.0f} ms) {mark}")
            invocation_ids.append(r.headers.get("x-restate-id", ""))

        sent = httpx.post(f"{ingress}/restate/send/Steps/one_step", json=41, timeout=30).json()
        attached = httpx.get(f"{ingress}/restate/invocation/{sent['invocationId']}/attach", timeout=60)
        console.print(f"send Steps/one_step 41 -> {sent['status']} {sent['invocationId']}; attach -> {attached.text}")
        failures += attached.text != "42"
        invocation_ids.append(sent["invocationId"])

        started = time.perf_counter()
        slept = httpx.post(f"{ingress}/Waits/sleep", json=1000, timeout=60)
        ms = (time.perf_counter() - started) * 1000
        console.print(f"POST /Waits/sleep 1000 -> {slept.text}  ({ms:.0f} ms; suspended in between, no request)")
        failures += slept.status_code != 200
        invocation_ids.append(slept.headers.get("x-restate-id", ""))

        counts = [httpx.post(f"{ingress}/Counter/demo/add", json=n, timeout=60).json() for n in (1, 2, 3)]
        state = httpx.get(f"{admin}/services/Counter/state/demo", timeout=10).json()
        console.print(f"POST /Counter/demo/add 1, 2, 3 -> {counts}; state of key 'demo': {state['state']}")
        failures += counts != [1, 3, 6]

        run = httpx.post(f"{ingress}/Signup/demo-wf/run/send", json="ann@example.com", timeout=30).json()
        confirmed = httpx.post(f"{ingress}/Signup/demo-wf/confirm", json="C-42", timeout=30).text
        result = httpx.get(f"{ingress}/restate/workflow/Signup/demo-wf/attach", timeout=60)
        console.print(f"workflow Signup/demo-wf: run {run['status']}, confirm -> {confirmed}, attach -> {result.text}")
        failures += result.status_code != 200
        invocation_ids.append(run["invocationId"])

        restarted_id = _restart_mid_sleep(torpor_stack, torpor, env, workdir, ingress, admin)
        failures += not restarted_id
        invocation_ids.append(restarted_id)

        console.print()
        for invocation_id in invocation_ids:
            if invocation_id:
                described = httpx.get(f"{admin}/invocations/{invocation_id}", timeout=10).json()
                console.print(_journal_table(described))
        steps = [e for e in read_side_effects(effects) if e.get("service") == "Steps" and e["handler"] == "ten_steps"]
        console.print(f"ctx.run closures of Steps/ten_steps executed: {len(steps)} (each step once)")
        failures += len(steps) != 10
    if failures:
        console.print(f"\n[bold red]{failures} check(s) failed[/]; logs and data kept in {workdir}")
        return 1
    shutil.rmtree(workdir, ignore_errors=True)  # a run that passed leaves nothing behind
    console.print("\n[bold green]demo finished[/]")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ingress-port", type=int, default=8080)
    parser.add_argument("--admin-port", type=int, default=9070)
    parser.add_argument("--services-port", type=int, default=9080)
    args = parser.parse_args(argv)
    return run(args.ingress_port, args.admin_port, args.services_port)


if __name__ == "__main__":
    raise SystemExit(main())
