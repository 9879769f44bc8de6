"""The ingress API (default port 8080): call and send handlers, attach to invocations.

Paths as Restate serves them: `/restate/call|send/{service}/{handler}`, the plain `/{service}/{handler}`
and `/{service}/{handler}/send`, and `/restate/invocation/{id}/attach|output`. Every answer about an
invocation carries `x-restate-id`. A failed invocation answers with its error code as the HTTP status
and `{"code", "message"}`. Browsers may call it from the web UI's origin and the allowed ones
(`TORPOR_UI_ORIGINS`, CORS, for the playground); `torpor dev` refuses foreign hosts and cross-site
simple requests before they reach these routes (`adapters/local/guard.py`).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterable
from dataclasses import replace

from control_plane.creation import what_holds
from control_plane.durations import parse_duration_ms, rfc3339
from control_plane.errors import BadRequest, Conflict, NotFound, TorporError
from control_plane.failures import metadata_of
from control_plane.ids import FIRST_AWAKEABLE_SIGNAL, parse_awakeable_id
from control_plane.inputs import validate_input
from control_plane.invocation import JOURNAL_ENTRY_LIMIT_BYTES, Engine
from control_plane.ports import (
    MAX_TIMER_MS,
    InvocationRecord,
    InvocationStore,
    ItemTooLarge,
    StoreConflict,
    StoredNotification,
)
from control_plane.protocol import encode_frames, frame
from control_plane.protocol import protocol_pb2 as pb
from control_plane.registry import Target
from control_plane.waiters import CompletionWaiters
from http_api.http import HttpRequest, HttpResponse, Router, error_response

_POLL_S = 0.5  # how often a waiting caller re-reads the store (the invocation may finish elsewhere)
NOT_READY = 470  # Restate: the invocation has not completed yet
ERROR_SOURCE_HEADER = "x-restate-error-source"  # restate-server 1.7.4+: `ingress` or `invocation`


def _http_status(code: object) -> int:
    status = int(str(code)) if str(code).isdigit() else 500
    return status if 400 <= status <= 599 else 500


_ATTEMPT_RESERVE_MS = 5_000  # see `Ingress.call`


CORS_HEADERS = {"access-control-expose-headers": "x-restate-id", "vary": "origin"}
"""On every ingress answer to an allowed origin, beside `access-control-allow-origin` naming it."""


class CorsRouter(Router):
    """A `Router` that pages of the allowed origins may call from a browser: the web UI's playground,
    served by the admin API, calls the ingress. An answer to a request whose `Origin` is allowed
    carries `access-control-allow-origin` naming it and `CORS_HEADERS` (no cookies are involved); a
    preflight `OPTIONS` from it gets `204` allowing `GET`/`POST` with the headers it asks for, cached
    for 10 minutes. Any other origin gets no CORS headers (its page can send, but not read, a simple
    request) and a `403` preflight.

    Attributes:
        allowed_origins: Origins as `scheme://host[:port]`, lower case; `*` allows any.
    """

    def __init__(self, allowed_origins: Iterable[str] = ()) -> None:
        super().__init__()
        self.allowed_origins = frozenset(allowed_origins)

    def _cors(self, request: HttpRequest) -> dict[str, str]:
        origin = request.headers.get("origin", "")
        if origin and ("*" in self.allowed_origins or origin.lower().rstrip("/") in self.allowed_origins):
            return {"access-control-allow-origin": origin, **CORS_HEADERS}
        return {}

    def dispatch(self, request: HttpRequest) -> HttpResponse:
        """Answer a preflight, or run the matching route and add the CORS headers to its answer."""
        cors = self._cors(request)
        if request.method.upper() == "OPTIONS":
            if not cors:
                origin = request.headers.get("origin", "(none)")
                message = f"origin {origin} may not call this ingress from a browser; allow it with TORPOR_UI_ORIGINS"
                return HttpResponse.json({"code": 403, "message": message}, 403)
            preflight = {
                "access-control-allow-methods": "GET, POST, OPTIONS",
                "access-control-allow-headers": request.headers.get(
                    "access-control-request-headers", "content-type, idempotency-key"
                ),
                "access-control-max-age": "600",
            }
            return HttpResponse(204, b"", {**cors, **preflight})
        response = with_error_source(super().dispatch(request), "ingress")
        return replace(response, headers={**response.headers, **cors}) if cors else response


def with_error_source(response: HttpResponse, source: str) -> HttpResponse:
    """`response` marked with where its error came from, as restate-server (1.7.4 and later) marks it:
    an `x-restate-error-source` header and a `"source"` field in the `{"code", "message"}` body.

    `source` is `invocation` for an invocation's own result (a terminal error, a kill or cancel, a
    workflow's `run` invoked twice) and `ingress` for what the ingress refused before or instead of
    one (an unknown service, a bad id, a body it cannot take, 470 not ready, ...). A response
    already marked, and any response below 400, is returned as it is.
    """
    if response.status < 400 or ERROR_SOURCE_HEADER in response.headers:
        return response
    body = response.body
    with contextlib.suppress(ValueError):
        decoded = json.loads(body) if body[:1] == b"{" else None
        if isinstance(decoded, dict) and "code" in decoded:
            body = json.dumps({**decoded, "source": source}, separators=(",", ":")).encode()
    return replace(response, body=body, headers={**response.headers, ERROR_SOURCE_HEADER: source})


class Ingress:
    """Ingress routes over the engine. `call_wait_ms` bounds how long a call waits (then 202)."""

    def __init__(self, engine: Engine, store: InvocationStore, waiters: CompletionWaiters, call_wait_ms: int) -> None:
        self.engine = engine
        self.store = store
        self.waiters = waiters
        self.call_wait_ms = call_wait_ms
        self.router = CorsRouter()
        r = self.router
        r.add("POST", "/restate/call/{service}/{handler}", self.call)
        r.add("POST", "/restate/call/{service}/{key}/{handler}", self.call)
        r.add("POST", "/restate/send/{service}/{handler}", self.send)
        r.add("POST", "/restate/send/{service}/{key}/{handler}", self.send)
        r.add("GET", "/restate/invocation/{invocation_id}/attach", self.attach)
        r.add("GET", "/restate/invocation/{invocation_id}/output", self.output)
        r.add("GET", "/restate/invocation/{service}/{handler}/{idempotency_key}/attach", self.attach_idempotent)
        r.add("GET", "/restate/invocation/{service}/{handler}/{idempotency_key}/output", self.output_idempotent)
        r.add("GET", "/restate/invocation/{service}/{key}/{handler}/{idempotency_key}/attach", self.attach_idempotent)
        r.add("GET", "/restate/invocation/{service}/{key}/{handler}/{idempotency_key}/output", self.output_idempotent)
        r.add("GET", "/restate/workflow/{service}/{key}/attach", self.attach_workflow)
        r.add("GET", "/restate/workflow/{service}/{key}/output", self.workflow_output)
        r.add("POST", "/restate/awakeables/{awakeable_id}/resolve", self.resolve_awakeable)
        r.add("POST", "/restate/awakeables/{awakeable_id}/reject", self.reject_awakeable)
        for verb in ("call", "send"):  # before `/{service}/{first}/{second}` reads it as service "restate"
            r.add("POST", f"/restate/{verb}/{{service}}", self.no_handler)
        r.add("POST", "/{service}/{key}/{handler}/send", self.send)
        r.add("POST", "/{service}/{first}/{second}", self.plain_three)
        r.add("POST", "/{service}/{handler}", self.call)
        for method, empty_key_path in (
            ("POST", "/restate/call/{service}//{handler}"),
            ("POST", "/restate/send/{service}//{handler}"),
            ("POST", "/{service}//{handler}/send"),
            ("POST", "/{service}//{handler}"),
            ("GET", "/restate/workflow/{service}//{suffix}"),
            ("GET", "/restate/invocation/{service}//{handler}/{idempotency_key}/{suffix}"),
        ):
            r.add(method, empty_key_path, self.empty_key)

    def no_handler(self, request: HttpRequest, service: str) -> HttpResponse:
        """`/restate/call/{service}` (or send) without a handler: a 400 naming the path's shape."""
        verb = request.path.split("/")[2]
        raise BadRequest(
            f"{request.path} names no handler: use /restate/{verb}/{service}/{{handler}} "
            f"(or /restate/{verb}/{service}/{{key}}/{{handler}} for a virtual object or workflow)"
        )

    # --- routes -------------------------------------------------------------------------------------

    def plain_three(self, request: HttpRequest, service: str, first: str, second: str) -> HttpResponse:
        """`/{Service}/{handler}/send` for a plain service, else `/{Object}/{key}/{handler}` (Restate's paths)."""
        if second == "send" and self.engine.registry.service(service).ty == "SERVICE":
            return self.send(request, service, first)
        return self.call(request, service, second, key=first)

    def call(self, request: HttpRequest, service: str, handler: str, key: str = "") -> HttpResponse:
        """Invoke and wait for the result; past `call_wait_ms` answer 202 with the invocation id.

        The ingress runs attempts itself until `call_wait_ms` minus a reserve (a fifth, at most 5 s),
        then hands the invocation to the scheduler (on AWS: the worker) and waits for the rest.

        A workflow's `run` called again for the same workflow id is a 409.
        """
        self._reject_delay(request)
        target = self._target(request, service, handler, key)
        idempotency_key = self._idempotency_key(request, target)
        try:
            record = self.engine.create(
                service,
                handler,
                request.body,
                self._kept_headers(request),
                key=key,
                leased=True,
                idempotency_key=idempotency_key,
            )
        except StoreConflict as exc:
            if idempotency_key:  # the same request again: attach to the first invocation
                first_id = self.engine.idempotent_invocation_id(service, handler, key, idempotency_key)
                return self.attach(request, first_id)
            if target.handler_type == "WORKFLOW":  # restate-server counts this one as the invocation's
                return with_error_source(error_response(Conflict("the workflow method was already invoked")), "invocation")
            raise
        if record.status != "running":  # an exclusive object handler waits for its key
            return self._wait(record.invocation_id, self.call_wait_ms / 1000)
        # no new attempt in the last fifth of the wait (at most 5 s), so that one started just before
        # the deadline still ends within the wait: API Gateway cuts a Lambda ingress off at 29 s
        reserve_ms = min(_ATTEMPT_RESERVE_MS, self.call_wait_ms // 5)
        with self.waiters.watching(record.invocation_id) as event:  # from here on no completion is missed
            _, last = self.engine.drive(record, deadline_ms=record.created_at_ms + self.call_wait_ms - reserve_ms)
            if last.status == "completed":
                return self._result(last)
            remaining_ms = record.created_at_ms + self.call_wait_ms - self.engine.clock.now_ms()
            return self._wait(record.invocation_id, max(0, remaining_ms) / 1000, (event, last))

    def send(self, request: HttpRequest, service: str, handler: str, key: str = "") -> HttpResponse:
        """Enqueue an invocation and answer `202 {"invocationId", "status": "Accepted"}` at once.

        `?delay=10s` (or `PT10S`, `500ms`, `1 hour`, ...: `parse_duration_ms`) starts it no earlier
        than that; the answer then carries `executionTime` (RFC 3339). A malformed delay is a 400.
        A workflow's `run` sent again for the same workflow id answers `"status": "PreviouslyAccepted"`
        with the first id.
        """
        delay = request.query("delay")
        delay_ms = 0
        if delay is not None:
            try:
                delay_ms = parse_duration_ms(delay)
            except ValueError as exc:
                raise BadRequest(f"bad delay: {exc}") from exc
        target = self._target(request, service, handler, key)
        execution_time_ms = self.engine.clock.now_ms() + delay_ms if delay_ms else 0
        if execution_time_ms > MAX_TIMER_MS:
            raise BadRequest(f"bad delay: {delay!r} ends after the latest time a timer can hold (the year 2286)")
        idempotency_key = self._idempotency_key(request, target)
        try:
            record = self.engine.create(
                service,
                handler,
                request.body,
                self._kept_headers(request),
                key=key,
                leased=False,
                execution_time_ms=execution_time_ms,
                idempotency_key=idempotency_key,
            )
        except StoreConflict:
            if idempotency_key:
                first = self._record(self.engine.idempotent_invocation_id(service, handler, key, idempotency_key))
            elif target.handler_type == "WORKFLOW":
                first = self._record(self.engine.workflow_run_id(service, key))
            else:
                raise
            again: dict[str, object] = {"invocationId": first.invocation_id, "status": "PreviouslyAccepted"}
            if first.execution_time_ms:
                again["executionTime"] = rfc3339(first.execution_time_ms)
            return HttpResponse.json(again, 202, {"x-restate-id": first.invocation_id})
        body: dict[str, object] = {"invocationId": record.invocation_id, "status": "Accepted"}
        if record.execution_time_ms:
            body["executionTime"] = rfc3339(record.execution_time_ms)
        return HttpResponse.json(body, 202, {"x-restate-id": record.invocation_id})

    def resolve_awakeable(self, request: HttpRequest, awakeable_id: str) -> HttpResponse:
        """Complete an awakeable with the request body as its value (the first completion wins); 202."""
        signal = pb.SignalNotificationMessage(value=pb.Value(content=request.body))
        return self._complete_awakeable(awakeable_id, signal)

    def reject_awakeable(self, request: HttpRequest, awakeable_id: str) -> HttpResponse:
        """Fail an awakeable with the request body (text) as the reason; 202."""
        reason = request.body.decode("utf-8", "replace") or "rejected"
        signal = pb.SignalNotificationMessage(failure=pb.Failure(code=500, message=reason))
        return self._complete_awakeable(awakeable_id, signal)

    def _complete_awakeable(self, awakeable_id: str, signal: pb.SignalNotificationMessage) -> HttpResponse:
        invocation_id, index = parse_awakeable_id(awakeable_id)  # BadRequest (400) if malformed
        if index < FIRST_AWAKEABLE_SIGNAL:  # built-in signals (1 = cancel) are not awakeables
            raise BadRequest(f"malformed awakeable id: signal index {index} is not an awakeable's (17 and up)")
        signal.idx = index
        entry = encode_frames([frame(signal)])
        limit = min(JOURNAL_ENTRY_LIMIT_BYTES, self.engine.facts.value_limit_bytes)
        if len(entry) > limit:  # it could never be folded into the journal
            raise ItemTooLarge(
                f"the awakeable completion takes {len(entry)} bytes, more than the {limit} bytes "
                f"{what_holds(limit)}; complete it with a smaller value"
            )
        self.engine.effects.notify(invocation_id, StoredNotification(f"s{index}", entry, 0))  # NotFound (404)
        return HttpResponse(202)

    def attach_workflow(self, request: HttpRequest, service: str, key: str) -> HttpResponse:
        """Wait for workflow `key`'s `run` result; 404 if it was never started (or its retention ended)."""
        return self.attach(request, self._workflow_run(service, key))

    def workflow_output(self, request: HttpRequest, service: str, key: str) -> HttpResponse:
        """The workflow's result, `470` while it runs, `404` for an unknown workflow id."""
        return self.output(request, self._workflow_run(service, key))

    def _workflow_run(self, service: str, key: str) -> str:
        if self.engine.registry.service(service).ty != "WORKFLOW":
            raise BadRequest(f"'{service}' is not a workflow")
        invocation_id = self.engine.workflow_run_id(service, key)
        if self.store.get_invocation(invocation_id) is None:
            raise NotFound(f"workflow {service} with id '{key}' not found")
        return invocation_id

    def attach(self, request: HttpRequest, invocation_id: str) -> HttpResponse:
        """Wait for the invocation's result, like a call (202 if it does not finish in time)."""
        self._record(invocation_id)
        return self._wait(invocation_id, self.call_wait_ms / 1000)

    def output(self, request: HttpRequest, invocation_id: str) -> HttpResponse:
        """The result if the invocation completed, else `470` (not ready)."""
        record = self._record(invocation_id)
        if record.status != "completed":
            return HttpResponse.json(
                {"code": NOT_READY, "message": f"invocation {invocation_id} has not completed yet ({record.status})"},
                NOT_READY,
                {"x-restate-id": invocation_id},
            )
        return self._result(record)

    def attach_idempotent(
        self, request: HttpRequest, service: str, handler: str, idempotency_key: str, key: str = ""
    ) -> HttpResponse:
        """Attach to the invocation sent to `service/handler` (of object `key`) with `idempotency_key`,
        like `attach` by id. 404 if there is none (never sent, or its retention ended)."""
        return self.attach(request, self._idempotent_invocation(service, handler, key, idempotency_key))

    def output_idempotent(
        self, request: HttpRequest, service: str, handler: str, idempotency_key: str, key: str = ""
    ) -> HttpResponse:
        """The result of the invocation sent with `idempotency_key`, like `output` by id (`470` while it runs)."""
        return self.output(request, self._idempotent_invocation(service, handler, key, idempotency_key))

    def empty_key(self, request: HttpRequest, **_: str) -> HttpResponse:
        """A path with an empty virtual object or workflow key (`/Counter//add`): always a 400."""
        raise BadRequest(
            f"the key in {request.path} is empty: a virtual object or workflow key needs at least one character"
        )

    # --- helpers ------------------------------------------------------------------------------------

    def _kept_headers(self, request: HttpRequest) -> dict[str, str]:
        """The request's headers the invocation keeps (`Settings.persisted_headers`); the rest,
        credentials among them, are never stored."""
        keeps = self.engine.settings.keeps_header
        return {name: value for name, value in request.headers.items() if keeps(name)}

    def _idempotent_invocation(self, service: str, handler: str, key: str, idempotency_key: str) -> str:
        """The id of the live invocation sent to the target with `idempotency_key`; `NotFound` if none.

        The id is derived from target and key (`ids.idempotent_invocation_id`); a completed invocation
        whose retention ended but which the sweep has not removed yet counts as gone.
        """
        self._check_key(self.engine.registry.resolve(service, handler), key)
        invocation_id = self.engine.idempotent_invocation_id(service, handler, key, idempotency_key)
        record = self.store.get_invocation(invocation_id)
        expired = (
            record is not None
            and record.status == "completed"
            and 0 < record.expires_at_s * 1000 <= self.engine.clock.now_ms()
        )
        if record is None or expired:
            target = f"{service}/{key}/{handler}" if key else f"{service}/{handler}"
            raise NotFound(
                f"invocation of {target} with idempotency key {idempotency_key!r} not found "
                "(never sent, or its retention ended)"
            )
        return invocation_id

    def _target(self, request: HttpRequest, service: str, handler: str, key: str) -> Target:
        target = self.engine.registry.resolve(service, handler)
        if target.options.ingress_private:
            raise TorporError(f"service '{service}' is private: only other services may call it", status=403)
        self._check_key(target, key)
        validate_input(target, request.body, request.headers.get("content-type"))
        return target

    def _check_key(self, target: Target, key: str) -> None:
        """A plain service takes no key, a virtual object or workflow needs one; else `BadRequest`."""
        service, handler = target.service, target.handler
        if target.service_type == "SERVICE" and key:
            raise BadRequest(f"'{service}' is a service, not a virtual object or workflow: call /{service}/{handler}")
        if target.service_type != "SERVICE" and not key:
            kind = "virtual object" if target.service_type == "VIRTUAL_OBJECT" else "workflow"
            raise BadRequest(f"'{service}' is a {kind}: call it with a key, /{service}/{{key}}/{handler}")

    def _idempotency_key(self, request: HttpRequest, target: Target) -> str:
        """The `idempotency-key` header; `BadRequest` (400) for an empty one (it must not be empty) and
        for any on a workflow's `run` handler, which runs once per workflow id already (restate-server
        refuses it too; a key would also give the run an id other than the workflow's)."""
        value = request.headers.get("idempotency-key")
        if value is None:
            return ""
        if target.service_type == "WORKFLOW" and target.handler_type == "WORKFLOW":
            raise BadRequest(
                f"idempotency keys are not accepted on workflow handlers: '{target.service}/{target.handler}' "
                "runs once per workflow id already; drop the idempotency-key header"
            )
        if not value.strip():
            raise BadRequest("the idempotency-key header must not be empty")
        return value

    def _reject_delay(self, request: HttpRequest) -> None:
        if request.query("delay") is not None:
            raise BadRequest("delay is only allowed on send: use /restate/send/... or .../send?delay=10s")

    def _record(self, invocation_id: str) -> InvocationRecord:
        record = self.store.get_invocation(invocation_id)
        if record is None:
            raise NotFound(f"invocation {invocation_id} not found")
        return record

    def _wait(
        self, invocation_id: str, timeout_s: float, watched: tuple[threading.Event, InvocationRecord] | None = None
    ) -> HttpResponse:
        """Wait for completion (in-process wake-ups, a store re-read every `_POLL_S`); 202 after `timeout_s`.

        `watched`: the caller's event from `waiters.watching`, set up before the record it holds was
        read (that record is not re-read unless the event fired meanwhile).
        """
        deadline = time.monotonic() + timeout_s
        with contextlib.ExitStack() as stack:
            if watched is None:
                event, known = stack.enter_context(self.waiters.watching(invocation_id)), None
            else:
                event, known = watched
            while True:
                if known is not None and not event.is_set():
                    record, known = known, None
                else:
                    event.clear()
                    record = self._record(invocation_id)
                if record.status == "completed":
                    return self._result(record)
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.engine.stopping.is_set():
                    break
                event.wait(min(_POLL_S, remaining))
        return HttpResponse.json(
            {"invocationId": invocation_id, "status": "Accepted"}, 202, {"x-restate-id": invocation_id}
        )

    def _result(self, record: InvocationRecord) -> HttpResponse:
        headers = {"x-restate-id": record.invocation_id}
        if record.failure is not None:
            failure = dict(record.failure)
            error = TorporError(str(failure.get("message", "")), status=_http_status(failure.get("code", 500)))
            body = {"code": int(str(failure.get("code", 500))), "message": error.message}
            if metadata_of(failure):
                body["metadata"] = metadata_of(failure)
            return with_error_source(HttpResponse.json(body, error.status, headers), "invocation")
        output = record.output or b""
        if output:
            headers["content-type"] = record.output_content_type
        return HttpResponse(200, output, headers)


__all__ = [
    "CORS_HEADERS",
    "ERROR_SOURCE_HEADER",
    "NOT_READY",
    "CorsRouter",
    "Ingress",
    "error_response",
    "with_error_source",
]
