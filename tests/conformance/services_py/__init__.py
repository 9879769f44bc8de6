"""The conformance suite's test services in Python (restate-sdk), all at one endpoint.

`python -m tests.conformance.services_py --port P` serves them (hypercorn, one worker, HTTP/1.1).
With `TORPOR_CONFORMANCE_IDENTITY_KEY` set (a `publickeyv1_...` key) the endpoint accepts only
requests signed with that key.
"""

from __future__ import annotations

import os
from typing import Any

import restate

from tests.conformance.services_py.calls import cancel_blocking, cancel_runner, kill_runner, kill_singleton, proxy
from tests.conformance.services_py.failing import failing, non_deterministic
from tests.conformance.services_py.interpreter import interpreter
from tests.conformance.services_py.objects import awakeable_holder, block_and_wait, counter, list_object, map_object
from tests.conformance.services_py.utils import test_utils

SERVICES = (
    counter,
    proxy,
    list_object,
    map_object,
    awakeable_holder,
    block_and_wait,
    cancel_runner,
    cancel_blocking,
    kill_runner,
    kill_singleton,
    failing,
    non_deterministic,
    test_utils,
    interpreter,
)
"""Every service of the test-service contract."""


def make_app(identity_key: str | None = None) -> Any:
    """The ASGI app serving `SERVICES`.

    `identity_key` (else `$TORPOR_CONFORMANCE_IDENTITY_KEY`), a `publickeyv1_...` key, makes the
    endpoint accept only requests signed with it.
    """
    key = identity_key or os.environ.get("TORPOR_CONFORMANCE_IDENTITY_KEY") or None
    return restate.app(services=list(SERVICES), identity_keys=[key] if key else None)
