"""`http_api.http.Router`: path parameters are percent-decoded as UTF-8, strictly."""

from __future__ import annotations

import json

import pytest

from http_api.http import HttpRequest, HttpResponse, Router


def echo_router() -> Router:
    router = Router()

    def echo(request: HttpRequest, service: str, key: str, handler: str) -> HttpResponse:
        return HttpResponse.json({"service": service, "key": key, "handler": handler})

    router.add("POST", "/{service}/{key}/{handler}", echo)
    return router


def test_a_percent_encoded_utf8_segment_is_decoded() -> None:
    reply = echo_router().dispatch(HttpRequest("POST", "/Counter/caf%C3%A9%2Fx/add"))
    assert reply.status == 200
    assert json.loads(reply.body) == {"service": "Counter", "key": "café/x", "handler": "add"}


@pytest.mark.parametrize("segment", ["%ff", "%fe", "ok%C3"])
def test_a_segment_that_is_not_utf8_once_decoded_is_a_400_naming_it(segment: str) -> None:
    reply = echo_router().dispatch(HttpRequest("POST", f"/Counter/{segment}/add"))
    assert reply.status == 400
    assert json.loads(reply.body) == {
        "code": 400,
        "message": f"path segment {segment!r} is not valid UTF-8 after percent-decoding",
    }
