"""The smallest possible service: one handler, no journaled steps.

``Greeter.greet`` takes a JSON string and returns a JSON string. An invocation is a single
request/response exchange (Start + Input in, Output + End out) — the baseline for protocol
tests and for measuring the control plane's fixed cost per invocation.
"""

from __future__ import annotations

import restate

greeter = restate.Service("Greeter")


@greeter.handler()
async def greet(ctx: restate.Context, name: str) -> str:
    """Greet someone by name.

    Args:
        ctx: The Restate context (unused: this handler journals nothing).
        name: Who to greet.

    Returns:
        ``"Hello, {name}!"``.
    """
    del ctx
    return f"Hello, {name}!"
