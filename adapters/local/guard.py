"""The local APIs' guard against other web pages: DNS rebinding and cross-site requests.

`torpor dev`'s admin API and ingress have no credentials: anything that can reach their ports may
use them. A web page in the user's browser can reach them too, two ways this guard closes:

- **DNS rebinding**: a page on `evil.example` whose name is re-pointed to 127.0.0.1 sends requests
  with `Host: evil.example` and, being then "same-origin", reads the answers. Only the names the
  server was reached by legitimately are accepted (the loopback names with its port, the names of
  `TORPOR_ALLOWED_HOSTS`, or any name when it listens on a non-loopback address).
- **Cross-site requests** (CSRF): a page may send a "simple" `POST` (a form, or `text/plain`) to
  `http://127.0.0.1:9070/deployments` or to an ingress handler without a preflight: it re-points
  services to its own URL, or runs a handler. A request that changes something (any method but
  GET, HEAD, OPTIONS) with an `Origin` other than the API's own (its addresses, the `Host` the
  request names) or one it allows (the ingress: `TORPOR_UI_ORIGINS`, the web UI's playground), an
  `Origin: null`, or `Sec-Fetch-Site: cross-site` from an origin not allowed, is refused.

Requests without `Origin` (curl, the CLI, the SDKs) pass: they are not made by a web page.
"""

from __future__ import annotations

from collections.abc import Iterable

from adapters.local.asgi import Dispatcher
from http_api.http import HttpRequest, HttpResponse

_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class LocalGuard:
    """A router wrapper: `dispatch` refuses foreign hosts and cross-site changes with a 403
    `{"code", "message"}`, else hands the request to `router`.

    Args:
        router: The API's router (the admin API's, the ingress's, the UI proxy's).
        hosts: Accepted `Host` header values (lower case, with the port), e.g. `127.0.0.1:9070`,
            `localhost:9070`; None accepts any (the server listens on a non-loopback address).
        origins: Origins whose pages may make changes (`http://127.0.0.1:9070`, ...), lower case
            without a trailing `/`; `*` allows every origin (`TORPOR_UI_ORIGINS=*`).
        api: What the messages call the API ("admin API", "ingress").
        extra_hosts: Further accepted host names (`TORPOR_ALLOWED_HOSTS`), lower case, with or
            without a port (`myhost.lan` accepts it on any port).
    """

    def __init__(
        self,
        router: Dispatcher,
        hosts: Iterable[str] | None,
        origins: Iterable[str],
        *,
        api: str = "admin API",
        extra_hosts: Iterable[str] = (),
    ) -> None:
        self.router = router
        self.hosts = None if hosts is None else frozenset(hosts)
        self.origins = frozenset(origins)
        self.api = api
        self.extra_hosts = frozenset(extra_hosts)

    def _host_allowed(self, host: str) -> bool:
        if self.hosts is None or host in self.hosts or host in self.extra_hosts:
            return True
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        return name in self.extra_hosts

    def dispatch(self, request: HttpRequest) -> HttpResponse:
        """403 `{"code", "message"}` for a foreign Host or a cross-site change; else the router's answer."""
        host = request.headers.get("host", "").lower()
        if not self._host_allowed(host):
            shown = host[:100] if host.isprintable() else repr(host[:100])
            return _refused(
                f"Host {shown or '(none)'} is not this {self.api}'s address; use http://{min(self.hosts or {''})} "
                f"(the local {self.api} answers only to its own address, against DNS rebinding; "
                "TORPOR_ALLOWED_HOSTS names more)"
            )
        if request.method.upper() not in _SAFE_METHODS:
            origin = request.headers.get("origin", "").lower().rstrip("/")
            cross_site = request.headers.get("sec-fetch-site", "").lower() == "cross-site"
            same_origin = origin in (f"http://{host}", f"https://{host}")  # the UI, by whatever name it was opened
            allowed = (
                bool(origin) and origin != "null" and (same_origin or origin in self.origins or "*" in self.origins)
            )
            if (origin and not allowed) or (cross_site and not allowed):
                shown = origin[:100] if origin.isprintable() else repr(origin[:100])
                return _refused(
                    f"a {request.method.upper()[:20]} from the web page at {shown or 'another site'} was refused: the "
                    f"local {self.api} takes changes only from "
                    + ("its own web UI" if self.api == "admin API" else "the origins of TORPOR_UI_ORIGINS")
                    + " or from clients that are not web pages"
                )
        return self.router.dispatch(request)


LocalAdminGuard = LocalGuard
"""The name this guard had when only the admin API used it."""


def _refused(message: str) -> HttpResponse:
    return HttpResponse.json({"code": 403, "message": message}, 403)
