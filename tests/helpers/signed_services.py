"""A Restate app that accepts only signed requests: restate-sdk's `identity_keys`, from the environment.

`SIGNED_SERVICES_IDENTITY_KEYS` (comma-separated `publickeyv1_…`) is read when the module is
imported, so set it before the deployment's process starts: served over HTTP with
`python -m hypercorn tests.helpers.signed_services:app`, or as a Lambda handler in the local Lambda
emulator (`tests.helpers.signed_services:app`, `AWS_LAMBDA_FUNCTION_NAME` set there, so
`restate.app` builds its Lambda handler). The SDK answers 401 to a request whose
`x-restate-jwt-v1` no key verifies.
"""

from __future__ import annotations

import os
from datetime import timedelta

import restate

IDENTITY_KEYS_ENV = "SIGNED_SERVICES_IDENTITY_KEYS"

greeter = restate.Service("SignedGreeter")


@greeter.handler()
async def greet(ctx: restate.Context, name: str) -> str:
    """Greets after a durable 10 ms sleep: a suspension, so the call takes a second, resuming request."""
    await ctx.sleep(timedelta(milliseconds=10))
    return f"hello {name}"


app = restate.app(
    [greeter],
    protocol="request_response",
    identity_keys=[key for key in os.environ.get(IDENTITY_KEYS_ENV, "").split(",") if key],
)
