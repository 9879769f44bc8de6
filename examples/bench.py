"""Handlers for the benchmarks in `bench/` (see bench/README.md).

* ``Bench/steps_sleep_steps``: the cost model's workflow, ``steps`` sequential ``ctx.run`` steps with
  one durable sleep in the middle (half the steps before it, the rest after).
* ``Sequence/{key}/append``: an exclusive object handler that appends its number to the key's list,
  so a run over many keys can check afterwards that no invocation was lost or ran twice and that
  each key saw its numbers in the order they were sent. ``Sequence/{key}/get`` reads the list.
"""

from __future__ import annotations

from datetime import timedelta

import restate

bench = restate.Service("Bench")
sequence = restate.VirtualObject("Sequence")


@bench.handler()
async def steps_sleep_steps(ctx: restate.Context, request: dict) -> int:
    """Run ``request["steps"]`` steps (default 10) with one sleep of ``request["sleep_ms"]`` in the middle.

    Returns:
        The sum of what the steps returned, ``1 + 2 + ... + steps``.
    """
    steps, sleep_ms = int(request.get("steps", 10)), int(request.get("sleep_ms", 3_600_000))
    total = 0
    for index in range(1, steps + 1):
        if index == steps // 2 + 1:
            await ctx.sleep(timedelta(milliseconds=sleep_ms))
        total += await ctx.run_typed(f"step-{index}", lambda index=index: index)
    return total


@sequence.handler()
async def append(ctx: restate.ObjectContext, number: int) -> int:
    """Append ``number`` to the key's list ``seen``; returns the list's new length."""
    seen = (await ctx.get("seen", type_hint=list)) or []
    seen.append(number)
    ctx.set("seen", seen)
    return len(seen)


@sequence.handler(kind="shared")
async def get(ctx: restate.ObjectSharedContext) -> list:
    """The numbers appended so far, in the order they were appended."""
    return (await ctx.get("seen", type_hint=list)) or []
