"""Failures as stored and as carried on the wire: `{"code", "message", "metadata"}` <-> `Failure`.

A terminal failure (an invocation's, a callee's result, a durable promise's) is stored as a JSON
object `{"code": int, "message": str, "metadata": {str: str}}`; `metadata` is left out when empty,
so records written before it existed read the same. On the wire it is the protocol's `Failure`
message, whose `metadata` (key/value pairs, Restate service protocol V6+) the SDKs fill from e.g.
`TerminalError(..., metadata={...})`.
"""

from __future__ import annotations

from collections.abc import Mapping

from control_plane.protocol import protocol_pb2 as pb

MAX_STORED_CHARS = 4096
"""Longest failure text (message, stack trace, command name) kept on the invocation item (400 KB in all)."""
MAX_METADATA_CHARS = 16 * 1024
"""Most characters of failure metadata (keys and values together) kept with a stored failure."""


def clip(text: str, limit: int = MAX_STORED_CHARS) -> str:
    """`text`, cut to `limit` characters with a visible marker saying how long it was."""
    if len(text) <= limit:
        return text
    marker = f"… [truncated: {len(text)} characters in all]"
    return text[: max(0, limit - len(marker))] + marker


MAX_STACKTRACE_BYTES = 4096
"""Largest stack trace kept with an invocation's last failure (bytes of UTF-8, marker included)."""
STACKTRACE_HEAD_BYTES = 1024
"""Of a longer trace, the first this many bytes stay, the rest of the room goes to its end."""


def clip_stacktrace(trace: str, limit: int = MAX_STACKTRACE_BYTES) -> str:
    """`trace`, at most `limit` bytes of UTF-8: a longer one loses its middle, replaced by a line
    saying how many bytes were cut. The start (a JavaScript or Java trace's message and innermost
    frames) and the end (a Python trace's innermost frames and its exception line) stay: the first
    `STACKTRACE_HEAD_BYTES`, and the last bytes that fill the rest. Characters cut in two at either
    edge are dropped whole."""
    data = trace.encode("utf-8", "replace")
    if len(data) <= limit:
        return trace
    marker_room = 64
    head_size = min(STACKTRACE_HEAD_BYTES, max(0, (limit - marker_room) // 4))
    tail_size = max(0, limit - marker_room - head_size)
    cut = len(data) - head_size - tail_size
    head = data[:head_size].decode("utf-8", "ignore")
    tail = data[len(data) - tail_size :].decode("utf-8", "ignore") if tail_size else ""
    return f"{head}\n… [{cut} bytes of the stack trace cut] …\n{tail}"


def stored_failure(failure: pb.Failure) -> dict[str, object]:
    """The stored form of a wire `Failure`: code (0 means 500), message and metadata (if any).

    The message is cut to `MAX_STORED_CHARS` (with a marker saying how long it was), so a failure
    fits on the invocation item beside a large input; metadata beyond `MAX_METADATA_CHARS` in all is
    dropped entry by entry (the first ones stay).
    """
    out: dict[str, object] = {"code": failure.code or 500, "message": clip(failure.message)}
    metadata: dict[str, str] = {}
    size = 0
    for entry in failure.metadata:
        size += len(entry.key) + len(entry.value)
        if size > MAX_METADATA_CHARS:
            break
        metadata[entry.key] = entry.value
    if metadata:
        out["metadata"] = metadata
    return out


def metadata_of(stored: Mapping[str, object]) -> dict[str, str]:
    """The metadata of a stored failure (`{}` for one stored without it)."""
    metadata = stored.get("metadata")
    if not isinstance(metadata, Mapping):
        return {}
    return {str(k): str(v) for k, v in metadata.items()}


def wire_failure(stored: Mapping[str, object]) -> pb.Failure:
    """The wire `Failure` of a stored failure, metadata included."""
    failure = pb.Failure(code=int(str(stored.get("code", 500))), message=str(stored.get("message", "")))
    for key, value in metadata_of(stored).items():
        failure.metadata.add(key=key, value=value)
    return failure
