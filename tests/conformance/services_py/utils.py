"""TestUtilsService: echo handlers, headers, raw bytes, side-effect counting, cancel and signals."""

from __future__ import annotations

from typing import Any

from restate import Context, Service
from restate.serde import BytesSerde

test_utils = Service("TestUtilsService")


@test_utils.handler()
async def echo(ctx: Context, value: str) -> str:
    """Return the input."""
    return value


@test_utils.handler(name="uppercaseEcho")
async def uppercase_echo(ctx: Context, value: str) -> str:
    """Return the input in upper case."""
    return value.upper()


@test_utils.handler(name="echoHeaders")
async def echo_headers(ctx: Context) -> dict[str, str]:
    """The request's headers as the handler sees them."""
    return dict(ctx.request().headers)


@test_utils.handler(
    name="rawEcho",
    accept="*/*",
    content_type="application/octet-stream",
    input_serde=BytesSerde(),
    output_serde=BytesSerde(),
)
async def raw_echo(ctx: Context, value: bytes) -> bytes:
    """Return the input bytes unchanged (`application/octet-stream`)."""
    return value


@test_utils.handler(name="countExecutedSideEffects")
async def count_executed_side_effects(ctx: Context, increments: int) -> int:
    """Run `increments` `ctx.run` steps that count in memory; returns how many ran in this execution.

    In request/response mode the final execution replays every step, so the answer is 0.
    """
    executed = 0

    def count() -> None:
        nonlocal executed
        executed += 1

    for _ in range(increments):
        await ctx.run_typed("count", count)
    return executed


@test_utils.handler(name="cancelInvocation")
async def cancel_invocation(ctx: Context, invocation_id: str) -> None:
    """Cancel another invocation from the context."""
    ctx.cancel_invocation(invocation_id)


@test_utils.handler(name="resolveSignal")
async def resolve_signal(ctx: Context, req: dict[str, Any]) -> None:
    """`{invocationId, signalName, value}`: resolve that invocation's named signal."""
    ctx.resolve_signal(req["invocationId"], req["signalName"], req["value"])


@test_utils.handler(name="rejectSignal")
async def reject_signal(ctx: Context, req: dict[str, Any]) -> None:
    """`{invocationId, signalName, reason}`: reject that invocation's named signal."""
    ctx.reject_signal(req["invocationId"], req["signalName"], req["reason"])
