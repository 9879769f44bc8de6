"""The admin API (default port 9070): deployments, services, invocations, health.

Shapes follow Restate's admin API: `POST /deployments` takes `{"uri", "additional_headers", "force",
"use_http_11", "dry_run", "breaking", "metadata"}` and answers `201 {"id", "services", ...}`; lists are
wrapped (`{"deployments": [...]}`, `{"services": [...]}`). Times are RFC 3339 strings.
"""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata
from typing import Any

from control_plane import ids
from control_plane.durations import parse_duration_ms, rfc3339
from control_plane.endpoints import parse_additional_headers, parse_metadata, parse_registration
from control_plane.entry_names import EntryNaming, name_entry, name_journal
from control_plane.errors import BadRequest, Conflict, NotFound
from control_plane.ids import FIRST_AWAKEABLE_SIGNAL, awakeable_id
from control_plane.invocation import Engine
from control_plane.journal import AwaitPoint, Journal, stored_frames
from control_plane.keyed import slots_of
from control_plane.limits import (
    HANDLER_LIMITS,
    HANDLER_RATES,
    POOL_PREFIX,
    SERVICE_LIMIT,
    SERVICE_RATE,
    Rules,
    delete_rules,
    upsert_rules,
)
from control_plane.observability import PrometheusMetrics
from control_plane.ports import (
    COMPLETION_KINDS,
    INVOCATION_STATUSES,
    DeploymentRecord,
    InvocationRecord,
    JournalBatch,
    LoadedInvocation,
    ServiceRecord,
    Store,
    StoreConflict,
)
from control_plane.protocol import Frame, MessageType, is_command, is_notification, type_name
from control_plane.protocol import protocol_pb2 as pb
from control_plane.registry import Registry, same_services
from http_api import admin_openapi, ui
from http_api.admin_debug import WaitsCache, awaited_by, waiting_for
from http_api.admin_shapes import (
    ADMIN_API_VERSION,
    RESTATE_FEATURES,
    RESTATE_SERVER_VERSION,
    service_json,
    service_revisions,
    state_version,
)
from http_api.http import HttpRequest, HttpResponse, Router
from http_api.prices import cost_usd
from http_api.query import SqlEngine, serve_query

_PREVIEW_BYTES = 200


def preview(data: bytes) -> Any:
    """A value for display: JSON if it parses, else text, else base64; cut at 200 bytes."""
    if len(data) > _PREVIEW_BYTES:
        return data[:_PREVIEW_BYTES].decode("utf-8", "replace") + "…"
    try:
        return json.loads(data)
    except ValueError:
        try:
            return data.decode()
        except UnicodeDecodeError:
            return "base64:" + base64.b64encode(data).decode()


def describe_entry(
    index: int, entry: Frame, stored_at_ms: int = 0, naming: EntryNaming | None = None
) -> dict[str, Any]:
    """One journal entry decoded for people: index, kind, type, name, ids, what it touches and a
    value preview (`describe_frame`; `naming` as `name_journal` gives it for the entry, which knows
    a call's callee).

    `stored_at` is when the entry was committed (RFC 3339; omitted if `stored_at_ms` is 0); a Sleep
    command has its `wake_up_at` (also as `wake_up_time`, the name the CLI reads).
    """
    out: dict[str, Any] = {"index": index, **describe_frame(entry, naming)}
    if stored_at_ms:
        out["stored_at"] = rfc3339(stored_at_ms)
    return out


def describe_frame(entry: Frame, naming: EntryNaming | None = None) -> dict[str, Any]:
    """A protocol message decoded for people: kind, type, name, ids, value preview, failure (code,
    message, metadata if any), wake-up time; a Call or OneWayCall has its `target` (`service/handler`)
    and, to a keyed service, `key`.

    What the entry touches (`control_plane.entry_names`, `naming` or else `name_entry(entry)`):
    `entry_type` (`Command: SetState`, Restate's words), `details` (`key email`, `Tally/w1/add
    inv_1…`, `until …`, `awakeable sign_1…`, as `restate invocations describe` words them),
    and, those the entry has, `state_key`, `promise_name`, `invoked_id` (a call's callee, an attach's
    invocation), `invoke_at` (a delayed send), `awakeable_id`, `signal`, `attach_to`."""
    naming = naming if naming is not None else name_entry(entry)
    kind = "command" if is_command(entry.type) else "notification" if is_notification(entry.type) else "custom"
    out: dict[str, Any] = {"kind": kind, "type": type_name(entry.type), "entry_type": naming.entry_type}
    details = naming.details()
    if details:
        out["details"] = details
    for field_name in ("state_key", "promise_name", "invoked_id", "awakeable_id", "signal", "attach_to"):
        value = getattr(naming, field_name)
        if value is not None:
            out[field_name] = value
    if naming.invoke_at_ms:
        out["invoke_at"] = rfc3339(naming.invoke_at_ms)
    message = entry.decode()
    if message is None:
        return out
    fields = {f.name: v for f, v in message.ListFields()}
    if "name" in fields and entry.type != MessageType.Signal:
        out["name"] = fields["name"]
    for id_field in ("result_completion_id", "completion_id", "signal_id", "idx"):
        if id_field in fields:
            out[id_field] = fields[id_field]
    value = fields.get("value")
    if isinstance(value, pb.Value):
        out["value"] = preview(value.content)
    elif isinstance(value, bytes):  # e.g. ProposeRun-derived values are Value messages; keep bytes too
        out["value"] = preview(value)
    failure = fields.get("failure")
    if isinstance(failure, pb.Failure):
        out["failure"] = {"code": failure.code, "message": failure.message}
        if failure.metadata:  # as stored: left out when empty
            out["failure"]["metadata"] = {m.key: m.value for m in failure.metadata}
    if entry.type == MessageType.Sleep:
        out["wake_up_at"] = out["wake_up_time"] = rfc3339(fields.get("wake_up_time", 0))
    if isinstance(fields.get("invocation_id"), str):
        out["invocation_id"] = fields["invocation_id"]
    if "service_name" in fields:
        out["target"] = f"{fields['service_name']}/{fields.get('handler_name', '')}"
        if isinstance(fields.get("key"), str):  # a call to a virtual object or workflow: its key
            out["key"] = fields["key"]
    return out


def stored_times(record: InvocationRecord, batches: Sequence[JournalBatch], length: int) -> list[int]:
    """When each of the journal's `length` entries was stored (ms): the Input with the invocation,
    the others with the batch that committed them."""
    starts = [(0, record.created_at_ms), *((b.start_index, b.committed_at_ms) for b in batches)]
    times: list[int] = []
    for i, (start, ms) in enumerate(starts):
        end = starts[i + 1][0] if i + 1 < len(starts) else length
        times.extend([ms] * max(0, end - start))
    return times


def pending_notifications(loaded: LoadedInvocation, journal: Journal) -> list[dict[str, Any]]:
    """Notifications delivered from outside (awakeables, cancel) and not yet folded into the journal,
    in the order they were stored, each decoded with its `key` and `stored_at`."""
    out: list[dict[str, Any]] = []
    for stored in sorted(loaded.notifications, key=lambda n: (n.created_at_ms, n.key)):
        if journal.has(stored.key):
            continue
        for entry in stored_frames(stored.entry):
            naming = name_entry(entry, loaded.record.invocation_id)
            out.append({"key": stored.key, **describe_frame(entry, naming), "stored_at": rfc3339(stored.created_at_ms)})
    return out


def deployment_json(d: DeploymentRecord, services: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A deployment as the admin API shows it: `arn` for a Lambda deployment, else `uri`; `services`
    as given (`admin_shapes.service_json` of each, or `service_revisions` in a list), else their names
    and revision 1."""
    is_lambda = d.endpoint.startswith("arn:")
    return {
        "id": d.deployment_id,
        ("arn" if is_lambda else "uri"): d.endpoint,
        **({"assume_role_arn": d.auth["assume_role_arn"]} if "assume_role_arn" in d.auth else {}),
        **({"auth": dict(d.auth)} if "google_id_token" in d.auth else {}),
        "protocol_type": "BidiStream" if d.protocol_mode == "BIDI_STREAM" else "RequestResponse",
        **({} if is_lambda else {"http_version": "HTTP/2.0" if d.protocol_mode == "BIDI_STREAM" else "HTTP/1.1"}),
        "additional_headers": dict(d.additional_headers),
        "metadata": dict(d.metadata),
        "created_at": rfc3339(d.created_at_ms),
        "min_protocol_version": d.min_protocol_version,
        "max_protocol_version": d.max_protocol_version,
        "sdk_version": d.manifest.get("sdkVersion") if isinstance(d.manifest, dict) else None,
        "services": services if services is not None else [{"name": n, "revision": 1} for n in d.services],
    }


def _failure_json(failure: Mapping[str, object] | None) -> dict[str, Any] | None:
    """A stored attempt failure, with `at` (RFC 3339) beside its `at_ms`."""
    if not failure:
        return None
    out = dict(failure)
    at_ms = out.get("at_ms")
    if isinstance(at_ms, int):
        out["at"] = rfc3339(at_ms)
    return out


def completion_kind(record: InvocationRecord) -> str:
    """How a completed invocation ended: `succeeded`, `failed`, `cancelled` or `killed` (stored by
    the completing write; a record stored before that field existed says `succeeded` or `failed`)."""
    return record.completion or ("failed" if record.failure else "succeeded")


def invocation_json(
    record: InvocationRecord, journal: Journal | None = None, stored_at_ms: Sequence[int] = ()
) -> dict[str, Any]:
    """An invocation as the admin API shows it; with `journal`, each entry decoded (with the time
    it was stored, from `stored_at_ms`, one per entry, when given)."""
    target = f"{record.service}/{record.key}/{record.handler}" if record.key else f"{record.service}/{record.handler}"
    out: dict[str, Any] = {
        "id": record.invocation_id,
        "target": target,
        "target_service_name": record.service,
        "target_handler_name": record.handler,
        "target_service_key": record.key or None,
        "status": record.status,
        "deployment_id": record.deployment_id,
        "protocol_version": record.protocol_version,
        "attempts": record.attempts,
        "retry_count": record.retry_count,
        "next_retry_at": rfc3339(record.next_retry_at_ms),
        "execution_time": rfc3339(record.execution_time_ms),
        "wake_up_at": rfc3339(record.wake_up_at_ms),
        "waiting_on": dict(record.waiting_on) if record.waiting_on and record.status == "suspended" else None,
        "last_failure": _failure_json(record.last_failure),
        "created_at": rfc3339(record.created_at_ms),
        "modified_at": rfc3339(record.modified_at_ms),
        "completed_at": rfc3339(record.completed_at_ms),
        "journal_length": len(journal) if journal is not None else record.journal_length,
        "idempotency_key": record.idempotency_key or None,
        "trace_id": record.trace_id or None,
        "invoked_by_id": record.caller_id or None,
        "aws_requests": dict(record.requests or {}),
        "aws_cost_usd": {k: round(v, 9) for k, v in cost_usd(record.requests or {}).items()},
    }
    if record.slot_limit:  # counted against a concurrency limit: `pending` while it waits for a slot
        out["concurrency_limit"] = {"pool": record.slot.removeprefix(POOL_PREFIX), "limit": record.slot_limit}
        if record.more_slots:  # every limit it counts against, in the order it takes their slots
            out["concurrency_limits"] = [
                {"pool": scope.removeprefix(POOL_PREFIX), "limit": n} for scope, n in slots_of(record)
            ]
    if record.status == "completed":
        out["completion_result"] = "failure" if record.failure else "success"
        out["completion_kind"] = completion_kind(record)
        if record.failure:
            out["completion_failure"] = dict(record.failure)
        elif record.output is not None:
            out["completion_output"] = preview(record.output)
    if journal is not None:
        times = list(stored_at_ms) or [0] * len(journal)
        namings = name_journal(record.invocation_id, journal)
        out["journal"] = [
            describe_entry(i, f, at, naming)
            for i, (f, at, naming) in enumerate(zip(journal, times, namings, strict=True))
        ]
    return out


_DURATION_OPTIONS = {
    "inactivity_timeout": "inactivityTimeout",
    "abort_timeout": "abortTimeout",
    "journal_retention": "journalRetention",
    "idempotency_retention": "idempotencyRetention",
    "workflow_completion_retention": "workflowCompletionRetention",
}
_RETRY_OPTIONS = {
    "initial_interval": "retryPolicyInitialInterval",
    "max_interval": "retryPolicyMaxInterval",
}


_ALL_RETRY_OPTIONS = (
    *_RETRY_OPTIONS.values(),
    "retryPolicyMaxAttempts",
    "retryPolicyExponentiationFactor",
    "retryPolicyOnMaxAttempts",
)


def _duration(field_name: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        value = str(value)  # a number of ms: the parser's bounds apply as to "1500"
    if isinstance(value, str):
        try:
            return parse_duration_ms(value)
        except ValueError as exc:
            raise BadRequest(f"{field_name}: {exc}") from exc
    raise BadRequest(f'{field_name}: expected a duration such as "30s" or a number of ms, got {value!r}')


def service_overrides(body: dict[str, Any]) -> dict[str, Any]:
    """Translate a `PATCH /services/{name}` body into manifest-named overrides (ms). Raises `BadRequest`."""
    out: dict[str, Any] = {}
    for field_name, value in body.items():
        if field_name in _DURATION_OPTIONS:
            out[_DURATION_OPTIONS[field_name]] = _duration(field_name, value)
        elif field_name in ("public", "ingress_private"):
            if value is not None and not isinstance(value, bool):
                raise BadRequest(f"{field_name}: expected true or false")
            private = None if value is None else (not value if field_name == "public" else value)
            out["ingressPrivate"] = private
        elif field_name == "retry_policy":
            out.update(_retry_overrides(value))
        elif field_name == "rate_limit":
            out[SERVICE_RATE] = _rate(field_name, value)
        elif field_name == "handler_rate_limits":
            if not isinstance(value, dict):
                raise BadRequest(f'{field_name}: expected an object such as {{"handler": 2.5}} (null removes one)')
            out[HANDLER_RATES] = {str(h): _rate(f"{field_name}.{h}", n) for h, n in value.items()}
        elif field_name == "concurrency_limit":
            out[SERVICE_LIMIT] = _limit(field_name, value)
        elif field_name == "handler_concurrency_limits":
            if not isinstance(value, dict):
                raise BadRequest(f'{field_name}: expected an object such as {{"handler": 10}} (null removes one)')
            out[HANDLER_LIMITS] = {str(h): _limit(f"{field_name}.{h}", n) for h, n in value.items()}
        else:
            known = ", ".join([*_DURATION_OPTIONS, "public", "retry_policy", "concurrency_limit",
                               "handler_concurrency_limits", "rate_limit", "handler_rate_limits"])
            raise BadRequest(f"unknown service option {field_name!r}; known: {known}")
    return out


def _limit(field_name: str, value: object) -> int | None:
    """A concurrency limit: a whole number of at least 1, or None (removes it). Raises `BadRequest`."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadRequest(f"{field_name}: expected a whole number of at least 1 (null removes the limit), got {value!r}")
    return value


def _rate(field_name: str, value: object) -> float | None:
    """A rate limit in starts per second: a number above 0 (at most 1000), or None. Raises `BadRequest`."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1000:
        raise BadRequest(f"{field_name}: expected starts per second, a number above 0 and at most 1000, got {value!r}")
    return float(value)


def _retry_overrides(value: object) -> dict[str, Any]:
    if value is None:
        return dict.fromkeys(_ALL_RETRY_OPTIONS)
    if not isinstance(value, dict):
        raise BadRequest("retry_policy: expected an object")
    out: dict[str, Any] = {}
    for name, item in value.items():
        if name in _RETRY_OPTIONS:
            out[_RETRY_OPTIONS[name]] = _duration(f"retry_policy.{name}", item)
        elif name == "max_attempts":
            if item is not None and (isinstance(item, bool) or not isinstance(item, int) or item < 1):
                raise BadRequest("retry_policy.max_attempts: expected an integer of at least 1")
            out["retryPolicyMaxAttempts"] = item
        elif name == "exponentiation_factor":
            if item is not None and (isinstance(item, bool) or not isinstance(item, int | float) or item < 1):
                raise BadRequest("retry_policy.exponentiation_factor: expected a number of at least 1")
            out["retryPolicyExponentiationFactor"] = item
        elif name == "on_max_attempts":
            if item is not None and str(item).lower() not in ("pause", "kill"):
                raise BadRequest("retry_policy.on_max_attempts: expected pause or kill")
            out["retryPolicyOnMaxAttempts"] = None if item is None else str(item).upper()
        else:
            raise BadRequest(f"unknown retry_policy option {name!r}")
    return out


_VERSION_PREFIX = f"/v{ADMIN_API_VERSION}"
"""Restate's versioned admin paths (`/v4/services`): the `restate` CLI adds the prefix once `GET /version` names it."""


def _versioned(request: HttpRequest) -> bool:
    """Whether the request came by a versioned path (`/v4/...`), as Restate's own clients send them."""
    return request.path.startswith(_VERSION_PREFIX + "/")


def _torpor_version() -> str:
    try:
        return metadata.version("torpor")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


_PAGE_TOKEN = re.compile(r"([0-9]{1,16})\.(inv_1[0-9A-Za-z]{22}(?:[0-9A-Za-z]{11})?)")
"""A `next_page_token`: `{created_at_ms}.{invocation_id}`, ASCII digits only (`str.isdigit` admits `²`)."""


def _parse_page_token(token: str | None) -> tuple[int, str] | None:
    """`(created_at_ms, invocation_id)` from a `next_page_token`; `BadRequest` (400) if malformed."""
    if token is None:
        return None
    match = _PAGE_TOKEN.fullmatch(token)
    if match is None:
        raise BadRequest("malformed page_token: pass the next_page_token of the previous answer unchanged")
    return int(match.group(1)), match.group(2)


class Admin:
    """Admin routes over the registry and the store."""

    def __init__(self, registry: Registry, store: Store, engine: Engine, *, ingress_url: str | None = None) -> None:
        self.registry = registry
        self.store = store
        self.engine = engine
        self.ingress_url = ingress_url  # for the web UI's playground (GET /ui/config.json); None: unknown
        self.sql: SqlEngine | None = None  # POST /query; set by the edge when the `query` extra is installed
        self._waits = WaitsCache()  # `waiting_for` of suspended invocations in lists (`?waiting_for=true`)
        self.router = Router(optional_prefix=_VERSION_PREFIX)
        r = self.router
        r.add("GET", "/", self.ui_redirect)
        r.add("GET", "/ui", self.ui_index)
        r.add("GET", "/ui/config.json", self.ui_config)
        r.add("GET", "/ui/{name}", self.ui_file)
        r.add("GET", "/health", self.health)
        r.add("GET", "/version", self.version)
        r.add("GET", "/openapi", self.openapi)
        r.add("GET", "/metrics", self.metrics)
        r.add("POST", "/deployments", self.register)
        r.add("GET", "/deployments", self.list_deployments)
        r.add("GET", "/deployments/{deployment_id}", self.get_deployment)
        r.add("DELETE", "/deployments/{deployment_id}", self.delete_deployment)
        r.add("GET", "/services", self.list_services)
        r.add("GET", "/services/{name}", self.get_service)
        r.add("PATCH", "/services/{name}", self.configure_service)
        r.add("GET", "/limits/rules", self.list_rules)
        r.add("PUT", "/limits/rules", self.upsert_rules)
        r.add("POST", "/limits/rules/bulk-delete", self.delete_rules)
        r.add("GET", "/services/{name}/handlers", self.list_handlers)
        r.add("GET", "/services/{name}/handlers/{handler}", self.get_handler)
        r.add("POST", "/services/{name}/state", self.modify_state)
        r.add("GET", "/services/{name}/state", self.list_state_keys)
        r.add("GET", "/services/{name}/state/{key}", self.get_state)
        r.add("DELETE", "/services/{name}/state/{key}", self.clear_state)
        r.add("GET", "/invocations", self.list_invocations)
        r.add("GET", "/invocations/{invocation_id}", self.get_invocation)
        r.add("PATCH", "/invocations/{invocation_id}/cancel", self.cancel_invocation)
        r.add("PATCH", "/invocations/{invocation_id}/kill", self.kill_invocation)
        r.add("PATCH", "/invocations/{invocation_id}/pause", self.pause_invocation)
        r.add("PATCH", "/invocations/{invocation_id}/resume", self.resume_invocation)
        r.add("PATCH", "/invocations/{invocation_id}/purge", self.purge_invocation)
        r.add("PATCH", "/invocations/{invocation_id}/restart-as-new", self.restart_invocation_as_new)
        r.add("DELETE", "/invocations/{invocation_id}", self.purge_invocation)
        r.add("POST", "/query", self.query)

    def ui_redirect(self, request: HttpRequest) -> HttpResponse:
        """`302` to the web UI (a relative location, so it holds behind a path prefix too)."""
        return HttpResponse(302, b"", {"location": "ui/"})

    def ui_index(self, request: HttpRequest) -> HttpResponse:
        """The web UI's page at `/ui/`; `/ui` redirects there, so its relative links resolve under `/ui/`."""
        if not request.path.endswith("/"):
            return HttpResponse(302, b"", {"location": "ui/"})
        return self.ui_file(request, "index.html")

    def ui_config(self, request: HttpRequest) -> HttpResponse:
        """`{"ingress_url": ...}`: where the UI's playground sends requests (null: the UI asks for it)."""
        return HttpResponse.json({"ingress_url": self.ingress_url}, headers={"cache-control": "no-store"})

    def ui_file(self, request: HttpRequest, name: str) -> HttpResponse:
        """One static file of the web UI (HTML, JavaScript module, CSS); 404 if there is none by that name."""
        response = ui.static_response(request, name)
        if response is None:
            raise NotFound(f"the web UI has no file {name!r}")
        return response

    def metrics(self, request: HttpRequest) -> HttpResponse:
        """This process's metrics in the Prometheus text format (`torpor dev`); 404 where they go to
        CloudWatch as EMF instead (the Lambda functions)."""
        metrics = self.engine.metrics
        if not isinstance(metrics, PrometheusMetrics):
            raise NotFound("this control plane exports its metrics as CloudWatch EMF, not on /metrics")
        return HttpResponse(200, metrics.render(), {"content-type": "text/plain; version=0.0.4; charset=utf-8"})

    def health(self, request: HttpRequest) -> HttpResponse:
        """`200 {"status": "ok", "pid"}` once the store answers; `pid`: the process that answered
        (`torpor dev --workers N` runs several on one port)."""
        self.store.list_deployments()
        return HttpResponse.json({"status": "ok", "pid": os.getpid()})

    def version(self, request: HttpRequest) -> HttpResponse:
        """`{"version", "min_admin_api_version", "max_admin_api_version", "ingress_endpoint", "features"}`
        (restate-server's `VersionInformation`): the restate-server version whose API Torpor serves,
        with Torpor's own as build metadata (`1.7.12+torpor.0.1.0`; Restate's web UI reads the
        first part to choose its queries), the one admin API version it serves (4, restate-server
        1.7's, which Restate's CLI then puts before each path, `/v4/...`), and restate-server's
        feature flags, all `false` (`RESTATE_FEATURES`)."""
        return HttpResponse.json(
            {
                "version": f"{RESTATE_SERVER_VERSION}+torpor.{_torpor_version()}",
                "min_admin_api_version": ADMIN_API_VERSION,
                "max_admin_api_version": ADMIN_API_VERSION,
                "ingress_endpoint": self.ingress_url,
                "features": dict.fromkeys(RESTATE_FEATURES, False),
            }
        )

    def openapi(self, request: HttpRequest) -> HttpResponse:
        """This admin API described as an OpenAPI 3.1 document (`http_api.admin_openapi`)."""
        return HttpResponse.json(admin_openapi.document(_torpor_version()))

    def _service_json(self, record: ServiceRecord) -> dict[str, Any]:
        return service_json(record, self.registry.config_of(record))

    def register(self, request: HttpRequest) -> HttpResponse:
        """Register a deployment by `uri` or Lambda `arn` (see `control_plane.endpoints`): discovery,
        then 201 with its id and services. `"use_http_11": true` keeps an HTTP/2 endpoint in
        request/response mode (see `Registry.discover_mode`). 400 naming the fix for a bad body or an unpinned ARN."""
        body = request.json()
        if not isinstance(body, dict):
            raise BadRequest('the body must be a JSON object like {"uri": "http://localhost:9080"}')
        headers = parse_additional_headers(body.get("additional_headers"))
        force = body.get("force", False)
        if not isinstance(force, bool):
            raise BadRequest('"force" must be true or false')
        use_http_11 = body.get("use_http_11", False)
        if not isinstance(use_http_11, bool):
            raise BadRequest('"use_http_11" must be true or false')
        target = parse_registration(body, force=force)
        metadata = parse_metadata(body.get("metadata"))
        dry_run = body.get("dry_run", False)
        if not isinstance(dry_run, bool):
            raise BadRequest('"dry_run" must be true or false')
        if dry_run:
            answer = self._dry_run(target.endpoint, headers, target.auth)
            return HttpResponse.json(answer, 201 if answer["changes"] else 200)
        deployment, _ = self.registry.register(
            target.endpoint, headers, force=force, metadata=metadata, auth=target.auth, use_http_11=use_http_11
        )
        services = [self._service_json(s) for s in self.store.list_services() if s.name in deployment.services]
        return HttpResponse.json(deployment_json(deployment, services), 201)

    def _dry_run(self, endpoint: str, headers: dict[str, str], auth: Mapping[str, object]) -> dict[str, Any]:
        """What registering `endpoint` would make (nothing is stored): `{"id", "services", "dry_run": true,
        "min_protocol_version", "max_protocol_version"}`, each service as `GET /services/{name}` would
        show it then, and `changes`: false if the endpoint is registered with the same services (the
        answer is then 200, else 201, as restate-server answers). `id` is the registered deployment's
        if the endpoint is registered, else a new one."""
        manifest = self.registry.discover(endpoint, headers, auth)
        existing = next((d for d in self.store.list_deployments() if d.endpoint == endpoint), None)
        deployment_id = existing.deployment_id if existing else ids.new_deployment_id()
        changes = existing is None or not same_services(existing.manifest, manifest)
        services = []
        for service in manifest["services"]:
            previous = self.store.get_service(service["name"])
            kept = previous is not None and not changes and previous.deployment_id == deployment_id
            revision = (previous.revision + (0 if kept else 1)) if previous else 1
            overrides = previous.overrides if previous else {}
            record = ServiceRecord(service["name"], deployment_id, service["ty"], service, revision, overrides)
            services.append(self._service_json(record))
        return {
            "id": deployment_id,
            "services": services,
            "min_protocol_version": manifest.get("minProtocolVersion"),
            "max_protocol_version": manifest.get("maxProtocolVersion"),
            "sdk_version": manifest.get("sdkVersion"),
            "dry_run": True,
            "changes": changes,
        }

    def list_deployments(self, request: HttpRequest) -> HttpResponse:
        """`{"deployments": [...]}`, each with its services as `{"name", "revision"}`."""
        deployments = self.store.list_deployments()
        services = self.store.list_services()
        return HttpResponse.json(
            {"deployments": [deployment_json(d, service_revisions(d, deployments, services)) for d in deployments]}
        )

    def get_deployment(self, request: HttpRequest, deployment_id: str) -> HttpResponse:
        """One deployment with its services. 404 if unknown."""
        deployment = self.store.get_deployment(deployment_id)
        if deployment is None:
            raise NotFound(
                f"deployment {deployment_id} not found; list them with torpor deployments list (GET /deployments)"
            )
        services = [self._service_json(s) for s in self.store.list_services() if s.deployment_id == deployment_id]
        return HttpResponse.json(deployment_json(deployment, services))

    def delete_deployment(self, request: HttpRequest, deployment_id: str) -> HttpResponse:
        """Remove a deployment and the services pointing at it; 202. `?force=true` even if invocations are pinned."""
        self.registry.remove(deployment_id, force=request.flag("force"))
        return HttpResponse(202)

    def list_services(self, request: HttpRequest) -> HttpResponse:
        """`{"services": [...]}`."""
        return HttpResponse.json({"services": [self._service_json(s) for s in self.store.list_services()]})

    def get_service(self, request: HttpRequest, name: str) -> HttpResponse:
        """One service with its effective configuration and where each value comes from; 404 if unknown."""
        record = self.registry.service(name)
        config = self.registry.config_of(record)
        return HttpResponse.json({**service_json(record, config), "config": config})

    def list_handlers(self, request: HttpRequest, name: str) -> HttpResponse:
        """`{"handlers": [...]}` of a service, each as `GET /services/{name}/handlers/{handler}`; 404 if unknown."""
        return HttpResponse.json({"handlers": self._service_json(self.registry.service(name))["handlers"]})

    def get_handler(self, request: HttpRequest, name: str, handler: str) -> HttpResponse:
        """One handler (`HandlerMetadata`): types, input/output descriptions and schemas, options; 404 if unknown."""
        handlers = self._service_json(self.registry.service(name))["handlers"]
        found = next((h for h in handlers if h["name"] == handler), None)
        if found is None:
            raise NotFound(f"service {name} has no handler {handler!r}; list them with GET /services/{name}/handlers")
        return HttpResponse.json(found)

    def configure_service(self, request: HttpRequest, name: str) -> HttpResponse:
        """Override a service's options until it is registered again (Restate's admin/CLI level).

        Body (all optional, null removes an override): `inactivity_timeout`, `abort_timeout`,
        `journal_retention`, `idempotency_retention`, `workflow_completion_retention` (durations:
        `"30s"`, `"1 hour"`, `"PT1H"` or ms: `parse_duration_ms`), `public` (bool), `retry_policy`
        {`initial_interval`, `max_interval`, `max_attempts`, `exponentiation_factor`, `on_max_attempts`:
        pause|kill}.
        Answers like `GET /services/{name}`; 400 naming a bad field. By a versioned path (`/v4/...`,
        as Restate's CLI sends its `ModifyServiceRequest`) a null leaves that option unchanged.
        """
        body = request.json()
        if not isinstance(body, dict):
            raise BadRequest('the body must be a JSON object like {"inactivity_timeout": "2m"}')
        if _versioned(request):
            body = {k: v for k, v in body.items() if v is not None}
        self.registry.configure(name, service_overrides(body))
        return self.get_service(request, name)

    def list_rules(self, request: HttpRequest) -> HttpResponse:
        """`{"rules": [...]}`: the concurrency rule book, sorted by pattern (`control_plane.limits`)."""
        rules, _ = self.store.get_rule_book()
        return HttpResponse.json({"rules": [rules[p] for p in sorted(rules)]})

    def upsert_rules(self, request: HttpRequest) -> HttpResponse:
        """`PUT /limits/rules`: upsert a batch of rules, all or nothing (`limits.upsert_rules`: 422 for
        a malformed entry, 409 for a failed precondition); answers the rules as stored. New
        invocations of scoped calls use them at once."""
        return self._edit_rules(lambda book: upsert_rules(book, request.json(), self.engine.clock.now_ms()))

    def delete_rules(self, request: HttpRequest) -> HttpResponse:
        """`POST /limits/rules/bulk-delete`: remove rules by pattern, all or nothing
        (`limits.delete_rules`); answers the patterns removed."""
        return self._edit_rules(lambda book: delete_rules(book, request.json()))

    def _edit_rules(self, edit: Callable[[Rules], tuple[Rules, Any]]) -> HttpResponse:
        """Read the rule book, `edit` it, write it back conditionally (again if another edit won)."""
        for _ in range(8):
            book, version = self.store.get_rule_book()
            new, answer = edit(book)
            try:
                self.store.put_rule_book(new, version)
            except StoreConflict:
                continue
            return HttpResponse.json(answer)
        raise Conflict("the rule book is being edited by others; try again")

    def get_state(self, request: HttpRequest, name: str, key: str) -> HttpResponse:
        """`{"key": key, "state": {name: value}, "version"}` of a virtual object or workflow key.

        Values are decoded for display (JSON if they parse, else text; cut at 200 bytes), or with
        `?encoding=base64` each whole value in base64, as `torpor state get|edit` reads them; with
        `?raw=true` (the web UI's editor) the decoded values and also `raw`, `{name: base64}`.
        `version` is `admin_shapes.state_version` of this state, which `POST /services/{name}/state`
        compares with its `version` (so an edit fails if the state changed since it was read).
        400 for a service without state or an unknown encoding; 404 for an unknown service.
        """
        self._keyed(name)
        encoding = request.query("encoding")
        if encoding not in (None, "base64"):
            raise BadRequest(f"unknown encoding {encoding!r}: leave it out, or ask for encoding=base64")
        state = self.store.load_state(name, key)
        if encoding == "base64":
            shown = {k.decode("utf-8", "replace"): base64.b64encode(v).decode() for k, v in sorted(state.items())}
        else:
            shown = {k.decode("utf-8", "replace"): preview(v) for k, v in sorted(state.items())}
        out: dict[str, Any] = {"key": key, "state": shown, "version": state_version(state)}
        if request.flag("raw"):
            out["raw"] = {k.decode("utf-8", "replace"): base64.b64encode(v).decode() for k, v in sorted(state.items())}
        return HttpResponse.json(out)

    def list_state_keys(self, request: HttpRequest, name: str) -> HttpResponse:
        """`{"keys": [...]}`: the keys of a virtual object or workflow that have state, sorted; at
        most `?limit=` (1..10000, default 1000), with `"truncated": true` if there are more. 400 for
        a service without state or a bad limit; 404 for an unknown service."""
        self._keyed(name)
        try:
            limit = int(request.query("limit") or 1000)
        except ValueError as exc:
            raise BadRequest("limit must be an integer from 1 to 10000") from exc
        if not 1 <= limit <= 10_000:
            raise BadRequest("limit must be an integer from 1 to 10000")
        keys = self.store.state_keys(name, limit + 1)
        body: dict[str, Any] = {"keys": sorted(keys)[:limit]}
        if len(keys) > limit:
            body["truncated"] = True
        return HttpResponse.json(body)

    def clear_state(self, request: HttpRequest, name: str, key: str) -> HttpResponse:
        """Delete all state of one key; 202. Refused (409) while an invocation holds the key."""
        self._keyed(name)
        holder = self.store.lock_holder(name, key)
        if holder is not None:
            raise Conflict(f"invocation {holder} holds key '{key}' of {name}; cancel it or wait, then clear")
        self.store.clear_state(name, key)
        return HttpResponse(202)

    def modify_state(self, request: HttpRequest, name: str) -> HttpResponse:
        """Replace all state of one object key (Restate's `ModifyServiceStateRequest`, the `restate` CLI's
        `state edit`): body `{"object_key", "new_state": {name: [byte, ...]}, "version"?}`; 202.

        With `version` (`admin_shapes.state_version` of the state the caller read), 409 if the state
        changed since. The edit holds the object key like an exclusive invocation (taken if nobody
        holds it or waits for it, else 409; calls arriving meanwhile queue and are handed the key
        after), so no handler writes the key's state between the version check and the write. 400
        for a bad body or a service without state; 404 for an unknown service.
        """
        self._keyed(name)
        body = request.json()
        if not isinstance(body, dict) or not isinstance(body.get("object_key"), str):
            raise BadRequest('the body must be a JSON object like {"object_key": "k", "new_state": {"name": [98]}}')
        key = body["object_key"]
        if not key:
            raise BadRequest('"object_key" must not be empty')
        new_state = body.get("new_state")
        if not isinstance(new_state, dict):
            raise BadRequest('"new_state" must be an object of state names to arrays of bytes (0..255)')
        writes: dict[bytes, bytes | None] = {}
        for state_name, value in new_state.items():
            if not isinstance(value, list) or not all(
                isinstance(b, int) and not isinstance(b, bool) and 0 <= b <= 255 for b in value
            ):
                raise BadRequest(f'"new_state"."{state_name}" must be an array of bytes (integers 0..255)')
            writes[state_name.encode()] = bytes(value)
        version = body.get("version")
        if version is not None and not isinstance(version, str):
            raise BadRequest('"version" must be a string (the state version the change was based on)')
        lock = ids.new_invocation_id()  # a holder no invocation is: a pump releases it if this edit dies holding it
        if self.store.take_key(name, key, lock) is None:
            holder = self.store.lock_holder(name, key)
            busy = f"invocation {holder} holds" if holder else "calls wait for"
            raise Conflict(f"{busy} key '{key}' of {name}; cancel them or wait, then edit the state")
        try:
            if version is not None and version != state_version(self.store.load_state(name, key)):
                raise Conflict(f"the state of {name}/{key} changed since it was read; read it again and retry")
            self.store.apply_state(name, key, writes, clear=True, holder=lock)
        finally:
            waiting = self.store.release_key(name, key, lock)
            if waiting is None or waiting:
                self.engine.keys.pump(name, key)
        return HttpResponse(202)

    def _keyed(self, name: str) -> None:
        if self.registry.service(name).ty == "SERVICE":
            raise BadRequest(f"'{name}' is a service: only virtual objects and workflows have state")

    def list_invocations(self, request: HttpRequest) -> HttpResponse:
        """`{"invocations": [...], "next_page_token"?}`, newest first by creation time (then id, descending).

        Filters: `?status=`, `?service=`, `?handler=`, `?key=`, `?completion=` (a completed one's
        `completion_kind`: succeeded, failed, cancelled, killed); `?limit=` (1..1000, default 100)
        and `?page_token=` (from the previous answer) page through the rest. With `?waiting_for=true`
        a suspended one has `waiting_for` (`admin_debug.waiting_for`: its journal read once per
        version of its record, then cached) and a pending one `waiting_for_key_holder`. A stored record the
        store cannot decode is left out and named in `unreadable` (`[{"invocation_id", "message"}]`).
        """
        status = request.query("status")
        if status is not None and status not in INVOCATION_STATUSES:
            raise BadRequest(f"unknown status {status!r}; one of: {', '.join(INVOCATION_STATUSES)}")
        completion = request.query("completion")
        if completion is not None and completion not in COMPLETION_KINDS:
            raise BadRequest(f"unknown completion {completion!r}; one of: {', '.join(COMPLETION_KINDS)}")
        if completion is not None and status not in (None, "completed"):
            raise BadRequest(f"completion={completion} lists completed invocations only, not status={status}")
        if completion is not None:
            status = "completed"
        try:
            limit = int(request.query("limit") or 100)
        except ValueError as exc:
            raise BadRequest("limit must be an integer from 1 to 1000") from exc
        if not 1 <= limit <= 1000:
            raise BadRequest("limit must be an integer from 1 to 1000")
        before = _parse_page_token(request.query("page_token"))
        records = self.store.list_invocations(
            [status] if status else None,
            request.query("service"),
            limit + 1,
            handler=request.query("handler"),
            key=request.query("key"),
            before=before,
            completion=completion,
        )
        body: dict[str, Any] = {"invocations": [invocation_json(r) for r in records[:limit]]}
        if request.flag("waiting_for"):
            for record, shown in zip(records[:limit], body["invocations"], strict=True):
                self._add_waits(record, shown)
        unreadable = getattr(records, "unreadable", ())  # rows the store could not decode (InvocationPage)
        if unreadable:
            body["unreadable"] = [{"invocation_id": i, "message": message} for i, message in unreadable]
        if len(records) > limit:
            last = records[limit - 1]
            body["next_page_token"] = f"{last.created_at_ms}.{last.invocation_id}"
        return HttpResponse.json(body)

    def get_invocation(self, request: HttpRequest, invocation_id: str) -> HttpResponse:
        """One invocation with its journal decoded entry by entry, each with `stored_at`, and the
        `pending_notifications` waiting outside it; a suspended one lists the ids of the awakeables
        it awaits (`awaiting_awakeables`) and what it waits for in words (`waiting_for`, see
        `admin_debug.waiting_for`). `invoked_by_id` is the invocation whose Call created it (null
        for one from the ingress or a one-way send: the store keeps no sender), with its target in
        `invoked_by_target` (null once purged); `awaited_by` lists the other callers waiting for
        its result. 404 if unknown."""
        loaded = self.store.load_invocation(invocation_id)
        if loaded is None:
            raise NotFound(f"invocation {invocation_id} not found")
        record = loaded.record
        journal = Journal.load(record.input_entry, loaded.batches)
        out = invocation_json(record, journal, stored_times(record, loaded.batches, len(journal)))
        out["pending_notifications"] = pending_notifications(loaded, journal)
        if out["waiting_on"]:
            signals = AwaitPoint.from_json(out["waiting_on"]).signals
            out["awaiting_awakeables"] = [
                awakeable_id(record.invocation_id, i) for i in sorted(signals) if i >= FIRST_AWAKEABLE_SIGNAL
            ]
        if record.status == "pending":
            out["waiting_for_key_holder"] = self.store.lock_holder(record.service, record.key)
        out["waiting_for"] = waiting_for(record, journal)
        out["invoked_by_target"] = None
        if record.caller_id:
            caller = self.store.get_invocation(record.caller_id)
            out["invoked_by_target"] = invocation_json(caller)["target"] if caller else None
        out["awaited_by"] = awaited_by(record)
        cycle = self.engine.operations.deadlock(loaded) if record.status != "completed" else None
        if cycle:
            out["deadlock"] = {
                "cycle": cycle,
                "message": (
                    " waits for ".join(cycle) + ": a cycle of calls that can never complete (e.g. an exclusive "
                    "handler calling an exclusive handler of its own object key); cancel or kill one of them"
                ),
            }
        return HttpResponse.json(out)

    def _add_waits(self, record: InvocationRecord, shown: dict[str, Any]) -> None:
        """Add `waiting_for` (suspended) or `waiting_for_key_holder` (pending) to a listed invocation."""
        if record.status == "pending":
            shown["waiting_for_key_holder"] = self.store.lock_holder(record.service, record.key)
        if record.status != "suspended":
            return
        cached = self._waits.get(record)
        if cached is None:
            loaded = self.store.load_invocation(record.invocation_id)
            if loaded is None:
                return
            cached = waiting_for(loaded.record, Journal.load(loaded.record.input_entry, loaded.batches))
            self._waits.put(loaded.record, cached)
        shown["waiting_for"] = cached

    def cancel_invocation(self, request: HttpRequest, invocation_id: str) -> HttpResponse:
        """Send the cancel signal (the handler sees a terminal error at its next await); 202.

        404 for an unknown invocation, 409 for a completed one.
        """
        self.engine.operations.cancel(invocation_id)
        return HttpResponse(202)

    def pause_invocation(self, request: HttpRequest, invocation_id: str) -> HttpResponse:
        """Pause: no more attempts until resumed; 202. 404 unknown, 409 completed."""
        self.engine.operations.pause(invocation_id)
        return HttpResponse(202)

    def resume_invocation(self, request: HttpRequest, invocation_id: str) -> HttpResponse:
        """Resume a paused or suspended invocation now, or retry a backing-off one at once
        (`Operations.resume`); `?deployment=dp_…|latest|keep` (or a JSON body `{"deployment": ...}`)
        resumes it on another deployment. 202; 400 unknown or malformed deployment; 404 unknown
        invocation; 409 completed, or running and asked to move; 425 not started yet."""
        deployment = request.query("deployment")
        if deployment is None and request.body.strip():
            body = request.json()
            if not isinstance(body, dict):
                raise BadRequest('the body must be a JSON object like {"deployment": "dp_..."}')
            deployment = body.get("deployment")
        self.engine.operations.resume(invocation_id, deployment)
        return HttpResponse(202)

    def purge_invocation(self, request: HttpRequest, invocation_id: str) -> HttpResponse:
        """Delete a completed invocation (record, journal, notifications); 202. 409 if not completed."""
        self.engine.operations.purge(invocation_id)
        return HttpResponse(202)

    def restart_invocation_as_new(self, request: HttpRequest, invocation_id: str) -> HttpResponse:
        """Run a completed invocation again under a new id (`Engine.restart_as_new`), as restate-server
        answers it: `?from=N` (default 0: the Input command alone; N > 0 copies the journal up to entry
        N included, with the completions of its commands) and `?deployment=keep|latest|dp_…` (only with
        `from` > 0; default latest). 200 `{"new_invocation_id": "inv_…"}`; 400 bad `from` or prefix or
        deployment, 404 unknown, 409 still running, 410 journal gone, 422 workflow, 425 not started."""
        raw = request.query("from") or "0"
        if not raw.isdigit() or int(raw) >= 2**32:
            raise BadRequest(f"from: expected a journal index (an unsigned 32-bit integer), got {raw!r}")
        new_id = self.engine.restart_as_new(invocation_id, int(raw), request.query("deployment") or None)
        return HttpResponse.json({"new_invocation_id": new_id})

    def kill_invocation(self, request: HttpRequest, invocation_id: str) -> HttpResponse:
        """Complete the invocation at once with code 409 without running more handler code; 202."""
        self.engine.operations.kill(invocation_id)
        return HttpResponse(202)

    def query(self, request: HttpRequest) -> HttpResponse:
        """`POST /query {"query": "SELECT …"}`: SQL over the introspection tables (`http_api.query`).

        JSON rows with `accept: application/json`, else an Arrow IPC stream; 400 for a bad query,
        501 without the optional `query` extra."""
        return serve_query(self.sql, request)
