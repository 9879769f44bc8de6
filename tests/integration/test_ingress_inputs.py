"""What the ingress and admin APIs answer to unusual input, with real restate-sdk handlers.

Attach and output by idempotency key, an idempotency key on a workflow's `run`, request content
types, malformed invocation ids, empty object keys, an oversized request, deeply nested JSON and
garbage page tokens. Where restate-server 1.7.12 answers these, the status codes are its own.

`torpor dev` wiring on a moto server over HTTP; the example services run under hypercorn.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from adapters.local.dev import DevServer
from control_plane.settings import Settings
from tests.helpers.dev import dev_with_examples, unique
from tests.helpers.headers import CREDENTIAL_NAMES

SETTINGS = Settings(
    inactivity_timeout_ms=10_000,
    lease_margin_ms=2_000,
    call_wait_ms=20_000,
    ui_origins=("https://ui.example.com",),
    allowed_hosts=("torpor.test",),
)


@pytest.fixture(scope="module")
def dev(moto_endpoint: str, examples_url: str) -> Iterator[DevServer]:
    with dev_with_examples(moto_endpoint, examples_url, SETTINGS) as server:
        yield server


def assert_error(reply: httpx.Response, status: int, *fragments: str) -> None:
    """`reply` is `status` with a `{"code", "message"}` body whose message holds every fragment."""
    assert reply.status_code == status, reply.text
    body = reply.json()
    assert body["code"] == status, body
    for fragment in fragments:
        assert fragment in body["message"], body


# --- attach and output by idempotency key -----------------------------------------------------------


def test_a_service_invocation_is_attached_and_read_by_its_idempotency_key(dev: DevServer) -> None:
    # GIVEN a send to a service with an idempotency key
    key = unique("attach")
    sent = httpx.post(f"{dev.ingress_url}/Greeter/greet/send", json="ann", headers={"idempotency-key": key})
    assert sent.status_code == 202, sent.text
    invocation_id = sent.json()["invocationId"]

    # WHEN a client attaches to it and reads its output by target and key (no invocation id)
    attached = httpx.get(f"{dev.ingress_url}/restate/invocation/Greeter/greet/{key}/attach", timeout=30)
    output = httpx.get(f"{dev.ingress_url}/restate/invocation/Greeter/greet/{key}/output", timeout=30)

    # THEN both answer the result and name the invocation
    for reply in (attached, output):
        assert reply.status_code == 200, reply.text
        assert reply.json() == "Hello, ann!"
        assert reply.headers["x-restate-id"] == invocation_id


def test_an_object_invocation_is_attached_by_object_key_and_idempotency_key(dev: DevServer) -> None:
    key, object_key = unique("attach"), unique("counter")
    sent = httpx.post(f"{dev.ingress_url}/Counter/{object_key}/add/send", json=5, headers={"idempotency-key": key})
    assert sent.status_code == 202, sent.text

    path = f"{dev.ingress_url}/restate/invocation/Counter/{object_key}/add/{key}"
    attached = httpx.get(f"{path}/attach", timeout=30)
    assert attached.status_code == 200, attached.text
    assert attached.json() == 5
    assert attached.headers["x-restate-id"] == sent.json()["invocationId"]
    output = httpx.get(f"{path}/output", timeout=30)
    assert (output.status_code, output.json()) == (200, 5)

    # another object key with the same idempotency key is another invocation, never made
    other = httpx.get(f"{dev.ingress_url}/restate/invocation/Counter/{unique('other')}/add/{key}/output")
    assert_error(other, 404, "not found")


def test_output_by_idempotency_key_is_470_until_the_invocation_completes(dev: DevServer) -> None:
    key = unique("sleepy")
    sent = httpx.post(f"{dev.ingress_url}/Waits/sleep/send", json=1500, headers={"idempotency-key": key})
    assert sent.status_code == 202, sent.text

    early = httpx.get(f"{dev.ingress_url}/restate/invocation/Waits/sleep/{key}/output")
    assert early.status_code == 470, early.text
    assert early.headers["x-restate-id"] == sent.json()["invocationId"]
    attached = httpx.get(f"{dev.ingress_url}/restate/invocation/Waits/sleep/{key}/attach", timeout=30)
    assert (attached.status_code, attached.json()) == (200, "slept 1500 ms")


@pytest.mark.parametrize("suffix", ["attach", "output"])
def test_an_unknown_idempotency_key_is_a_404(dev: DevServer, suffix: str) -> None:
    reply = httpx.get(f"{dev.ingress_url}/restate/invocation/Greeter/greet/{unique('never')}/{suffix}")
    assert_error(reply, 404, "idempotency key", "not found")
    assert "x-restate-id" not in reply.headers
    keyed = httpx.get(f"{dev.ingress_url}/restate/invocation/Counter/k/add/{unique('never')}/{suffix}")
    assert_error(keyed, 404, "not found")


def test_attach_by_idempotency_key_checks_the_target(dev: DevServer) -> None:
    base = f"{dev.ingress_url}/restate/invocation"
    assert_error(httpx.get(f"{base}/Counter/add/k/output"), 400, "virtual object", "key")
    assert_error(httpx.get(f"{base}/Greeter/x/greet/k/output"), 400, "service")
    assert_error(httpx.get(f"{base}/Nope/greet/k/output"), 404, "Nope")
    assert_error(httpx.get(f"{base}/Greeter/nope/k/output"), 404, "nope")


# --- an idempotency key on a workflow's run ----------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/restate/call/Signup/{id}/run",
        "/Signup/{id}/run",
        "/restate/send/Signup/{id}/run",
        "/Signup/{id}/run/send",
    ],
)
def test_an_idempotency_key_on_a_workflow_run_is_a_400_and_starts_nothing(dev: DevServer, path: str) -> None:
    workflow_id = unique("wf")
    url = dev.ingress_url + path.format(id=workflow_id)
    reply = httpx.post(url, json="a@example.com", headers={"idempotency-key": "k1"}, timeout=30)
    assert_error(reply, 400, "idempotency key", "workflow")
    assert "x-restate-id" not in reply.headers
    # an empty key gets the same answer (the workflow id is the key)
    empty = httpx.post(url, json="a@example.com", headers={"idempotency-key": ""}, timeout=30)
    assert_error(empty, 400, "idempotency key", "workflow")
    never = httpx.get(f"{dev.ingress_url}/restate/workflow/Signup/{workflow_id}/output")
    assert never.status_code == 404, never.text


def test_an_idempotency_key_on_a_workflows_shared_handler_is_accepted(dev: DevServer) -> None:
    reply = httpx.post(f"{dev.ingress_url}/Signup/{unique('wf')}/status", headers={"idempotency-key": "k1"})
    assert reply.status_code == 200, reply.text
    assert reply.json() == {"email": None, "stage": None}


# --- content types -----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/Greeter/greet", "/restate/call/Greeter/greet", "/Greeter/greet/send"])
def test_a_content_type_the_handler_does_not_take_is_a_400_naming_it(dev: DevServer, path: str) -> None:
    reply = httpx.post(f"{dev.ingress_url}{path}", content=b'"ann"', headers={"content-type": "text/plain"})
    assert_error(reply, 400, "'text/plain'", "application/json")
    assert "x-restate-id" not in reply.headers


def test_json_content_types_with_parameters_are_accepted(dev: DevServer) -> None:
    for content_type in ("application/json; charset=utf-8", "application/json;charset=UTF-8", "Application/JSON"):
        reply = httpx.post(f"{dev.ingress_url}/Greeter/greet", content=b'"ann"', headers={"content-type": content_type})
        assert (reply.status_code, reply.json()) == (200, "Hello, ann!"), content_type


def test_a_body_without_a_content_type_is_a_400_and_no_body_needs_none(dev: DevServer) -> None:
    reply = httpx.post(f"{dev.ingress_url}/Greeter/greet", content=b'"ann"')
    assert_error(reply, 400, "content-type", "application/json")
    # no body and no content type: the handler gets no input (its input is optional)
    empty = httpx.post(f"{dev.ingress_url}/Greeter/greet")
    assert (empty.status_code, empty.json()) == (200, "Hello, None!")


# --- malformed invocation ids and empty keys ---------------------------------------------------------


@pytest.mark.parametrize("bad", ["not-an-id", "inv_1000000000000000000000", "inv_1" + "z" * 22])
def test_a_malformed_invocation_id_is_a_400(dev: DevServer, bad: str) -> None:
    for reply in (
        httpx.get(f"{dev.ingress_url}/restate/invocation/{bad}/output"),
        httpx.get(f"{dev.ingress_url}/restate/invocation/{bad}/attach"),
        httpx.get(f"{dev.admin_url}/invocations/{bad}"),
        httpx.patch(f"{dev.admin_url}/invocations/{bad}/cancel"),
    ):
        assert_error(reply, 400, "bad invocation id", bad)


@pytest.mark.parametrize(
    "path",
    [
        "/restate/call/Counter//add",
        "/Counter//add",
        "/restate/send/Counter//add",
        "/Counter//add/send",
        "/restate/call/Signup//run",
    ],
)
def test_an_empty_object_key_is_a_400(dev: DevServer, path: str) -> None:
    reply = httpx.post(f"{dev.ingress_url}{path}", json=1)
    assert_error(reply, 400, "key", "empty")


@pytest.mark.parametrize("path", ["/restate/workflow/Signup//output", "/restate/invocation/Counter//add/k/attach"])
def test_an_empty_key_in_attach_paths_is_a_400(dev: DevServer, path: str) -> None:
    assert_error(httpx.get(f"{dev.ingress_url}{path}"), 400, "key", "empty")


# --- sizes and shapes --------------------------------------------------------------------------------


def test_a_413_for_an_oversized_request_names_the_limit_and_no_invocation(dev: DevServer) -> None:
    reply = httpx.post(f"{dev.ingress_url}/Greeter/greet", json="x" * 500_000, timeout=30)
    assert_error(reply, 413, "400 KB")
    assert "inv_" not in reply.json()["message"]
    assert "x-restate-id" not in reply.headers


def test_deeply_nested_json_is_a_400(dev: DevServer) -> None:
    nested = b"[" * 100_000 + b"]" * 100_000
    reply = httpx.post(f"{dev.ingress_url}/Greeter/greet", content=nested, headers={"content-type": "application/json"})
    assert_error(reply, 400, "nested")
    admin = httpx.post(f"{dev.admin_url}/deployments", content=nested, headers={"content-type": "application/json"})
    assert_error(admin, 400, "nested")


@pytest.mark.parametrize("token", ["²", "²³.inv_1", "1.inv_1", "9" * 5000 + ".inv_1" + "0" * 22, "٣.inv_1x", "%ff"])
def test_a_garbage_page_token_is_a_400(dev: DevServer, token: str) -> None:
    reply = httpx.get(f"{dev.admin_url}/invocations", params={"page_token": token})
    assert_error(reply, 400, "page_token")


# --- headers kept with an invocation ---------------------------------------------------------------


@pytest.mark.parametrize("send", [False, True])
def test_credential_headers_are_never_stored_with_an_invocation(dev: DevServer, send: bool) -> None:
    from control_plane.protocol import decode_frames
    from control_plane.protocol import protocol_pb2 as pb

    # GIVEN a call carrying credentials, a custom header and a header outside the allow-list
    headers = {"authorization": "Bearer s3cret", "cookie": "session=s3cret", "x-api-key": "s3cret",
               "x-my-custom-header": "kept", "my-header": "dropped"}  # fmt: skip
    path = "/Greeter/greet/send" if send else "/Greeter/greet"
    reply = httpx.post(f"{dev.ingress_url}{path}", json={"name": "ann"}, headers=headers, timeout=20)
    assert reply.status_code in (200, 202), reply.text
    # WHEN the invocation is read from the store
    record = dev.store.get_invocation(reply.headers["x-restate-id"])
    assert record is not None
    (entry,) = decode_frames(record.input_entry)
    stored = {h.key.lower(): h.value for h in pb.InputCommandMessage.FromString(entry.payload).headers}
    # THEN the custom x- header is there, the credentials and the unlisted header are not (nowhere in the item)
    assert stored["x-my-custom-header"] == "kept"
    assert not {"authorization", "cookie", "x-api-key", "my-header"} & set(stored)
    assert b"s3cret" not in record.input_entry


def test_headers_carrying_keys_pins_one_time_codes_or_certificates_are_dropped_by_default(dev: DevServer) -> None:
    from control_plane.protocol import decode_frames
    from control_plane.protocol import protocol_pb2 as pb

    # GIVEN a call carrying every credential header of CREDENTIAL_NAMES (all x-*) and a plain custom header
    headers = {name: f"s3cret-{i}" for i, name in enumerate(CREDENTIAL_NAMES)}
    headers["x-my-custom-header"] = "kept"
    # WHEN a handler reads the request's headers
    reply = httpx.post(f"{dev.ingress_url}/Chain/headers", headers=headers, timeout=20)
    assert reply.status_code == 200, reply.text
    seen = reply.json()
    # THEN it sees the custom header and none of the credentials
    assert seen["x-my-custom-header"] == "kept"
    assert not set(CREDENTIAL_NAMES) & set(seen), seen
    # AND none of them is in the invocation's journal
    record = dev.store.get_invocation(reply.headers["x-restate-id"])
    assert record is not None
    (entry,) = decode_frames(record.input_entry)
    stored = {h.key.lower() for h in pb.InputCommandMessage.FromString(entry.payload).headers}
    assert "x-my-custom-header" in stored
    assert not set(CREDENTIAL_NAMES) & stored
    assert b"s3cret" not in record.input_entry


@pytest.mark.parametrize("verb", ["call", "send"])
def test_a_restate_path_without_a_handler_is_a_400_naming_the_shape(dev: DevServer, verb: str) -> None:
    reply = httpx.post(f"{dev.ingress_url}/restate/{verb}/Greeter", json="x")
    assert_error(reply, 400, "names no handler", f"/restate/{verb}/Greeter/{{handler}}")


# --- the local ingress against other web pages -----------------------------------------------------


def _not_sent(dev: DevServer, idempotency_key: str) -> bool:
    """No invocation was sent to `Chain/headers` with `idempotency_key`."""
    reply = httpx.get(f"{dev.ingress_url}/restate/invocation/Chain/headers/{idempotency_key}/output", timeout=10)
    return reply.status_code == 404


def test_the_local_ingress_answers_only_to_its_own_address(dev: DevServer) -> None:
    port = dev.ingress_url.rsplit(":", 1)[1]
    key = unique("rebind")
    # GIVEN a DNS-rebinding page whose name now points at 127.0.0.1
    rebound = {"host": "evil.example", "idempotency-key": key}
    # WHEN it calls a handler, or reads an answer
    call = httpx.post(f"{dev.ingress_url}/Chain/headers", headers=rebound, timeout=10)
    read = httpx.get(f"{dev.ingress_url}/restate/invocation/Chain/headers/{key}/output", headers=rebound)
    # THEN both are refused with a 403 naming the Host, and nothing ran
    assert_error(call, 403, "Host evil.example", "TORPOR_ALLOWED_HOSTS")
    assert_error(read, 403, "Host evil.example")
    assert _not_sent(dev, key)
    # AND its own names, and the names of TORPOR_ALLOWED_HOSTS, are answered
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"torpor.test:{port}"):
        reply = httpx.post(f"{dev.ingress_url}/Greeter/greet", json="ann", headers={"host": host}, timeout=20)
        assert reply.status_code == 200, (host, reply.text)


@pytest.mark.parametrize(
    "forged",
    [
        {"content-type": "text/plain", "origin": "https://evil.example"},
        {"content-type": "application/x-www-form-urlencoded", "origin": "https://evil.example"},
        {"content-type": "multipart/form-data; boundary=x", "origin": "null"},  # a sandboxed frame
        {"content-type": "text/plain", "sec-fetch-site": "cross-site"},  # no Origin: only this
    ],
)
def test_a_cross_site_simple_request_to_the_local_ingress_runs_no_handler(dev: DevServer, forged: dict) -> None:
    # GIVEN a web page on another site posting a "simple" request (no preflight) to a handler taking no input
    key = unique("csrf")
    # WHEN it reaches the local ingress
    reply = httpx.post(f"{dev.ingress_url}/Chain/headers", headers={**forged, "idempotency-key": key}, timeout=10)
    # THEN it is refused with a 403 naming why, and no invocation was made
    assert_error(reply, 403, "TORPOR_UI_ORIGINS")
    assert _not_sent(dev, key)


def test_the_web_ui_and_the_allowed_origins_still_call_the_local_ingress(dev: DevServer) -> None:
    # the admin API's web UI (its playground) and an origin of TORPOR_UI_ORIGINS, even cross-site
    for origin, site in ((dev.admin_url, "same-site"), ("https://ui.example.com", "cross-site")):
        headers = {"origin": origin, "sec-fetch-site": site}
        reply = httpx.post(f"{dev.ingress_url}/Greeter/greet", json="ann", headers=headers, timeout=20)
        assert reply.status_code == 200, (origin, reply.text)
        assert reply.headers["access-control-allow-origin"] == origin
    # and clients that are not web pages
    assert httpx.post(f"{dev.ingress_url}/Greeter/greet", json="ann", timeout=20).status_code == 200
