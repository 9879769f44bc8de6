"""Endpoint manifest (the discovery answer of a deployment), versions v1..v4.

The models keep the manifest's wire names, which are camelCase (`minProtocolVersion`,
`retryPolicyMaxAttempts`, ...), so a parsed manifest reads like the JSON it came from and dumps back
to it with `model_dump(exclude_none=True)`. Unknown fields are accepted and ignored, so newer SDKs
(e.g. the v5 field `eagerStateKeysWhitelist`) do not break registration. All durations are integers
in milliseconds.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, NonNegativeFloat, NonNegativeInt, ValidationError, model_validator

from control_plane.errors import BadRequest
from control_plane.protocol.versions import manifest_version_of

__all__ = [
    "Handler",
    "InputPayload",
    "Manifest",
    "OutputPayload",
    "Service",
    "parse_manifest",
]

ServiceType = Literal["SERVICE", "VIRTUAL_OBJECT", "WORKFLOW"]
HandlerType = Literal["EXCLUSIVE", "SHARED", "WORKFLOW"]


class _WireModel(BaseModel):
    """Base of the manifest models: wire names, unknown fields ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class InputPayload(_WireModel):
    """What a handler accepts as request body.

    Attributes:
        required: If true, a body with a content type must be sent, even an empty one.
        contentType: Accepted content type, may contain wildcards as in `accept`; unset means no body.
        jsonSchema: JSON schema of the body, if the SDK provides one.
    """

    required: bool | None = None
    contentType: str | None = None
    jsonSchema: Any = None


class OutputPayload(_WireModel):
    """What a handler returns.

    Attributes:
        setContentTypeIfEmpty: Set `contentType` on the response even when the output is empty.
        contentType: Content type of the output.
        jsonSchema: JSON schema of the output, if the SDK provides one.
    """

    setContentTypeIfEmpty: bool | None = None
    contentType: str | None = None
    jsonSchema: Any = None


class _Options(_WireModel):
    """Per-service / per-handler options (v3+, retry policy v4+); all optional, durations in ms.

    Attributes:
        documentation: Free text (v2+).
        metadata: String key/value pairs shown by the admin API (v2+).
        inactivityTimeout: Ms without progress before the attempt is interrupted.
        abortTimeout: Ms after the inactivity timeout before the attempt is aborted.
        journalRetention: Ms to keep the journal after completion.
        idempotencyRetention: Ms to remember an idempotency key.
        workflowCompletionRetention: Ms to keep a finished workflow's result.
        enableLazyState: Do not ship state with Start; reads go through GetLazyState.
        ingressPrivate: Not callable from the ingress, only from other handlers.
        retryPolicyInitialInterval: Ms before the first retry.
        retryPolicyMaxInterval: Upper bound of the retry delay, ms.
        retryPolicyMaxAttempts: Attempts before `retryPolicyOnMaxAttempts` applies.
        retryPolicyExponentiationFactor: Growth factor of the retry delay.
        retryPolicyOnMaxAttempts: PAUSE or KILL the invocation when attempts run out.
    """

    documentation: str | None = None
    metadata: dict[str, str] | None = None
    inactivityTimeout: NonNegativeInt | None = None
    abortTimeout: NonNegativeInt | None = None
    journalRetention: NonNegativeInt | None = None
    idempotencyRetention: NonNegativeInt | None = None
    workflowCompletionRetention: NonNegativeInt | None = None
    enableLazyState: bool | None = None
    ingressPrivate: bool | None = None
    retryPolicyInitialInterval: NonNegativeInt | None = None
    retryPolicyMaxInterval: NonNegativeInt | None = None
    retryPolicyMaxAttempts: NonNegativeInt | None = None
    retryPolicyExponentiationFactor: NonNegativeFloat | None = None
    retryPolicyOnMaxAttempts: Literal["PAUSE", "KILL"] | None = None


class Handler(_Options):
    """One handler of a service, plus the options of `_Options`.

    Attributes:
        name: Handler name as used in the invoke path.
        ty: EXCLUSIVE, SHARED or WORKFLOW; unset for plain services (objects default to EXCLUSIVE,
            workflows' main handler is WORKFLOW).
        input: Accepted request body, if described.
        output: Produced response body, if described.
    """

    name: str
    ty: HandlerType | None = None
    input: InputPayload | None = None
    output: OutputPayload | None = None


class Service(_Options):
    """One service of a deployment, plus the options of `_Options` (defaults for its handlers).

    Attributes:
        name: Service name.
        ty: SERVICE, VIRTUAL_OBJECT or WORKFLOW.
        handlers: Its handlers, names unique.
    """

    name: str
    ty: ServiceType
    handlers: list[Handler]

    @model_validator(mode="after")
    def _unique_handlers(self) -> Service:
        seen: set[str] = set()
        for h in self.handlers:
            if h.name in seen:
                raise ValueError(f"service {self.name!r} lists handler {h.name!r} twice")
            seen.add(h.name)
        return self

    def find_handler(self, handler: str) -> Handler | None:
        """Return the handler called `handler`, or None."""
        return next((h for h in self.handlers if h.name == handler), None)


class Manifest(_WireModel):
    """A deployment's endpoint manifest.

    Attributes:
        protocolMode: REQUEST_RESPONSE or BIDI_STREAM, if stated (Torpor always uses request/response).
        minProtocolVersion: Lowest invocation protocol version the deployment speaks.
        maxProtocolVersion: Highest invocation protocol version the deployment speaks.
        services: The services, names unique.
        lambdaCompression: "zstd" when the deployment accepts/produces zstd-compressed Lambda bodies (v4+).
    """

    protocolMode: Literal["REQUEST_RESPONSE", "BIDI_STREAM"] | None = None
    minProtocolVersion: int
    maxProtocolVersion: int
    services: list[Service]
    lambdaCompression: Literal["zstd"] | None = None

    @model_validator(mode="after")
    def _unique_services(self) -> Manifest:
        seen: set[str] = set()
        for s in self.services:
            if s.name in seen:
                raise ValueError(f"service {s.name!r} is listed twice")
            seen.add(s.name)
        return self

    def find_service(self, service: str) -> Service | None:
        """Return the service called `service`, or None."""
        return next((s for s in self.services if s.name == service), None)

    def find_handler(self, service: str, handler: str) -> Handler | None:
        """Look up a handler.

        Args:
            service: Service name.
            handler: Handler name.

        Returns:
            The handler, or None when the service or the handler is not in the manifest.
        """
        s = self.find_service(service)
        return None if s is None else s.find_handler(handler)


def _describe(e: ValidationError) -> str:
    """Render pydantic errors as "services[0].handlers[1].name: Field required; ..."."""
    parts: list[str] = []
    for err in e.errors(include_url=False):
        path = ""
        for loc in err["loc"]:
            path += f"[{loc}]" if isinstance(loc, int) else (f".{loc}" if path else str(loc))
        msg = err["msg"]
        if err["type"] == "missing":
            msg = "missing"
        parts.append(f"{path}: {msg}" if path else msg)
    return "; ".join(parts)


def parse_manifest(body: bytes, content_type: str) -> Manifest:
    """Parse and validate a discovery answer.

    Args:
        body: The response body (UTF-8 JSON).
        content_type: The response's `content-type`, which names the manifest version.

    Returns:
        The manifest.

    Raises:
        UnsupportedProtocol: `content_type` is not endpoint manifest v1..v4.
        BadRequest: The body is not JSON, not an object, or misses/mistypes a field; the message names
            the field, e.g. "minProtocolVersion: missing".
    """
    version = manifest_version_of(content_type)
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BadRequest(f"endpoint manifest v{version} is not JSON: {e}") from e
    if not isinstance(data, dict):
        raise BadRequest(f"endpoint manifest v{version} must be a JSON object, got {type(data).__name__}")
    try:
        return Manifest.model_validate(data)
    except ValidationError as e:
        raise BadRequest(f"invalid endpoint manifest v{version}: {_describe(e)}") from e


def manifest_entries(manifest: Mapping[str, object], name: str) -> list[dict[str, Any]]:
    """The list under `name` in a stored manifest (`services` of a deployment's, `handlers` of a
    service's), as JSON objects; `[]` if it is missing. Stored manifests were validated by
    `parse_manifest` when registered, so the shape is not checked again here."""
    entries = manifest.get(name)
    return cast(list[dict[str, Any]], entries) if isinstance(entries, list) else []
