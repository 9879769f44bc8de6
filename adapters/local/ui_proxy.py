"""`torpor ui`: the web UI on this machine, for an admin API that takes SigV4-signed requests only.

On AWS the admin API is an API Gateway HTTP API with IAM authorization: a browser cannot sign its
requests, so it cannot open the UI there. `UiProxy` serves the UI's files from this package on a
loopback port and forwards everything else (the admin calls the page makes, and `/ui/config.json`,
which names the deployed ingress) to the admin API, each request signed with the user's AWS
credentials (botocore's `SigV4Auth`, service `execute-api`, via `adapters.cli.aws_auth.SigV4`).

Anything on this machine that reaches the port acts with the user's credentials, so the proxy sits
behind the same guard as `torpor dev`'s admin API (`adapters.local.guard.LocalGuard`): only
requests naming its own loopback address in `Host` (no DNS rebinding), and changes only from its
own origin or from clients that are not web pages (no cross-site requests).

`UiProxyServer(...).start()` serves it with hypercorn on a background thread; `.stop()` ends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading

import httpx
from hypercorn.asyncio import serve
from hypercorn.config import Config

from adapters.local.asgi import asgi_app
from adapters.local.dev import DevServerError, browser_origins, http_url, listen_socket
from adapters.local.guard import LocalGuard
from http_api import ui
from http_api.http import HttpRequest, HttpResponse

log = logging.getLogger("torpor.ui")

CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 60.0  # registration runs discovery against the deployment (as the CLI's admin client)
MAX_BODY_BYTES = 10 * 1024 * 1024  # what the UI sends is small JSON; API Gateway takes at most 10 MB
_FORWARDED_REQUEST_HEADERS = ("accept", "content-type", "if-none-match")
"""Request headers passed on to the admin API. Cookies, Origin, Referer and the like are not: the
admin API authenticates by the signature alone."""
_DROPPED_ANSWER_HEADERS = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding", "set-cookie"}
)


class UiProxy:
    """Serves the web UI's files and forwards the admin calls, signed (a dispatcher for `asgi_app`).

    Args:
        admin_url: The admin API's base URL (`https://ID.execute-api.REGION.amazonaws.com[/stage]`),
            without a trailing slash.
        auth: Signs each forwarded request (`adapters.cli.aws_auth.SigV4`); None sends them unsigned.
        client: The HTTP client to forward with; None: a new one (closed by `close`).
    """

    def __init__(self, admin_url: str, auth: httpx.Auth | None, client: httpx.Client | None = None) -> None:
        self.admin_url = admin_url.rstrip("/")
        self._own_client = client is None
        self._client = client or httpx.Client(
            auth=auth, timeout=httpx.Timeout(CONNECT_TIMEOUT_S, read=READ_TIMEOUT_S), follow_redirects=False
        )

    def dispatch(self, request: HttpRequest) -> HttpResponse:
        """The UI's page and files from this package; anything else the admin API's answer, signed.

        A failure to reach the admin API is a `502`, and API Gateway's own `403` (the signature or
        the credentials' permissions refused) a `403`, each `{"code", "message"}` saying what to fix.
        """
        method = request.method.upper()
        if method in ("GET", "HEAD"):
            local = self._local(request)
            if local is not None:
                return local
        return self.forward(request)

    def _local(self, request: HttpRequest) -> HttpResponse | None:
        path = request.path
        if path == "/":
            return HttpResponse(302, b"", {"location": "ui/"})
        if path == "/ui":
            return HttpResponse(302, b"", {"location": "ui/"})
        if not path.startswith("/ui/"):
            return None
        name = path.removeprefix("/ui/") or "index.html"
        if name == "config.json":  # the deployed admin function names the deployed ingress
            return None
        found = ui.static_response(request, name)
        return found or HttpResponse.json({"code": 404, "message": f"the web UI has no file {name!r}"}, 404)

    def forward(self, request: HttpRequest) -> HttpResponse:
        """`request` sent to the admin API (same method, path, query and body), signed; its answer.

        Only to the admin API's host: a request target that is not an absolute path (`@evil/x`
        would make the URL `https://admin@evil/x`) is a 400, and the URL built is checked to name
        the admin API's scheme, host and port before anything is signed.
        """
        if not request.path.startswith("/") or request.path.startswith("//"):
            return HttpResponse.json(
                {
                    "code": 400,
                    "message": f"bad request target {request.path[:100]!r}: expected a path such as /services",
                },
                400,
            )
        url = self.admin_url + request.path + (f"?{request.query_string}" if request.query_string else "")
        target, admin = httpx.URL(url), httpx.URL(self.admin_url)
        if (target.scheme, target.host, target.port, target.userinfo) != (admin.scheme, admin.host, admin.port, b""):
            return HttpResponse.json({"code": 400, "message": "the request would leave the admin API: refused"}, 400)
        headers = {name: request.headers[name] for name in _FORWARDED_REQUEST_HEADERS if name in request.headers}
        try:
            answer = self._client.request(request.method, url, headers=headers, content=request.body)
        except httpx.HTTPError as exc:
            message = f"cannot reach the admin API at {self.admin_url}: {exc or type(exc).__name__}"
            return HttpResponse.json({"code": 502, "message": message}, 502)
        if answer.status_code == 403 and not _is_torpor_error(answer):
            return HttpResponse.json({"code": 403, "message": gateway_refusal(answer, self.admin_url)}, 403)
        kept = {k.lower(): v for k, v in answer.headers.items() if k.lower() not in _DROPPED_ANSWER_HEADERS}
        return HttpResponse(answer.status_code, answer.content, kept)

    def close(self) -> None:
        """Close the HTTP client if this proxy made it."""
        if self._own_client:
            self._client.close()


def _is_torpor_error(answer: httpx.Response) -> bool:
    """True if `answer` is the admin API's own error (`{"code", "message"}`), not API Gateway's."""
    try:
        body = answer.json()
    except ValueError:
        return False
    return isinstance(body, dict) and "code" in body


def gateway_refusal(answer: httpx.Response, admin_url: str) -> str:
    """One line on API Gateway's `403` to a signed request: what it said and what to fix."""
    try:
        said = answer.json().get("message") or answer.reason_phrase
    except (ValueError, AttributeError):
        said = answer.text.strip()[:200] or answer.reason_phrase
    return (
        f"API Gateway refused the signed request to {admin_url} (403: {said}): the AWS credentials in use need "
        "execute-api:Invoke on the admin API, and must be for its account and region (check AWS_PROFILE, --region)"
    )


class UiProxyServer:
    """`UiProxy` behind `LocalGuard`, served by hypercorn on a loopback port (a background thread).

    Usable as a context manager.

    Args:
        proxy: What to serve.
        port: Port on 127.0.0.1; 0 picks a free one.
    """

    def __init__(self, proxy: UiProxy, port: int = 0) -> None:
        self.proxy = proxy
        self._port = port
        self._url: str | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._shutdown: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        """`http://127.0.0.1:PORT`, once started."""
        if self._url is None:
            raise RuntimeError("the UI server is not started")
        return self._url

    def __enter__(self) -> UiProxyServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> UiProxyServer:
        """Listen and serve; returns once the port accepts connections. Raises `DevServerError`."""
        sock = listen_socket("127.0.0.1", self._port, "web UI", "--port")
        self._url = http_url("127.0.0.1", sock.getsockname()[1])
        origins = browser_origins(self._url)
        hosts = {origin.split("://", 1)[1] for origin in origins}
        app = asgi_app(LocalGuard(self.proxy, hosts, origins), max_concurrency=16, max_body_bytes=MAX_BODY_BYTES)
        config = Config()
        config.bind = [f"fd://{sock.detach()}"]
        config.alpn_protocols = ["http/1.1"]
        config.accesslog = None
        config.errorlog = logging.getLogger("torpor.hypercorn")
        config.graceful_timeout = 2.0
        config.include_server_header = False
        self._thread = threading.Thread(target=self._serve, args=(app, config), name="torpor-ui", daemon=True)
        self._thread.start()
        self._ready.wait(timeout=15)
        if self._error is not None or self._loop is None:
            raise DevServerError(f"the web UI server did not start: {self._error!r}")
        return self

    def _serve(self, app: object, config: Config) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._shutdown = asyncio.Event()
            self._ready.set()
            await serve(app, config, shutdown_trigger=self._shutdown.wait, mode="asgi")  # type: ignore[arg-type]

        try:
            asyncio.run(main())
        except BaseException as exc:  # reported by start(), logged; the thread ends
            self._error = exc
            log.exception("the web UI server failed")
        finally:
            self._ready.set()

    def stop(self) -> None:
        """Stop serving and close the proxy's client. Safe to call twice."""
        if self._thread is not None:
            loop, shutdown = self._loop, self._shutdown
            if loop is not None and shutdown is not None and not loop.is_closed():
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(shutdown.set)
            self._thread.join(timeout=15)
            self._thread = None
        self.proxy.close()
