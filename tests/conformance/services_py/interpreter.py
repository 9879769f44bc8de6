"""VirtualObjectCommandInterpreter: runs a list of commands (awaits over awakeables, sleeps, runs and
signals, combined as any / all / race) and records each command's result in state `results`.

Command shapes: `{"type": "<name>", ...}` as in the conformance suite's contract
(`awaitOne {command}`, `awaitAny {commands}`, `awaitAwakeableOrTimeout {awakeableKey, timeoutMillis}`,
...); awaitable commands: `createAwakeable {awakeableKey}`, `sleep {timeoutMillis}` (result
`"sleep"`), `runReturns {value}`, `runThrowTerminalException {reason}`, `createSignal {signalName}`.
"""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta
from typing import Any

from restate import (
    ObjectContext,
    ObjectSharedContext,
    RestateDurableFuture,
    RestateDurableSleepFuture,
    VirtualObject,
    as_completed,
    gather,
    select,
    wait_completed,
)
from restate.exceptions import TerminalError

interpreter = VirtualObject("VirtualObjectCommandInterpreter")


@interpreter.handler(name="getResults", kind="shared")
async def get_results(ctx: ObjectSharedContext | ObjectContext) -> list[str]:
    """The result of every command interpreted so far on this key."""
    return await ctx.get("results", type_hint=list[str]) or []


@interpreter.handler(name="hasAwakeable", kind="shared")
async def has_awakeable(ctx: ObjectSharedContext, awakeable_key: str) -> bool:
    """Whether an awakeable was created under `awakeable_key`."""
    return bool(await ctx.get("awk-" + awakeable_key, type_hint=str))


@interpreter.handler(name="resolveAwakeable", kind="shared")
async def resolve_awakeable(ctx: ObjectSharedContext | ObjectContext, req: dict[str, str]) -> None:
    """`{awakeableKey, value}`: resolve that awakeable; terminal error when there is none."""
    awakeable_id = await ctx.get("awk-" + req["awakeableKey"], type_hint=str)
    if not awakeable_id:
        raise TerminalError("No awakeable is registered")
    ctx.resolve_awakeable(awakeable_id, req["value"])


@interpreter.handler(name="rejectAwakeable", kind="shared")
async def reject_awakeable(ctx: ObjectSharedContext | ObjectContext, req: dict[str, str]) -> None:
    """`{awakeableKey, reason}`: reject that awakeable; terminal error when there is none."""
    awakeable_id = await ctx.get("awk-" + req["awakeableKey"], type_hint=str)
    if not awakeable_id:
        raise TerminalError("No awakeable is registered")
    ctx.reject_awakeable(awakeable_id, req["reason"])


def _future(ctx: ObjectContext, command: dict[str, Any]) -> RestateDurableFuture[Any]:
    """Start one awaitable command; its future."""
    kind = command["type"]
    if kind == "createAwakeable":
        awakeable_id, awakeable = ctx.awakeable(type_hint=str)
        ctx.set("awk-" + command["awakeableKey"], awakeable_id)
        return awakeable
    if kind == "sleep":
        return ctx.sleep(timedelta(milliseconds=command["timeoutMillis"]))
    if kind == "runThrowTerminalException":
        reason = command["reason"]

        def fail() -> str:
            raise TerminalError(reason)

        return ctx.run_typed("run should fail command", fail)
    if kind == "runReturns":
        value = command["value"]

        async def returns() -> str:
            await asyncio.sleep(0)  # a run that really awaits
            return value

        return ctx.run_typed("runReturns", returns)
    if kind == "createSignal":
        return ctx.signal(command["signalName"], type_hint=str)
    raise TerminalError(f"unknown awaitable command {kind!r}")


async def _value(future: RestateDurableFuture[Any]) -> str:
    """The future's result as a string; a sleep yields `"sleep"`."""
    if isinstance(future, RestateDurableSleepFuture):
        await future
        return "sleep"
    return str(await future)


async def _first_completed(futures: list[RestateDurableFuture[Any]]) -> str:
    """Race: the first future to complete decides (its value or its failure)."""
    done, _ = await wait_completed(*futures)
    first = next(f for f in futures if f in done)
    return await _value(first)


async def _first_succeeded(futures: list[RestateDurableFuture[Any]]) -> str:
    """Any: the first success; when all fail, the last failure."""
    last_error: TerminalError | None = None
    async for future in as_completed(*futures):
        try:
            return await _value(future)
        except TerminalError as error:
            last_error = error
    assert last_error is not None
    raise last_error


async def _all_succeeded(futures: list[RestateDurableFuture[Any]]) -> str:
    """All: every value joined by `|` (in command order); the first failure to happen fails it."""
    remaining = list(futures)
    while remaining:
        done, remaining = await wait_completed(*remaining)
        for future in done:
            await _value(future)  # raises the failure
    return "|".join([await _value(f) for f in futures])


async def _all_completed(futures: list[RestateDurableFuture[Any]]) -> str:
    """All settled: `ok:<value>` or `err:<message>` per command, joined by `|`."""
    await gather(*futures)
    parts = []
    for future in futures:
        try:
            parts.append("ok:" + await _value(future))
        except TerminalError as error:
            parts.append("err:" + error.message)
    return "|".join(parts)


_COMBINATORS = {
    "awaitAny": _first_completed,
    "awaitFirstCompleted": _first_completed,
    "awaitAnySuccessful": _first_succeeded,
    "awaitFirstSucceededOrAllFailed": _first_succeeded,
    "awaitAllSucceededOrFirstFailed": _all_succeeded,
    "awaitAllCompleted": _all_completed,
}


@interpreter.handler(name="interpretCommands")
async def interpret_commands(ctx: ObjectContext, req: dict[str, Any]) -> str:
    """Run `req["commands"]` in order, appending each result to state `results`; returns the last result."""
    result = ""
    for command in req["commands"]:
        kind = command["type"]
        if kind == "awaitAwakeableOrTimeout":
            awakeable_id, awakeable = ctx.awakeable(type_hint=str)
            ctx.set("awk-" + command["awakeableKey"], awakeable_id)
            timeout = ctx.sleep(timedelta(milliseconds=command["timeoutMillis"]))
            winner, value = await select(awakeable=awakeable, timeout=timeout)
            if winner == "timeout":
                raise TerminalError("await-timeout", status_code=500)
            result = value
        elif kind == "resolveAwakeable":
            await resolve_awakeable(ctx, command)
            result = ""
        elif kind == "rejectAwakeable":
            await reject_awakeable(ctx, command)
            result = ""
        elif kind == "getEnvVariable":

            def read_env(name: str) -> str:
                return os.environ.get(name, "")

            result = await ctx.run_typed("get_env", read_env, name=command["envName"])
        elif kind == "awaitOne":
            result = await _value(_future(ctx, command["command"]))
        elif kind in _COMBINATORS:
            result = await _COMBINATORS[kind]([_future(ctx, c) for c in command["commands"]])
        else:
            raise TerminalError(f"unknown command {kind!r}")
        results = await get_results(ctx)
        ctx.set("results", [*results, result])
    return result
