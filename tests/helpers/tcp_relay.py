"""A TCP relay for tests: counts the connections it accepts, can cut them, and can act as a CONNECT proxy.

with TcpRelay(upstream=("127.0.0.1", 9080)) as relay:   # a port forwarder
    ...  # talk to f"http://127.0.0.1:{relay.port}"
    relay.accepted        # connections accepted so far
    relay.open            # of those, the ones still open
    relay.cut()           # close every live connection (both sides), as a crashed peer would

with TcpRelay() as proxy:                                 # an HTTP CONNECT proxy (RFC 9110 §9.3.6)
    os.environ["HTTP_PROXY"] = f"http://127.0.0.1:{proxy.port}"
    proxy.tunnels         # the `host:port` targets tunnelled to, in order
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType


class TcpRelay:
    """Relays TCP connections on a free loopback port to `upstream`, or with no `upstream` to the
    target of each connection's HTTP CONNECT request (answered `200`). Thread-safe; a daemon thread
    per direction of each connection."""

    def __init__(self, upstream: tuple[str, int] | None = None) -> None:
        self.upstream = upstream
        self.accepted = 0
        self.open = 0
        self.tunnels: list[str] = []
        self._live: list[socket.socket] = []
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._server.getsockname()[1]
        threading.Thread(target=self._accept_loop, name="tcp-relay", daemon=True).start()

    def __enter__(self) -> TcpRelay:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def cut(self) -> int:
        """Close every live relayed connection on both sides; how many sockets were closed."""
        with self._lock:
            live, self._live = self._live, []
        for sock in live:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        return len(live)

    def close(self) -> None:
        """Stop accepting and cut every connection."""
        self._server.close()
        self.cut()

    def _accept_loop(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                self.accepted += 1
            threading.Thread(target=self._relay, args=(client,), name="tcp-relay-conn", daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        try:
            if self.upstream is not None:
                upstream = socket.create_connection(self.upstream, timeout=10)
            else:
                head = b""
                while b"\r\n\r\n" not in head:
                    chunk = client.recv(1)
                    if not chunk:
                        client.close()
                        return
                    head += chunk
                method, target, _ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
                assert method == "CONNECT", method
                host, port = target.rsplit(":", 1)
                upstream = socket.create_connection((host.strip("[]"), int(port)), timeout=10)
                with self._lock:
                    self.tunnels.append(target)
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            upstream.settimeout(None)
        except (OSError, AssertionError, ValueError):
            client.close()
            return
        with self._lock:
            self._live += [client, upstream]
            self.open += 1
        threading.Thread(target=_pump, args=(upstream, client), daemon=True).start()
        _pump(client, upstream)
        with self._lock:
            self.open -= 1


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy bytes from `source` to `sink` until either side ends; then close both."""
    try:
        while chunk := source.recv(65536):
            sink.sendall(chunk)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
