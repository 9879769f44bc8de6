"""A chain of calls A → B → C, and calls that share one callee through an idempotency key.

`Chain/a` calls `Chain/b`, which calls `Chain/c`, which sleeps `ms` milliseconds; each result
flows back up (`"a(b(c))"`). Every step is a `ctx.run`, recorded as a side effect, so tests can
see that each ran once. Cancelling `a` while `c` sleeps reaches `a`, whose SDK cancels `b`, whose
SDK cancels `c`: each catches the 409 terminal error, records a compensation step and raises it on.

`Chain/call_once` calls `Chain/work` with the idempotency key it is given: however many callers
use the same key, `work` runs once and each of them gets its result.
"""

from __future__ import annotations

from datetime import timedelta

import restate
from restate import TerminalError

from examples.side_effects import record_side_effect

chain = restate.Service("Chain")
SERVICE = "Chain"


async def _step(ctx: restate.Context, handler: str, name: str) -> None:
    invocation_id = ctx.request().id

    def record() -> str:
        record_side_effect(SERVICE, handler, invocation_id, name)
        return name

    await ctx.run_typed(name, record)


@chain.handler()
async def c(ctx: restate.Context, ms: int) -> str:
    """Sleep `ms`, return "c"; on cancel, record `c-compensate` and fail with 409."""
    await _step(ctx, "c", "c-start")
    try:
        await ctx.sleep(timedelta(milliseconds=ms))
    except TerminalError:
        await _step(ctx, "c", "c-compensate")
        raise
    await _step(ctx, "c", "c-done")
    return "c"


@chain.handler()
async def b(ctx: restate.Context, ms: int) -> str:
    """Call `c`, return "b(<c's result>)"; on cancel, record `b-compensate` and fail with 409."""
    await _step(ctx, "b", "b-start")
    try:
        inner = await ctx.service_call(c, ms)
    except TerminalError:
        await _step(ctx, "b", "b-compensate")
        raise
    await _step(ctx, "b", "b-done")
    return f"b({inner})"


@chain.handler()
async def a(ctx: restate.Context, ms: int) -> str:
    """Call `b`, return "a(<b's result>)"; on cancel, record `a-compensate` and fail with 409."""
    await _step(ctx, "a", "a-start")
    try:
        inner = await ctx.service_call(b, ms)
    except TerminalError:
        await _step(ctx, "a", "a-compensate")
        raise
    await _step(ctx, "a", "a-done")
    return f"a({inner})"


@chain.handler()
async def work(ctx: restate.Context, ms: int) -> str:
    """Sleep `ms`, record one `work` step, and return this invocation's id."""
    await ctx.sleep(timedelta(milliseconds=ms))
    await _step(ctx, "work", "work")
    return ctx.request().id


@chain.handler()
async def call_once(ctx: restate.Context, request: dict) -> str:
    """Call `work` with `request["ms"]` under the idempotency key `request["key"]`; its result."""
    return await ctx.service_call(work, int(request["ms"]), idempotency_key=str(request["key"]))


@chain.handler()
async def trace(ctx: restate.Context) -> dict:
    """The W3C `traceparent` this attempt arrived with (`{"traceparent": ...}`), for trace tests."""
    return {"traceparent": ctx.request().attempt_headers.get("traceparent")}
