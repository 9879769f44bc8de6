"""Virtual objects: keyed state with one writer per key.

`Counter/{key}/add` is exclusive: calls on one key run one at a time, in arrival order, and each
request records its start and end (side effects) so tests can check that they never overlap.
`Counter/{key}/get` is shared: it runs beside them and reads the last committed state.
`LazyCounter` is the same counter with lazy state (`state_preload=False`): every read is a
completion from Torpor, hence a suspension.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import restate
from restate import TerminalError

from examples.side_effects import record_side_effect

counter = restate.VirtualObject("Counter")
lazy_counter = restate.VirtualObject("LazyCounter", state_preload=False)


@counter.handler()
async def add(ctx: restate.ObjectContext, delta: int) -> int:
    """Add `delta` to the counter and return the new value (exclusive: one at a time per key).

    Records `{"step": "start"|"end"}` side effects around a short pause, outside `ctx.run` on
    purpose: they mark handler requests, so overlapping requests for a key would show.
    """
    started = time.time()
    value = (await ctx.get("count", type_hint=int)) or 0
    await asyncio.sleep(0.01)
    ctx.set("count", value + delta)
    record_side_effect("Counter", "add", ctx.request().id, "request", key=ctx.key(), start=started, end=time.time())
    return value + delta


@counter.handler(kind="shared")
async def get(ctx: restate.ObjectSharedContext) -> int:
    """The counter's value as last committed (shared: runs beside exclusive handlers)."""
    return (await ctx.get("count", type_hint=int)) or 0


@counter.handler()
async def add_then_fail(ctx: restate.ObjectContext, delta: int) -> int:
    """Set the counter, then fail the attempt with a retryable error every time.

    The SetState of a failed attempt must never become visible.
    """
    value = (await ctx.get("count", type_hint=int)) or 0
    ctx.set("count", value + delta)
    raise RuntimeError("this attempt fails after writing state")


@counter.handler()
async def add_after_sleep(ctx: restate.ObjectContext, request: dict) -> int:
    """Sleep `request["ms"]` while holding the key, then add `request["delta"]`."""
    await ctx.sleep(timedelta(milliseconds=int(request["ms"])))
    value = (await ctx.get("count", type_hint=int)) or 0
    ctx.set("count", value + int(request["delta"]))
    return value + int(request["delta"])


@counter.handler()
async def reset(ctx: restate.ObjectContext) -> str:
    """Clear all state of the key."""
    ctx.clear_all()
    return "reset"


@counter.handler()
async def describe(ctx: restate.ObjectContext) -> dict:
    """`{"key", "keys": [state keys]}`."""
    return {"key": ctx.key(), "keys": sorted(await ctx.state_keys())}


@lazy_counter.handler()
async def lazy_add(ctx: restate.ObjectContext, delta: int) -> int:
    """Like Counter/add, with lazy state: the read is answered by Torpor (one suspension)."""
    value = (await ctx.get("count", type_hint=int)) or 0
    ctx.set("count", value + delta)
    return value + delta


@lazy_counter.handler()
async def read_many(ctx: restate.ObjectContext, names: list) -> dict:
    """Read several state entries (each a lazy read) and list the keys."""
    values = {name: await ctx.get(name, type_hint=str) for name in names}
    if not isinstance(names, list):
        raise TerminalError("names must be a list", status_code=400)
    return {"values": values, "keys": sorted(await ctx.state_keys())}


@lazy_counter.handler()
async def put(ctx: restate.ObjectContext, entries: dict) -> int:
    """Set several string entries at once."""
    for name, value in entries.items():
        ctx.set(name, value)
    return len(entries)


@counter.handler()
async def add_via_self(ctx: restate.ObjectContext, delta: int) -> int:
    """Call `Counter/{same key}/add` and wait for it: a deadlock, kept as an example of one.

    The callee is exclusive on the key this handler holds, so it waits in the key's inbox until
    this invocation ends, and this invocation waits for the callee. Torpor does not break the cycle
    (neither does Restate); `torpor invocations describe` names it. Cancel or kill the caller.
    """
    return await ctx.object_call(add, key=ctx.key(), arg=delta)
