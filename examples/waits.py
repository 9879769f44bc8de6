"""Handlers that wait: durable sleeps, awakeables, named signals, delayed sends, and compensation
on cancel.

While one of these waits, the invocation is suspended: Torpor stores why, the deployment gets no
request, and a timer or a notification brings it back.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta

import restate
from restate import TerminalError

from examples.side_effects import record_side_effect

waits = restate.Service("Waits")

SERVICE = "Waits"


@waits.handler()
async def sleep(ctx: restate.Context, ms: int) -> str:
    """Sleep durably for `ms` milliseconds (0: a wake-up time already past; the SDK refuses negatives)."""
    await ctx.sleep(timedelta(milliseconds=ms))
    return f"slept {ms} ms"


@waits.handler()
async def sleeps(ctx: restate.Context, count: int) -> str:
    """Sleep durably for 0 ms `count` times in a row (each one due as soon as it is issued)."""
    for _ in range(count):
        await ctx.sleep(timedelta(milliseconds=0))
    return f"slept {count} times"


@waits.handler()
async def timed_sleep(ctx: restate.Context, ms: int) -> int:
    """Sleep durably for `ms` ms and return how late the handler resumed, in ms: the wall time after
    the sleep minus (the time journaled beside it, in a `ctx.run` issued in the same attempt, + `ms`)."""
    start = ctx.run_typed("start", lambda: int(time.time() * 1000))
    slept = ctx.sleep(timedelta(milliseconds=ms))  # issued before the run's result is awaited: one attempt
    due = await start + ms
    await slept
    return int(time.time() * 1000) - due


@waits.handler()
async def call_sleep(ctx: restate.Context, ms: int) -> str:
    """Call `Waits/sleep` with `ms` and wait for its result: while the callee sleeps, this invocation
    is suspended on the call (its journal links to the callee, and the callee's to it)."""
    return await ctx.service_call(sleep, arg=ms)


@waits.handler()
async def awakeable(ctx: restate.Context) -> str:
    """Create an awakeable, publish its id as a side effect, and return what it is resolved with.

    The id is recorded in a `ctx.run` (so it is journaled once) to the side-effects file, where a
    test or a person picks it up: `{"step": "awakeable", "awakeable_id": ...}`.

    Raises:
        TerminalError: when the awakeable is rejected (its reason and code).
    """
    awakeable_id, promise = ctx.awakeable(type_hint=str)
    invocation_id = ctx.request().id

    def publish() -> str:
        record_side_effect(SERVICE, "awakeable", invocation_id, "awakeable", awakeable_id=awakeable_id)
        return awakeable_id

    await ctx.run_typed("publish awakeable id", publish)
    value = await promise
    return f"got {value}"


@waits.handler()
async def resolve(ctx: restate.Context, request: dict) -> str:
    """Resolve (`{"id", "value"}`) or reject (`{"id", "reason"}`) an awakeable from a handler."""
    if "reason" in request:
        ctx.reject_awakeable(request["id"], request["reason"])
        return "rejected"
    ctx.resolve_awakeable(request["id"], request["value"])
    return "resolved"


@waits.handler()
async def signal(ctx: restate.Context, request: dict) -> str:
    """Sleep `after_ms` (default 0: no sleep), then wait `times` times (default 1) for the named
    signal `name` sent to this invocation (`{"name", "after_ms", "times"}`) and return what it
    carried. A signal sent during the sleep is kept until the handler awaits it.

    Raises:
        TerminalError: when the signal is rejected (its message and code).
    """
    if request.get("after_ms"):
        await ctx.sleep(timedelta(milliseconds=request["after_ms"]))
    values = [await ctx.signal(request["name"], type_hint=str) for _ in range(request.get("times", 1))]
    return "got " + ", ".join(values)


@waits.handler()
async def send_signal(ctx: restate.Context, request: dict) -> str:
    """Resolve (`{"id", "name", "value"}`) or reject (`{"id", "name", "reason"}`, optional `"code"`)
    the named signal `name` of invocation `id`."""
    if "reason" in request:
        ctx.reject_signal(request["id"], request["name"], request["reason"], request.get("code", 500))
        return "rejected"
    ctx.resolve_signal(request["id"], request["name"], request["value"])
    return "resolved"


@waits.handler()
async def booking(ctx: restate.Context, ms: int) -> str:
    """Reserve, sleep `ms`, confirm; if cancelled during the sleep, release the reservation (once).

    Raises:
        TerminalError: 409 when cancelled, after the compensation step ran.
    """
    invocation_id = ctx.request().id

    def step(name: str) -> str:
        record_side_effect(SERVICE, "booking", invocation_id, name)
        return name

    await ctx.run_typed("reserve", lambda: step("reserve"))
    try:
        await ctx.sleep(timedelta(milliseconds=ms))
    except TerminalError:
        await ctx.run_typed("release", lambda: step("release"))
        raise
    await ctx.run_typed("confirm", lambda: step("confirm"))
    return "confirmed"


@waits.handler()
async def send_later(ctx: restate.Context, ms: int) -> str:
    """Send `Waits/stamp` with a delay of `ms` milliseconds (a OneWayCall with `invoke_time`)."""
    sent_at = await ctx.run_typed("now", lambda: int(time.time() * 1000))
    handle = ctx.generic_send(
        "Waits",
        "stamp",
        json.dumps({"sent_at": sent_at, "delay_ms": ms}).encode(),
        send_delay=timedelta(milliseconds=ms),
    )
    return await handle.invocation_id()


@waits.handler()
async def stamp(ctx: restate.Context, request: dict) -> int:
    """Record when it ran (a side effect with `t_ms`), and return that time in ms."""
    invocation_id = ctx.request().id

    def now() -> int:
        record_side_effect(SERVICE, "stamp", invocation_id, "stamp", request=request)
        return int(time.time() * 1000)

    return await ctx.run_typed("stamp", now)
