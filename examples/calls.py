"""Calls between services: a handler calls others and waits for their results.

While it waits, the caller is suspended; the callee's result comes back as a CallCompletion.
"""

from __future__ import annotations

from datetime import timedelta

import restate
from restate import TerminalError

from examples.greeter import greet
from examples.objects import add
from examples.steps import fail_terminal
from examples.waits import booking

calls = restate.Service("Calls")


@calls.handler()
async def greet_twice(ctx: restate.Context, name: str) -> list:
    """Call Greeter/greet twice, one after the other; return both greetings."""
    first = await ctx.service_call(greet, name)
    second = await ctx.service_call(greet, name.upper())
    return [first, second]


@calls.handler()
async def count_to(ctx: restate.Context, request: dict) -> int:
    """Call Counter/{key}/add with 1, `n` times (a keyed callee, one writer per key); the last value."""
    value = 0
    for _ in range(int(request["n"])):
        value = await ctx.object_call(add, key=str(request["key"]), arg=1)
    return value


@calls.handler()
async def call_failing(ctx: restate.Context, message: str) -> str:
    """Call Steps/fail_terminal and report the failure it raised."""
    try:
        await ctx.service_call(fail_terminal, message)
    except TerminalError as error:
        return f"callee failed with {error.status_code}: {error.message}"
    return "callee did not fail"


@calls.handler()
async def book_via(ctx: restate.Context, ms: int) -> str:
    """Call Waits/booking (which sleeps `ms`); cancelling this invocation cancels the booking too."""
    return await ctx.service_call(booking, ms)


@calls.handler()
async def send_then_sleep(ctx: restate.Context, ms: int) -> str:
    """Send Waits/booking (a one-way call, which sleeps `ms`), then sleep `ms` itself; the callee's id.

    Cancelling this invocation while it sleeps leaves the one-way callee running; killing it kills the callee too.
    """
    callee = await ctx.service_send(booking, ms).invocation_id()
    await ctx.sleep(timedelta(milliseconds=ms))
    return callee
