"""A local stand-in for AWS Lambda's `Invoke` API, to run Lambda handlers in `torpor dev` and tests.

    python -m adapters.local.lambda_emulator --function Examples=examples.app:app --port 0
    # prints "lambda emulator serving on http://127.0.0.1:PORT" once it answers

It hosts the functions `NAME=module:attr` names (`attr` takes `(event, context)`, like a Lambda
handler) and answers, over HTTP (werkzeug), the parts of the AWS APIs that Torpor's
`adapters.aws.lambda_invoker.LambdaInvoker` calls:

- `POST /2015-03-31/functions/{FunctionName}/invocations[?Qualifier=Q]` (Lambda `Invoke`,
  `RequestResponse` only). `FunctionName` is `NAME`, `NAME:QUALIFIER`, or an ARN
  (`arn:aws:lambda:REGION:ACCOUNT:function:NAME[:QUALIFIER]`). The reply body is the handler's return
  value as JSON, with `X-Amz-Executed-Version` (the numeric qualifier, else `$LATEST`). A handler
  that raised answers `X-Amz-Function-Error: Unhandled` and `{"errorMessage", "errorType",
  "stackTrace"}`. Requests and responses over 6 MB get Lambda's errors
  (`RequestEntityTooLargeException`, `Function.ResponseSizeTooLarge`); an unknown function
  `ResourceNotFoundException` (404).
- `Invoke` with `InvocationType: Event` (an asynchronous invoke) of a function named with
  `--hold NAME` (`EmulatorApp(held=...)`): the event is not run but held, `202`, for whoever stands
  in for Lambda's own event queue (`tests.helpers.aws_functions.LocalFunctions` runs the control
  plane's worker on it); `POST /_emulator/held/{NAME}[?max=N]` takes the oldest N (default all)
  held events, `{"events": [...]}`. Other functions answer `Event` with
  `InvalidParameterValueException`, as before.
- `POST /` with `Action=AssumeRole` (STS): fresh credentials for any role, valid for
  `DurationSeconds`, so deployments registered with `assume_role_arn` work locally too.
- `GET /_emulator/calls`: `{"calls": [...], "assume_role_calls": [...]}`, every `Invoke` so far in
  this process, oldest first: `{"function", "qualifier" (None if unqualified), "executed_version",
  "path", "invocation_id" (the `x-restate-invocation-id` header of the event), "error_type" (None if
  the handler returned), "access_key_id" (of the request's signature), "started_at_ms",
  "ended_at_ms", "commit_ms" (time the function spent committing run results itself,
  `adapters.aws.checkpoints`' `x-torpor-commit-ms` answer header; None without it)}`; tests read
  it to check which version each attempt ran on. `DELETE` clears it.

Every qualifier runs the same code (the one module loaded): the emulator has no published versions,
it only records which one was asked for. It checks no signature.

Each function has a timeout (`--timeout SECONDS`, default 900, Lambda's maximum; set it to the
function's `Timeout`), enforced as Lambda enforces it: the handler's
`context.get_remaining_time_in_millis()` counts down to it, and an Invoke still running then answers
`X-Amz-Function-Error: Unhandled` with `{"errorType": "Sandbox.Timedout", "errorMessage": "RequestId:
… Error: Task timed out after N.NN seconds"}` (as Lambda does), while its execution environment is
stopped and discarded: the handler's thread gets `SystemExit` at its next Python instruction (asyncio
lets it through; a blocking call, e.g. `time.sleep`, ends first), so the handler runs no further
step, and the next call gets a fresh environment (a new thread: thread-local state is gone).

Handlers run in a separate process, with `AWS_LAMBDA_FUNCTION_NAME` set while their modules are
imported (so `restate.app(...)` builds its Lambda handler), never in the control plane's process;
`LambdaEmulatorProcess` starts and stops that process. Calls run on execution environments, one
thread each with its own asyncio event loop, reused between calls like warm Lambda environments (at
most `--workers` busy at once).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import ctypes
import importlib
import json
import logging
import os
import queue
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import FrameType
from typing import Any
from xml.sax.saxutils import escape

import httpx
from werkzeug.exceptions import HTTPException
from werkzeug.routing import Map, Rule
from werkzeug.serving import make_server
from werkzeug.wrappers import Request, Response

log = logging.getLogger("torpor.lambda_emulator")

ACCOUNT = "123456789012"
"""The account id in the ARNs the emulator reports (any account in a request's ARN is accepted)."""

MAX_PAYLOAD_BYTES = 6 * 1024 * 1024
"""Lambda's synchronous-invoke payload limit, request and response each (6 MB)."""

MAX_ASYNC_PAYLOAD_BYTES = 1024 * 1024
"""Lambda's asynchronous-invoke (`Event`) payload limit (1 MB)."""

DEFAULT_TIMEOUT_S = 900.0
"""A function's timeout when none is given: Lambda's maximum (15 minutes), in seconds."""

LambdaHandler = Callable[[Any, Any], Any]

_READY_LINE = re.compile(r"lambda emulator serving on (http://\S+)")
_FUNCTION_SPEC = re.compile(r"^(?P<name>[A-Za-z0-9_-]{1,64})=(?P<module>[\w.]+):(?P<attr>[\w.]+)$")
_ARN = re.compile(
    r"^arn:aws[a-z-]*:lambda:(?P<region>[a-z0-9-]+):(?P<account>\d{12}):function:(?P<name>[A-Za-z0-9_-]{1,64})"
    r"(?::(?P<qualifier>[A-Za-z0-9$_-]{1,128}))?$"
)
_NAME = re.compile(r"^(?P<name>[A-Za-z0-9_-]{1,64})(?::(?P<qualifier>[A-Za-z0-9$_-]{1,128}))?$")
_CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/")
_STS_NS = "https://sts.amazonaws.com/doc/2011-06-15/"


class _ApiError(Exception):
    """A refusal in the AWS JSON error shape: HTTP `status`, `x-amzn-ErrorType: code`, `message`."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message

    def response(self) -> Response:
        body = json.dumps({"Type": "User", "message": self.message})
        return Response(
            body, status=self.status, content_type="application/json", headers={"x-amzn-ErrorType": self.code}
        )


def _event(request: Request, limit_bytes: int, operation: str) -> Any:
    """An Invoke's payload as JSON (an empty one: `{}`). Raises `_ApiError` 413 past `limit_bytes`
    (Lambda's message names the kind of invoke, `operation`), 400 if it is not JSON."""
    raw = request.get_data(cache=False)
    if len(raw) > limit_bytes:
        raise _ApiError(
            413, "RequestEntityTooLargeException", f"Request must be smaller than {limit_bytes} bytes {operation}"
        )
    try:
        return json.loads(raw) if raw.strip() else {}
    except ValueError as exc:
        raise _ApiError(400, "InvalidRequestContentException", "Could not parse request body into json") from exc


@dataclass(frozen=True, slots=True)
class _Context:
    """The `context` a handler receives: the fields of Lambda's Python context object the SDKs read."""

    function_name: str
    function_version: str
    invoked_function_arn: str
    aws_request_id: str
    deadline_s: float = 0.0
    """`time.monotonic()` at which the function's timeout ends this call."""
    memory_limit_in_mb: str = "128"
    log_group_name: str = ""
    log_stream_name: str = ""

    def get_remaining_time_in_millis(self) -> int:
        """Milliseconds left before the function's timeout stops this call (Lambda's context method)."""
        return max(0, int((self.deadline_s - time.monotonic()) * 1000))


class _TimedOut(SystemExit):
    """Raised in an execution environment's thread once its call passed the function's timeout: a
    `SystemExit`, so asyncio (`Task`, `Handle`) lets it through and the handler unwinds; the thread
    then ends, as Lambda discards the environment of a call that timed out."""


class _Environment:
    """One execution environment: a thread with its own event loop that runs calls one at a time."""

    def __init__(self, name: str) -> None:
        self._jobs: queue.Queue[tuple[Callable[[], Any], concurrent.futures.Future[Any]] | None] = queue.Queue()
        self.thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self.thread.start()

    def submit(self, call: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._jobs.put((call, done))
        return done

    def close(self) -> None:
        """End the thread once its current call returns."""
        self._jobs.put(None)

    def stop(self) -> None:
        """Stop the call under way: `_TimedOut` in the thread at its next Python instruction."""
        ident = self.thread.ident
        if ident is not None and self.thread.is_alive():
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(_TimedOut))

    def _serve(self) -> None:
        try:
            _new_event_loop()
            while (job := self._jobs.get()) is not None:
                call, done = job
                try:
                    done.set_result(call())
                except Exception as exc:  # noqa: BLE001 - handed to the waiting Invoke
                    done.set_exception(exc)
        except _TimedOut:
            log.info("%s stopped: its call passed the function's timeout", self.thread.name)


class _Environments:
    """The execution environments of the emulator: reused while warm, at most `workers` busy at
    once, and one whose call passed its timeout stopped and never used again (see the module doc)."""

    def __init__(self, workers: int) -> None:
        self._slots = threading.BoundedSemaphore(workers)
        self._lock = threading.Lock()
        self._idle: list[_Environment] = []
        self._all: list[_Environment] = []
        self._count = 0

    def run(self, call: Callable[[], Any], timeout_s: float) -> Any:
        """`call()` on an idle environment, waiting at most `timeout_s` for it.

        Raises:
            TimeoutError: It ran longer than `timeout_s` (the environment was stopped and discarded).
        """
        with self._slots:
            with self._lock:
                if self._idle:
                    environment = self._idle.pop()
                else:
                    self._count += 1
                    environment = _Environment(f"lambda-env-{self._count}")
                    self._all.append(environment)
            done = environment.submit(call)
            try:
                result = done.result(timeout=timeout_s)
            except concurrent.futures.TimeoutError:
                environment.stop()
                environment.close()
                with self._lock:
                    self._all.remove(environment)
                raise TimeoutError(f"the call ran longer than {timeout_s} s") from None
            with self._lock:
                self._idle.append(environment)
            return result

    def close(self) -> None:
        """End every environment's thread after its call under way (waits for them)."""
        with self._lock:
            environments, self._idle, self._all = list(self._all), [], []
        for environment in environments:
            environment.close()
        for environment in environments:
            environment.thread.join()


def parse_function_spec(spec: str) -> tuple[str, str]:
    """`NAME=module:attr` → `(NAME, "module:attr")`. Raises `ValueError` naming the form."""
    match = _FUNCTION_SPEC.match(spec.strip())
    if match is None:
        raise ValueError(
            f"{spec!r} is not NAME=module:attr (NAME: letters, digits, - and _, at most 64), "
            "e.g. Examples=examples.app:app"
        )
    return match["name"], f"{match['module']}:{match['attr']}"


def function_arn(name: str, qualifier: str | None = None, *, region: str = "us-east-1", account: str = ACCOUNT) -> str:
    """The ARN of function `name` (with `:qualifier` if given), as the emulator names it."""
    arn = f"arn:aws:lambda:{region}:{account}:function:{name}"
    return f"{arn}:{qualifier}" if qualifier else arn


def load_handler(target: str) -> LambdaHandler:
    """Import `module:attr` (attr may be dotted) and return it. Raises `ValueError` if it is not callable."""
    module_name, _, attr = target.partition(":")
    value: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        value = getattr(value, part)
    if not callable(value):
        raise ValueError(f"{target} is not callable: a Lambda handler takes (event, context)")
    return value  # type: ignore[no-any-return]


def _new_event_loop() -> None:
    """Thread-pool initializer: every worker thread (execution environment) gets its own event loop."""
    asyncio.set_event_loop(asyncio.new_event_loop())


class EmulatorApp:
    """The WSGI app: Lambda `Invoke` for `functions`, STS `AssumeRole`, and the call log.

    Args:
        functions: Function name → its handler, called as `handler(event, context)`.
        region: Region in the ARNs reported to handlers.
        workers: Invocations running at the same time (more wait for a free worker).
        timeout_s: Each function's timeout in seconds (Lambda's `Timeout`, 1 to 900): a call still
            running then is stopped and answers `Sandbox.Timedout` (see the module doc).
        timeouts_s: Timeouts of single functions, by name, instead of `timeout_s`.

    Raises:
        ValueError: A timeout is not a number of seconds above 0.
    """

    def __init__(
        self,
        functions: Mapping[str, LambdaHandler],
        *,
        region: str = "us-east-1",
        workers: int = 8,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        timeouts_s: Mapping[str, float] | None = None,
        held: Sequence[str] = (),
    ) -> None:
        self.functions = dict(functions)
        self.held: dict[str, list[Any]] = {name: [] for name in held}
        """Functions whose asynchronous (`Event`) invokes are held, not run: name → events, oldest first."""
        self.region = region
        self.timeouts_s = {name: float((timeouts_s or {}).get(name, timeout_s)) for name in self.functions}
        """Each function's timeout in seconds."""
        for name, seconds in self.timeouts_s.items():
            if not seconds > 0:
                raise ValueError(f"the timeout of function {name} must be above 0 seconds, not {seconds}")
        self._environments = _Environments(workers)
        self._lock = threading.Lock()
        self._calls: list[dict[str, Any]] = []
        self._assume_role_calls: list[dict[str, Any]] = []
        self._urls = Map(
            [
                Rule("/2015-03-31/functions/<path:function_name>/invocations", methods=["POST"], endpoint="invoke"),
                Rule("/_emulator/calls", methods=["GET", "DELETE"], endpoint="calls"),
                Rule("/_emulator/held/<name>", methods=["POST"], endpoint="held"),
                Rule("/", methods=["POST"], endpoint="sts"),
            ]
        )

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        request = Request(environ)
        adapter = self._urls.bind_to_environ(environ)
        try:
            endpoint, values = adapter.match()
            if endpoint == "invoke":
                response = self._invoke(request, values["function_name"])
            elif endpoint == "calls":
                response = self._call_log(request)
            elif endpoint == "held":
                response = self._take_held(request, values["name"])
            else:
                response = self._sts(request)
        except _ApiError as exc:
            response = exc.response()
        except HTTPException as exc:
            response = _ApiError(exc.code or 400, "UnknownOperationException", exc.description or str(exc)).response()
        return response(environ, start_response)

    def close(self) -> None:
        """Stop the execution environments (after the calls in progress)."""
        self._environments.close()

    # --- Lambda Invoke ------------------------------------------------------------------------------

    def _resolve(self, function_name: str, qualifier_param: str | None) -> tuple[str, str | None]:
        """`(name, qualifier)` a `FunctionName` path segment and `Qualifier` parameter name. Raises `_ApiError`."""
        match = _ARN.match(function_name) or _NAME.match(function_name)
        if match is None:
            raise _ApiError(400, "InvalidParameterValueException", f"invalid FunctionName {function_name!r}")
        name, qualifier = match["name"], match["qualifier"]
        if qualifier_param:
            if qualifier and qualifier != qualifier_param:
                raise _ApiError(
                    400,
                    "InvalidParameterValueException",
                    "The derived qualifier from the function name does not match the specified qualifier.",
                )
            qualifier = qualifier_param
        if name not in self.functions:
            raise _ApiError(
                404,
                "ResourceNotFoundException",
                f"Function not found: {function_arn(name, qualifier, region=self.region)}",
            )
        return name, qualifier

    def _invoke(self, request: Request, function_name: str) -> Response:
        invocation_type = request.headers.get("X-Amz-Invocation-Type", "RequestResponse")
        match = _ARN.match(function_name) or _NAME.match(function_name)
        if invocation_type == "Event" and match is not None and match["name"] in self.held:
            return self._hold(request, match["name"])
        name, qualifier = self._resolve(function_name, request.args.get("Qualifier"))
        if invocation_type != "RequestResponse":
            raise _ApiError(
                400, "InvalidParameterValueException", f"the emulator runs RequestResponse only, not {invocation_type}"
            )
        event = _event(request, MAX_PAYLOAD_BYTES, "for the InvokeFunction operation")
        version = qualifier if qualifier and qualifier.isdigit() else "$LATEST"
        timeout_s = self.timeouts_s[name]
        context = _Context(
            function_name=name,
            function_version=version,
            invoked_function_arn=function_arn(name, qualifier, region=self.region),
            aws_request_id=str(uuid.uuid4()),
            deadline_s=time.monotonic() + timeout_s,
        )
        headers = event.get("headers") if isinstance(event, dict) else None
        credential = _CREDENTIAL.search(request.headers.get("Authorization", ""))
        record: dict[str, Any] = {
            "function": name,
            "qualifier": qualifier,
            "executed_version": version,
            "path": event.get("path") if isinstance(event, dict) else None,
            "invocation_id": headers.get("x-restate-invocation-id") if isinstance(headers, dict) else None,
            "error_type": None,
            "access_key_id": credential.group(1) if credential else None,
            "started_at_ms": int(time.time() * 1000),
        }
        handler = self.functions[name]
        try:
            body, error_type, commit_ms = self._environments.run(lambda: _run(handler, event, context), timeout_s)
        except TimeoutError:  # Lambda's answer when a function's timeout ends an Invoke
            message = f"RequestId: {context.aws_request_id} Error: Task timed out after {timeout_s:.2f} seconds"
            log.warning("function %s: %s", name, message)
            body, error_type, commit_ms = (
                json.dumps({"errorType": "Sandbox.Timedout", "errorMessage": message}).encode("utf-8"),
                "Sandbox.Timedout",
                None,
            )
        record["error_type"] = error_type
        record["commit_ms"] = commit_ms
        record["ended_at_ms"] = int(time.time() * 1000)
        with self._lock:
            self._calls.append(record)
        headers_out = {"X-Amz-Executed-Version": version, "x-amzn-RequestId": context.aws_request_id}
        if error_type is not None:
            headers_out["X-Amz-Function-Error"] = "Unhandled"
        return Response(body, status=200, content_type="application/json", headers=headers_out)

    def _hold(self, request: Request, name: str) -> Response:
        """An asynchronous invoke of a held function: its event kept for `_take_held`, `202` (Lambda's answer)."""
        event = _event(request, MAX_ASYNC_PAYLOAD_BYTES, "for an asynchronous invoke")
        with self._lock:
            self.held[name].append(event)
        return Response(b"", status=202, headers={"x-amzn-RequestId": str(uuid.uuid4())})

    def _take_held(self, request: Request, name: str) -> Response:
        if name not in self.held:
            raise _ApiError(404, "ResourceNotFoundException", f"function {name} is not held (--hold {name})")
        most = int(request.args.get("max", "0") or 0)
        with self._lock:
            events = self.held[name]
            taken = events[:most] if most > 0 else list(events)
            del events[: len(taken)]
        return Response(json.dumps({"events": taken}), status=200, content_type="application/json")

    # --- STS AssumeRole -----------------------------------------------------------------------------

    def _sts(self, request: Request) -> Response:
        form = request.form
        if form.get("Action") != "AssumeRole":
            raise _ApiError(400, "InvalidAction", f"the emulator answers STS AssumeRole only, not {form.get('Action')}")
        role, session = form.get("RoleArn", ""), form.get("RoleSessionName", "")
        duration_s = int(form.get("DurationSeconds", "3600"))
        expires = (datetime.now(UTC) + timedelta(seconds=duration_s)).strftime("%Y-%m-%dT%H:%M:%SZ")
        access_key_id = "ASIA" + secrets.token_hex(8).upper()
        with self._lock:
            self._assume_role_calls.append({"role_arn": role, "session_name": session, "access_key_id": access_key_id})
        role_name = role.rsplit("/", 1)[-1]
        xml = (
            f'<AssumeRoleResponse xmlns="{_STS_NS}"><AssumeRoleResult><Credentials>'
            f"<AccessKeyId>{access_key_id}</AccessKeyId><SecretAccessKey>{secrets.token_hex(20)}</SecretAccessKey>"
            f"<SessionToken>{secrets.token_hex(32)}</SessionToken><Expiration>{expires}</Expiration></Credentials>"
            f"<AssumedRoleUser><AssumedRoleId>AROA{secrets.token_hex(8).upper()}:{escape(session)}</AssumedRoleId>"
            f"<Arn>arn:aws:sts::{ACCOUNT}:assumed-role/{escape(role_name)}/{escape(session)}</Arn></AssumedRoleUser>"
            f"</AssumeRoleResult><ResponseMetadata><RequestId>{uuid.uuid4()}</RequestId></ResponseMetadata>"
            "</AssumeRoleResponse>"
        )
        return Response(xml, status=200, content_type="text/xml")

    # --- the call log -------------------------------------------------------------------------------

    def calls(self) -> dict[str, list[dict[str, Any]]]:
        """`{"calls": [...], "assume_role_calls": [...]}` so far, oldest first (see the module doc)."""
        with self._lock:
            return {"calls": list(self._calls), "assume_role_calls": list(self._assume_role_calls)}

    def _call_log(self, request: Request) -> Response:
        if request.method == "DELETE":
            with self._lock:
                self._calls.clear()
                self._assume_role_calls.clear()
        return Response(json.dumps(self.calls()), status=200, content_type="application/json")


def _run(handler: LambdaHandler, event: Any, context: _Context) -> tuple[bytes, str | None, float | None]:
    """Call `handler`; `(reply body, None, commit ms)`, or `(Lambda's error JSON, errorType, None)` if it
    failed. The commit time is the answer's `x-torpor-commit-ms` header, if any (else None)."""
    commit_ms: float | None = None
    try:
        result = handler(event, context)
        body = json.dumps(result).encode("utf-8")
        with contextlib.suppress(AttributeError, KeyError, TypeError, ValueError):
            commit_ms = float(result["headers"]["x-torpor-commit-ms"])
    except Exception as exc:  # noqa: BLE001 - any exception of the handler is its function error
        error = {
            "errorMessage": str(exc),
            "errorType": type(exc).__name__,
            "stackTrace": traceback.format_exception(exc)[-20:],
        }
        log.warning("function %s raised %s: %s", context.function_name, type(exc).__name__, exc)
        return json.dumps(error).encode("utf-8"), type(exc).__name__, None
    if len(body) > MAX_PAYLOAD_BYTES:
        error = {
            "errorMessage": f"Response payload size ({len(body)} bytes) exceeded maximum allowed payload size "
            f"({MAX_PAYLOAD_BYTES} bytes).",
            "errorType": "Function.ResponseSizeTooLarge",
        }
        return json.dumps(error).encode("utf-8"), "Function.ResponseSizeTooLarge", None
    return body, None, commit_ms


# --- the emulator process ---------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Run the emulator in the foreground until SIGTERM or SIGINT; see the module doc for the flags."""
    parser = argparse.ArgumentParser(
        prog="python -m adapters.local.lambda_emulator", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--function",
        dest="functions",
        action="append",
        required=True,
        metavar="NAME=module:attr",
        help="A function to host (repeatable), e.g. Examples=examples.app:app.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="Address to listen on.")
    parser.add_argument("--port", type=int, default=0, help="Port to listen on (0: a free one).")
    parser.add_argument("--region", default="us-east-1", help="Region reported to handlers.")
    parser.add_argument("--workers", type=int, default=8, help="Invocations running at the same time.")
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help="Each function's timeout, as Lambda's Timeout (default 900, Lambda's maximum).",
    )
    parser.add_argument(
        "--hold",
        action="append",
        default=[],
        metavar="NAME",
        help="A function whose asynchronous (Event) invokes are held for POST /_emulator/held/NAME (repeatable).",
    )
    parser.add_argument("--verbose", action="store_true", help="Log every HTTP request.")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-5s %(name)s: %(message)s")
    logging.getLogger("werkzeug").setLevel(logging.INFO if args.verbose else logging.WARNING)

    os.environ.setdefault("AWS_REGION", args.region)
    os.environ.setdefault("AWS_DEFAULT_REGION", args.region)
    functions: dict[str, LambdaHandler] = {}
    for spec in args.functions:
        try:
            name, target = parse_function_spec(spec)
        except ValueError as exc:
            parser.error(str(exc))
        # https://docs.aws.amazon.com/lambda/latest/dg/configuration-envvars.html: set while the
        # function's module loads, so restate.app(...) returns its Lambda handler
        os.environ["AWS_LAMBDA_FUNCTION_NAME"] = name
        os.environ["AWS_LAMBDA_FUNCTION_VERSION"] = "$LATEST"
        try:
            functions[name] = load_handler(target)
        except Exception as exc:  # noqa: BLE001 - reported with the function's name, then exit
            sys.stderr.write(f"cannot load function {name} from {target}: {type(exc).__name__}: {exc}\n")
            return 2

    if not 0 < args.timeout <= DEFAULT_TIMEOUT_S:
        parser.error(f"--timeout must be above 0 and at most {DEFAULT_TIMEOUT_S:.0f} seconds (Lambda's range)")
    try:
        _with_checkpoints(functions)
    except ImportError as exc:
        if type(exc).__name__ != "UnsupportedSDK":  # adapters.aws.checkpoints' (its import failed)
            raise
        sys.stderr.write(f"{exc}\n")  # one line that says what to do
        return 2
    app = EmulatorApp(functions, region=args.region, workers=args.workers, timeout_s=args.timeout, held=args.hold)
    server = make_server(args.host, args.port, app, threaded=True)
    port = server.socket.getsockname()[1]
    host = f"[{args.host}]" if ":" in args.host else args.host

    def request_stop(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, request_stop)
    sys.stdout.write(f"lambda emulator serving on http://{host}:{port} ({', '.join(functions)})\n")
    sys.stdout.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        app.close()
    return 0


def _with_checkpoints(functions: dict[str, LambdaHandler]) -> None:
    """With a store named in the environment (`TORPOR_SQLITE`, or `TORPOR_TABLE` and
    `TORPOR_DYNAMODB_ENDPOINT`), run every restate-sdk app among `functions` through Torpor's
    in-process checkpoints (`adapters.aws.checkpoints`), as a function deployed with the handler
    `adapters.aws.checkpoints.handler` runs on AWS; other functions are left as they are.

    Raises:
        adapters.aws.checkpoints.UnsupportedSDK: (an ImportError) a store is named and the installed
            restate-sdk is outside the wrapper's `SUPPORTED_SDK`.
    """
    if not (os.environ.get("TORPOR_SQLITE") or os.environ.get("TORPOR_TABLE")):
        return  # no store: request/response, and no restate-sdk version to check
    from adapters.aws.checkpoints import Checkpoints, asgi_app_of, store_from_environment

    store = store_from_environment()
    if store is None:
        return
    for name, handler in list(functions.items()):
        app = asgi_app_of(handler)
        if app is not None:
            functions[name] = Checkpoints(app, store)


class LambdaEmulatorProcess:
    """Runs `python -m adapters.local.lambda_emulator` in a subprocess; usable as a context manager.

    The child inherits the environment (without `AWS_LAMBDA_FUNCTION_NAME`), runs in `cwd`, and has
    `cwd` first on its `PYTHONPATH`, so `module:attr` targets resolve as they would for
    `python -m` there. Its stderr is inherited; its stdout lines after the ready line are logged.

    Args:
        functions: Function name → `module:attr` of its handler.
        host: Address the emulator listens on.
        port: Its port; 0 picks a free one (reported by the child).
        region: Region reported to handlers.
        cwd: Working directory of the child; None: this process's.
        startup_timeout_s: How long `start` waits for the emulator to answer.
        env: More environment variables for the child, e.g. `TORPOR_SQLITE` (in-process checkpoints
            against the dev store: `adapters.aws.checkpoints`).
        keep_running: Start the child again, on the same port, when it exits before `stop` (a crash,
            a SIGKILL), as Lambda replaces an execution environment that died: Invokes refused in the
            meantime are retried by Torpor like any failed attempt. Checked every 0.2 s.
        timeout_s: Each function's timeout in seconds (`--timeout`; Lambda's `Timeout`).
        hold: Functions whose asynchronous invokes are held, not run (`--hold`; `held` takes them).
    """

    def __init__(
        self,
        functions: Mapping[str, str],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        region: str = "us-east-1",
        cwd: str | os.PathLike[str] | None = None,
        startup_timeout_s: float = 30.0,
        env: Mapping[str, str] | None = None,
        keep_running: bool = False,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        hold: Sequence[str] = (),
    ) -> None:
        self.timeout_s = timeout_s
        self.hold = tuple(hold)
        self.env = dict(env or {})
        self.keep_running = keep_running
        self.restarts = 0
        """How many times the child was started again after it exited on its own (`keep_running`)."""
        self._stopping = threading.Event()
        self._watcher: threading.Thread | None = None
        if not functions:
            raise ValueError("the Lambda emulator needs at least one function")
        self.functions = dict(functions)
        self.host, self.port, self.region = host, port, region
        self.cwd = os.fspath(cwd) if cwd is not None else os.getcwd()
        self.startup_timeout_s = startup_timeout_s
        self.process: subprocess.Popen[str] | None = None
        self._url: str | None = None
        self._pump: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The emulator's base URL, e.g. `http://127.0.0.1:41234` (after `start`)."""
        if self._url is None:
            raise RuntimeError("the Lambda emulator is not started: call start() first")
        return self._url

    def __enter__(self) -> LambdaEmulatorProcess:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> LambdaEmulatorProcess:
        """Start the child and return once it answers HTTP (with `keep_running`, also its watcher).

        Raises:
            RuntimeError: The child exited (a function failed to load: its stderr says why) or did not
                answer within `startup_timeout_s`.
        """
        self._stopping.clear()
        try:
            self._spawn()
        except BaseException:
            self.stop()
            raise
        if self.keep_running:
            self._watcher = threading.Thread(target=self._watch, name="lambda-emulator-watch", daemon=True)
            self._watcher.start()
        return self

    def _watch(self) -> None:
        """Until `stop`: start the child again (same port) whenever it has exited."""
        while not self._stopping.wait(0.2):
            process = self.process
            if process is None or process.poll() is None:
                continue
            log.warning("the Lambda emulator exited (status %s): starting it again on %s", process.returncode, self.url)
            self._end_child()
            try:
                self._spawn()
            except RuntimeError:
                log.exception("the Lambda emulator did not start again; trying again in a second")
                self._end_child()
                self._stopping.wait(1.0)
                continue
            self.restarts += 1

    def _spawn(self) -> None:
        """Start the child on `port` and wait for its ready line; then `port` is the one it took."""
        env = dict(os.environ)
        env.pop("AWS_LAMBDA_FUNCTION_NAME", None)
        for name in ("TORPOR_SQLITE", "TORPOR_TABLE", "TORPOR_DYNAMODB_ENDPOINT"):
            env.pop(name, None)  # only what this emulator is given
        env.pop("TORPOR_BLOB_BUCKET", None)
        env.pop("TORPOR_S3_ENDPOINT", None)
        env.update(self.env)
        env["PYTHONPATH"] = os.pathsep.join([self.cwd, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))])
        env["PYTHONUNBUFFERED"] = "1"
        command = [sys.executable, "-m", "adapters.local.lambda_emulator", "--host", self.host]
        command += ["--port", str(self.port), "--region", self.region, "--timeout", str(self.timeout_s)]
        for name, target in self.functions.items():
            command += ["--function", f"{name}={target}"]
        for name in self.hold:
            command += ["--hold", name]
        self.process = subprocess.Popen(command, cwd=self.cwd, env=env, stdout=subprocess.PIPE, text=True)
        lines: queue.Queue[str | None] = queue.Queue()
        self._pump = threading.Thread(target=self._read_stdout, args=(lines,), name="lambda-emulator-out", daemon=True)
        self._pump.start()
        self._url = self._wait_until_ready(lines)
        self.port = int(self._url.rsplit(":", 1)[1])  # a restart comes back on the same port

    def _read_stdout(self, lines: queue.Queue[str | None]) -> None:
        assert self.process is not None
        assert self.process.stdout is not None
        ready = False
        for line in self.process.stdout:
            if ready:
                log.info("lambda: %s", line.rstrip())
            else:
                lines.put(line)
                ready = _READY_LINE.search(line) is not None
        lines.put(None)

    def _wait_until_ready(self, lines: queue.Queue[str | None]) -> str:
        assert self.process is not None
        deadline = time.monotonic() + self.startup_timeout_s
        seen: list[str] = []
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RuntimeError(f"the Lambda emulator printed no ready line in time; stdout so far: {seen!r}")
            try:
                line = lines.get(timeout=min(remaining, 0.5))
            except queue.Empty:
                continue
            if line is None:
                code = self.process.wait()
                raise RuntimeError(
                    f"the Lambda emulator exited with status {code} at start-up (its stderr says why); stdout: {seen!r}"
                )
            seen.append(line)
            match = _READY_LINE.search(line)
            if match:
                return match.group(1)

    def calls(self) -> dict[str, list[dict[str, Any]]]:
        """`GET /_emulator/calls`: `{"calls": [...], "assume_role_calls": [...]}` (see the module doc)."""
        reply = httpx.get(f"{self.url}/_emulator/calls", timeout=10, trust_env=False)
        reply.raise_for_status()
        body: dict[str, list[dict[str, Any]]] = reply.json()
        return body

    def held(self, name: str, most: int = 0) -> list[Any]:
        """`POST /_emulator/held/{name}`: the oldest `most` (0: all) held asynchronous events of a
        function named in `hold`, taken (each is returned once)."""
        reply = httpx.post(f"{self.url}/_emulator/held/{name}", params={"max": most}, timeout=10, trust_env=False)
        reply.raise_for_status()
        events: list[Any] = reply.json()["events"]
        return events

    def stop_watching(self) -> None:
        """From now on, a child that exits is not started again (a shutdown has begun: a Ctrl+C in the
        terminal reaches the child too). Safe from a signal handler; `stop` still ends the child."""
        self._stopping.set()

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM the child, SIGKILL if it has not exited within `timeout_s`. Safe to call twice."""
        self._stopping.set()
        watcher, self._watcher = self._watcher, None
        if watcher is not None and watcher is not threading.current_thread():
            watcher.join(timeout=self.startup_timeout_s + 5)  # a restart under way finishes first
        self._end_child(timeout_s)
        self._url = None

    def _end_child(self, timeout_s: float = 10.0) -> None:
        """SIGTERM the child (if it runs), SIGKILL after `timeout_s`; reap it and its output pump."""
        process, self.process = self.process, None
        if process is not None:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            if self._pump is not None:
                self._pump.join(timeout=5)
            if process.stdout is not None:
                process.stdout.close()

    @property
    def running(self) -> bool:
        """True while the child process runs."""
        return self.process is not None and self.process.poll() is None


@contextlib.contextmanager
def serve_in_thread(
    functions: Mapping[str, LambdaHandler],
    *,
    host: str = "127.0.0.1",
    region: str = "us-east-1",
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Iterator[tuple[str, EmulatorApp]]:
    """Serve `EmulatorApp(functions, timeout_s=timeout_s)` from a thread of this process (for handlers
    that do not need `AWS_LAMBDA_FUNCTION_NAME`, e.g. plain test functions). Yields `(base URL, app)`."""
    app = EmulatorApp(functions, region=region, timeout_s=timeout_s)
    server = make_server(host, 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="lambda-emulator", daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{server.socket.getsockname()[1]}", app
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
        app.close()


if __name__ == "__main__":
    sys.exit(main())
