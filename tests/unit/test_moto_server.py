"""The embedded moto server of `torpor dev` serves one request at a time (moto updates items in place
without a lock; a concurrent read could see half an update)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from adapters.local.moto_server import ACCEPT_TIMEOUT_S, is_sqs_request, make_moto_server, serialized


def test_serialized_runs_one_request_at_a_time() -> None:
    running, most = 0, 0
    guard = threading.Lock()

    def slow_app(environ: dict, start_response: object) -> list[bytes]:
        nonlocal running, most
        with guard:
            running += 1
            most = max(most, running)
        time.sleep(0.02)
        with guard:
            running -= 1
        return [b"ok"]

    app = serialized(slow_app)
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: app({}, lambda *a: None), range(16)))
    assert answers == [[b"ok"]] * 16
    assert most == 1


def test_an_sqs_request_runs_while_another_request_holds_the_lock() -> None:
    # a subscription's long poll on `torpor dev --moto` must not hold DynamoDB up, nor the reverse
    release = threading.Event()

    def app(environ: dict, start_response: object) -> list[bytes]:
        if environ.get("HTTP_X_AMZ_TARGET", "").startswith("DynamoDB"):
            assert release.wait(5), "the SQS request never ran beside the DynamoDB one"
        else:
            release.set()
        return [b"ok"]

    serial = serialized(app)
    dynamodb = {"HTTP_X_AMZ_TARGET": "DynamoDB_20120810.GetItem"}
    sqs = {"HTTP_AUTHORIZATION": "AWS4-HMAC-SHA256 Credential=testing/20261207/us-east-1/sqs/aws4_request, ..."}
    with ThreadPoolExecutor(2) as pool:
        held = pool.submit(serial, dynamodb, lambda *a: None)
        time.sleep(0.05)
        assert pool.submit(serial, sqs, lambda *a: None).result(timeout=5) == [b"ok"]
        assert held.result(timeout=5) == [b"ok"]


def test_requests_are_told_apart_by_target_or_signature() -> None:
    assert is_sqs_request({"HTTP_X_AMZ_TARGET": "AmazonSQS.ReceiveMessage"})
    assert is_sqs_request({"HTTP_AUTHORIZATION": "AWS4-HMAC-SHA256 Credential=k/20261207/us-east-1/sqs/aws4_request"})
    assert not is_sqs_request({"HTTP_X_AMZ_TARGET": "DynamoDB_20120810.PutItem"})
    assert not is_sqs_request({"HTTP_AUTHORIZATION": "AWS4-HMAC-SHA256 Credential=k/20261207/us-east-1/s3/aws4_request"})


def test_the_servers_loop_never_waits_in_accept_for_ever() -> None:
    # socketserver accepts after select; a connection gone in between blocked `stop()` for ever
    server = make_moto_server("127.0.0.1", 0, lambda environ, start_response: [b"ok"])
    try:
        assert server.socket.gettimeout() == ACCEPT_TIMEOUT_S
        started = time.monotonic()
        server._handle_request_noblock()  # nothing to accept: returns after the timeout
        assert time.monotonic() - started < ACCEPT_TIMEOUT_S + 2
    finally:
        server.server_close()
