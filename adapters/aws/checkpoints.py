"""In-process checkpoints for a Lambda-hosted restate-sdk app: one Invoke per suspension, not per `ctx.run`.

In request/response mode every awaited `ctx.run` ends the handler's request: the SDK proposes the
result, suspends, and Torpor stores it and invokes the function again, which replays the journal.
This entry point drives the user's `restate.app(...)` ASGI app in streaming mode inside the function
instead, the way restate-server drives a deployment over a bidirectional HTTP/2 stream:

1. the request body (Start, the journal, the notifications to deliver) goes in as the first chunk of
   an ASGI request body that stays open (`more_body=True`);
2. each `ProposeRunCompletion` the SDK sends is committed straight to the journal here, with the
   commands before it, as one conditional `Store.append_batch` at the journal's length (the write
   that makes a commit happen at most once, as the orchestrator's own commit of run results),
   fenced by the attempt's epoch and doorbell: the first commit, and then one commit a second at
   most (`FENCE_EVERY_MS`), is preceded by a strongly consistent read of both on the invocation's
   record (`InvocationStore.read_fence`; a read unit, not a write unit), so a function whose
   attempt lost its lease or whose invocation was killed, or for which a notification such as a
   cancel arrived, stops committing within a second and lets the SDK suspend (answer header
   `x-torpor-fenced`; the orchestrator re-reads the invocation and delivers what arrived);
3. the commit is acked on the open body: a RunCompletionNotification (service protocol V5/V6), or a
   ProposeRunCompletionAck when the proposal carries the REQUESTED_ACK flag (V7); the handler goes on;
4. when the SDK ends (End, Suspension, Error), or waits for something that is not there (a sleep, a
   call, an awakeable: no `ctx.run` executing, nothing new sent, nothing to ack), the body is closed,
   so the SDK suspends as in request/response mode; the function returns the frames it did not
   commit, with `x-torpor-journal-length: N` (the journal's length after its commits). The
   orchestrator re-reads the journal and carries on exactly as after a request/response attempt.

Supported SDK: restate-sdk (Python) `SUPPORTED_SDK` (>=1.2,<1.4), each of `TESTED_SDK_VERSIONS`
driven end to end by tests/integration/test_checkpoints_sdk_versions.py. The SDK offers no public hook
for the two things this needs, so it relies on these private names and behaviours of
`restate/aws_lambda.py`, `server.py` and `server_context.py` (identical in 1.2.0 and 1.3.0):

- finding the ASGI app (`asgi_app_of`): on Lambda (`AWS_LAMBDA_FUNCTION_NAME` set) `restate.app(...)`
  returns `wrap_asgi_as_lambda_handler(asgi_app).<locals>.lambda_handler`, read here through its
  closure cell `asgi_app`; elsewhere it returns `asgi_app(endpoint).<locals>.app` itself (a function
  named `app` of 3 arguments). Neither object exposes the app, and `Endpoint.app()` wraps it the same way;
- knowing a run is in flight (`_runs_executing`): a `ctx.run` closure executes in a task whose coroutine
  is `create_poll_or_cancel_coroutine.<locals>.wrapper` (`_RUN_TASK`; a sync closure awaits the
  loop's default executor from it). The SDK's own signal, `restate.run_completed`, goes to its private
  `ReceiveChannel`; on the wire the SDK sends a Run command before the closure starts but nothing while
  it executes (1.3.0 sends AwaitingOn after the proposal, `executing_side_effects` false), and a Run
  command also precedes a run that is never awaited, so the frames alone cannot tell;
- streaming: `process_invocation_to_completion` reads the body until the Start and the known entries are
  there, then runs the handler; `create_poll_or_cancel_coroutine` reads more body
  (`DoProgressWaitExternalProgress`) while a run's result is awaited, and the VM suspends only once the
  input is closed; `leave()` waits for the input to close before it ends the response.

Another SDK version is refused when this module is imported (`UnsupportedSDK`, one line, no stack
trace: on Lambda an `ImportError` is reported as `Runtime.ImportModuleError`), unless
`TORPOR_ALLOW_UNTESTED_SDK=1`: then, should the run task be named differently, the body closes as soon
as nothing else happens, and a run that was executing is proposed and committed by the orchestrator, as
in request/response mode: one Invoke more, never a step run twice; should the app not be found,
`load_app` says so.

Only what the orchestrator's commit would do nothing more with is committed here: Run commands, run
results and custom entries (and, in the first commit, the notifications the request delivered). Any
other new command (state writes, calls, one-way calls, sleeps, awakeables, ...) has effects the
orchestrator carries out after its commit, so a run proposed after one is not committed here: the
body closes, the SDK suspends, and the orchestrator commits and applies them.

Configuration (environment of the function):

- `TORPOR_APP`: `module:attr` of the user's `restate.app(...)` (for `handler`);
- `TORPOR_ALLOW_UNTESTED_SDK=1`: run with a restate-sdk outside `SUPPORTED_SDK` (a warning, not an error);
- the store to commit to: `TORPOR_TABLE` (DynamoDB table, in `AWS_REGION`; `TORPOR_DYNAMODB_ENDPOINT`
  for another endpoint, e.g. moto) or `TORPOR_SQLITE` (the dev store's SQLite file). Without either,
  the function answers in request/response mode, as the SDK's own Lambda handler does.

What the orchestrator sends (headers of the invocation event, every attempt; see
`control_plane.attempt.CHECKPOINT_HEADERS`): `x-torpor-epoch`, `x-torpor-doorbell` (the
invocation's doorbell when the orchestrator read it), `x-torpor-journal-length` (the
stored journal's length; entries after it in the body are notifications delivered with this
attempt) and `x-torpor-deadline-ms` (epoch ms after which nothing is committed here and the SDK is
let suspend: four fifths into the attempt's timeout, which the lease covers; or 2 s before the
function's own timeout, if that comes first). A request without them (discovery, an older
orchestrator) goes to the SDK unchanged.
"""

from __future__ import annotations

import asyncio
import base64
import importlib
import importlib.metadata
import logging
import os
import re
import struct
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from control_plane.attempt import (
    DEADLINE_HEADER,
    DOORBELL_HEADER,
    EPOCH_HEADER,
    FENCED_HEADER,
    JOURNAL_LENGTH_HEADER,
)
from control_plane.ports import MAX_ITEM_BYTES, InvocationStore, JournalBatch, Store, StoreConflict
from control_plane.protocol import Frame, MessageType, encode_frames, frame, is_custom
from control_plane.protocol import protocol_pb2 as pb

log = logging.getLogger("torpor.checkpoints")

COMMITTED_HEADER = JOURNAL_LENGTH_HEADER
"""Response header: the journal's length after the commits made in the function (absent: none)."""
COMMIT_TIME_HEADER = "x-torpor-commit-ms"
"""Response header, for measurement only: milliseconds the function spent committing (fence + batch)."""

_LIMIT_BYTES = MAX_ITEM_BYTES - 16 * 1024  # what one journal item holds, as the orchestrator's commit
_HEADER = struct.Struct(">HHI")
_ACK_FLAG = 0x8000
_OWN_TIMEOUT_MARGIN_MS = 2_000  # commits stop this long before the function's timeout
FENCE_EVERY_MS = 1_000
"""After the first commit of an Invoke, the epoch and doorbell are checked again (one more read)
before a commit only once this long has passed since the last check (ms): a kill or a cancel reaches
a function that runs many quick steps within about this long, without a second request per step."""
_SETTLE_ROUNDS = 50  # event-loop turns with nothing happening before the SDK counts as waiting
_RUN_TASK = "create_poll_or_cancel_coroutine.<locals>.wrapper"  # private to restate-sdk (module doc)
_ENDINGS = frozenset({MessageType.End, MessageType.Suspension, MessageType.Error})

SUPPORTED_SDK = ">=1.2,<1.4"
"""The restate-sdk versions this wrapper runs with (pip specifier; pyproject.toml's `checkpoints` extra)."""
_SUPPORTED_SDK_RANGE = ((1, 2), (1, 4))  # SUPPORTED_SDK as (major, minor) bounds: low included, high not
TESTED_SDK_VERSIONS = ("1.2.0", "1.3.0")
"""The releases tests/integration/test_checkpoints_sdk_versions.py drives the wrapper with."""
ALLOW_UNTESTED_SDK_ENV = "TORPOR_ALLOW_UNTESTED_SDK"

ASGIApp = Callable[..., Any]


class UnsupportedSDK(ImportError):
    """The installed restate-sdk is outside `SUPPORTED_SDK`. An `ImportError`, so that the Lambda
    runtime reports it as `Runtime.ImportModuleError` with this one-line message and no stack trace."""


def check_sdk_version(version: str | None = None, env: Mapping[str, str] | None = None) -> str | None:
    """Refuse a restate-sdk outside `SUPPORTED_SDK` (the private names this module relies on are known
    for those releases only; module doc).

    Args:
        version: The version to check; None: the installed distribution `restate-sdk`'s.
        env: The environment (`TORPOR_ALLOW_UNTESTED_SDK=1` turns the error into a warning); None: os.environ.

    Returns:
        The version checked, or None if restate-sdk is not installed (nothing to check: importing the
        user's app fails on its own).

    Raises:
        UnsupportedSDK: a version outside `SUPPORTED_SDK`, or one that is not `MAJOR.MINOR...`.
    """
    env = os.environ if env is None else env
    if version is None:
        try:
            version = importlib.metadata.version("restate-sdk")
        except importlib.metadata.PackageNotFoundError:
            return None
    match = re.match(r"(\d+)\.(\d+)", version)
    low, high = _SUPPORTED_SDK_RANGE
    if match is not None and low <= (int(match[1]), int(match[2])) < high:
        return version
    message = (
        f"restate-sdk {version} is installed, but Torpor's Lambda checkpoint wrapper (adapters.aws.checkpoints) "
        f"supports restate-sdk{SUPPORTED_SDK} (tested: {', '.join(TESTED_SDK_VERSIONS)}): install "
        f"'restate-sdk[serde]{SUPPORTED_SDK}', or set {ALLOW_UNTESTED_SDK_ENV}=1 to try this one"
    )
    if env.get(ALLOW_UNTESTED_SDK_ENV, "") not in ("", "0"):
        log.warning("%s (%s is set: going on)", message.partition(": install")[0], ALLOW_UNTESTED_SDK_ENV)
        return version
    raise UnsupportedSDK(message)


def asgi_app_of(target: object) -> ASGIApp | None:
    """The ASGI app behind `target`: `restate.app(...)`'s ASGI app itself, or the Lambda handler it
    returns when `AWS_LAMBDA_FUNCTION_NAME` is set (restate-sdk `aws_lambda.wrap_asgi_as_lambda_handler`
    keeps the app in its closure as `asgi_app`). None if `target` is neither."""
    code = getattr(target, "__code__", None)
    closure = getattr(target, "__closure__", None)
    if code is not None and closure and "asgi_app" in code.co_freevars:
        return closure[code.co_freevars.index("asgi_app")].cell_contents  # type: ignore[no-any-return]
    if code is not None and code.co_argcount == 3 and getattr(target, "__name__", "") == "app":
        return target  # type: ignore[return-value]
    return None


def store_from_environment(env: Mapping[str, str] | None = None) -> Store | None:
    """The store named by `TORPOR_TABLE` (+ `TORPOR_DYNAMODB_ENDPOINT`, `AWS_REGION`) or
    `TORPOR_SQLITE`; None if neither is set (the function then answers request/response)."""
    env = os.environ if env is None else env
    if env.get("TORPOR_SQLITE"):
        from adapters.local.sqlite_store import SQLiteStore

        return SQLiteStore(env["TORPOR_SQLITE"])
    if env.get("TORPOR_TABLE"):
        from adapters.aws.dynamodb_store import DynamoDBStore

        region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1"
        from adapters.aws.blobs import blob_store_from_env

        return DynamoDBStore(
            env["TORPOR_TABLE"],
            region=region,
            endpoint_url=env.get("TORPOR_DYNAMODB_ENDPOINT"),
            blobs=blob_store_from_env(env, region),
        )
    return None


@dataclass
class _Attempt:
    """One invocation event's state: what the SDK sent, what is committed, what to ack."""

    invocation_id: str
    epoch: int
    length: int  # the stored journal's length: the next commit's start index
    deadline_ms: int
    journal_runs: set[int]  # Run completion ids of the journal sent, without a completion
    delivered: list[Frame]  # notifications sent after the stored journal: committed first
    frames: list[Frame] = field(default_factory=list)  # sent by the SDK, not committed
    buffer: bytearray = field(default_factory=bytearray)
    doorbell: int | None = None  # the doorbell the orchestrator read (None: an older orchestrator)
    committed: bool = False
    fenced_at_ms: int = 0  # when the epoch and doorbell were last checked
    fenced: bool = False  # a check failed: nothing more is committed in this Invoke
    commit_s: float = 0.0  # time spent in the store's writes
    ended: bool = False
    sent_count: int = 0  # frames the SDK sent so far (to tell whether anything happened)


class Checkpoints:
    """A Lambda handler (`handler(event, context)`) driving `app` with in-process checkpoints.

    Args:
        app: The user's restate-sdk ASGI app (`asgi_app_of(restate.app(...))`).
        store: Where commits go (journal batches and the record: `InvocationStore`); None: every
            request goes to the SDK in request/response mode.
        now_ms: The wall clock, epoch milliseconds.
    """

    def __init__(self, app: ASGIApp, store: InvocationStore | None, *, now_ms: Callable[[], int] | None = None) -> None:
        self.app = app
        self.store = store
        self._now_ms = now_ms or (lambda: int(time.time() * 1000))
        self._local = threading.local()

    def __call__(self, event: Mapping[str, Any], context: Any) -> dict[str, Any]:
        """Answer one API-Gateway-proxy event (see the module doc); returns the proxy response."""
        headers = {str(k).lower(): str(v) for k, v in (event.get("headers") or {}).items()}
        loop = getattr(self._local, "loop", None)
        if loop is None:
            loop = self._local.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        body = (
            base64.b64decode(event.get("body") or "")
            if event.get("isBase64Encoded")
            else (str(event.get("body") or "").encode("utf-8"))
        )
        attempt = self._attempt_of(headers, body, str(event.get("path", "")))
        remaining = getattr(context, "get_remaining_time_in_millis", None)
        if attempt is not None and callable(remaining):  # suspend before the function's own timeout
            own_deadline_ms = self._now_ms() + int(remaining()) - _OWN_TIMEOUT_MARGIN_MS
            attempt.deadline_ms = min(attempt.deadline_ms or own_deadline_ms, own_deadline_ms)
        status, out_headers, out = loop.run_until_complete(self._drive(event, headers, body, attempt))
        if attempt is not None and attempt.committed:
            out_headers[COMMITTED_HEADER] = str(attempt.length)
            out_headers[COMMIT_TIME_HEADER] = f"{attempt.commit_s * 1000:.1f}"
        if attempt is not None and attempt.fenced:
            out_headers[FENCED_HEADER] = "1"
        return {
            "statusCode": status,
            "headers": out_headers,
            "isBase64Encoded": True,
            "body": base64.b64encode(out).decode(),
        }

    def _attempt_of(self, headers: Mapping[str, str], body: bytes, path: str) -> _Attempt | None:
        """The attempt's fields, or None if this request cannot be checkpointed here (no store, not an
        invocation, no headers from the orchestrator, a compressed body)."""
        if self.store is None or "/invoke/" not in path or "zstd" in headers.get("content-encoding", ""):
            return None
        try:
            epoch, length = int(headers[EPOCH_HEADER]), int(headers[JOURNAL_LENGTH_HEADER])
            deadline_ms = int(headers.get(DEADLINE_HEADER, "0"))
            doorbell = int(headers[DOORBELL_HEADER]) if DOORBELL_HEADER in headers else None
            invocation_id = headers["x-restate-invocation-id"]
            sent = _split(body)
        except (KeyError, ValueError):
            return None
        if not sent or sent[0].type != MessageType.Start:
            return None
        journal = sent[1 : 1 + length]
        runs: set[int] = set()
        for f in journal:
            if f.type == MessageType.Run:
                runs.add(pb.RunCommandMessage.FromString(f.payload).result_completion_id)
            elif f.type == MessageType.RunCompletion:
                runs.discard(pb.RunCompletionNotificationMessage.FromString(f.payload).completion_id)
        return _Attempt(invocation_id, epoch, length, deadline_ms, runs, sent[1 + length :], doorbell=doorbell)

    async def _drive(
        self, event: Mapping[str, Any], headers: Mapping[str, str], body: bytes, attempt: _Attempt | None
    ) -> tuple[int, dict[str, str], bytes]:
        """Run the ASGI app on one request; returns status, headers and the body to answer with."""
        inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        inbox.put_nowait({"type": "http.request", "body": body, "more_body": attempt is not None})
        closed = attempt is None
        state: dict[str, Any] = {"status": 500, "headers": {}}
        raw = bytearray()
        changed = asyncio.Event()

        async def receive() -> dict[str, Any]:
            if inbox.empty() and closed and state.get("drained"):
                await asyncio.Future()  # like the SDK's own Lambda adapter: nothing more, ever
            item = await inbox.get()
            if not item.get("more_body", False):
                state["drained"] = True
            return item

        async def send(message: Mapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                state["status"] = int(message["status"])
                state["headers"] = {k.decode("latin-1"): v.decode("latin-1") for k, v in message["headers"]}
            elif message["type"] == "http.response.body" and message.get("body"):
                if attempt is None:
                    raw.extend(message["body"])
                else:
                    _take(attempt, message["body"])
                changed.set()

        scope = _scope(event, headers)
        task = asyncio.ensure_future(self.app(scope, receive, send))
        if attempt is not None:
            quiet = 0
            while not task.done():
                if changed.is_set():
                    changed.clear()
                    quiet = 0
                    if not closed and self._handle(attempt, inbox):
                        continue
                if not closed and attempt.ended:
                    closed = True
                    inbox.put_nowait({"type": "http.request", "body": b"", "more_body": False})
                await asyncio.sleep(0)
                if closed or changed.is_set():
                    if closed:
                        await asyncio.wait([task], timeout=0.05)
                    continue
                if _runs_executing() or not inbox.empty():
                    quiet = 0
                    await asyncio.sleep(0.001)
                    continue
                quiet += 1
                if quiet >= _SETTLE_ROUNDS:  # waiting for something only the orchestrator can bring
                    closed = True
                    inbox.put_nowait({"type": "http.request", "body": b"", "more_body": False})
        await task
        if attempt is not None:
            if attempt.buffer:
                raise RuntimeError("the SDK's answer ended inside a frame")
            raw = bytearray(encode_frames(attempt.frames))
        state["headers"].pop("content-length", None)
        return state["status"], state["headers"], bytes(raw)

    def _handle(self, attempt: _Attempt, inbox: asyncio.Queue[dict[str, Any]]) -> bool:
        """Commit and ack the proposals sent so far, if they can be committed here. True if acked."""
        proposals = [f for f in attempt.frames if f.type == MessageType.ProposeRunCompletion]
        if not proposals or attempt.ended:
            return False
        if self._now_ms() >= attempt.deadline_ms > 0:
            return False  # the lease ends: the orchestrator stores the rest
        found = _entries(attempt)
        if found is None:
            return False
        entries, open_runs = found
        if not self._commit(attempt, entries):
            return False
        attempt.journal_runs = open_runs
        acks = []
        for proposal in proposals:
            completion_id = pb.ProposeRunCompletionMessage.FromString(proposal.payload).result_completion_id
            if proposal.requested_ack:
                acks.append(frame(pb.ProposeRunCompletionAckMessage(completion_id=completion_id)))
            else:
                acks.append(_completion(proposal))
        attempt.frames = []
        inbox.put_nowait({"type": "http.request", "body": encode_frames(acks), "more_body": True})
        return True

    def _commit(self, attempt: _Attempt, entries: list[Frame]) -> bool:
        """Fence on the epoch and doorbell (the first commit, then once per `FENCE_EVERY_MS`): a
        strongly consistent read of both (`InvocationStore.read_fence`), compared with the attempt's;
        then append `entries` at the journal's length (the conditional put that makes the commit
        happen at most once). False: not committed.

        The fence reads rather than writes (issue 24: a write on the record cost a write unit, 5
        times a read unit, per Invoke): it is as strong a check as the conditional write it replaces,
        which also said nothing about what happens after it; either way a kill, a successor or a
        notification that lands after the check is seen at the next one, within `FENCE_EVERY_MS`."""
        assert self.store is not None
        data = encode_frames(entries)
        if len(data) > _LIMIT_BYTES:
            return False  # too large for one journal item: the orchestrator's commit says so
        started = time.perf_counter()
        now_ms = self._now_ms()
        try:
            if not attempt.committed or now_ms - attempt.fenced_at_ms >= FENCE_EVERY_MS:
                fence = self.store.read_fence(attempt.invocation_id)
                doorbell = fence[1] if attempt.doorbell is None or fence is None else attempt.doorbell
                if fence is None or fence != (attempt.epoch, doorbell):
                    attempt.fenced = True
                    raise StoreConflict(
                        f"invocation {attempt.invocation_id}: epoch {attempt.epoch} or doorbell {attempt.doorbell} "
                        f"no longer holds (read {fence})"
                    )
                attempt.fenced_at_ms = now_ms
            self.store.append_batch(
                attempt.invocation_id, JournalBatch(attempt.length, data, attempt.epoch, self._now_ms())
            )
        except StoreConflict as exc:  # a kill, a successor or a notification moved the fence, or the index is taken
            log.warning("in-process checkpoint of %s not committed: %s", attempt.invocation_id, exc)
            attempt.deadline_ms = 1  # commit nothing more in this request
            return False
        finally:
            attempt.commit_s += time.perf_counter() - started
        attempt.length += len(entries)
        attempt.committed = True
        attempt.delivered = []
        return True


def _entries(attempt: _Attempt) -> tuple[list[Frame], set[int]] | None:
    """The journal entries for the frames sent so far (run proposals as RunCompletions), with the
    delivered notifications first, and the Run commands left without a completion after them; None
    if one of them is not safe to commit here (module doc)."""
    out = list(attempt.delivered)
    runs = set(attempt.journal_runs)
    for f in attempt.frames:
        if f.type == MessageType.Run:
            runs.add(pb.RunCommandMessage.FromString(f.payload).result_completion_id)
            out.append(Frame(f.type, f.payload))
        elif f.type == MessageType.ProposeRunCompletion:
            completion = _completion(f)
            completion_id = pb.ProposeRunCompletionMessage.FromString(f.payload).result_completion_id
            if completion_id not in runs:
                return None
            runs.discard(completion_id)
            out.append(completion)
        elif is_custom(f.type):
            out.append(Frame(f.type, f.payload))
        elif f.type in (MessageType.AwaitingOn, MessageType.CommandAck):
            continue
        else:
            return None
    return out, runs


def _completion(proposal: Frame) -> Frame:
    """The RunCompletionNotification a ProposeRunCompletion becomes (as the orchestrator stores it)."""
    message = pb.ProposeRunCompletionMessage.FromString(proposal.payload)
    notification = pb.RunCompletionNotificationMessage(completion_id=message.result_completion_id)
    if message.WhichOneof("result") == "failure":
        notification.failure.CopyFrom(message.failure)
    else:
        notification.value.content = message.value
    return frame(notification)


def _take(attempt: _Attempt, data: bytes) -> None:
    """Add `data` to the frames the SDK sent (frames may arrive split across chunks)."""
    attempt.buffer.extend(data)
    while len(attempt.buffer) >= _HEADER.size:
        t, flags, n = _HEADER.unpack_from(attempt.buffer, 0)
        if len(attempt.buffer) < _HEADER.size + n:
            return
        payload = bytes(attempt.buffer[_HEADER.size : _HEADER.size + n])
        del attempt.buffer[: _HEADER.size + n]
        attempt.frames.append(Frame(t, payload, bool(flags & _ACK_FLAG)))
        attempt.sent_count += 1
        if t in _ENDINGS:
            attempt.ended = True


def _split(body: bytes) -> list[Frame]:
    frames: list[Frame] = []
    offset = 0
    while offset < len(body):
        t, flags, n = _HEADER.unpack_from(body, offset)
        start = offset + _HEADER.size
        offset = start + n
        if offset > len(body):
            raise ValueError("truncated frame")
        frames.append(Frame(t, body[start:offset], bool(flags & _ACK_FLAG)))
    return frames


def _runs_executing() -> bool:
    """True while a `ctx.run` closure of the SDK runs (its task is pending; module doc)."""
    return any(
        not t.done() and getattr(t.get_coro(), "__qualname__", "").endswith(_RUN_TASK) for t in asyncio.all_tasks()
    )


def _scope(event: Mapping[str, Any], headers: Mapping[str, str]) -> dict[str, Any]:
    """The ASGI HTTP scope of an API-Gateway-proxy event (as restate-sdk's Lambda adapter builds it)."""
    path = str(event.get("path", "/"))
    return {
        "type": "http",
        "method": str(event.get("httpMethod", "POST")),
        "http_version": "1.1",
        "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()],
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "scheme": headers.get("x-forwarded-proto", "https"),
        "query_string": b"",
        "client": None,
        "server": None,
        "asgi": {"version": "3.0", "spec_version": "2.0"},
        "extensions": None,
    }


def load_app(target: str) -> ASGIApp:
    """Import `module:attr` and return its restate-sdk ASGI app. Raises `ValueError` if it is none."""
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise ValueError(f"TORPOR_APP={target!r} is not module:attr, e.g. examples.app:app")
    value: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        value = getattr(value, part)
    app = asgi_app_of(value)
    if app is None:
        raise ValueError(f"{target} is not a restate.app(...): give the module:attr of the app the SDK built")
    return app


_handler: Checkpoints | None = None
_handler_lock = threading.Lock()

check_sdk_version()  # at import: on Lambda, at the function's init (UnsupportedSDK)


def handler(event: Mapping[str, Any], context: Any) -> dict[str, Any]:
    """The function's handler (`adapters.aws.checkpoints.handler`): loads `TORPOR_APP` and the store
    once per execution environment, then answers as `Checkpoints` does.

    Raises:
        ValueError: `TORPOR_APP` is unset, or not a restate app (a function error Torpor retries).
    """
    global _handler
    with _handler_lock:
        if _handler is None:
            target = os.environ.get("TORPOR_APP", "")
            if not target:
                raise ValueError("set TORPOR_APP to the module:attr of the restate.app(...) this function serves")
            _handler = Checkpoints(load_app(target), store_from_environment())
    return _handler(event, context)
