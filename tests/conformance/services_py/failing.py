"""Test services that fail on purpose: Failing (terminal errors, retries, `ctx.run` retry policies) and
NonDeterministic (handlers that take a different path on every other attempt).

Counters live in process memory, as the contract requires: serve with one worker.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from restate import ObjectContext, RunOptions, VirtualObject
from restate.exceptions import TerminalError

from tests.conformance.services_py.objects import add as counter_add
from tests.conformance.services_py.objects import get as counter_get
from tests.conformance.services_py.objects import reset as counter_reset

failing = VirtualObject("Failing")

_attempts = {"eventual_success": 0, "side_effect_success": 0, "side_effect_failure": 0}


@failing.handler(name="terminallyFailingCall")
async def terminally_failing_call(ctx: ObjectContext, failure: dict[str, Any]) -> None:
    """`{errorMessage, metadata?}`: fail terminally with that message and metadata."""
    raise TerminalError(failure["errorMessage"], metadata=failure.get("metadata"))


@failing.handler(name="callTerminallyFailingCall")
async def call_terminally_failing_call(ctx: ObjectContext, failure: dict[str, Any]) -> str:
    """Call `terminallyFailingCall` on another key; its terminal error propagates."""
    await ctx.object_call(terminally_failing_call, key="random-583e1bf2", arg=failure)
    raise ValueError("unreachable: the call above fails terminally")


@failing.handler(name="failingCallWithEventualSuccess")
async def failing_call_with_eventual_success(ctx: ObjectContext) -> int:
    """Fail with a retryable error on attempts 1-3, return 4 on the 4th (counted in this process)."""
    _attempts["eventual_success"] += 1
    if _attempts["eventual_success"] >= 4:
        _attempts["eventual_success"] = 0
        return 4
    raise ValueError(f"Failed at attempt: {_attempts['eventual_success']}")


@failing.handler(name="terminallyFailingSideEffect")
async def terminally_failing_side_effect(ctx: ObjectContext, failure: dict[str, Any]) -> None:
    """A `ctx.run` that raises a terminal error `{errorMessage, metadata?}`; it propagates."""

    def side_effect() -> None:
        raise TerminalError(failure["errorMessage"], metadata=failure.get("metadata"))

    await ctx.run_typed("sideEffect", side_effect)
    raise ValueError("unreachable: the run above fails terminally")


@failing.handler(name="sideEffectSucceedsAfterGivenAttempts")
async def side_effect_succeeds_after_given_attempts(ctx: ObjectContext, attempts: int) -> int:
    """A `ctx.run` that succeeds on its `attempts`-th execution (policy: attempts + 1, 1 ms apart)."""

    def side_effect() -> int:
        _attempts["side_effect_success"] += 1
        if _attempts["side_effect_success"] >= attempts:
            return _attempts["side_effect_success"]
        raise ValueError(f"Failed at attempt: {_attempts['side_effect_success']}")

    options: RunOptions[int] = RunOptions(
        max_attempts=attempts + 1, initial_retry_interval=timedelta(milliseconds=1), retry_interval_factor=1.0
    )
    return await ctx.run_typed("sideEffect", side_effect, options)


@failing.handler(name="sideEffectFailsAfterGivenAttempts")
async def side_effect_fails_after_given_attempts(ctx: ObjectContext, max_attempts: int) -> int:
    """A `ctx.run` that always fails, with `max_attempts`; the handler catches the terminal error and
    returns how many times the step ran."""

    def side_effect() -> int:
        _attempts["side_effect_failure"] += 1
        raise ValueError(f"Failed at attempt: {_attempts['side_effect_failure']}")

    options: RunOptions[int] = RunOptions(
        max_attempts=max_attempts, initial_retry_interval=timedelta(milliseconds=1), retry_interval_factor=1.0
    )
    try:
        await ctx.run_typed("sideEffect", side_effect, options)
    except TerminalError:
        return _attempts["side_effect_failure"]
    raise TerminalError("the side effect did not fail")


non_deterministic = VirtualObject("NonDeterministic")

_invocations: dict[str, int] = {}


def _odd_attempt(ctx: ObjectContext) -> bool:
    """True on the 1st, 3rd, ... execution for this key in this process."""
    _invocations[ctx.key()] = _invocations.get(ctx.key(), 0) + 1
    return _invocations[ctx.key()] % 2 == 1


async def _finish(ctx: ObjectContext) -> None:
    """Sleep 100 ms, then `Counter/{key}/add 1` one-way: the step that must never run twice."""
    await ctx.sleep(timedelta(milliseconds=100))
    ctx.object_send(counter_add, key=ctx.key(), arg=1)


@non_deterministic.handler(name="eitherSleepOrCall")
async def either_sleep_or_call(ctx: ObjectContext) -> None:
    """Sleep on odd executions, call `Counter/abc/get` on even ones."""
    if _odd_attempt(ctx):
        await ctx.sleep(timedelta(milliseconds=100))
    else:
        await ctx.object_call(counter_get, key="abc", arg=None)
    await _finish(ctx)


@non_deterministic.handler(name="callDifferentMethod")
async def call_different_method(ctx: ObjectContext) -> None:
    """Call `Counter/abc/get` on odd executions, `Counter/abc/reset` on even ones."""
    if _odd_attempt(ctx):
        await ctx.object_call(counter_get, key="abc", arg=None)
    else:
        await ctx.object_call(counter_reset, key="abc", arg=None)
    await _finish(ctx)


@non_deterministic.handler(name="backgroundInvokeWithDifferentTargets")
async def background_invoke_with_different_targets(ctx: ObjectContext) -> None:
    """Send to `Counter/abc/get` on odd executions, `Counter/abc/reset` on even ones."""
    if _odd_attempt(ctx):
        ctx.object_send(counter_get, key="abc", arg=None)
    else:
        ctx.object_send(counter_reset, key="abc", arg=None)
    await _finish(ctx)


@non_deterministic.handler(name="setDifferentKey")
async def set_different_key(ctx: ObjectContext) -> None:
    """Set state `a` on odd executions, `b` on even ones."""
    ctx.set("a" if _odd_attempt(ctx) else "b", "my-state")
    await _finish(ctx)
