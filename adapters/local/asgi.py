"""An ASGI bridge from a server (uvicorn) to a `http_api.http.Router`.

The routes are blocking functions (they talk to DynamoDB and may wait for an invocation to
finish), so each request runs `router.dispatch` on a worker thread of the app's own pool, sized for
the number of requests served at once.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol
from urllib.parse import quote

from http_api.http import HttpRequest, HttpResponse

log = logging.getLogger("torpor.asgi")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
AsgiApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class Dispatcher(Protocol):
    """What the app serves: a `Router`, or a wrapper around one (`adapters.local.guard`)."""

    def dispatch(self, request: HttpRequest) -> HttpResponse: ...


_PATH_SAFE = "/:@!$&'()*+,;=-._~"  # kept as-is when re-encoding a decoded path (RFC 3986 pchar)


def prestart(executor: ThreadPoolExecutor, threads: int, timeout_s: float = 30.0) -> None:
    """Start `threads` threads of `executor` now (at most its `max_workers`), not one per `submit`
    when a burst comes.

    A `ThreadPoolExecutor` starts a thread inside `submit` whenever none is idle, and `Thread.start`
    waits until the new thread runs: on a busy GIL each costs a switch interval or more. Submitted
    from the server's event loop, 100 calls at once made 90 threads one after another while the loop
    accepted nothing else (a py-spy profile of `torpor dev` under `bench.sleeps` part (b): 28 % of
    the samples holding the GIL were in `Thread.start`). Each task waits on a barrier, so `threads`
    of them take `threads` distinct threads. Raises nothing: a barrier that times out (a thread that
    never came) leaves the pool to start the rest on demand, as before.
    """
    barrier = threading.Barrier(threads, timeout=timeout_s)

    def arrive() -> None:
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            pass

    for _ in range(threads):
        executor.submit(arrive)


class WorkerPool:
    """Up to `max_workers` threads that run submitted functions, each idle one waiting on a lock of its
    own: a `submit` wakes exactly the thread it hands the function to, the one idle most recently.

    `ThreadPoolExecutor`'s idle threads wait on one shared queue, and each `get` that takes a task
    releases the queue's lock to the next idle thread, which wakes, takes the GIL, finds the queue
    empty and sleeps again: two thread wake-ups (and two GIL hand-offs) per request where one does
    (`strace -f` on `torpor dev`: bench/README.md, section 1). Threads are started up front
    (`start`), so no request waits for `Thread.start`; past `max_workers` busy threads, functions
    wait in arrival order for the next one free. A function's exception is logged, not raised
    (callers hand their outcome back themselves, as `_RouterApp._dispatched` does).

    Args:
        max_workers: Most functions run at once (threads).
        name: Prefix of the threads' names (`{name}_{n}`).
    """

    def __init__(self, max_workers: int, name: str) -> None:
        self._max_workers = max_workers
        self._name = name
        self._mutex = threading.Lock()
        self._idle: list[_Worker] = []  # a stack: the most recently idle is woken first (warm caches)
        self._waiting: collections.deque[Callable[[], None]] = collections.deque()
        self._threads = 0
        self._closed = False

    def start(self, threads: int) -> None:
        """Start `threads` idle threads now (at most `max_workers` in all)."""
        for _ in range(threads):
            with self._mutex:
                if self._closed or self._threads >= self._max_workers:
                    return
                self._threads += 1
                number = self._threads
            threading.Thread(target=self._work, args=(None,), name=f"{self._name}_{number}", daemon=True).start()

    def submit(self, function: Callable[[], None]) -> None:
        """Run `function()` on an idle thread, on a new one if none is idle and fewer than
        `max_workers` run, else on the first thread free. Raises `RuntimeError` after `close`."""
        with self._mutex:
            if self._closed:
                raise RuntimeError("the worker pool is closed")
            if self._idle:
                worker = self._idle.pop()
                worker.task = function
                worker.wake.release()
                return
            if self._threads >= self._max_workers:
                self._waiting.append(function)
                return
            self._threads += 1
            number = self._threads
        threading.Thread(target=self._work, args=(function,), name=f"{self._name}_{number}", daemon=True).start()

    def close(self) -> None:
        """Let idle threads end and drop functions not started yet; running ones finish on their threads."""
        with self._mutex:
            self._closed = True
            idle, self._idle = self._idle, []
            self._waiting.clear()
        for worker in idle:
            worker.task = None
            worker.wake.release()

    def _work(self, task: Callable[[], None] | None) -> None:
        me = _Worker()
        while True:
            if task is not None:
                try:
                    task()
                except Exception:  # a function's own failure: logged, and the thread serves on
                    log.exception("a function run on the worker pool %s raised", self._name)
                task = None
            with self._mutex:
                if self._waiting:
                    task = self._waiting.popleft()
                    continue
                if self._closed:
                    return
                self._idle.append(me)
            me.wake.acquire()  # until `submit` or `close` hands over (GIL released while waiting)
            task = me.task
            if task is None:
                return


class _Worker:
    """An idle `WorkerPool` thread's hand-over point: `wake` is held (acquired) while it waits."""

    __slots__ = ("task", "wake")

    def __init__(self) -> None:
        self.task: Callable[[], None] | None = None
        self.wake = threading.Lock()
        self.wake.acquire()


class _RouterApp:
    """The ASGI 3 application returned by `asgi_app`."""

    def __init__(self, router: Dispatcher, max_concurrency: int, max_body_bytes: int, read_timeout_s: float) -> None:
        self._router = router
        self._max_concurrency = max_concurrency
        self._max_body_bytes = max_body_bytes
        self._read_timeout_s = read_timeout_s
        self._executor: WorkerPool | None = None
        self._executor_lock = threading.Lock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "websocket":
            await receive()  # websocket.connect
            await send({"type": "websocket.close", "code": 1003})

    def _pool(self) -> WorkerPool:
        with self._executor_lock:
            if self._executor is None:
                self._executor = WorkerPool(self._max_concurrency, "torpor-http")
                self._executor.start(self._max_concurrency)
            return self._executor

    def close(self) -> None:
        """Shut the worker pool down (requests still running finish on their threads)."""
        with self._executor_lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.close()

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._pool()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = _headers(scope)
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self._max_body_bytes:  # refused before reading any of it
            await self._send(send, self._too_large())
            return
        chunks: list[bytes] = []
        size = 0
        deadline = asyncio.get_running_loop().time() + self._read_timeout_s
        while True:
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:  # a stalled or too slow body: answered, and the connection closed
                await self._send(send, self._timed_out())
                return
            if message["type"] == "http.disconnect":
                return  # the client left before sending the whole body
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self._max_body_bytes:  # the rest is never read: the server closes the connection
                await self._send(send, self._too_large())
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        request = HttpRequest(
            method=scope["method"],
            path=_raw_path(scope),
            query_string=bytes(scope.get("query_string", b"")).decode("latin-1"),
            headers=headers,
            body=b"".join(chunks),
        )
        await self._send(send, await self._dispatched(request))

    def _dispatched(self, request: HttpRequest) -> asyncio.Future[HttpResponse]:
        """`router.dispatch(request)` on a worker thread; its answer comes back to the loop in one
        `call_soon_threadsafe` (lighter than `run_in_executor`'s chained futures)."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[HttpResponse] = loop.create_future()

        def settle(response: HttpResponse | None, error: BaseException | None) -> None:
            if answer.cancelled():  # the client left and the server cancelled the request
                return
            if error is not None:
                answer.set_exception(error)
            else:
                answer.set_result(response)  # type: ignore[arg-type]

        def run() -> None:
            response, error = None, None
            try:
                response = self._router.dispatch(request)
            except Exception as exc:  # noqa: BLE001 - handed to the awaiting request, which raises it there
                error = exc
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile (the server stopped)
                loop.call_soon_threadsafe(settle, response, error)

        self._pool().submit(run)
        return answer

    def _timed_out(self) -> HttpResponse:
        message = (
            f"the request body did not arrive within {self._read_timeout_s:g} s "
            "(TORPOR_REQUEST_READ_TIMEOUT_MS); send it whole, with a content-length that matches it"
        )
        return HttpResponse.json({"code": 408, "message": message}, 408, {"connection": "close"})

    def _too_large(self) -> HttpResponse:
        message = (
            f"the request body is larger than {self._max_body_bytes} bytes, the most this server takes "
            "(TORPOR_MAX_REQUEST_BYTES)"
        )
        return HttpResponse.json({"code": 413, "message": message}, 413, {"connection": "close"})

    @staticmethod
    async def _send(send: Send, response: HttpResponse) -> None:
        headers = {name.lower(): value for name, value in response.headers.items()}
        headers.setdefault("content-length", str(len(response.body)))
        await send(
            {
                "type": "http.response.start",
                "status": response.status,
                "headers": [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()],
            }
        )
        await send({"type": "http.response.body", "body": response.body})


def _raw_path(scope: Scope) -> str:
    """The still percent-encoded path: `raw_path` if the server gives it, else `path` re-encoded."""
    raw = scope.get("raw_path")
    if raw:
        return bytes(raw).split(b"?", 1)[0].decode("latin-1")
    return quote(scope.get("path", "/"), safe=_PATH_SAFE)


def _headers(scope: Scope) -> dict[str, str]:
    """Header names lower-cased; a repeated header's values joined with ", " in arrival order."""
    headers: dict[str, str] = {}
    for raw_name, raw_value in scope.get("headers", ()):
        name = bytes(raw_name).decode("latin-1").lower()
        value = bytes(raw_value).decode("latin-1")
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return headers


def asgi_app(
    router: Dispatcher,
    *,
    max_concurrency: int = 64,
    max_body_bytes: int = 10 * 1024 * 1024,
    read_timeout_s: float = 30.0,
) -> AsgiApp:
    """An ASGI 3 application serving `router`: HTTP requests and lifespan events.

    Each request's body is read whole (up to `max_body_bytes`), turned into an `HttpRequest`
    (method, raw percent-encoded path, query string, lower-case headers with repeats joined by
    ", ", body) and dispatched on a worker thread; the `HttpResponse` is sent back with a
    `content-length`. Lifespan startup and shutdown are acknowledged (shutdown also releases the
    worker pool). WebSocket connections are refused.

    Args:
        router: The routes to serve (`HttpControlPlane.ingress.router` or `.admin.router`).
        max_concurrency: Most requests dispatched at the same time; more wait for a free thread.
        max_body_bytes: A larger body is answered `413` `{"code", "message"}` as soon as its
            `content-length` or the bytes read so far exceed it; the rest is never read.
        read_timeout_s: The whole body must arrive within this many seconds of the request's
            headers; else the answer is `408` `{"code", "message"}` with `connection: close` (a
            `content-length` larger than the body sent, a stalled or dripping client). Request
            headers are bounded by the server's keep-alive timeout (5 s), after which it closes
            the connection.

    Returns:
        The ASGI callable `app(scope, receive, send)`.
    """
    return _RouterApp(router, max_concurrency, max_body_bytes, read_timeout_s)
