"""Lambda handlers for tests, hosted by the local Lambda emulator (`adapters.local.lambda_emulator`).

Import it only where `AWS_LAMBDA_FUNCTION_NAME` is set (the emulator's process): `examples.app.app`
is then the SDK's Lambda handler.
"""

from __future__ import annotations

import threading
from typing import Any

from examples.app import app as examples_handler

_lock = threading.Lock()
_invoke_requests = 0


def flaky(event: dict[str, Any], context: Any) -> Any:
    """The examples' Lambda handler, except that the first `/invoke/…` request of the process raises.

    Lambda reports that as a function error (`X-Amz-Function-Error: Unhandled`, errorType
    `RuntimeError`): Torpor must count it as a failed attempt and retry.
    """
    global _invoke_requests
    if str(event.get("path", "")).startswith("/invoke/"):
        with _lock:
            _invoke_requests += 1
            first = _invoke_requests == 1
        if first:
            raise RuntimeError("flaky: the first invocation request of this process fails")
    return examples_handler(event, context)
