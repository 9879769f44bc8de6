"""`torpor dev` and its parts: the in-process scheduler, the ASGI bridge and the dev server.

The names below are imported on first use, so a process that needs one part only (the local Lambda
emulator: `python -m adapters.local.lambda_emulator`) does not load the dev server's (moto, hypercorn).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "DevServer": "adapters.local.dev",
    "run_dev": "adapters.local.dev",
    "LocalScheduler": "adapters.local.scheduler",
    "asgi_app": "adapters.local.asgi",
}

__all__ = ["DevServer", "LocalScheduler", "asgi_app", "run_dev"]


def __getattr__(name: str) -> Any:
    """`adapters.local.NAME` for a name in `__all__`, imported from its module. Raises AttributeError."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'adapters.local' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
