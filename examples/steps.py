"""Handlers that exercise the journal, retries and failures — test fixtures for Torpor.

``Steps`` has one handler per behaviour the control plane must get right:

* ``ten_steps`` / ``n_steps`` / ``one_step``: sequential ``ctx.run`` steps. In request/response
  mode each step ends the attempt with a suspension, so ``n`` steps take ``n + 1`` requests, each
  replaying the journal so far. Every closure appends a line to the side-effects file (see
  ``examples.side_effects``): after a completed invocation each step must appear exactly once.
* ``flaky``: fails with a plain (retryable) exception until it has been attempted a given number
  of times for the same invocation, then succeeds. The attempt counter lives in this process's
  memory, keyed by invocation id — it is a test fixture, not a pattern to copy: a real handler
  must not keep state outside Restate, and restarting the process resets the count.
* ``fail_terminal``: fails with a terminal error (status 422), which must not be retried.
* ``no_input``: a handler that takes no input at all.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import restate
from restate import TerminalError

from examples.side_effects import record_side_effect

steps = restate.Service("Steps")

SERVICE = "Steps"

_FLAKY_ATTEMPTS: dict[str, int] = {}
"""Attempts seen by ``flaky`` in this process, keyed by invocation id (test fixture only)."""


def _step(handler: str, invocation_id: str, step: str, value: int) -> Callable[[], int]:
    """Build a ``ctx.run`` closure that records its side effect and returns ``value``.

    Args:
        handler: Handler name for the side-effect record.
        invocation_id: ``ctx.request().id`` of the running invocation.
        step: The step name (also used as the ``ctx.run`` name).
        value: What the step returns.

    Returns:
        A zero-argument function annotated to return ``int`` (the SDK picks the JSON serde
        from that annotation).
    """

    def run_step() -> int:
        record_side_effect(SERVICE, handler, invocation_id, step)
        return value

    return run_step


@steps.handler()
async def ten_steps(ctx: restate.Context, label: str) -> list:
    """Run ten sequential steps named ``step-1`` … ``step-10``.

    Args:
        ctx: The Restate context.
        label: A free-form label; it only shows up in the input (handy to tell runs apart).

    Returns:
        ``[1, 2, …, 10]``: what each step returned.
    """
    del label
    invocation_id = ctx.request().id
    results: list[int] = []
    for index in range(1, 11):
        name = f"step-{index}"
        results.append(await ctx.run_typed(name, _step("ten_steps", invocation_id, name, index)))
    return results


@steps.handler()
async def n_steps(ctx: restate.Context, n: int) -> int:
    """Run ``n`` sequential steps named ``step-1`` … ``step-n``.

    Args:
        ctx: The Restate context.
        n: How many steps (0 or more).

    Returns:
        ``n``.

    Raises:
        TerminalError: Status 400 when ``n`` is not a non-negative integer.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise TerminalError(f"n must be a non-negative integer, got {n!r}", status_code=400)
    invocation_id = ctx.request().id
    for index in range(1, n + 1):
        name = f"step-{index}"
        await ctx.run_typed(name, _step("n_steps", invocation_id, name, index))
    return n


@steps.handler()
async def flaky(ctx: restate.Context, succeed_on_attempt: int) -> str:
    """Fail with a retryable error until attempt ``succeed_on_attempt``, then succeed.

    Test fixture: attempts are counted in this process's memory per invocation id, so the
    count is only right while the same process serves every attempt.

    Args:
        ctx: The Restate context.
        succeed_on_attempt: The attempt (1-based) that succeeds; 1 or less succeeds at once.

    Returns:
        ``"ok after N attempts"``.

    Raises:
        Exception: A plain exception (a failed attempt, to be retried) before that attempt.
    """
    invocation_id = ctx.request().id
    attempts = _FLAKY_ATTEMPTS.get(invocation_id, 0) + 1
    _FLAKY_ATTEMPTS[invocation_id] = attempts
    if attempts < succeed_on_attempt:
        raise Exception(f"flaky: attempt {attempts} of {succeed_on_attempt} fails on purpose")
    return f"ok after {attempts} attempts"


@steps.handler()
async def fail_terminal(ctx: restate.Context, message: str) -> str:
    """Fail at once with a terminal error (status 422) that must not be retried.

    Args:
        ctx: The Restate context.
        message: The error message.

    Raises:
        TerminalError: Always, with ``message`` and status 422.
    """
    del ctx
    raise TerminalError(message, status_code=422)


@steps.handler()
async def no_input(ctx: restate.Context) -> str:
    """Return ``"done"``; the handler takes no input.

    Args:
        ctx: The Restate context.

    Returns:
        ``"done"``.
    """
    del ctx
    return "done"


@steps.handler()
async def one_step(ctx: restate.Context, x: int) -> int:
    """Run one step, ``add-one``, that returns ``x + 1``.

    Args:
        ctx: The Restate context.
        x: The number to increment.

    Returns:
        ``x + 1``, as journaled by the step.
    """
    invocation_id = ctx.request().id
    return await ctx.run_typed("add-one", _step("one_step", invocation_id, "add-one", x + 1))


@steps.handler()
async def slow_steps(ctx: restate.Context, request: dict) -> int:
    """Run ``request["n"]`` sequential steps that each take ``request["step_ms"]`` milliseconds.

    Used by the crash test: slow enough that the control plane can be killed between steps.

    Args:
        ctx: The Restate context.
        request: ``{"n": int, "step_ms": int}``.

    Returns:
        The sum of the step indexes, ``n * (n + 1) / 2``.
    """
    n, step_ms = int(request["n"]), int(request.get("step_ms", 100))
    invocation_id = ctx.request().id
    total = 0
    for index in range(1, n + 1):
        name = f"step-{index}"

        async def run_step(index: int = index, name: str = name) -> int:
            await asyncio.sleep(step_ms / 1000)
            record_side_effect(SERVICE, "slow_steps", invocation_id, name)
            return index

        total += await ctx.run_typed(name, run_step)
    return total


@steps.handler()
async def big_step(ctx: restate.Context, size: int) -> int:
    """One step whose journaled result is a string of `size` bytes; returns its length.

    Shows the limit of a journal entry: DynamoDB items hold at most 400 KB.
    """
    value = await ctx.run_typed("make a big value", lambda: "x" * size)
    return len(value)
