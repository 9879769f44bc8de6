"""`torpor dev --workers N`: N orchestrator processes over one store, on the same two ports.

This process (the parent) binds the ingress and admin sockets once, then forks N children before
it starts any thread. Each child runs a whole control plane (`DevServer` with `listen_sockets`) on
the inherited listening sockets: the kernel hands each new connection to whichever process accepts
it first, so connections spread over the processes. The parent only supervises:

- children start one after the other, each once the one before answers (the first creates the
  store's schema alone; a store that cannot be opened fails the start with the child's error);
- a child that dies is started again (after a second if it ran less than `_QUICK_DEATH_S`); its
  start-up sweep re-arms every stored timer and every unfinished invocation, including the ones
  whose timers lived in the dead child's scheduler (`LocalScheduler` keeps timers in memory);
- SIGINT or SIGTERM stops every child (SIGTERM, each stops cleanly as `torpor dev` does), SIGKILL
  for one still running after `_STOP_TIMEOUT_S`; a parent killed outright takes them with it (on
  Linux each child asks for SIGTERM when its parent dies).

Any process may advance any invocation: the store's lease and conditional writes let one attempt
of an invocation run at a time wherever the wake-up arrived, as with two `torpor dev` on one data
directory. Both stores processes can share qualify: SQLite in a data directory (SQLite's file
locks serialise writers) and DynamoDB at an endpoint; a store in memory or on the embedded moto
lives in one process and is refused (`shared_store_refusal`), as is the local Lambda emulator.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import socket
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import FrameType

from adapters.local.dev import DEFAULT_STORE, DevServer, DevServerError, listen_socket, serve_until_signalled

log = logging.getLogger("torpor.dev")

_START_TIMEOUT_S = 120.0  # how long one child may take to answer (store, sweep, HTTP servers)
_STOP_TIMEOUT_S = 30.0  # how long the children get to stop after SIGTERM before SIGKILL
_QUICK_DEATH_S = 5.0  # a child that dies sooner than this after starting is restarted after a pause
_RESTART_PAUSE_S = 1.0
_POLL_S = 0.2  # how often the parent looks for children that died


def shared_store_refusal(
    workers: int,
    dynamodb_endpoint: str | None,
    data_dir: str | None,
    in_memory: bool,
    moto: bool,
    lambda_functions: Mapping[str, str] | None,
) -> str | None:
    """Why `workers` processes cannot run with these options (one line naming the fix), or None.

    Processes share a SQLite store in a data directory or a DynamoDB endpoint; a store in memory or
    on the embedded moto (also the default store when it is "moto" and none is given) lives in one
    process, and the local Lambda emulator is started by one `torpor dev` process.
    """
    if workers <= 1:
        return None
    if in_memory or (dynamodb_endpoint is None and data_dir is None and not moto and DEFAULT_STORE == "sqlite"):
        return (
            f"--workers {workers} needs a store the processes share: --data-dir DIR (SQLite) or "
            "--dynamodb-endpoint URL, not --in-memory (or use --workers 1)"
        )
    if moto or (dynamodb_endpoint is None and data_dir is None):
        return (
            f"--workers {workers} needs a store the processes share: --data-dir DIR (SQLite) or "
            "--dynamodb-endpoint URL (e.g. a moto server or dynalite you run), not the embedded --moto "
            "(or use --workers 1)"
        )
    if lambda_functions:
        return (
            f"--workers {workers} does not run the local Lambda emulator (--lambda): use --workers 1 with "
            "--lambda, or run the emulator on its own (python -m adapters.local.lambda_emulator)"
        )
    return None


@dataclass
class _Child:
    """One worker process: its index (0-based), pid, when it started, and its readiness pipe."""

    index: int
    pid: int
    started_at: float
    ready_fd: int | None  # read end: a byte once it serves, EOF if it died first; None once read


def run_workers(
    count: int,
    host: str,
    ingress_port: int,
    admin_port: int,
    make_server: Callable[[tuple[socket.socket, socket.socket]], DevServer],
) -> None:
    """Bind both ports, run `count` child processes each serving `make_server(sockets)`, supervise
    them until SIGINT or SIGTERM, then stop them all. Call it before any thread starts (it forks).

    Args:
        count: How many processes (at least 1).
        host: Address both sockets listen on.
        ingress_port: Ingress port (0: a free port, the same for every process).
        admin_port: Admin port (0: a free port).
        make_server: Builds a child's `DevServer` on the `(ingress, admin)` listening sockets.

    Raises:
        DevServerError: A port is taken, or a child exited (or did not answer within
            `_START_TIMEOUT_S`) at start-up: its own error is logged above.
    """
    sockets = (
        listen_socket(host, ingress_port, "ingress", "--ingress-port"),
        listen_socket(host, admin_port, "admin", "--admin-port"),
    )
    stopping: list[int] = []

    def request_stop(signum: int, frame: FrameType | None) -> None:
        if not stopping:
            log.info("torpor dev: %s received, stopping %d workers", signal.Signals(signum).name, count)
        stopping.append(signum)

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    children: dict[int, _Child] = {}
    try:
        for index in range(count):  # one after the other: the first alone creates the schema
            child = _fork(index, sockets, make_server)
            children[child.pid] = child
            if not _wait_ready(child, stopping):
                if stopping:
                    return
                raise DevServerError(f"torpor dev: worker {index} did not start (its error is above)")
        log.info(
            "torpor dev: %d workers (pids %s) serve the ingress and admin ports",
            count,
            ", ".join(str(pid) for pid in children),
        )
        _supervise(children, sockets, make_server, stopping)
    finally:
        _stop_all(children)
        for sock in sockets:
            sock.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    log.info("torpor dev: stopped")


def _fork(
    index: int,
    sockets: tuple[socket.socket, socket.socket],
    make_server: Callable[[tuple[socket.socket, socket.socket]], DevServer],
) -> _Child:
    """Fork worker `index`: the child serves until signalled, then exits (never returns here)."""
    read_fd, write_fd = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    parent = os.getpid()
    pid = os.fork()
    if pid:
        os.close(write_fd)
        return _Child(index, pid, time.monotonic(), read_fd)
    os.close(read_fd)
    code = 1
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        _die_with(parent)
        server = make_server(sockets)
        log.info("torpor dev: worker %d is pid %d", index, os.getpid())
        serve_until_signalled(server, started=lambda: _say_ready(write_fd))
        code = 0
    except DevServerError as exc:
        log.error("torpor dev: worker %d: %s", index, exc.message)
    except KeyboardInterrupt:
        code = 130
    except BaseException:
        log.exception("torpor dev: worker %d failed", index)
    finally:
        logging.shutdown()
        os._exit(code)  # never back into the parent's code (click, atexit handlers)


def _say_ready(write_fd: int) -> None:
    """Write the readiness byte and close the pipe (a restarted child's parent is not listening)."""
    with contextlib.suppress(OSError):
        os.write(write_fd, b"1")
    os.close(write_fd)


def _die_with(parent: int) -> None:
    """Have this process get SIGTERM when `parent` dies, even by SIGKILL (Linux's
    `PR_SET_PDEATHSIG`; elsewhere nothing), so no worker outlives its supervisor."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
    if os.getppid() != parent:  # it died before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)


def _wait_ready(child: _Child, stopping: list[int]) -> bool:
    """Wait until `child` serves (True) or died, did not answer within `_START_TIMEOUT_S`, or a stop
    was asked for (False)."""
    assert child.ready_fd is not None
    deadline = time.monotonic() + _START_TIMEOUT_S
    try:
        while not stopping and time.monotonic() < deadline:
            readable, _, _ = select.select([child.ready_fd], [], [], _POLL_S)
            if readable:
                return os.read(child.ready_fd, 1) == b"1"
        return False
    finally:
        os.close(child.ready_fd)
        child.ready_fd = None


def _supervise(
    children: dict[int, _Child],
    sockets: tuple[socket.socket, socket.socket],
    make_server: Callable[[tuple[socket.socket, socket.socket]], DevServer],
    stopping: list[int],
) -> None:
    """Until a stop is asked for: start again each child that died (in its place, same index)."""
    while not stopping:
        time.sleep(_POLL_S)
        while not stopping:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            dead = children.pop(pid, None)
            if dead is None:
                continue
            ran_s = time.monotonic() - dead.started_at
            log.warning(
                "torpor dev: worker %d (pid %d) %s after %.0f s; starting it again",
                dead.index,
                pid,
                _describe_exit(status),
                ran_s,
            )
            if ran_s < _QUICK_DEATH_S:
                time.sleep(_RESTART_PAUSE_S)
            if stopping:
                break
            child = _fork(dead.index, sockets, make_server)
            if child.ready_fd is not None:  # not waited for: the others serve meanwhile
                os.close(child.ready_fd)
                child.ready_fd = None
            children[child.pid] = child


def _describe_exit(status: int) -> str:
    """`exited with status 1` or `was killed by SIGKILL`, from a `waitpid` status."""
    if os.WIFSIGNALED(status):
        return f"was killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exited with status {os.waitstatus_to_exitcode(status)}"


def _stop_all(children: dict[int, _Child]) -> None:
    """SIGTERM every child, wait for them (SIGKILL after `_STOP_TIMEOUT_S`), and reap them."""
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + _STOP_TIMEOUT_S
    while children:
        for pid in list(children):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                child = children.pop(pid)
                if child.ready_fd is not None:
                    os.close(child.ready_fd)
        if children and time.monotonic() > deadline:
            for pid in children:
                log.warning("torpor dev: worker pid %d did not stop within %.0f s: SIGKILL", pid, _STOP_TIMEOUT_S)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + _STOP_TIMEOUT_S
        time.sleep(0.05)
