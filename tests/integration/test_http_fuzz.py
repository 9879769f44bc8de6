"""A seeded fuzz run of `torpor dev`'s two HTTP ports: no request gets a 5xx, none hangs.

Thousands of random and mutated requests go to the ingress and the admin API of one `torpor dev`
(SQLite in memory) with the example services registered (real restate-sdk handlers over HTTP):
methods, paths (route shapes with odd bytes, percent-escapes, unknown names), headers (CR/LF,
non-ASCII, empty names, foreign `Host`, `Origin`), bodies (random JSON, garbage) and
`content-length`s that lie. Each is written on its own connection with a raw socket and must be
answered (a status line, or the connection closed by the server) within `ANSWER_LIMIT_S`; no answer
may be a 5xx. Handlers that fail on purpose with a 5xx (`Steps/fail_terminal`, ...) are not called:
their status is the handler's, not the server's.

Only loopback is ever addressed: registration bodies name 127.0.0.1, `[::1]`, `localhost` or a
malformed host, never an ARN or a Cloud Run service (they would reach AWS or Google), and byte
mutations touch request heads only (a flipped byte in a body's URI could name another address).

`TORPOR_FUZZ_SEED` and `TORPOR_FUZZ_REQUESTS` change the run (default: seed 5, 2,400 requests).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from adapters.local.dev import DevServer
from control_plane.retry import RetryPolicy
from control_plane.settings import Settings

SEED = int(os.environ.get("TORPOR_FUZZ_SEED", "5"))
REQUESTS = int(os.environ.get("TORPOR_FUZZ_REQUESTS", "2400"))
ANSWER_LIMIT_S = 20.0  # far above the 2 s call wait and the 1 s read timeout below
SETTINGS = Settings(
    call_wait_ms=2_000,
    request_read_timeout_ms=1_000,
    inactivity_timeout_ms=5_000,
    lease_margin_ms=1_000,
    retry_policy=RetryPolicy(max_attempts=2, on_max_attempts="pause"),  # a handler that throws stops soon
)

# handlers that take fuzzed input without failing with a 5xx on purpose: (path template, JSON input or None)
INGRESS_TARGETS = [
    "/Greeter/greet", "/Counter/{key}/add", "/Counter/{key}/get", "/Counter/{key}/describe",
    "/Steps/no_input", "/Steps/one_step", "/Chain/headers", "/Signup/{key}/run", "/Signup/{key}/status",
    "/Signup/{key}/confirm", "/Nope/x", "/Greeter/nope",
]  # fmt: skip
INGRESS_SHAPES = [
    "{target}", "{target}/send", "/restate/call{target}", "/restate/send{target}",
    "/restate/invocation/{inv}/attach", "/restate/invocation/{inv}/output",
    "/restate/invocation/Greeter/greet/{key}/attach", "/restate/invocation/Counter/{key}/add/{key}/output",
    "/restate/workflow/Signup/{key}/attach", "/restate/workflow/Signup/{key}/output",
    "/restate/awakeables/{awk}/resolve", "/restate/awakeables/{awk}/reject", "/restate/call/Greeter", "/", "",
]  # fmt: skip
ADMIN_SHAPES = [
    "/deployments", "/deployments/{dp}", "/services", "/services/{svc}", "/services/{svc}/handlers",
    "/services/{svc}/handlers/{key}", "/services/{svc}/state", "/services/{svc}/state/{key}", "/invocations",
    "/invocations/{inv}", "/invocations/{inv}/cancel", "/invocations/{inv}/kill", "/invocations/{inv}/pause",
    "/invocations/{inv}/resume", "/invocations/{inv}/purge", "/query", "/health", "/version", "/openapi",
    "/metrics", "/ui", "/ui/{key}", "/v4/deployments", "/v4/services/{svc}", "/schedules", "/schedules/{key}",
    "/limits/rules", "/limits/rules/bulk-delete",
    "/subscriptions", "/subscriptions/{key}",
    "/", "",
]  # fmt: skip
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD", "TRACE", "FOO", "get", "P\x00ST", "GÉT", ""]
ODD = ["%", "%zz", "%00", "%ff", "%c3%28", "\x00", "\x7f", "é", "😀", " ", "\t", "..", "//", "?", "#", ";", "\\"]
CONTENT_TYPES = [
    "application/json", "application/json; charset=utf-8", "text/plain", "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x", "application/octet-stream", "", "*/*", "application/", "\x00", "é/é",
]  # fmt: skip
SERVICES = ["Greeter", "Counter", "Signup", "Steps", "Nope", "", "é", "%00", "Greeter%2Fgreet"]
IDS = ["inv_1", "inv_1aaaaaaaaaaaaaaaaaaaaaaaaa", "inv_" + "z" * 40, "x", "", "%ff", "inv_1%00", "dp_1", "sign_1"]
URI_HOSTS = ["127.0.0.1", "[::1]", "localhost", "[::1", "127.0.0.1:99999", "127.0.0.1:0", "user:pw@127.0.0.1", ""]


def json_value(rng: random.Random, depth: int = 0) -> object:
    """A random JSON value (strings with odd characters, numbers big and small, nesting)."""
    kind = rng.randrange(8 if depth < 4 else 5)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.choice([0, -1, 1, 2**31, 2**63, -(2**64), 10**30, rng.randrange(-1000, 1000)])
    if kind == 2:
        return rng.choice([0.5, -1e308, 1e-308, 3.14])
    if kind in (3, 4):
        return "".join(
            rng.choice(["a", "é", "\n", "\x00", '"', "\\", "😀", "\ud800", " ", "x" * 50])
            for _ in range(rng.randrange(6))
        )
    if kind == 5:
        return [json_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    keys = ["uri", "additional_headers", "force", "dry_run", "metadata", "use_http_11", "retry_policy", "public",
            "inactivity_timeout", "key", "new_state", "query", "cron", "target", "arn", "auth",
            "pattern", "limits", "concurrency", "precondition", "expected_version", "concurrency_limit",
            "handler_concurrency_limits", "rate_limit", "handler_rate_limits", rng.choice(ODD)]  # fmt: skip
    return {rng.choice(keys): json_value(rng, depth + 1) for _ in range(rng.randrange(5))}


def registration(rng: random.Random, examples_url: str) -> object:
    """A `POST /deployments` body naming loopback only (never an ARN or a Cloud Run service)."""
    uri = rng.choice(
        [
            examples_url,
            f"http://{rng.choice(URI_HOSTS)}{rng.choice(['', ':1', ':9'])}"
            + rng.choice(["", "/", "/p", "/é", "?q", "#f", " x", "\n"]),
        ]
    )
    body: dict[str, object] = {"uri": uri}
    if rng.random() < 0.6:
        names = [
            "x-a",
            "X-B",
            "",
            "a b",
            "a\nb",
            "é",
            "host",
            "content-length",
            "connection",
            "authorization",
            "x" * 300,
        ]
        values = ["v", "", "a\r\nb", "\x00", "é", "€", " ", "x" * 9000, 1, None]
        body["additional_headers"] = {rng.choice(names): rng.choice(values) for _ in range(rng.randrange(3))}
    for name in ("force", "dry_run", "use_http_11", "metadata"):
        if rng.random() < 0.2:
            body[name] = rng.choice([True, False, "yes", 1, None, {"a": "b"}, {"a": 1}])
    if rng.random() < 0.1:
        body["arn"] = rng.choice(["arn:aws:lambda", 3, "", "arn:aws:lambda:eu-west-1:1:function:x"])  # never valid
    if rng.random() < 0.1:
        body["auth"] = rng.choice(["x", {"kind": 1}, {"google_id_token": 3}, [], {"a": {}, "b": {}}])  # never valid
    return body


def mutate(rng: random.Random, data: bytes) -> bytes:
    """`data` with a few bytes flipped, dropped or inserted."""
    buf = bytearray(data)
    for _ in range(rng.randrange(1, 4)):
        if not buf:
            break
        at = rng.randrange(len(buf))
        op = rng.randrange(3)
        if op == 0:
            buf[at] = rng.randrange(256)
        elif op == 1:
            del buf[at]
        else:
            buf[at:at] = bytes([rng.choice([0, 10, 13, 32, 0x7F, 0xC3, 0xFF, ord("%")])])
    return bytes(buf)


def request_bytes(rng: random.Random, port: int, admin: bool, examples_url: str) -> tuple[bytes, bool]:
    """One raw HTTP/1.1 request to `127.0.0.1:port`: `(bytes, lies)`; `lies` when its content-length
    announces more than it sends (the server must answer it 408 after its read timeout)."""
    key = rng.choice(["k", "k2", "é", "%c3%a9", "a%2Fb", "%00", "x" * 300, ""])
    fill = {
        "key": key,
        "inv": rng.choice(IDS),
        "awk": rng.choice(IDS),
        "dp": rng.choice(IDS),
        "svc": rng.choice(SERVICES),
    }
    if admin:
        path = rng.choice(ADMIN_SHAPES).format(**fill)
    else:
        fill["target"] = rng.choice(INGRESS_TARGETS).format(**fill)
        path = rng.choice(INGRESS_SHAPES).format(**fill)
    if rng.random() < 0.3:
        at = rng.randrange(len(path) + 1)
        path = path[:at] + rng.choice(ODD) + path[at:]
    if rng.random() < 0.2:
        path += "?" + rng.choice(["force=true", "force=maybe", "limit=-1", "limit=x", "status=é", "delay=10s",
                                  "delay=x",
                                  "page_token=%ff", "deployment=dp_x", "a=%", "=" * 3])  # fmt: skip
    method = rng.choice(METHODS) if rng.random() < 0.3 else rng.choice(["GET", "POST", "POST", "PATCH", "DELETE"])
    if rng.random() < 0.35:  # well-formed in all but the body: a registration, or a call of a handler
        path = rng.choice(["/deployments", "/v4/deployments"]) if admin else fill["target"]
        method = "POST"
    # the body
    kind = rng.randrange(10)
    if admin and path.rstrip("/").endswith("/deployments") and kind < 5:
        body = json.dumps(registration(rng, examples_url)).encode()
    elif kind < 7:
        body = json.dumps(json_value(rng), ensure_ascii=rng.random() < 0.5).encode("utf-8", "surrogatepass")
    elif kind < 9:
        body = rng.randbytes(rng.randrange(64))
    else:
        body = b""
    headers: list[tuple[bytes, bytes]] = []
    host = f"127.0.0.1:{port}".encode()
    host_choice = rng.random()
    if host_choice < 0.85:
        headers.append((b"host", host))
    elif host_choice < 0.95:
        headers.append((b"host", rng.choice([b"evil.example", b"", b"localhost", b"\xc3\xa9", b"127.0.0.1:1"])))
    content_type = "application/json" if rng.random() < 0.5 else rng.choice(CONTENT_TYPES)
    if content_type or rng.random() < 0.5:
        headers.append((b"content-type", content_type.encode("utf-8")))
    if rng.random() < 0.2:
        headers.append(
            (b"origin", rng.choice([b"https://evil.example", b"null", f"http://127.0.0.1:{port}".encode(), b"\xff"]))
        )
    if rng.random() < 0.1:
        headers.append((b"sec-fetch-site", rng.choice([b"cross-site", b"same-origin", b"none"])))
    if rng.random() < 0.1:
        headers.append((b"idempotency-key", rng.choice([b"k", b"", b"\xc3\xa9", b"x" * 500])))
    if rng.random() < 0.2:
        headers.append(rng.choice([(b"x-odd", b"\xff\xfe"), (b"x-\xc3\xa9", b"v"), (b"", b"v"), (b"x a", b"v"),
                                   (b"x-long", b"x" * 10_000), (b"authorization", b"Bearer t"),
                                   (b"x-otp", b"123456"), (b"x-cr", b"a\rb"), (b"x-lf", b"a\nb")]))  # fmt: skip
    lies = False
    length_choice = rng.random()
    if length_choice < 0.8:
        headers.append((b"content-length", str(len(body)).encode()))
    elif length_choice < 0.84:
        headers.append((b"content-length", str(len(body) + rng.randrange(1, 100)).encode()))
        lies = True
    elif length_choice < 0.88:
        headers.append((b"content-length", str(max(len(body) - 3, 0)).encode()))
    elif length_choice < 0.92:
        headers.append((b"content-length", rng.choice([b"-1", b"x", b"1e3", b"99999999999999999999", b" 3", b"3, 4"])))
    elif length_choice < 0.96 and body:
        headers.append((b"transfer-encoding", b"chunked"))
        body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    head = method.encode("utf-8") + b" " + path.encode("utf-8") + b" HTTP/1.1\r\n"
    head += b"".join(name + b": " + value + b"\r\n" for name, value in headers) + b"connection: close\r\n\r\n"
    if rng.random() < 0.05:  # the head only: a mutated body could re-point a registration off loopback
        head = mutate(rng, head)
    return head + body, lies


def exchange(port: int, raw: bytes) -> tuple[str, int | None]:
    """Send `raw` on a new connection; `("answered", status)`, `("closed", None)` when the server closed
    the connection without a status line, or `("hung", None)` if neither happened within the limit."""
    deadline = time.monotonic() + ANSWER_LIMIT_S
    with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_LIMIT_S) as sock:
        with contextlib.suppress(OSError):  # the server may close early (a 413, a malformed head): read what it said
            sock.sendall(raw)
        received = b""
        while b"\r\n" not in received:
            left = deadline - time.monotonic()
            if left <= 0:
                return "hung", None
            sock.settimeout(left)
            try:
                chunk = sock.recv(4096)
            except TimeoutError:
                return "hung", None
            except OSError:
                chunk = b""
            if not chunk:
                break
            received += chunk
    line = received.split(b"\r\n", 1)[0].split()
    if len(line) >= 2 and line[0].startswith(b"HTTP/") and line[1].isdigit():
        return "answered", int(line[1])
    return "closed", None


@pytest.fixture(scope="module")
def dev(examples_url: str) -> Iterator[DevServer]:
    with DevServer(ingress_port=0, admin_port=0, in_memory=True, settings=SETTINGS, concurrency=4) as server:
        reply = httpx.post(f"{server.admin_url}/deployments", json={"uri": examples_url}, timeout=30)
        assert reply.status_code == 201, reply.text
        yield server


def test_a_seeded_fuzz_run_of_both_ports_gets_no_5xx_and_no_hang(dev: DevServer, examples_url: str) -> None:
    rng = random.Random(SEED)
    ports = {"ingress": int(dev.ingress_url.rsplit(":", 1)[1]), "admin": int(dev.admin_url.rsplit(":", 1)[1])}
    cases = []
    for i in range(REQUESTS):
        api = "admin" if i % 2 else "ingress"
        raw, lies = request_bytes(rng, ports[api], api == "admin", examples_url)
        cases.append((api, raw, lies))
    outcomes: Counter[tuple[str, str]] = Counter()
    statuses: Counter[int] = Counter()
    bad: list[tuple[str, object, bytes]] = []
    lock = threading.Lock()

    def run(case: tuple[str, bytes, bool]) -> None:
        api, raw, lies = case
        outcome, status = exchange(ports[api], raw)
        with lock:
            outcomes[(api, outcome)] += 1
            if status is not None:
                statuses[status] += 1
            if (
                outcome == "hung"
                or (status is not None and status >= 500)
                or (lies and status not in (None, 400, 403, 408, 413))
            ):
                bad.append((api, status or outcome, raw[:300]))

    with ThreadPoolExecutor(max_workers=12) as pool:
        list(pool.map(run, cases))
    print(
        f"\nfuzz seed {SEED}: {REQUESTS} requests; outcomes {dict(outcomes)}; statuses {dict(sorted(statuses.items()))}"
    )
    assert not bad, "\n".join(f"{api} {what}: {raw!r}" for api, what, raw in bad[:20])
    assert sum(n for (_, outcome), n in outcomes.items() if outcome == "answered") > REQUESTS * 0.9
    # the server still answers afterwards
    assert httpx.get(f"{dev.admin_url}/health", timeout=10).status_code == 200
    assert httpx.post(f"{dev.ingress_url}/Greeter/greet", json="ann", timeout=20).json() == "Hello, ann!"
