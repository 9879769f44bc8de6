"""Version negotiation, content types, and endpoint manifests as the real Python SDK produces them."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import httpx
import pytest
import restate
from restate.discovery import compute_discovery_json
from restate.endpoint import Endpoint

from control_plane.errors import BadRequest, UnsupportedProtocol
from control_plane.protocol import (
    DISCOVERY_ACCEPT,
    SUPPORTED_VERSIONS,
    Manifest,
    invocation_content_type,
    manifest_version_of,
    negotiate,
    parse_manifest,
)

# ---------------------------------------------------------------------------------------------- versions


@pytest.mark.parametrize(
    ("lo", "hi", "expected"),
    [
        (5, 5, 5),
        (5, 6, 6),
        (5, 7, 7),
        (6, 6, 6),
        (7, 7, 7),
        (1, 5, 5),
        (5, 9, 7),
        (1, 99, 7),
    ],
)
def test_negotiate_picks_the_highest_common_version(lo: int, hi: int, expected: int) -> None:
    assert negotiate(lo, hi) == expected
    assert expected in SUPPORTED_VERSIONS


@pytest.mark.parametrize(
    ("lo", "hi", "fix"),
    [
        (1, 4, "upgrade the Restate SDK"),
        (8, 9, "upgrade Torpor"),
        (7, 5, "empty range"),
    ],
)
def test_negotiate_refuses_disjoint_ranges(lo: int, hi: int, fix: str) -> None:
    with pytest.raises(UnsupportedProtocol) as e:
        negotiate(lo, hi)
    assert f"V{lo}..V{hi}" in e.value.message
    assert "V5..V7" in e.value.message
    assert fix in e.value.message
    assert e.value.status == 415


def test_content_types() -> None:
    assert invocation_content_type(6) == "application/vnd.restate.invocation.v6"
    assert DISCOVERY_ACCEPT == (
        "application/vnd.restate.endpointmanifest.v4+json, application/vnd.restate.endpointmanifest.v3+json, "
        "application/vnd.restate.endpointmanifest.v2+json, application/vnd.restate.endpointmanifest.v1+json"
    )


@pytest.mark.parametrize(
    ("content_type", "version"),
    [
        ("application/vnd.restate.endpointmanifest.v1+json", 1),
        ("application/vnd.restate.endpointmanifest.v4+json", 4),
        (" Application/Vnd.Restate.EndpointManifest.V3+JSON ; charset=utf-8", 3),
    ],
)
def test_manifest_version_of(content_type: str, version: int) -> None:
    assert manifest_version_of(content_type) == version


@pytest.mark.parametrize(
    "content_type",
    ["application/vnd.restate.endpointmanifest.v5+json", "application/json", "text/plain", ""],
)
def test_manifest_version_of_refuses_others(content_type: str) -> None:
    with pytest.raises(UnsupportedProtocol, match=r"endpoint manifest v1\.\.v4"):
        manifest_version_of(content_type)


# ---------------------------------------------------------------------------------------------- manifest

V4 = "application/vnd.restate.endpointmanifest.v4+json"

greeter = restate.Service(
    "Greeter",
    description="Says hello",
    metadata={"team": "torpor"},
    inactivity_timeout=timedelta(seconds=30),
    ingress_private=False,
    invocation_retry_policy=restate.InvocationRetryPolicy(
        initial_interval=timedelta(milliseconds=50),
        max_interval=timedelta(seconds=10),
        max_attempts=5,
        exponentiation_factor=2.0,
        on_max_attempts="pause",
    ),
)


@greeter.handler(idempotency_retention=timedelta(hours=1))
async def greet(ctx: restate.Context, name: str) -> str:
    return f"Hello {name}!"


@greeter.handler()
async def ping(ctx: restate.Context) -> None:
    return None


counter = restate.VirtualObject("Counter")


@counter.handler()
async def add(ctx: restate.ObjectContext, delta: int) -> int:
    return delta


@counter.handler(kind="shared")
async def get(ctx: restate.ObjectSharedContext) -> int:
    return 0


signup = restate.Workflow("Signup")


@signup.main()
async def run(ctx: restate.WorkflowContext, email: str) -> str:
    return email


def _endpoint() -> Endpoint:
    endpoint = Endpoint()
    for svc in (greeter, counter, signup):
        endpoint.bind(svc)
    return endpoint


def _check_sdk_manifest(m: Manifest) -> None:
    assert m.protocolMode == "REQUEST_RESPONSE"
    assert negotiate(m.minProtocolVersion, m.maxProtocolVersion) == 7
    assert {s.name: s.ty for s in m.services} == {
        "Greeter": "SERVICE",
        "Counter": "VIRTUAL_OBJECT",
        "Signup": "WORKFLOW",
    }

    g = m.find_service("Greeter")
    assert g is not None
    assert g.documentation == "Says hello"
    assert g.metadata == {"team": "torpor"}
    assert g.inactivityTimeout == 30_000
    assert g.retryPolicyInitialInterval == 50
    assert g.retryPolicyMaxInterval == 10_000
    assert g.retryPolicyMaxAttempts == 5
    assert g.retryPolicyExponentiationFactor == 2.0
    assert g.retryPolicyOnMaxAttempts == "PAUSE"

    h = m.find_handler("Greeter", "greet")
    assert h is not None
    assert h.ty is None
    assert h.idempotencyRetention == 3_600_000
    assert h.input is not None
    assert h.input.contentType == "application/json"
    assert h.input.jsonSchema == {"type": "string"}
    assert h.output is not None
    assert h.output.contentType == "application/json"

    p = m.find_handler("Greeter", "ping")
    assert p is not None
    assert p.input is not None
    assert p.input.contentType is None

    assert m.find_handler("Counter", "add").ty == "EXCLUSIVE"  # type: ignore[union-attr]
    assert m.find_handler("Counter", "get").ty == "SHARED"  # type: ignore[union-attr]
    assert m.find_handler("Signup", "run").ty == "WORKFLOW"  # type: ignore[union-attr]
    assert m.find_handler("Greeter", "nope") is None
    assert m.find_handler("Nope", "greet") is None


def test_parse_manifest_from_compute_discovery_json() -> None:
    body = compute_discovery_json(_endpoint(), 4, "request_response").encode()
    _check_sdk_manifest(parse_manifest(body, V4))


def test_parse_manifest_served_by_the_sdk() -> None:
    async def discover() -> httpx.Response:
        app = restate.app([greeter, counter, signup], protocol="request_response")
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://deployment") as c:
            return await c.get("/discover", headers={"accept": DISCOVERY_ACCEPT})

    resp = asyncio.run(discover())
    assert resp.status_code == 200
    assert manifest_version_of(resp.headers["content-type"]) == 4
    _check_sdk_manifest(parse_manifest(resp.content, resp.headers["content-type"]))


MINIMAL = {"minProtocolVersion": 5, "maxProtocolVersion": 7, "services": []}


def test_minimal_manifest_and_unknown_fields_are_ignored() -> None:
    data = dict(MINIMAL, futureField=1)
    data["services"] = [
        {"name": "S", "ty": "SERVICE", "handlers": [{"name": "h", "eagerStateKeysWhitelist": ["a"]}], "x": True}
    ]
    m = parse_manifest(json.dumps(data).encode(), "application/vnd.restate.endpointmanifest.v1+json")
    assert m.protocolMode is None
    assert m.lambdaCompression is None
    assert m.find_handler("S", "h") is not None


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (b"not json", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (json.dumps({"maxProtocolVersion": 7, "services": []}).encode(), "minProtocolVersion: missing"),
        (json.dumps(dict(MINIMAL, minProtocolVersion="five")).encode(), "minProtocolVersion"),
        (json.dumps({k: v for k, v in MINIMAL.items() if k != "services"}).encode(), "services: missing"),
        (
            json.dumps(dict(MINIMAL, services=[{"name": "S", "ty": "ACTOR", "handlers": []}])).encode(),
            r"services\[0\]\.ty",
        ),
        (
            json.dumps(
                dict(MINIMAL, services=[{"name": "S", "ty": "SERVICE", "handlers": [{"ty": "SHARED"}]}])
            ).encode(),
            r"services\[0\]\.handlers\[0\]\.name: missing",
        ),
        (
            json.dumps(
                dict(MINIMAL, services=[{"name": "S", "ty": "SERVICE", "handlers": [], "inactivityTimeout": -1}])
            ).encode(),
            r"services\[0\]\.inactivityTimeout",
        ),
        (
            json.dumps(dict(MINIMAL, services=[{"name": "S", "ty": "SERVICE", "handlers": []}] * 2)).encode(),
            "listed twice",
        ),
    ],
)
def test_bad_manifests_name_the_problem(body: bytes, match: str) -> None:
    with pytest.raises(BadRequest, match=match) as e:
        parse_manifest(body, V4)
    assert e.value.status == 400


def test_parse_manifest_refuses_unknown_content_type() -> None:
    with pytest.raises(UnsupportedProtocol):
        parse_manifest(json.dumps(MINIMAL).encode(), "application/json")
