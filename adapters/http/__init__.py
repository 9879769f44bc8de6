"""The HTTP invoker: `control_plane.ports.Invoker` over plain HTTP/1.1 (local and Cloud Run endpoints)."""

from adapters.http.invoker import HttpInvoker

__all__ = ["HttpInvoker"]
