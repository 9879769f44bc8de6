"""The web UI: static files (HTML, ES modules, CSS) that the admin API serves under `/ui/`.

They are package data, read with `importlib.resources`, so the UI is served by the admin `Router`
wherever it runs (`torpor dev`, the admin Lambda function) with no build step and no other server.
"""

from __future__ import annotations

import hashlib
from functools import cache
from importlib.resources import files

from http_api.http import HttpRequest, HttpResponse

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
"""What the UI serves, by file extension; other files are not served."""

CACHE_CONTROL = "no-cache"  # file names carry no version: revalidate each time (cheap, with the ETag)
SECURITY_HEADERS = {
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    # the playground talks to the ingress, on another origin; nothing else leaves the admin origin
    "content-security-policy": (
        "default-src 'self'; connect-src 'self' http: https:; img-src 'self' data:; frame-ancestors 'none'"
    ),
}


@cache
def _static_files() -> dict[str, tuple[bytes, str, str]]:
    """`{name: (content, content type, etag)}` of every servable file, read once per process."""
    out: dict[str, tuple[bytes, str, str]] = {}
    for item in files(__name__).joinpath("static").iterdir():
        suffix = "." + item.name.rpartition(".")[2]
        if item.is_file() and suffix in CONTENT_TYPES:
            content = item.read_bytes()
            out[item.name] = (content, CONTENT_TYPES[suffix], '"' + hashlib.sha256(content).hexdigest()[:32] + '"')
    return out


def static_names() -> list[str]:
    """The names of the files the UI serves (`index.html`, `app.js`, ...)."""
    return sorted(_static_files())


def static_response(request: HttpRequest, name: str) -> HttpResponse | None:
    """The file `name` with its content type, `cache-control` and `etag`; `304` when the browser's
    `if-none-match` matches. None if there is no such file."""
    found = _static_files().get(name)
    if found is None:
        return None
    content, content_type, etag = found
    headers = {"cache-control": CACHE_CONTROL, "etag": etag, **SECURITY_HEADERS}
    if etag in {tag.strip().removeprefix("W/") for tag in request.headers.get("if-none-match", "").split(",")}:
        return HttpResponse(304, b"", headers)
    return HttpResponse(200, content, {"content-type": content_type, **headers})
