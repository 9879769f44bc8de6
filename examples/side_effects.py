"""Record the side effects of ``ctx.run`` closures so tests can count them.

A durable execution engine promises that a journaled step runs (at least) once and is then
replayed from the journal instead of being executed again. To check that from outside the
handler process, every ``ctx.run`` closure in ``examples.orders`` and ``examples.steps`` calls
:func:`record_side_effect`, which appends one JSON line to the file named by the environment
variable ``TORPOR_SIDE_EFFECTS_FILE`` (nothing is recorded when the variable is unset)::

    {"service": "Steps", "handler": "one_step", "invocation_id": "inv_…", "step": "add-one",
     "pid": 4242, "t_ms": 1718000000000}

Each line is written with a single ``os.write`` on a descriptor opened with ``O_APPEND``, so
concurrent writers (several handler processes, several requests) do not interleave lines.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

SIDE_EFFECTS_ENV = "TORPOR_SIDE_EFFECTS_FILE"
"""Name of the environment variable holding the path of the side-effects file."""


def side_effects_path() -> str | None:
    """Return the side-effects file configured for this process.

    Returns:
        The value of ``TORPOR_SIDE_EFFECTS_FILE``, or ``None`` when it is unset or empty.
    """
    return os.environ.get(SIDE_EFFECTS_ENV) or None


def record_side_effect(
    service: str, handler: str, invocation_id: str, step: str, **extra: Any
) -> dict[str, Any] | None:
    """Append one side-effect record to the configured file.

    Call this from inside a ``ctx.run`` closure: the record then marks one real execution of the
    step (replays do not run the closure, so they leave no record).

    Args:
        service: Restate service name, e.g. ``"OrderService"``.
        handler: Handler name, e.g. ``"place"``.
        invocation_id: The invocation id, ``ctx.request().id``.
        step: The ``ctx.run`` name, e.g. ``"charge payment"``.
        **extra: More JSON-serialisable fields for the record (e.g. an awakeable id).

    Returns:
        The record that was written, or ``None`` when ``TORPOR_SIDE_EFFECTS_FILE`` is unset.
    """
    path = side_effects_path()
    if path is None:
        return None
    record = {
        "service": service,
        "handler": handler,
        "invocation_id": invocation_id,
        "step": step,
        "pid": os.getpid(),
        "t_ms": int(time.time() * 1000),
        **extra,
    }
    line = (json.dumps(record, separators=(",", ":")) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)  # unbuffered, one write on an O_APPEND descriptor: the line lands whole
    finally:
        os.close(fd)
    return record


def read_side_effects(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read every record from a side-effects file.

    A missing file means that nothing was recorded yet. A last line without its newline (a
    write still under way) is ignored.

    Args:
        path: The file that ``TORPOR_SIDE_EFFECTS_FILE`` pointed at.

    Returns:
        The records in file order, each a dict with the keys ``service``, ``handler``,
        ``invocation_id``, ``step``, ``pid`` and ``t_ms``.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    lines = text.split("\n")
    # ``lines[-1]`` is "" when the file ends with a newline, else an incomplete record.
    return [json.loads(line) for line in lines[:-1] if line.strip()]
