"""The local admin API's guard against other web pages: DNS rebinding and cross-site requests.

`torpor dev`'s admin API has no credentials: anything that can reach its port may use it. A web
page in the user's browser can reach it too, two ways this guard closes:

- **DNS rebinding**: a page on `evil.example` whose name is re-pointed to 127.0.0.1 sends requests
  with `Host: evil.example`. Only the names the server was reached by legitimately are accepted
  (the loopback names with its port, or any name when it listens on a non-loopback address).
- **Cross-site requests** (CSRF): a page may send a "simple" `POST` (e.g. `text/plain`) to
  `http://127.0.0.1:9070/deployments` without a preflight and re-point services to its own URL.
  A request that changes something (any method but GET, HEAD, OPTIONS) with an `Origin` other than
  the admin API's own (where the web UI is served: its addresses, or the `Host` the request names),
  or `Sec-Fetch-Site: cross-site`, is refused.

Requests without `Origin` (curl, the CLI, the SDKs) pass: they are not made by a web page.
"""

from __future__ import annotations

from collections.abc import Iterable

from control_plane.http import HttpRequest, HttpResponse, Router

_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class LocalAdminGuard:
    """A router wrapper: `dispatch` refuses foreign hosts and cross-site changes with a 403, else
    hands the request to `router`.

    Args:
        router: The admin API's router.
        hosts: Accepted `Host` header values (lower case, with the port), e.g. `127.0.0.1:9070`,
            `localhost:9070`; None accepts any (the server listens on a non-loopback address).
        origins: The admin API's own origins (`http://127.0.0.1:9070`, ...), lower case.
    """

    def __init__(self, router: Router, hosts: Iterable[str] | None, origins: Iterable[str]) -> None:
        self.router = router
        self.hosts = None if hosts is None else frozenset(hosts)
        self.origins = frozenset(origins)

    def dispatch(self, request: HttpRequest) -> HttpResponse:
        """403 `{"code", "message"}` for a foreign Host or a cross-site change; else the router's answer."""
        host = request.headers.get("host", "").lower()
        if self.hosts is not None and host not in self.hosts:
            return _refused(
                f"Host {host or '(none)'} is not this admin API's address; use http://{min(self.hosts)} "
                "(the local admin API answers only to its own address, against DNS rebinding)"
            )
        if request.method.upper() not in _SAFE_METHODS:
            origin = request.headers.get("origin", "").lower().rstrip("/")
            cross_site = request.headers.get("sec-fetch-site", "").lower() == "cross-site"
            same_origin = origin in (f"http://{host}", f"https://{host}")  # the UI, by whatever name it was opened
            if (origin and not same_origin and origin not in self.origins) or origin == "null" or cross_site:
                return _refused(
                    f"a {request.method.upper()} from the web page at {origin or 'another site'} was refused: the "
                    "local admin API takes changes only from its own web UI or from clients that are not web pages"
                )
        return self.router.dispatch(request)


def _refused(message: str) -> HttpResponse:
    return HttpResponse.json({"code": 403, "message": message}, 403)
