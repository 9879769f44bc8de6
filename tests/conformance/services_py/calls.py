"""Test services that call others: Proxy, CancelTestRunner/CancelTestBlockingService, KillTestRunner/KillTestSingleton.

Names and JSON shapes follow the SDK conformance suite's test-service contract
(the services of `restatedev/e2e` `sdk-tests/` `contracts/`).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from restate import Context, ObjectContext, RestateDurableCallFuture, SendHandle, Service, VirtualObject
from restate.exceptions import TerminalError

from tests.conformance.services_py.objects import hold

proxy = Service("Proxy")


def _call(ctx: Context, req: dict[str, Any]) -> RestateDurableCallFuture[bytes]:
    """The call a ProxyRequest describes: `{serviceName, virtualObjectKey?, handlerName, message: [bytes],
    idempotencyKey?, scope?, limitKey?}` with the message bytes as they are (no JSON re-encoding)."""
    return ctx.generic_call(
        req["serviceName"],
        req["handlerName"],
        bytes(req["message"]),
        req.get("virtualObjectKey"),
        idempotency_key=req.get("idempotencyKey"),
        scope=req.get("scope"),
        limit_key=req.get("limitKey"),
    )


def _send(ctx: Context, req: dict[str, Any]) -> SendHandle:
    """The one-way call a ProxyRequest describes, delayed by `delayMillis` when given."""
    delay_ms = req.get("delayMillis")
    return ctx.generic_send(
        req["serviceName"],
        req["handlerName"],
        bytes(req["message"]),
        req.get("virtualObjectKey"),
        send_delay=timedelta(milliseconds=delay_ms) if delay_ms is not None else None,
        idempotency_key=req.get("idempotencyKey"),
        scope=req.get("scope"),
        limit_key=req.get("limitKey"),
    )


@proxy.handler()
async def call(ctx: Context, req: dict[str, Any]) -> list[int]:
    """Call the target and return its raw output bytes as a list of ints."""
    return list(await _call(ctx, req))


@proxy.handler(name="oneWayCall")
async def one_way_call(ctx: Context, req: dict[str, Any]) -> str:
    """Send to the target; returns the new invocation's id."""
    return await _send(ctx, req).invocation_id()


@proxy.handler(name="manyCalls")
async def many_calls(ctx: Context, requests: list[dict[str, Any]]) -> None:
    """`[{proxyRequest, oneWayCall, awaitAtTheEnd}]`: issue every call/send in order, then await the marked calls."""
    pending = []
    for item in requests:
        if item["oneWayCall"]:
            _send(ctx, item["proxyRequest"])
        else:
            future = _call(ctx, item["proxyRequest"])
            if item["awaitAtTheEnd"]:
                pending.append(future)
    for future in pending:
        await future


cancel_runner = VirtualObject("CancelTestRunner")
cancel_blocking = VirtualObject("CancelTestBlockingService")


@cancel_runner.handler(name="startTest")
async def start_test(ctx: ObjectContext, operation: str) -> None:
    """Call `CancelTestBlockingService/{key}/block(operation)`; a 409 (cancelled) from it sets state `state`."""
    try:
        await ctx.object_call(block, key=ctx.key(), arg=operation)
    except TerminalError as error:
        if error.status_code != 409:
            raise
        ctx.set("state", True)


@cancel_runner.handler(name="verifyTest")
async def verify_test(ctx: ObjectContext) -> bool:
    """Whether `startTest` saw its callee cancelled."""
    return bool(await ctx.get("state", type_hint=bool))


@cancel_blocking.handler()
async def block(ctx: ObjectContext, operation: str) -> None:
    """Hand an awakeable to `AwakeableHolder/{key}` and wait for it, then block on `operation`:
    CALL (itself, same key: never runs), SLEEP (1024 days) or AWAKEABLE (never resolved)."""
    awakeable_id, awakeable = ctx.awakeable(type_hint=str)
    await ctx.object_call(hold, key=ctx.key(), arg=awakeable_id)
    await awakeable
    if operation == "CALL":
        await ctx.object_call(block, key=ctx.key(), arg=operation)
    elif operation == "SLEEP":
        await ctx.sleep(timedelta(days=1024))
    elif operation == "AWAKEABLE":
        _, never = ctx.awakeable(type_hint=str)
        await never


@cancel_blocking.handler(name="isUnlocked")
async def cancel_is_unlocked(ctx: ObjectContext) -> None:
    """Answers once the key's lock is free."""


kill_runner = VirtualObject("KillTestRunner")
kill_singleton = VirtualObject("KillTestSingleton")


@kill_runner.handler(name="startCallTree")
async def start_call_tree(ctx: ObjectContext) -> None:
    """Call `KillTestSingleton/{key}/recursiveCall`."""
    await ctx.object_call(recursive_call, key=ctx.key(), arg=None)


@kill_singleton.handler(name="recursiveCall")
async def recursive_call(ctx: ObjectContext) -> None:
    """Send an awakeable to `AwakeableHolder/{key}`, wait for it, then call itself on the same key (a deadlock)."""
    awakeable_id, awakeable = ctx.awakeable(type_hint=str)
    ctx.object_send(hold, key=ctx.key(), arg=awakeable_id)
    await awakeable
    await ctx.object_call(recursive_call, key=ctx.key(), arg=None)


@kill_singleton.handler(name="isUnlocked")
async def kill_is_unlocked(ctx: ObjectContext) -> None:
    """Answers once the key's lock is free."""
