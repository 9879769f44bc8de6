"""Payloads up to restate-server's 32 MiB message limit, end to end.

A restate-sdk virtual object (served by hypercorn in this process) takes a 5 MiB input, sets it as
5 MiB of state, journals a 5 MiB `ctx.run` result and returns it as its 5 MiB output, through
`torpor dev` on DynamoDB (a moto server over the wire) with its large values in S3 (the same moto
server), and through `torpor dev` on SQLite. The handler gets its bytes intact on every replay, a
later call reads the state back, and a small call sends no S3 request at all. A 33 MiB request is
a 413 `{"code","message"}` before anything is written: no invocation, no object in the bucket.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator

import boto3
import httpx
import pytest
import restate
from restate.serde import BytesSerde

from adapters.aws.blobs import S3BlobStore
from adapters.local.dev import DevServer
from control_plane.ports import MAX_MESSAGE_BYTES
from control_plane.settings import Settings
from tests.helpers.asgi import serve_asgi
from tests.helpers.moto import unique_table_name
from tests.helpers.services import REPO_ROOT

MIB = 1024 * 1024
SETTINGS = Settings(inactivity_timeout_ms=60_000, lease_margin_ms=5_000, call_wait_ms=120_000)
_FLIP = bytes(b ^ 0x5A for b in range(256))  # the run's result: the input with every byte flipped

OCTETS = "application/octet-stream"
big = restate.VirtualObject("BigPayloads")


@big.handler(accept=OCTETS, content_type=OCTETS, input_serde=BytesSerde(), output_serde=BytesSerde())
async def roundtrip(ctx: restate.ObjectContext, data: bytes) -> bytes:
    """5 MiB in: the same as state (reversed), a run's result (flipped), and that result out."""
    ctx.set("value", data[::-1], serde=BytesSerde())
    flipped = await ctx.run_typed("flip", lambda: data.translate(_FLIP), restate.RunOptions(serde=BytesSerde()))
    if hashlib.sha256(flipped).digest() != hashlib.sha256(data.translate(_FLIP)).digest():
        raise restate.TerminalError("the journaled run result came back changed")
    return flipped


@big.handler(kind="shared", content_type=OCTETS, output_serde=BytesSerde())
async def value(ctx: restate.ObjectSharedContext) -> bytes:
    """The state `roundtrip` set (b"" if none)."""
    return await ctx.get("value", serde=BytesSerde()) or b""


@big.handler()
async def forget(ctx: restate.ObjectContext) -> None:
    """Clear the state `roundtrip` set."""
    ctx.clear("value")


@big.handler(kind="shared", accept=OCTETS, input_serde=BytesSerde())
async def size(ctx: restate.ObjectSharedContext, data: bytes) -> int:
    """The input's length (bytes)."""
    return len(data)


@pytest.fixture(scope="module")
def services_url() -> Iterator[str]:
    with serve_asgi(restate.app(services=[big], protocol="request_response")) as url:
        yield url


def _register(dev: DevServer, url: str) -> None:
    reply = httpx.post(f"{dev.admin_url}/deployments", json={"uri": url}, timeout=30)
    assert reply.status_code == 201, reply.text


def _call(dev: DevServer, path: str, body: bytes = b"") -> httpx.Response:
    return httpx.post(
        f"{dev.ingress_url}/BigPayloads/{path}",
        content=body,
        headers={"content-type": "application/octet-stream"},
        timeout=180,
    )


def _round_trips_five_mib(dev: DevServer, key: str) -> None:
    data = os.urandom(5 * MIB)
    reply = _call(dev, f"{key}/roundtrip", data)
    assert reply.status_code == 200, reply.text[:500]
    assert reply.content == data.translate(_FLIP)
    state = _call(dev, f"{key}/value")
    assert state.status_code == 200, state.text[:500]
    assert state.content == data[::-1]


def _refuses_33_mib(dev: DevServer) -> None:
    before = httpx.get(f"{dev.admin_url}/invocations", timeout=30).json()
    reply = _call(dev, "over/roundtrip", b"x" * (33 * MIB))
    assert reply.status_code == 413
    body = reply.json()
    assert set(body) >= {"code", "message"}, body
    after = httpx.get(f"{dev.admin_url}/invocations", timeout=30).json()
    assert after == before  # nothing was written


@pytest.fixture
def dynamodb_dev(moto_endpoint: str, services_url: str) -> Iterator[tuple[DevServer, str]]:
    bucket = f"torpor-blobs-{unique_table_name().lower()}"[:63]
    server = DevServer(
        ingress_port=0,
        admin_port=0,
        dynamodb_endpoint=moto_endpoint,
        table=unique_table_name(),
        settings=SETTINGS,
        blob_bucket=bucket,
    )
    server.start()
    try:
        _register(server, services_url)
        yield server, bucket
    finally:
        server.stop()


def _objects(moto_endpoint: str, bucket: str) -> list[str]:
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]


def test_five_mib_input_state_run_and_output_through_dynamodb_and_s3(
    dynamodb_dev: tuple[DevServer, str], moto_endpoint: str
) -> None:
    dev, bucket = dynamodb_dev
    blobs = dev.store.blobs
    assert isinstance(blobs, S3BlobStore)

    small = _call(dev, "small/roundtrip", b"hello")  # a small call: no S3 request at all
    assert small.status_code == 200, small.text
    assert small.content == b"hello".translate(_FLIP)
    assert blobs.requests == {}
    assert _objects(moto_endpoint, bucket) == []

    _round_trips_five_mib(dev, "large")
    keys = _objects(moto_endpoint, bucket)
    assert keys, keys
    assert all(k.startswith(("INV#", "OBJ#")) for k in keys), keys
    assert blobs.requests.get("s3 PutObject", 0) >= 3  # input, state value, run result (and output)


def test_over_32_mib_is_a_413_before_anything_is_written_on_dynamodb(
    dynamodb_dev: tuple[DevServer, str], moto_endpoint: str
) -> None:
    dev, bucket = dynamodb_dev
    _refuses_33_mib(dev)
    assert _objects(moto_endpoint, bucket) == []


def test_five_mib_payloads_and_the_limit_on_sqlite(services_url: str) -> None:
    dev = DevServer(ingress_port=0, admin_port=0, in_memory=True, settings=SETTINGS)
    dev.start()
    try:
        _register(dev, services_url)
        _round_trips_five_mib(dev, "local")
        _refuses_33_mib(dev)
    finally:
        dev.stop()


def test_the_limit_is_restate_servers_message_limit() -> None:
    assert MAX_MESSAGE_BYTES == 33_554_432


RESTATE_SERVER = REPO_ROOT / ".cache/conformance-restate/node_modules/@restatedev/restate-server-linux-x64/bin"


@pytest.mark.skipif(not RESTATE_SERVER.exists(), reason="restate-server not installed in .cache/")
def test_restate_server_and_torpor_draw_the_line_at_32_mib(services_url: str) -> None:
    """Side by side with restate-server 1.7.12: a 16 MiB input runs on both, one byte over 32 MiB is a
    413 on both (restate-server: `text/plain` "length limit exceeded"; Torpor: `{"code","message"}`)."""
    from tests.conformance.harness import RestateRuntime

    runtime = RestateRuntime()
    runtime.start()
    dev = DevServer(ingress_port=0, admin_port=0, in_memory=True, settings=SETTINGS)
    dev.start()
    try:
        body = {"uri": services_url, "use_http_11": True}
        assert httpx.post(f"{runtime.admin_url}/v4/deployments", json=body, timeout=60).status_code == 201
        _register(dev, services_url)
        for size, status in ((16 * MIB, 200), (MAX_MESSAGE_BYTES + 1, 413)):
            data = b"s" * size
            answers = [
                httpx.post(
                    f"{ingress}/BigPayloads/k/size",
                    content=data,
                    headers={"content-type": OCTETS},
                    timeout=120,
                )
                for ingress in (runtime.ingress_url, dev.ingress_url)
            ]
            assert [a.status_code for a in answers] == [status, status], [a.text[:200] for a in answers]
            if status == 200:
                assert [a.json() for a in answers] == [size, size]
            else:
                assert answers[1].json()["code"] == 413
    finally:
        dev.stop()
        runtime.close()


def test_listing_a_completed_invocation_with_a_5_mib_output_reads_no_object(
    dynamodb_dev: tuple[DevServer, str],
) -> None:
    dev, _ = dynamodb_dev
    blobs = dev.store.blobs
    assert isinstance(blobs, S3BlobStore)
    data = b'"' + b"a" * (5 * MIB) + b'"'  # a JSON string: the preview shows its first 200 bytes
    reply = _call(dev, "listed/roundtrip", data)
    assert reply.status_code == 200, reply.text[:500]
    gets = blobs.requests.get("s3 GetObject", 0)

    listed = httpx.get(f"{dev.admin_url}/invocations", params={"service": "BigPayloads"}, timeout=30)
    assert listed.status_code == 200, listed.text[:500]
    (shown,) = [i for i in listed.json()["invocations"] if i["target"] == "BigPayloads/listed/roundtrip"]
    assert shown["status"] == "completed"
    assert shown["completion_output"] == data.translate(_FLIP)[:200].decode("latin-1") + "…"
    assert blobs.requests.get("s3 GetObject", 0) == gets  # no object read: the list kept previews
    dev.control_plane.sweep()  # the sweep reads the records too
    assert blobs.requests.get("s3 GetObject", 0) == gets  # no object read: the list kept previews

    output = httpx.get(f"{dev.ingress_url}/restate/invocation/{shown['id']}/output", timeout=60)
    assert output.status_code == 200
    assert output.content == data.translate(_FLIP)  # the caller that needs the value gets it whole
    assert blobs.requests.get("s3 GetObject", 0) > gets


def test_a_replaced_or_cleared_large_state_value_leaves_no_object(
    dynamodb_dev: tuple[DevServer, str], moto_endpoint: str
) -> None:
    dev, bucket = dynamodb_dev

    def state_objects() -> list[str]:
        return [k for k in _objects(moto_endpoint, bucket) if k.startswith("OBJ#BigPayloads#")]  # its key's state

    _round_trips_five_mib(dev, "replaced")
    (first,) = state_objects()
    _round_trips_five_mib(dev, "replaced")  # another 5 MiB value replaces it
    (second,) = state_objects()
    assert second != first
    cleared = httpx.post(f"{dev.ingress_url}/BigPayloads/replaced/forget", timeout=60)
    assert cleared.status_code == 200, cleared.text
    assert state_objects() == []
    assert _call(dev, "replaced/value").content == b""
