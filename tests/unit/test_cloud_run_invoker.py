"""`CloudRunInvoker` without a network: token caching and expiry, retry on 401/403, headers, names.

A fake HTTP invoker records what would be sent and answers scripted statuses; tokens are unsigned
JWT-shaped strings with a chosen `exp`; the clock is a variable.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from google.api_core import exceptions as api_exceptions
from google.auth import exceptions as auth_exceptions
from google.auth import impersonated_credentials

from adapters.gcp.cloud_run import (
    NO_CREDENTIALS_FIX,
    CloudRunInvoker,
    _bounded_request_class,
    audience_for,
    gcloud_impersonated_id_token_credentials,
    jwt_expiry,
)
from control_plane.ports import HttpReply, InvokerError

URL = "https://greeter-abc-ew.a.run.app"
NOW = 1_800_000_000.0


def token(exp: float | None, n: int = 0) -> str:
    """A JWT-shaped token (not signed) with `exp`, told apart by `n`."""

    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    claims: dict[str, Any] = {"n": n} if exp is None else {"n": n, "exp": int(exp)}
    return f"{part({'alg': 'RS256'})}.{part(claims)}.c2ln"


class FakeHttp:
    """An `Invoker` that records requests and answers the next scripted status (then 200)."""

    def __init__(self, *statuses: int) -> None:
        self.statuses = list(statuses)
        self.sent: list[tuple[str, dict[str, str], float]] = []

    def request(
        self,
        endpoint: str,
        method: str,
        path: str,
        headers: Mapping[str, str],
        body: bytes,
        timeout_s: float,
        auth: Mapping[str, object] | None = None,
    ) -> HttpReply:
        self.sent.append((endpoint + path, dict(headers), timeout_s))
        status = self.statuses.pop(0) if self.statuses else 200
        return HttpReply(status=status, headers={"content-type": "text/html"}, body=b"<html>refused</html>")


class Fetcher:
    """An ID token fetcher handing out `token(exp, n)` with n = 1, 2, ...; counts calls per audience."""

    def __init__(self, lifetime_s: float | None = 3600.0, clock: list[float] | None = None) -> None:
        self.lifetime_s = lifetime_s
        self.clock = clock
        self.calls: list[str] = []
        self.delay_s = 0.0

    def __call__(self, audience: str) -> str:
        time.sleep(self.delay_s)
        self.calls.append(audience)
        now = self.clock[0] if self.clock else NOW
        return token(None if self.lifetime_s is None else now + self.lifetime_s, len(self.calls))


def make(
    *statuses: int, lifetime_s: float | None = 3600.0, **kwargs: Any
) -> tuple[CloudRunInvoker, FakeHttp, Fetcher, list[float]]:
    clock = [NOW]
    http = FakeHttp(*statuses)
    fetcher = Fetcher(lifetime_s, clock)
    invoker = CloudRunInvoker(http, id_token_fetcher=fetcher, clock=lambda: clock[0], **kwargs)
    return invoker, http, fetcher, clock


def call(invoker: CloudRunInvoker, headers: Mapping[str, str] | None = None, **kwargs: Any) -> HttpReply:
    return invoker.request(URL, "POST", "/invoke/Greeter/greet", headers or {}, b"x", 10.0, **kwargs)


def test_a_token_is_reused_until_five_minutes_before_it_expires() -> None:
    invoker, http, fetcher, clock = make()
    call(invoker)
    clock[0] = NOW + 3600 - 301
    call(invoker)
    assert len(fetcher.calls) == 1
    clock[0] = NOW + 3600 - 299
    call(invoker)
    assert len(fetcher.calls) == 2
    assert [headers["authorization"] for _, headers, _ in http.sent] == [
        f"Bearer {token(NOW + 3600, 1)}",
        f"Bearer {token(NOW + 3600, 1)}",
        f"Bearer {token(clock[0] + 3600, 2)}",
    ]


def test_a_short_lived_token_is_reused_until_halfway_to_its_expiry() -> None:
    invoker, _, fetcher, clock = make(lifetime_s=240)
    call(invoker)
    clock[0] = NOW + 119
    call(invoker)
    assert len(fetcher.calls) == 1
    clock[0] = NOW + 121
    call(invoker)
    assert len(fetcher.calls) == 2


def test_a_token_without_a_readable_expiry_is_reused_for_five_minutes() -> None:
    invoker, _, fetcher, clock = make(lifetime_s=None)
    call(invoker)
    clock[0] = NOW + 299
    call(invoker)
    assert len(fetcher.calls) == 1
    clock[0] = NOW + 301
    call(invoker)
    assert len(fetcher.calls) == 2


def test_tokens_are_cached_per_audience() -> None:
    invoker, _, fetcher, _ = make()
    for _ in range(3):
        call(invoker)
        call(invoker, auth={"google_id_token": {"audience": "custom"}})
    assert fetcher.calls == [URL, "custom"]


def test_concurrent_requests_share_one_fetch() -> None:
    invoker, http, fetcher, _ = make()
    fetcher.delay_s = 0.2
    threads = [threading.Thread(target=call, args=(invoker,)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(fetcher.calls) == 1
    assert len(http.sent) == 8


@pytest.mark.parametrize("status", [401, 403])
def test_a_refusal_drops_the_token_and_retries_once_with_a_new_one(status: int) -> None:
    invoker, http, fetcher, _ = make(status)
    reply = call(invoker)
    assert reply.status == 200
    assert len(fetcher.calls) == 2
    first, second = (headers["authorization"] for _, headers, _ in http.sent)
    assert first != second
    call(invoker)
    assert len(fetcher.calls) == 2  # the new token was cached


def test_a_second_refusal_is_returned_with_what_to_fix() -> None:
    invoker, http, _, _ = make(401, 401, 403, 403)
    reply = call(invoker)
    assert reply.status == 401
    assert reply.body.startswith(f"Cloud Run refused the ID token for audience {URL}".encode())
    assert reply.body.endswith(b"<html>refused</html>")
    assert len(http.sent) == 2
    reply = call(invoker)
    assert reply.status == 403
    assert b"roles/run.invoker" in reply.body
    assert len(http.sent) == 4


def test_the_sdks_own_401_is_returned_as_it_is_without_a_new_token() -> None:
    """A Restate SDK refusing Torpor's request identity answers 401 with `x-restate-server`: the ID
    token was fine, so it is neither dropped nor explained as a Cloud Run refusal."""

    class SdkRefusal(FakeHttp):
        def request(self, *args: Any, **kwargs: Any) -> HttpReply:
            super().request(*args, **kwargs)
            return HttpReply(status=401, headers={"x-restate-server": "restate-sdk-python"}, body=b"")

    http = SdkRefusal()
    fetcher = Fetcher()
    invoker = CloudRunInvoker(http, id_token_fetcher=fetcher, clock=lambda: NOW)
    reply = call(invoker)
    assert (reply.status, reply.body) == (401, b"")
    assert len(http.sent) == 1
    call(invoker)
    assert len(fetcher.calls) == 1  # the token was kept


def test_forgetting_a_refused_token_keeps_a_newer_one() -> None:
    invoker, _, _, _ = make()
    newer = invoker.id_token(URL)
    invoker.forget_token(URL, "an older token")
    assert invoker.id_token(URL) == newer
    invoker.forget_token(URL, newer)
    assert invoker.id_token(URL) != newer


def test_the_token_goes_in_x_serverless_authorization_beside_the_deployments_authorization() -> None:
    invoker, http, _, _ = make()
    call(invoker, {"Authorization": "Basic abc", "X-Serverless-Authorization": "stale", "x-restate-id": "1"})
    _, headers, _ = http.sent[0]
    assert headers["Authorization"] == "Basic abc"
    assert headers["x-serverless-authorization"].startswith("Bearer ")
    assert "X-Serverless-Authorization" not in headers
    assert headers["x-restate-id"] == "1"


def test_without_an_authorization_header_the_token_goes_in_authorization() -> None:
    invoker, http, _, _ = make()
    call(invoker, {"x-restate-id": "1"})
    _, headers, _ = http.sent[0]
    assert headers["authorization"].startswith("Bearer ")
    assert "x-serverless-authorization" not in headers


def test_the_audience_is_the_given_one_or_the_urls_origin() -> None:
    assert audience_for("https://svc-abc.a.run.app/restate/", None) == "https://svc-abc.a.run.app"
    assert audience_for("http://127.0.0.1:8080/x", {"google_id_token": {}}) == "http://127.0.0.1:8080"
    assert audience_for(URL, {"google_id_token": {"audience": "my-aud"}}) == "my-aud"


class FakeServices:
    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.calls: list[str] = []

    def get_service(self, *, name: str, timeout: float | None = None) -> Any:
        self.calls.append(name)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_a_service_name_is_resolved_once_and_built_once() -> None:
    services = FakeServices(SimpleNamespace(uri=URL + "/"))
    built: list[FakeServices] = []

    def factory() -> FakeServices:
        built.append(services)
        return services

    invoker, http, fetcher, _ = make(services_client_factory=factory)
    for _ in range(3):
        invoker.request("projects/p/locations/l/services/s", "GET", "/discover", {}, b"", 10.0)
    assert services.calls == ["projects/p/locations/l/services/s"]
    assert len(built) == 1
    assert [url for url, _, _ in http.sent] == [URL + "/discover"] * 3
    assert fetcher.calls == [URL]


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (api_exceptions.NotFound("gone"), "not found: check the project, region and service name"),
        (api_exceptions.PermissionDenied("no"), "needs run.services.get"),
        (api_exceptions.ServiceUnavailable("down"), "could not look up Cloud Run service"),
        (auth_exceptions.DefaultCredentialsError("none"), NO_CREDENTIALS_FIX),
        (SimpleNamespace(uri=""), "has no URL yet"),
    ],
)
def test_a_name_that_cannot_be_resolved_is_an_invoker_error_naming_the_fix(answer: Any, expected: str) -> None:
    services = FakeServices(answer)
    invoker, http, _, _ = make(services_client_factory=lambda: services)
    for _ in range(2):
        with pytest.raises(InvokerError, match="projects/p/locations/l/services/s") as raised:
            invoker.request("projects/p/locations/l/services/s", "GET", "/discover", {}, b"", 10.0)
        assert expected in raised.value.message
    assert len(services.calls) == 2  # failures are not cached
    assert http.sent == []


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (auth_exceptions.DefaultCredentialsError("nothing found"), f"nothing found): {NO_CREDENTIALS_FIX}"),
        (auth_exceptions.RefreshError("invalid_grant: bad", {"error": "invalid_grant"}), "refused an ID token"),
        (auth_exceptions.TransportError("connection refused"), "could not reach the Google token endpoint"),
    ],
)
def test_token_errors_are_invoker_errors_naming_the_fix(error: Exception, expected: str) -> None:
    def fetcher(audience: str) -> str:
        raise error

    http = FakeHttp()
    invoker = CloudRunInvoker(http, id_token_fetcher=fetcher)
    with pytest.raises(InvokerError) as raised:
        call(invoker)
    assert expected in raised.value.message
    assert "{'error'" not in raised.value.message
    assert http.sent == []


def test_time_spent_on_the_token_is_taken_from_the_timeout() -> None:
    invoker, http, fetcher, _ = make()
    fetcher.delay_s = 0.1
    invoker.request(URL, "POST", "/invoke/Greeter/greet", {}, b"", 5.0)
    assert http.sent[0][2] <= 4.95
    fetcher.delay_s = 0.2
    with pytest.raises(InvokerError, match="no time left"):
        invoker.request(URL, "POST", "/invoke/Greeter/greet", {}, b"", 0.1, auth={"google_id_token": {"audience": "a"}})


def test_jwt_expiry_reads_exp_or_gives_none() -> None:
    assert jwt_expiry(token(NOW)) == NOW
    assert jwt_expiry(token(None)) is None
    assert jwt_expiry("opaque") is None
    assert jwt_expiry("a.!!!.c") is None
    assert jwt_expiry("a." + base64.urlsafe_b64encode(b'{"exp": "soon"}').decode() + ".c") is None


def test_close_closes_only_an_http_invoker_it_built() -> None:
    closed: list[str] = []
    http = FakeHttp()
    http.close = lambda: closed.append("given")  # type: ignore[attr-defined]
    CloudRunInvoker(http).close()
    assert closed == []
    own = CloudRunInvoker()
    own.close()
    with pytest.raises(InvokerError, match="closed"):
        own._http.request(URL, "GET", "/", {}, b"", 1.0)


def test_gcloud_impersonated_credentials_are_used_and_other_kinds_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))
    assert gcloud_impersonated_id_token_credentials(URL) is None  # no file
    adc = tmp_path / "application_default_credentials.json"
    user = {"type": "authorized_user", "client_id": "c", "client_secret": "s", "refresh_token": "r"}
    adc.write_text(json.dumps(user))
    assert gcloud_impersonated_id_token_credentials(URL) is None
    sa = "torpor@p.iam.gserviceaccount.com"
    adc.write_text(
        json.dumps(
            {
                "type": "impersonated_service_account",
                "service_account_impersonation_url": (
                    f"https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/{sa}:generateAccessToken"
                ),
                "source_credentials": user,
                "delegates": [],
            }
        )
    )
    credentials = gcloud_impersonated_id_token_credentials(URL)
    assert isinstance(credentials, impersonated_credentials.IDTokenCredentials)
    adc.write_text(json.dumps({"type": "impersonated_service_account"}))
    with pytest.raises(auth_exceptions.DefaultCredentialsError):
        gcloud_impersonated_id_token_credentials(URL)


def test_the_default_fetchers_http_requests_are_bounded() -> None:
    seen: list[float] = []

    class Session:
        def request(self, method: str, url: str, **kwargs: Any) -> Any:
            seen.append(kwargs["timeout"])
            return SimpleNamespace(status_code=200, headers={}, content=b"")

        def close(self) -> None:
            pass

    request = _bounded_request_class()(session=Session())
    request.bound_s = 5.0
    request("http://127.0.0.1:1/token", method="POST", timeout=120)
    request("http://127.0.0.1:1/token", method="POST", timeout=2)
    request("http://127.0.0.1:1/token", method="POST")
    assert seen == [5.0, 2, 5.0]
