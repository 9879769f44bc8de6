"""`torpor dev` and its parts: the in-process scheduler, the ASGI bridge and the dev server."""

from adapters.local.asgi import asgi_app
from adapters.local.dev import DevServer, run_dev
from adapters.local.scheduler import LocalScheduler

__all__ = ["DevServer", "LocalScheduler", "asgi_app", "run_dev"]
