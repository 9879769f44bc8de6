"""The web UI's routes on the admin router (static files, redirects, config) and the ingress's CORS."""

from __future__ import annotations

import re
from typing import Any

import pytest

from http_api import ui
from http_api.admin import Admin
from http_api.http import HttpRequest, HttpResponse
from http_api.ingress import Ingress


def admin(**kwargs: Any) -> Admin:
    return Admin(None, None, None, **kwargs)  # type: ignore[arg-type]  # the UI's routes use none of them


def get(path: str, headers: dict[str, str] | None = None, **kwargs: Any) -> HttpResponse:
    return admin(**kwargs).router.dispatch(HttpRequest("GET", path, headers=headers or {}))


@pytest.mark.parametrize("path", ["/", "/ui"])
def test_the_root_and_ui_without_slash_redirect_to_the_ui_page(path: str) -> None:
    reply = get(path)
    assert reply.status == 302
    assert reply.headers["location"] == "ui/"  # relative: holds behind an API Gateway stage prefix too


@pytest.mark.parametrize(
    ("path", "content_type"),
    [
        ("/ui/", "text/html; charset=utf-8"),
        ("/ui/app.js", "text/javascript; charset=utf-8"),
        ("/ui/style.css", "text/css; charset=utf-8"),
        ("/ui/icon.svg", "image/svg+xml"),
    ],
)
def test_static_files_have_their_content_type_and_a_cache_header(path: str, content_type: str) -> None:
    reply = get(path)
    assert reply.status == 200
    assert reply.headers["content-type"] == content_type
    assert reply.headers["cache-control"] == "no-cache"
    assert reply.headers["x-content-type-options"] == "nosniff"
    assert reply.body


def test_a_file_the_browser_has_is_not_sent_again() -> None:
    etag = get("/ui/app.js").headers["etag"]
    again = get("/ui/app.js", {"if-none-match": f'W/"other", {etag}'})
    assert (again.status, again.body) == (304, b"")
    assert get("/ui/app.js", {"if-none-match": '"other"'}).status == 200


@pytest.mark.parametrize("name", ["nope.js", "..", "__init__.py", "config.toml"])
def test_unknown_files_are_404(name: str) -> None:
    assert get(f"/ui/{name}").status == 404


def test_config_names_the_ingress_url_when_known() -> None:
    assert get("/ui/config.json").body == b'{"ingress_url":null}'
    assert (
        get("/ui/config.json", ingress_url="http://127.0.0.1:8080").body == b'{"ingress_url":"http://127.0.0.1:8080"}'
    )


def test_every_file_the_ui_loads_is_served_and_local() -> None:
    """No CDN and no typo: each `src`/`href` of the page and each module import names a served file."""
    names = set(ui.static_names())
    index = get("/ui/").body.decode()
    wanted = set(re.findall(r'(?:src|href)="([^"#]+)"', index))
    for name in names:
        if name.endswith(".js"):
            wanted |= set(re.findall(r'from "\./([^"]+)"', get(f"/ui/{name}").body.decode()))
    assert wanted, "expected the page to load files"
    assert wanted <= names, f"referenced but not served: {wanted - names}"


UI = "http://127.0.0.1:9070"


def ingress_router() -> Any:
    router = Ingress(None, None, None, 0).router  # type: ignore[arg-type]  # CORS needs no engine
    router.allowed_origins = frozenset({UI})
    return router


def test_a_preflight_from_the_ui_is_answered_with_what_the_browser_asks_for() -> None:
    request = HttpRequest(
        "OPTIONS",
        "/restate/call/Greeter/greet",
        headers={"origin": UI, "access-control-request-method": "POST",
                 "access-control-request-headers": "content-type,x-mine"},
    )  # fmt: skip
    reply = ingress_router().dispatch(request)
    assert reply.status == 204
    assert reply.headers["access-control-allow-origin"] == UI
    assert "POST" in reply.headers["access-control-allow-methods"]
    assert reply.headers["access-control-allow-headers"] == "content-type,x-mine"


def test_every_ingress_answer_to_the_ui_carries_cors_headers_even_an_error() -> None:
    reply = ingress_router().dispatch(HttpRequest("GET", "/nowhere", headers={"origin": UI}))
    assert reply.status == 404
    assert reply.headers["access-control-allow-origin"] == UI
    assert reply.headers["access-control-expose-headers"] == "x-restate-id"
    assert reply.headers["content-type"] == "application/json"


def test_another_origin_gets_no_cors_permission() -> None:
    evil = {"origin": "https://evil.example", "access-control-request-method": "POST"}
    preflight = ingress_router().dispatch(HttpRequest("OPTIONS", "/restate/call/Greeter/greet", headers=evil))
    assert preflight.status == 403
    assert "TORPOR_UI_ORIGINS" in preflight.body.decode()
    reply = ingress_router().dispatch(HttpRequest("GET", "/nowhere", headers={"origin": "https://evil.example"}))
    assert "access-control-allow-origin" not in reply.headers
