"""Deployments and services: registration by discovery, look-up of targets, effective options.

A deployment is registered by asking it for its endpoint manifest (`GET /discover`); every service
it lists then points at it, so new invocations go there, while invocations already running stay
pinned to the deployment they started on.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from control_plane import ids
from control_plane.errors import BadRequest, Conflict, NotFound, TorporError
from control_plane.limits import (
    HANDLER_LIMITS,
    HANDLER_RATES,
    SERVICE_LIMIT,
    SERVICE_RATE,
    check_limits,
    pools_of,
    rate_of,
)
from control_plane.ports import (
    Clock,
    DeploymentRecord,
    HttpReply,
    InvocationStore,
    Invoker,
    InvokerError,
    RegistryStore,
    ServiceRecord,
)
from control_plane.protocol import DISCOVERY_ACCEPT, manifest_entries, manifest_version_of, negotiate, parse_manifest
from control_plane.request_identity import refusal_hint
from control_plane.retry import RetryPolicy
from control_plane.settings import Settings

_CACHE_TTL_S = 2.0
_UNFINISHED = ("scheduled", "ready", "running", "backing-off", "suspended", "paused")
_DISCOVERY_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class HandlerOptions:
    """Options in effect for one handler: handler options > service options > Torpor's settings.

    Durations in ms. Manifest options are Restate's (`inactivityTimeout`, `retryPolicy*`, ...).
    """

    inactivity_timeout_ms: int
    abort_timeout_ms: int
    retry_policy: RetryPolicy
    journal_retention_ms: int | None
    enable_lazy_state: bool = False
    workflow_retention_ms: int | None = None
    ingress_private: bool = False
    idempotency_retention_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Target:
    """A resolved `service/handler`: where it runs, how its input and output look, its options."""

    service: str
    handler: str
    service_type: str
    handler_type: str | None
    deployment_id: str
    options: HandlerOptions
    input_content_type: str | None  # None: the handler takes no input
    input_required: bool
    output_content_type: str
    pools: tuple[tuple[str, int], ...] = ()  # the concurrency limits it counts against (`limits.pools_of`)
    rate: tuple[str, float] | None = None  # the rate limit that paces its start (`limits.rate_of`)


def deployment_not_found(deployment_id: str) -> NotFound:
    """The 404 for an unknown deployment id, naming how to list them."""
    return NotFound(f"deployment {deployment_id} not found; list them with torpor deployments list (GET /deployments)")


def _option(handler: Mapping[str, Any], service: Mapping[str, Any], name: str) -> Any:
    value = handler.get(name)
    return service.get(name) if value is None else value


def _services_signature(manifest: Mapping[str, Any]) -> list[tuple[str, str, list[tuple[str, str]]]]:
    """What must not change silently when the same URI is registered again: services, types, handlers."""
    return sorted(
        (
            str(s.get("name")),
            str(s.get("ty")),
            sorted((str(h.get("name")), str(h.get("ty"))) for h in s.get("handlers", [])),
        )
        for s in manifest.get("services", [])
    )


def same_services(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two endpoint manifests declare the same services, types and handlers (registering
    `b` where `a` is registered changes nothing a caller sees)."""
    return _services_signature(a) == _services_signature(b)


class RegistryReads(RegistryStore, InvocationStore, Protocol):
    """The families the registry uses: deployments and services, and the invocations listing (a
    deployment that unfinished invocations are pinned to is not removed without `force`)."""


class Registry:
    """Registers deployments and resolves targets. Caches store reads for 2 s (records rarely change).

    Args:
        store: where deployments and services live.
        invoker: reaches deployments, for discovery.
        clock: wall clock (ms).
        settings: Torpor's defaults, the last level of option precedence.
    """

    def __init__(self, store: RegistryReads, invoker: Invoker, clock: Clock, settings: Settings) -> None:
        self.store = store
        self.invoker = invoker
        self.clock = clock
        self.settings = settings
        self._lock = threading.Lock()
        self._deployments: dict[str, tuple[float, DeploymentRecord]] = {}
        self._services: dict[str, tuple[float, ServiceRecord | None]] = {}
        # pinned_options by (deployment, service, handler), with the records they were computed from
        self._pinned: dict[tuple[str, str, str], tuple[DeploymentRecord, ServiceRecord | None, HandlerOptions]] = {}
        # resolve by (service, handler), with the service record it was computed from
        self._targets: dict[tuple[str, str], tuple[ServiceRecord, Target]] = {}

    # --- discovery and registration ---------------------------------------------------------------

    def discover_mode(
        self,
        endpoint: str,
        headers: Mapping[str, str],
        auth: Mapping[str, object] | None = None,
        use_http_11: bool = False,
    ) -> tuple[dict[str, Any], str]:
        """Discover `endpoint` and the protocol mode to invoke it in: `(manifest, mode)`.

        Like restate-server, discovery goes over HTTP/2 first (h2c with prior knowledge for
        `http://`, TLS ALPN `h2` for `https://`) unless `use_http_11`; an endpoint that does not
        speak HTTP/2 (or refuses it) is discovered again over HTTP/1.1. The mode is `BIDI_STREAM`
        when discovery went over HTTP/2 and the manifest's `protocolMode` is `BIDI_STREAM` (the
        Python SDK answers so on HTTP/2); otherwise `REQUEST_RESPONSE`, always for Lambda, Cloud Run
        with Google ID tokens, and HTTP/1.1. Raises what `discover` raises.
        """
        deadline = time.monotonic() + _DISCOVERY_TIMEOUT_S
        open_stream = getattr(self.invoker, "open_stream", None)
        plain = endpoint.startswith(("http://", "https://")) and not auth
        if open_stream is not None and plain and not use_http_11:
            manifest = self._discover_h2(open_stream, endpoint, headers, deadline)
            if manifest is not None:
                bidi = manifest.get("protocolMode") == "BIDI_STREAM"
                return manifest, "BIDI_STREAM" if bidi else "REQUEST_RESPONSE"
        return self.discover(endpoint, headers, auth, deadline=deadline), "REQUEST_RESPONSE"

    def _discover_h2(
        self, open_stream: Any, endpoint: str, headers: Mapping[str, str], deadline: float
    ) -> dict[str, Any] | None:
        """The manifest discovered over HTTP/2, or None if the endpoint does not speak it, refused,
        or did not answer whole by `deadline` (`time.monotonic()`; HTTP/1.1 is then tried with the
        time left)."""

        def left() -> float:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise InvokerError("the discovery deadline passed")
            return remaining

        try:
            stream = open_stream(
                endpoint, "GET", "/discover", {**headers, "accept": DISCOVERY_ACCEPT}, min(2.0, left())
            )
        except InvokerError:
            return None
        try:
            stream.end()
            status, answered = stream.head(left())
            body = b""
            while chunk := stream.receive(left()):  # a dripping answer still ends at the deadline
                body += chunk
                left()
        except InvokerError:
            return None
        finally:
            stream.close()
        if status != 200:
            return None
        return self._manifest(endpoint, HttpReply(status, answered, body))

    def discover(
        self,
        endpoint: str,
        headers: Mapping[str, str],
        auth: Mapping[str, object] | None = None,
        *,
        deadline: float | None = None,
    ) -> dict[str, Any]:
        """Fetch and validate the endpoint manifest of `endpoint` (manifest v1..v4) over HTTP/1.1.

        Returns the manifest as parsed JSON (Restate's camelCase names). Raises `BadRequest` naming
        the cause when the endpoint cannot be reached, answers non-200, sends a bad manifest, or has
        not answered whole by `deadline` (`time.monotonic()`; default: 10 s from now, the time one
        registration's discovery may take in all; other registrations do not wait for it).
        """
        timeout_s = (deadline - time.monotonic()) if deadline is not None else _DISCOVERY_TIMEOUT_S
        if timeout_s <= 0:
            raise BadRequest(
                f"discovery of {endpoint} failed: no answer within {_DISCOVERY_TIMEOUT_S:g} s over HTTP/2 "
                '(for an HTTP/1.1-only deployment, register with "use_http_11": true)'
            )
        try:
            reply = self.invoker.request(
                endpoint,
                "GET",
                "/discover",
                {**headers, "accept": DISCOVERY_ACCEPT},
                b"",
                timeout_s,
                auth=auth or None,
            )
        except InvokerError as exc:
            if deadline is not None and time.monotonic() >= deadline - 0.1:  # the whole discovery's time ran out
                raise BadRequest(
                    f"discovery of {endpoint} failed: no complete answer within {_DISCOVERY_TIMEOUT_S:g} s, the time "
                    "discovery may take. Is the service running, reachable from Torpor, and answering GET /discover?"
                ) from exc
            raise BadRequest(
                f"discovery of {endpoint} failed: {exc.message}. Is the service running and reachable from Torpor?"
            ) from exc
        if reply.status != 200:
            text = reply.body[:200].decode("utf-8", "replace").strip() or "(no body)"
            raise BadRequest(
                f"discovery of {endpoint} failed: GET /discover answered HTTP {reply.status}: {text}"
                + refusal_hint(reply.status, getattr(self.invoker, "request_identity", None))
            )
        return self._manifest(endpoint, reply)

    def _manifest(self, endpoint: str, reply: HttpReply) -> dict[str, Any]:
        """Validate a 200 discovery answer; raises `BadRequest` for a bad manifest. The SDK version the
        answer's `x-restate-server` header names is kept as the manifest's `sdkVersion`."""
        content_type = reply.headers.get("content-type", "")
        try:
            manifest_version_of(content_type)
        except TorporError as exc:
            raise BadRequest(f"discovery of {endpoint} failed: {exc.message}") from exc
        parse_manifest(reply.body, content_type)  # validates, raises BadRequest
        manifest: dict[str, Any] = json.loads(reply.body)
        if not manifest.get("services"):
            raise BadRequest(f"discovery of {endpoint} found no services: the endpoint binds none")
        sdk = reply.headers.get("x-restate-server")
        if sdk and not manifest.get("sdkVersion"):  # the SDK names itself there (`restate-sdk-python/1.3.0`)
            manifest["sdkVersion"] = sdk
        return manifest

    def register(
        self,
        endpoint: str,
        additional_headers: Mapping[str, str] | None = None,
        *,
        force: bool = False,
        metadata: Mapping[str, str] | None = None,
        auth: Mapping[str, object] | None = None,
        use_http_11: bool = False,
    ) -> tuple[DeploymentRecord, bool]:
        """Register the deployment at `endpoint`; returns `(deployment, created)`.

        Registering a URI again with the same services returns the existing deployment
        (`created=False`), updated in place if its protocol mode changed (`use_http_11`). If its
        services or handlers changed, `force=True` replaces it in place; without force it raises
        `Conflict` (409). `use_http_11` discovers and invokes over HTTP/1.1
        in request/response mode even if the endpoint speaks HTTP/2 (see `discover_mode`; the mode
        is recorded as `protocol_mode`). Raises `BadRequest` if discovery fails and
        `UnsupportedProtocol` if no service protocol version in 5..7 fits.
        """
        headers = dict(additional_headers or {})
        manifest, mode = self.discover_mode(endpoint, headers, auth, use_http_11)
        min_v, max_v = int(manifest["minProtocolVersion"]), int(manifest["maxProtocolVersion"])
        negotiate(min_v, min(max_v, self.settings.max_protocol_version))
        existing = next((d for d in self.store.list_deployments() if d.endpoint == endpoint), None)
        if existing is not None and not force:
            if _services_signature(existing.manifest) != _services_signature(manifest):
                raise Conflict(
                    f"deployment {existing.deployment_id} at {endpoint} is registered with other services or "
                    'handlers; register again with "force": true (POST /deployments) '
                    "to replace it"
                )
            if existing.protocol_mode == mode:
                return existing, False  # else the same services in another mode: updated in place
        deployment = DeploymentRecord(
            deployment_id=existing.deployment_id if existing else ids.new_deployment_id(),
            endpoint=endpoint,
            additional_headers=headers,
            manifest=manifest,
            min_protocol_version=min_v,
            max_protocol_version=max_v,
            created_at_ms=self.clock.now_ms(),
            services=tuple(str(s["name"]) for s in manifest["services"]),
            metadata=dict(metadata or {}),
            auth=dict(auth or {}),
            protocol_mode=mode,
        )
        self.store.put_deployment(deployment)
        if existing is not None:
            for dropped in set(existing.services) - set(deployment.services):
                previous = self.store.get_service(dropped)
                if previous is not None and previous.deployment_id == deployment.deployment_id:
                    self.store.delete_service(dropped)
        for service in manifest["services"]:
            previous = self.store.get_service(service["name"])
            revision = (previous.revision + 1) if previous else 1
            self.store.put_service(
                ServiceRecord(service["name"], deployment.deployment_id, service["ty"], service, revision)
            )
        self._forget()
        return deployment, True

    def remove(self, deployment_id: str, *, force: bool = False) -> None:
        """Remove a deployment and the services that point at it.

        Unfinished invocations stay pinned to the deployment they started on, so removing it makes
        their next attempts fail; without `force` that is refused. Raises `NotFound`, or `Conflict`
        (409) naming the pinned invocations.
        """
        deployment = self.store.get_deployment(deployment_id)
        if deployment is None:
            raise NotFound(
                f"deployment {deployment_id} not found; list them with torpor deployments list (GET /deployments)"
            )
        if not force:
            pinned = [
                r.invocation_id
                for r in self.store.list_invocations(_UNFINISHED, None, 10_000)
                if r.deployment_id == deployment_id
            ]
            if pinned:
                raise Conflict(
                    f"deployment {deployment_id} has {len(pinned)} unfinished invocation(s) pinned to it "
                    f"(e.g. {pinned[0]}); their next attempts would fail. Let them finish, or delete with ?force=true"
                )
        for service in self.store.list_services():
            if service.deployment_id == deployment_id:
                self.store.delete_service(service.name)
        self.store.delete_deployment(deployment_id)
        self._forget()

    # --- look-ups -----------------------------------------------------------------------------------

    def deployment(self, deployment_id: str) -> DeploymentRecord:
        """The deployment `deployment_id`. Raises `NotFound`."""
        now = time.monotonic()
        with self._lock:
            cached = self._deployments.get(deployment_id)
        if cached and now - cached[0] < _CACHE_TTL_S:
            return cached[1]
        record = self.store.get_deployment(deployment_id)
        if record is None:
            raise NotFound(
                f"deployment {deployment_id} not found; list them with torpor deployments list (GET /deployments)"
            )
        with self._lock:
            self._deployments[deployment_id] = (now, record)
        return record

    def service(self, name: str) -> ServiceRecord:
        """The service `name`. Raises `NotFound` naming it and the fix."""
        now = time.monotonic()
        with self._lock:
            cached = self._services.get(name)
        if cached and now - cached[0] < _CACHE_TTL_S:
            record = cached[1]
        else:
            record = self.store.get_service(name)
            with self._lock:
                self._services[name] = (now, record)
        if record is None:
            raise NotFound(
                f"service '{name}' not found; register the deployment that hosts it with "
                "torpor deployments register (POST /deployments on the admin API)"
            )
        return record

    def resolve(self, service: str, handler: str) -> Target:
        """Resolve `service/handler` to a `Target`. Raises `NotFound` naming the service or handler.

        Computed once per service record read (`service`): the same record gives the same target."""
        record = self.service(service)
        cached = self._targets.get((service, handler))
        if cached is not None and cached[0] is record:
            return cached[1]
        target = self._target(record, service, handler)
        with self._lock:
            self._targets[(service, handler)] = (record, target)
        return target

    def _target(self, record: ServiceRecord, service: str, handler: str) -> Target:
        spec = next((h for h in manifest_entries(record.manifest, "handlers") if h.get("name") == handler), None)
        if spec is None:
            known = ", ".join(sorted(str(h.get("name")) for h in manifest_entries(record.manifest, "handlers")))
            raise NotFound(f"handler '{handler}' not found in service '{service}'; its handlers are: {known}")
        input_spec = spec.get("input") or {}
        output_spec = spec.get("output") or {}
        # Manifest rule: an input without contentType (and not required) means "no input".
        input_ct = input_spec.get("contentType")
        return Target(
            service=service,
            handler=handler,
            service_type=record.ty,
            handler_type=spec.get("ty"),
            deployment_id=record.deployment_id,
            options=self._options(record.manifest, spec, record.overrides),
            input_content_type=input_ct,
            input_required=bool(input_spec.get("required", False)),
            output_content_type=output_spec.get("contentType") or "application/json",
            pools=tuple(pools_of(service, handler, record.overrides, _exclusive(record.ty, spec.get("ty")))),
            rate=rate_of(service, handler, record.overrides),
        )

    def pinned_options(self, deployment_id: str, service: str, handler: str) -> HandlerOptions:
        """Options of `service/handler` as the deployment an invocation is pinned to declares them.

        Falls back to Torpor's defaults if that deployment is gone (the attempt then fails anyway).
        """
        try:
            deployment = self.deployment(deployment_id)
        except NotFound:
            return self._options({}, {})
        try:
            registered: ServiceRecord | None = self.service(service)
        except NotFound:
            registered = None
        key = (deployment_id, service, handler)
        cached = self._pinned.get(key)  # computed from these very records: still right
        if cached is not None and cached[0] is deployment and cached[1] is registered:
            return cached[2]
        spec = next((s for s in manifest_entries(deployment.manifest, "services") if s.get("name") == service), {})
        handler_spec = next((h for h in manifest_entries(spec, "handlers") if h.get("name") == handler), {})
        options = self._options(spec, handler_spec, registered.overrides if registered is not None else {})
        with self._lock:
            self._pinned[key] = (deployment, registered, options)
        return options

    def protocol_version(self, deployment: DeploymentRecord) -> int:
        """The service protocol version to speak with `deployment`: min(its max, ours), at least 5."""
        return negotiate(
            deployment.min_protocol_version,
            min(deployment.max_protocol_version, self.settings.max_protocol_version),
        )

    def _options(
        self, service: Mapping[str, Any], handler: Mapping[str, Any], overrides: Mapping[str, Any] | None = None
    ) -> HandlerOptions:
        """Options by precedence: handler (code) > service (code) > admin overrides > Torpor settings."""
        s = self.settings
        default = s.retry_policy
        layers = (handler, service, overrides or {})

        def opt(name: str, fallback: Any) -> Any:
            return next((layer[name] for layer in layers if layer.get(name) is not None), fallback)

        on_max = str(opt("retryPolicyOnMaxAttempts", default.on_max_attempts)).lower()
        policy = RetryPolicy(
            initial_interval_ms=int(opt("retryPolicyInitialInterval", default.initial_interval_ms)),
            exponentiation_factor=float(opt("retryPolicyExponentiationFactor", default.exponentiation_factor)),
            max_interval_ms=int(opt("retryPolicyMaxInterval", default.max_interval_ms)),
            max_attempts=_max_attempts(opt("retryPolicyMaxAttempts", None), default.max_attempts),
            on_max_attempts="kill" if on_max == "kill" else "pause",
        )
        retention = opt("journalRetention", None)
        workflow_retention = opt("workflowCompletionRetention", None)
        idempotency_retention = opt("idempotencyRetention", None)
        return HandlerOptions(
            inactivity_timeout_ms=int(opt("inactivityTimeout", s.inactivity_timeout_ms)),
            abort_timeout_ms=int(opt("abortTimeout", s.inactivity_timeout_ms)),
            retry_policy=policy,
            journal_retention_ms=None if retention is None else int(retention),
            enable_lazy_state=bool(opt("enableLazyState", False)),
            workflow_retention_ms=None if workflow_retention is None else int(workflow_retention),
            ingress_private=bool(opt("ingressPrivate", False)),
            idempotency_retention_ms=None if idempotency_retention is None else int(idempotency_retention),
        )

    def configure(self, name: str, changes: Mapping[str, Any]) -> ServiceRecord:
        """Apply admin/CLI overrides to service `name` (manifest option names, durations in ms).

        A None value removes an override (a handler's concurrency limit: None in
        `handlerConcurrencyLimits` removes that handler's; the others stay). A concurrency limit that
        would apply to an exclusive object handler is refused (`limits.check_limits`). Overrides rank below what the service's code declares and
        last until the service is registered again (Restate's configuration levels). Raises
        `NotFound` for an unknown service, `BadRequest` for `workflowCompletionRetention` on a
        service that is not a workflow (it has no run whose completion is retained).
        """
        current = self.service(name)
        if changes.get("workflowCompletionRetention") is not None and current.ty != "WORKFLOW":
            kind = {"VIRTUAL_OBJECT": "a virtual object", "SERVICE": "a service"}.get(current.ty, current.ty)
            raise BadRequest(
                f"workflow_completion_retention applies to workflows only; {name!r} is {kind} "
                "(its completed invocations are kept for journal_retention and idempotency_retention)"
            )
        check_limits(current.ty, manifest_entries(current.manifest, "handlers"), changes)
        for per_handler in (HANDLER_LIMITS, HANDLER_RATES):
            if isinstance(changes.get(per_handler), Mapping):  # per handler: merged, None removes one
                stored = current.overrides.get(per_handler)
                handlers = {**(stored if isinstance(stored, Mapping) else {}), **changes[per_handler]}
                changes = {**changes, per_handler: {h: n for h, n in handlers.items() if n is not None} or None}
        merged = {k: v for k, v in {**current.overrides, **changes}.items() if v is not None}
        updated = replace(current, overrides=merged)
        self.store.put_service(updated)
        self._forget()
        return updated

    def effective_config(self, name: str) -> dict[str, dict[str, Any]]:
        """`{option: {"value", "source"}}` of service `name` at service level, and where each comes from.

        Sources: `service (code)`, `admin override`, then Torpor's `torpor.toml`, `environment` or
        `built-in`. Options a handler's code sets itself are listed as `handler <name> (code)`.
        Raises `NotFound` for an unknown service.
        """
        return self.config_of(self.service(name))

    def config_of(self, record: ServiceRecord) -> dict[str, dict[str, Any]]:
        """`effective_config` of a service record, stored or not (a dry run's discovered service)."""
        settings_source = dict(self.settings.sources)
        policy = self.settings.retry_policy
        fallback = {
            "inactivityTimeout": (self.settings.inactivity_timeout_ms, "inactivity_timeout_ms"),
            "abortTimeout": (self.settings.inactivity_timeout_ms, "inactivity_timeout_ms"),
            "journalRetention": (self.settings.completed_retention_ms, "completed_retention_ms"),
            "idempotencyRetention": (self.settings.completed_retention_ms, "completed_retention_ms"),
            "workflowCompletionRetention": (self.settings.workflow_retention_ms, "workflow_retention_ms"),
            "ingressPrivate": (False, ""),
            "retryPolicyInitialInterval": (policy.initial_interval_ms, "retry_policy.initial_interval_ms"),
            "retryPolicyMaxInterval": (policy.max_interval_ms, "retry_policy.max_interval_ms"),
            "retryPolicyMaxAttempts": (policy.max_attempts, "retry_policy.max_attempts"),
            "retryPolicyExponentiationFactor": (policy.exponentiation_factor, "retry_policy.exponentiation_factor"),
            "retryPolicyOnMaxAttempts": (policy.on_max_attempts.upper(), "retry_policy.on_max_attempts"),
        }
        if record.ty != "WORKFLOW":  # a workflow's run only (restate-server lists it for workflows alone)
            del fallback["workflowCompletionRetention"]
        out: dict[str, dict[str, Any]] = {}
        for option, (value, setting) in fallback.items():
            if record.manifest.get(option) is not None:
                out[option] = {"value": record.manifest[option], "source": "service (code)"}
            elif record.overrides.get(option) is not None:
                out[option] = {"value": record.overrides[option], "source": "admin override"}
            else:
                out[option] = {"value": value, "source": settings_source.get(setting, "built-in")}
            for handler in manifest_entries(record.manifest, "handlers"):
                if handler.get(option) is not None:
                    out[option].setdefault("handlers", {})[handler["name"]] = handler[option]
        for option in (SERVICE_LIMIT, HANDLER_LIMITS, SERVICE_RATE, HANDLER_RATES):  # admin overrides only
            if record.overrides.get(option) is not None:
                out[option] = {"value": record.overrides[option], "source": "admin override"}
        return out

    def _forget(self) -> None:
        with self._lock:
            self._deployments.clear()
            self._services.clear()
            self._targets.clear()


def _exclusive(service_type: str, handler_type: object) -> bool:
    """True for an exclusive handler of a virtual object (a manifest handler without `ty` is one)."""
    return service_type == "VIRTUAL_OBJECT" and handler_type != "SHARED"


def _max_attempts(given: Any, default: int) -> int:
    """A manifest's or the admin API's `retryPolicyMaxAttempts`; 0 means one attempt, no retries.

    The manifest allows 0 (a non-negative integer); restate-server 1.7 reads it as 1, so do we,
    rather than as Torpor's "no limit" (`RetryPolicy.max_attempts == 0`, settings only).
    """
    if given is None:
        return default
    return max(1, int(given))
