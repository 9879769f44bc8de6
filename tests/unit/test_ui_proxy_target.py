"""`torpor ui`'s proxy signs requests for the admin API's host only.

A request target that is not an absolute path (`GET @evil.example/x`, which hypercorn passes on)
would have made the URL `https://API@evil.example/x`: evil.example would have received the
signed request and its credentials."""

from __future__ import annotations

import httpx
import pytest

from adapters.local.ui_proxy import UiProxy
from http_api.http import HttpRequest

ADMIN = "https://abc123.execute-api.eu-west-1.amazonaws.com/prod"


@pytest.fixture
def sent() -> list[httpx.Request]:
    return []


@pytest.fixture
def proxy(sent: list[httpx.Request]) -> UiProxy:
    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={"services": []})

    return UiProxy(ADMIN, None, client=httpx.Client(transport=httpx.MockTransport(answer)))


@pytest.mark.parametrize("target", ["@evil.example/x", "//evil.example/x", "evil.example", ":443@evil.example/"])
def test_a_target_that_is_not_a_path_is_refused_before_anything_is_sent(
    proxy: UiProxy, sent: list[httpx.Request], target: str
) -> None:
    answer = proxy.forward(HttpRequest("GET", target))
    assert answer.status == 400
    assert sent == []


def test_a_path_goes_to_the_admin_api_below_its_stage(proxy: UiProxy, sent: list[httpx.Request]) -> None:
    assert proxy.forward(HttpRequest("GET", "/services", "limit=5")).status == 200
    (request,) = sent
    assert str(request.url) == f"{ADMIN}/services?limit=5"
