"""Run the example Restate services (``examples``) in a subprocess for tests.

The services run in their own process — ``python -m examples.serve`` — so that a test can kill
them (a crashed deployment), restart them on the same port, or point several control planes at
them, exactly as with a real deployment::

    with serve_examples(side_effects_file=tmp_path / "effects.jsonl") as (base_url, process):
        httpx.get(f"{base_url}/discover", headers={"accept": MANIFEST_V3})
        process.kill()  # the deployment goes away

The process's stderr (Hypercorn and SDK logs) is inherited, so pytest shows it with a failing
test.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parents[2]
"""The repository root: the examples' subprocess runs there, with it on ``PYTHONPATH``."""

MANIFEST_V3 = "application/vnd.restate.endpointmanifest.v3+json"
MANIFEST_V4 = "application/vnd.restate.endpointmanifest.v4+json"

_READY_LINE = re.compile(r"serving examples on (https?://\S+)")


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port that is free on ``host`` right now.

    The port is only reserved until this returns; prefer letting a server bind port 0 and
    report its port when you can.

    Args:
        host: The address to probe.

    Returns:
        A port number.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _pump_stdout(process: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
    """Forward the child's stdout lines to a queue (``None`` at EOF) so it never blocks."""
    assert process.stdout is not None
    for line in process.stdout:
        lines.put(line)
    lines.put(None)


def stop_process(process: subprocess.Popen[str], timeout: float = 10.0) -> int | None:
    """Stop a server process: SIGTERM, then SIGKILL if it does not exit within ``timeout``.

    Args:
        process: The process to stop; one that already exited is left alone.
        timeout: Seconds to wait after SIGTERM.

    Returns:
        The process's exit status.
    """
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


@contextlib.contextmanager
def serve_examples(
    port: int = 0,
    max_protocol_version: int | None = None,
    side_effects_file: str | os.PathLike[str] | None = None,
    *,
    host: str = "127.0.0.1",
    startup_timeout: float = 30.0,
    env: dict[str, str] | None = None,
    http2: bool = False,
    tls: tuple[str, str] | None = None,
    max_concurrent_streams: int | None = None,
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """Run ``python -m examples.serve`` in a subprocess until the block exits.

    The server binds ``port`` on ``host`` (``0``: a free port, which the child reports on
    stdout). The context is entered only once ``GET /discover`` answers ``200``; on exit the
    process gets SIGTERM (SIGKILL after 10 s) unless it already exited — tests may kill it.

    Args:
        port: Port to bind; ``0`` picks a free one. A fixed port lets a test restart the
            services at the same URL after killing them.
        max_protocol_version: Passed as ``--max-protocol-version`` (lowers the advertised
            maximum service-protocol version, e.g. to 5 or 6).
        side_effects_file: Becomes ``TORPOR_SIDE_EFFECTS_FILE`` in the child, where every
            ``ctx.run`` closure appends a line (read it with
            ``examples.side_effects.read_side_effects``). ``None`` unsets the variable.
        host: Loopback address to bind.
        startup_timeout: Seconds to wait for the server to answer discovery.
        env: Extra environment variables for the child.
        http2: Passed as ``--http2``: also serve HTTP/2 with prior knowledge (bidirectional mode).
        tls: ``(certfile, keyfile)``, PEM: serve TLS (``https://``); discovery is polled trusting
            ``certfile``.
        max_concurrent_streams: Passed as ``--max-concurrent-streams`` (HTTP/2 streams per connection).

    Yields:
        ``(base_url, process)``: e.g. ``("http://127.0.0.1:41234", <Popen>)``.

    Raises:
        RuntimeError: If the server exits or does not answer discovery before the deadline.
    """
    child_env = dict(os.environ)
    child_env.pop("AWS_LAMBDA_FUNCTION_NAME", None)  # the SDK would build a Lambda handler
    child_env.pop("TORPOR_SIDE_EFFECTS_FILE", None)
    pythonpath = [str(REPO_ROOT), *filter(None, child_env.get("PYTHONPATH", "").split(os.pathsep))]
    child_env["PYTHONPATH"] = os.pathsep.join(pythonpath)
    child_env["PYTHONUNBUFFERED"] = "1"
    if side_effects_file is not None:
        child_env["TORPOR_SIDE_EFFECTS_FILE"] = os.fspath(side_effects_file)
    if env:
        child_env.update(env)

    command = [sys.executable, "-m", "examples.serve", "--host", host, "--port", str(port)]
    if max_protocol_version is not None:
        command += ["--max-protocol-version", str(max_protocol_version)]
    if http2:
        command.append("--http2")
    if tls is not None:
        command += ["--certfile", tls[0], "--keyfile", tls[1]]
    if max_concurrent_streams is not None:
        command += ["--max-concurrent-streams", str(max_concurrent_streams)]

    process = subprocess.Popen(
        command,
        cwd=REPO_ROOT,
        env=child_env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()
    pump = threading.Thread(target=_pump_stdout, args=(process, lines), name="examples-stdout", daemon=True)
    pump.start()
    try:
        verify = ssl.create_default_context(cafile=tls[0]) if tls is not None else True
        base_url = _wait_until_ready(process, lines, time.monotonic() + startup_timeout, verify)
        yield base_url, process
    finally:
        stop_process(process)
        pump.join(timeout=5)
        if process.stdout is not None:
            process.stdout.close()


def _wait_until_ready(
    process: subprocess.Popen[str],
    lines: queue.Queue[str | None],
    deadline: float,
    verify: ssl.SSLContext | bool = True,
) -> str:
    """Wait for the ready line, then poll ``GET /discover`` until it answers ``200``.

    Args:
        process: The server process.
        lines: Its stdout lines, ``None`` at EOF.
        deadline: ``time.monotonic()`` value to give up at.
        verify: httpx's ``verify`` for an ``https://`` server.

    Returns:
        The base URL the server reported.

    Raises:
        RuntimeError: If the process exits first or the deadline passes.
    """
    seen: list[str] = []
    base_url: str | None = None
    while base_url is None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise RuntimeError(f"examples.serve printed no ready line in time; stdout so far: {seen!r}")
        try:
            line = lines.get(timeout=min(remaining, 0.5))
        except queue.Empty:
            continue
        if line is None:
            code = process.wait()
            raise RuntimeError(
                f"examples.serve exited with status {code} before it was ready (stderr above); stdout: {seen!r}"
            )
        seen.append(line)
        match = _READY_LINE.search(line)
        if match:
            base_url = match.group(1)

    headers = {"accept": MANIFEST_V3}
    last_error = "no attempt"
    delay = 0.01
    with httpx.Client(timeout=2.0, verify=verify) as client:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"examples.serve exited with status {process.returncode} before answering discovery")
            try:
                response = client.get(f"{base_url}/discover", headers=headers)
                if response.status_code == 200:
                    return base_url
                last_error = f"status {response.status_code}: {response.text[:200]}"
            except httpx.TransportError as error:
                last_error = repr(error)
            if time.monotonic() >= deadline:
                raise RuntimeError(f"examples.serve at {base_url} did not answer discovery in time: {last_error}")
            time.sleep(delay)  # polling back-off, bounded by the deadline
            delay = min(delay * 2, 0.2)
