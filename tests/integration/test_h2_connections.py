"""HTTP/2 connections to deployments in bidirectional mode: shared, kept alive, replaced when cut;
TLS with ALPN `h2` trusting `SSL_CERT_FILE`; `HTTP(S)_PROXY` through CONNECT and `NO_PROXY`.

The example services run under hypercorn with HTTP/2 (h2c, or TLS with a certificate minted here);
a TCP relay in front of them counts the connections Torpor opens and cuts them on demand.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from adapters.http.streaming import H2Invoker
from control_plane.ports import InvokerError
from control_plane.settings import Settings
from tests.helpers.dev import describe, dev_with_examples, wait_completed, wait_for
from tests.helpers.services import MANIFEST_V3, serve_examples
from tests.helpers.tcp_relay import TcpRelay

SETTINGS = Settings(inactivity_timeout_ms=10_000, lease_margin_ms=2_000, call_wait_ms=30_000)
PROXY_SETTINGS = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY")


@pytest.fixture(autouse=True)
def _no_proxy_from_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_SETTINGS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture(scope="module")
def h2_services() -> Iterator[str]:
    with serve_examples(http2=True) as (url, _process):
        yield url


@pytest.fixture
def relay(h2_services: str) -> Iterator[TcpRelay]:
    host, port = h2_services.removeprefix("http://").rsplit(":", 1)
    with TcpRelay(upstream=(host, int(port))) as relay:
        yield relay


def _ten_steps(ingress_url: str, key: str) -> str:
    reply = httpx.post(f"{ingress_url}/Steps/ten_steps", json=key, timeout=60)
    assert reply.status_code == 200, reply.text
    assert reply.json() == list(range(1, 11))
    return reply.headers["x-restate-id"]


def test_sequential_and_concurrent_invocations_share_one_connection(moto_endpoint: str, relay: TcpRelay) -> None:
    with dev_with_examples(moto_endpoint, f"http://127.0.0.1:{relay.port}", SETTINGS) as dev:
        # WHEN five invocations run one after the other, then eight at once, each streamed on one request
        ids = [_ten_steps(dev.ingress_url, f"seq-{i}") for i in range(5)]
        with ThreadPoolExecutor(8) as pool:
            ids += list(pool.map(lambda i: _ten_steps(dev.ingress_url, f"par-{i}"), range(8)))
        attempts = [describe(dev, invocation_id)["attempts"] for invocation_id in ids]
    # THEN registration and all 13 attempts went over one TCP connection (streams multiplexed on it)
    assert attempts == [1] * 13
    assert relay.accepted == 1


def test_a_cut_connection_fails_only_its_attempts_and_the_next_opens_a_new_one(
    moto_endpoint: str, relay: TcpRelay
) -> None:
    with dev_with_examples(moto_endpoint, f"http://127.0.0.1:{relay.port}", SETTINGS) as dev:
        _ten_steps(dev.ingress_url, "before")
        # WHEN the idle kept-alive connection is cut (as a deployment restart would)
        assert relay.cut() == 2
        # THEN the next invocation runs on a new connection
        invocation_id = _ten_steps(dev.ingress_url, "after-idle-cut")
        assert describe(dev, invocation_id)["attempts"] <= 2
        assert relay.accepted == 2
        # WHEN the connection is cut while a stream on it has committed two of six slow steps
        sent = httpx.post(f"{dev.ingress_url}/Steps/slow_steps/send", json={"n": 6, "step_ms": 300}, timeout=30)
        slow_id = sent.json()["invocationId"]

        def committed() -> int:
            return sum(1 for e in describe(dev, slow_id)["journal"] if e["type"] == "RunCompletion")

        wait_for(lambda: committed() >= 2, 30, "two committed steps")
        relay.cut()
        # THEN that attempt fails, the retry opens a new connection and the invocation completes once
        described = wait_completed(dev.admin_url, slow_id)
        output = httpx.get(f"{dev.ingress_url}/restate/invocation/{slow_id}/output", timeout=10)
        assert output.json() == 21
        assert described["attempts"] >= 2
        assert [e["name"] for e in described["journal"] if e["type"] == "Run"] == [f"step-{i}" for i in range(1, 7)]
        assert relay.accepted >= 3
        # AND a later invocation goes on the connection the retry opened
        opened = relay.accepted
        assert describe(dev, _ten_steps(dev.ingress_url, "after-stream-cut"))["attempts"] == 1
        assert relay.accepted == opened


def _self_signed(directory: Path) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1 and localhost: `(cert.pem, key.pem)` paths."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "torpor test deployment")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return str(cert_path), str(key_path)


def test_an_https_deployment_is_streamed_over_tls_h2_trusting_ssl_cert_file(
    moto_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = _self_signed(tmp_path)
    with serve_examples(http2=True, tls=(cert, key)) as (url, _process):
        assert url.startswith("https://")
        # GIVEN certifi's roots only: the self-signed deployment is refused, naming the setting
        with pytest.raises(InvokerError, match="SSL_CERT_FILE") as refused:
            H2Invoker(trust_env=False).open_stream(url, "GET", "/discover", {"accept": MANIFEST_V3}, 5)
        assert "self-signed certificate" in str(refused.value)
        # WHEN SSL_CERT_FILE trusts it
        monkeypatch.setenv("SSL_CERT_FILE", cert)
        with dev_with_examples(moto_endpoint, url, SETTINGS) as dev:
            listed = httpx.get(f"{dev.admin_url}/deployments", timeout=10).json()["deployments"]
            invocation_id = _ten_steps(dev.ingress_url, "tls")
            described = describe(dev, invocation_id)
    # THEN it is registered over HTTP/2 (ALPN h2) in bidirectional mode, and ten steps take one request
    assert [(d["uri"], d["protocol_type"], d["http_version"]) for d in listed] == [(url, "BidiStream", "HTTP/2.0")]
    assert described["attempts"] == 1


def _discover(invoker: H2Invoker, url: str) -> dict[str, Any]:
    stream = invoker.open_stream(url, "GET", "/discover", {"accept": MANIFEST_V3}, 5)
    try:
        stream.end()
        status, _ = stream.head(5)
        body = b""
        while chunk := stream.receive(5):
            body += chunk
    finally:
        stream.close()
    assert status == 200, body
    manifest: dict[str, Any] = json.loads(body)
    return manifest


def test_http_proxy_is_tunnelled_with_connect_unless_no_proxy_names_the_host(
    h2_services: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = h2_services.removeprefix("http://")
    with TcpRelay() as proxy:
        # WHEN HTTP_PROXY names a proxy: the HTTP/2 connection is a CONNECT tunnel through it
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
        invoker = H2Invoker()
        assert _discover(invoker, h2_services)["protocolMode"] == "BIDI_STREAM"
        assert _discover(invoker, h2_services)["protocolMode"] == "BIDI_STREAM"
        invoker.close()
        assert proxy.tunnels == [target]  # one tunnel, kept for the second request
        # WHEN NO_PROXY names the host: direct
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        _discover(H2Invoker(), h2_services)
        assert proxy.tunnels == [target]
    # AND a proxy the invoker cannot tunnel through is refused, naming the setting
    monkeypatch.delenv("NO_PROXY")
    monkeypatch.setenv("HTTP_PROXY", "https://127.0.0.1:1")
    with pytest.raises(InvokerError, match=r"HTTP_PROXY=https://127\.0\.0\.1:1: .*http:// proxy \(CONNECT\) only"):
        H2Invoker().open_stream(h2_services, "GET", "/discover", {}, 5)


def test_requests_beyond_the_peer_s_max_concurrent_streams_go_on_another_connection() -> None:
    with serve_examples(http2=True, max_concurrent_streams=2) as (url, _process):
        host, port = url.removeprefix("http://").rsplit(":", 1)
        with TcpRelay(upstream=(host, int(port))) as relay:
            relayed = f"http://127.0.0.1:{relay.port}"
            invoker = H2Invoker()
            _discover(invoker, relayed)  # GIVEN a connection that got the deployment's SETTINGS (2 streams)
            # WHEN five requests are open at once
            streams = [invoker.open_stream(relayed, "GET", "/discover", {"accept": MANIFEST_V3}, 5) for _ in range(5)]
            for stream in streams:
                stream.end()
            statuses = [stream.head(5)[0] for stream in streams]
            # THEN each connection carries at most two of them: three connections
            assert statuses == [200] * 5
            assert relay.accepted == 3
            for stream in streams:
                stream.close()
            # AND later requests go on the connections kept open
            for _ in range(4):
                _discover(invoker, relayed)
            assert relay.accepted == 3
            invoker.close()


def test_a_request_ended_after_its_answer_leaves_the_connection_usable() -> None:
    with serve_examples(http2=True, max_concurrent_streams=2) as (url, _process):
        host, port = url.removeprefix("http://").rsplit(":", 1)
        with TcpRelay(upstream=(host, int(port))) as relay:
            relayed = f"http://127.0.0.1:{relay.port}"
            invoker = H2Invoker()
            for _ in range(3):  # more than the 2 streams the deployment allows at once
                # GIVEN a request whose answer ended before its body did (the SDK answers discovery at once)
                stream = invoker.open_stream(relayed, "GET", "/discover", {"accept": MANIFEST_V3}, 5)
                assert stream.head(5)[0] == 200
                while stream.receive(5):
                    pass
                # WHEN its body is ended and the stream released
                stream.end()
                stream.close()
            # THEN the connection still serves requests: the server got no frame for a stream it had
            # forgotten, and each released stream was closed (reset), so none counts against the limit
            assert _discover(invoker, relayed)["protocolMode"] == "BIDI_STREAM"
            assert relay.accepted == 1
            invoker.close()


def test_a_connection_is_retired_after_its_requests_and_its_last_stream_still_ends(relay: TcpRelay) -> None:
    relayed = f"http://127.0.0.1:{relay.port}"
    invoker = H2Invoker(max_requests=3)
    # GIVEN a stream open on a connection that has carried its 3 requests
    _discover(invoker, relayed)
    _discover(invoker, relayed)
    last = invoker.open_stream(relayed, "GET", "/discover", {"accept": MANIFEST_V3}, 5)
    last.end()
    # WHEN more requests come: they go on a new connection
    for _ in range(3):
        _discover(invoker, relayed)
    assert relay.accepted == 2
    # THEN the retired connection's last stream still gets its answer, and then it is closed (the
    # second connection too, after its 3 requests)
    assert last.head(5)[0] == 200
    while last.receive(5):
        pass
    last.close()
    wait_for(lambda: relay.open == 0, 5, "the retired connections to close")
    _discover(invoker, relayed)
    assert relay.accepted == 3
    invoker.close()
