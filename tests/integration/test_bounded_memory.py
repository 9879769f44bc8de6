"""`torpor dev` keeps its memory bounded when a caller or a deployment sends too much.

`torpor dev` runs in its own process (its resident memory read from /proc); a 300 MB request body is
refused with a 413 before it is read, and a deployment answering 200 MB fails the attempt without
being read whole (`TORPOR_MAX_REQUEST_BYTES`, `TORPOR_MAX_ANSWER_BYTES`): over HTTP/1.1
(request/response) and over HTTP/2 (one 200 MB message on a stream), with the same failed attempt.
Linux only.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from control_plane.protocol import MessageType
from tests.helpers.asgi import serve_asgi
from tests.helpers.dev import torpor_dev_process, wait_for
from tests.helpers.fake_deployment import Answer, FakeDeployment

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

MB = 1024 * 1024
GROWTH_LIMIT = 50 * MB


def rss(pid: int, field: str = "VmRSS") -> int:
    """Resident memory of process `pid` (bytes); `field="VmHWM"`: its peak since `reset_peak`."""
    with open(f"/proc/{pid}/status") as status:
        line = next(line for line in status if line.startswith(f"{field}:"))
    return int(line.split()[1]) * 1024


def reset_peak(pid: int) -> None:
    """Start measuring the peak resident memory of process `pid` afresh (`/proc/PID/clear_refs`, "5")."""
    with open(f"/proc/{pid}/clear_refs", "w") as clear_refs:
        clear_refs.write("5")


class HugeAnswer(FakeDeployment):
    """Discovery of `Fake/big` as usual; every attempt is answered with `size` bytes, chunked (no
    content-length), so the reader cannot know the size in advance.

    With `http2`, discovery announces the bidirectional mode (served over h2c, the deployment is
    streamed) and the answer is one message: an Output command whose header announces `size` bytes,
    followed by them, sent without waiting for the request body to end."""

    def __init__(self, size: int, http2: bool = False) -> None:
        super().__init__({"big": lambda start, journal: Answer(b"")})
        self.size = size
        self.http2 = http2

    def manifest(self) -> dict[str, Any]:
        return {**super().manifest(), "protocolMode": "BIDI_STREAM" if self.http2 else "REQUEST_RESPONSE"}

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await super().__call__(scope, receive, send)
            return
        if self.http2:  # the stream's body stays open: answer as soon as the request starts
            await receive()
        else:
            while (await receive()).get("more_body"):
                pass
        content_type = dict(scope["headers"]).get(b"content-type", b"")
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", content_type)]})
        chunk = b"\0" * MB
        try:
            if self.http2:
                header = MessageType.Output.to_bytes(2, "big") + b"\0\0" + self.size.to_bytes(4, "big")
                await send({"type": "http.response.body", "body": header, "more_body": True})
            for _ in range(self.size // MB):
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        except Exception:  # noqa: BLE001  # the reader hung up, as it should (the error type is the server's)
            return


@pytest.fixture(scope="module")
def torpor() -> Iterator[tuple[str, str, int]]:
    """`torpor dev` (default store, in a subprocess): `(ingress URL, admin URL, pid)`, warmed up."""
    with torpor_dev_process("--in-memory") as (ingress, admin, process):
        for _ in range(3):
            httpx.get(f"{admin}/deployments", timeout=10)
        yield ingress, admin, process.pid


def send_body(url: str, size: int, declare: bool) -> tuple[bytes, int]:
    """POST to `url` over a raw socket: `declare`, headers announcing `size` bytes and no body (the
    answer must come without it); else `size` bytes chunked, stopping when the server answers or
    hangs up. Returns `(what it answered, bytes sent)`."""
    parts = urlsplit(url)
    sent = 0
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        framing = f"content-length: {size}" if declare else "transfer-encoding: chunked"
        head = (
            f"POST {parts.path} HTTP/1.1\r\nhost: {parts.netloc}\r\ncontent-type: application/json\r\n{framing}\r\n\r\n"
        )
        sock.sendall(head.encode())
        if declare:  # the answer comes on the headers alone: nothing of the body is needed
            return sock.recv(65536), 0
        sock.setblocking(False)
        chunk = b"1" * MB
        answer = b""
        try:
            while sent < size and not answer:
                try:
                    answer = sock.recv(65536)
                    break
                except BlockingIOError:
                    pass
                data = b"%x\r\n%s\r\n" % (len(chunk), chunk)
                sock.setblocking(True)
                sock.sendall(data)
                sock.setblocking(False)
                sent += len(chunk)
            sock.setblocking(True)
            answer = answer or sock.recv(65536)
        except (BrokenPipeError, ConnectionResetError):
            pass
    return answer, sent


@pytest.mark.parametrize("declare", [True, False], ids=["content-length", "chunked"])
def test_a_300_mb_request_body_is_refused_early_and_memory_stays_bounded(
    torpor: tuple[str, str, int], declare: bool
) -> None:
    ingress, admin, pid = torpor
    before = rss(pid)
    # WHEN a caller sends a 300 MB body
    answer, sent = send_body(f"{ingress}/Greeter/greet", 300 * MB, declare)
    # THEN it is refused (413) or cut off long before the end, and torpor dev grew by less than 50 MB
    assert sent < 100 * MB, "torpor dev read on"
    if declare:  # refused on its content-length; chunked, the connection may be reset before the answer is read
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert rss(pid) - before < GROWTH_LIMIT, f"grew by {(rss(pid) - before) / MB:.0f} MB"
    assert httpx.get(f"{admin}/health", timeout=10).status_code == 200


@pytest.mark.parametrize("http2", [False, True], ids=["http1.1-request-response", "http2-stream"])
def test_a_200_mb_answer_from_a_deployment_fails_the_attempt_and_memory_stays_bounded(
    torpor: tuple[str, str, int], http2: bool
) -> None:
    ingress, admin, pid = torpor
    with serve_asgi(HugeAnswer(200 * MB, http2)) as url:
        registered = httpx.post(f"{admin}/deployments", json={"uri": url}, timeout=30)
        assert registered.status_code in (200, 201), registered.text
        assert registered.json()["protocol_type"] == ("BidiStream" if http2 else "RequestResponse")
        before = rss(pid)
        reset_peak(pid)
        # WHEN a handler answers 200 MB
        reply = httpx.post(f"{ingress}/Fake/big/send", timeout=30)
        assert reply.status_code == 202, reply.text
        sent = reply.json()
        invocation_id = sent["invocationId"]

        def described() -> dict[str, Any]:
            body: dict[str, Any] = httpx.get(f"{admin}/invocations/{invocation_id}", timeout=10).json()
            return body

        # THEN the attempt fails, in both modes alike: a retried failure naming the limit and its setting
        wait_for(lambda: described().get("last_failure"), 60, "the attempt to fail on the answer's size")
        grown = rss(pid, "VmHWM") - before  # at its peak: what was buffered may be freed by now
        assert grown < GROWTH_LIMIT, f"grew by {grown / MB:.0f} MB"
        after = described()
        failure = after["last_failure"]
        assert (failure["code"], failure["message"]) == (
            500,
            f"the deployment's answer exceeded {32 * MB} bytes (TORPOR_MAX_ANSWER_BYTES)",
        )
        assert after["status"] in ("backing-off", "running", "ready"), after["status"]
        assert "completion_kind" not in after  # not completed: retried by the retry policy
        httpx.patch(f"{admin}/invocations/{invocation_id}/kill", timeout=10)
