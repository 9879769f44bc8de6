"""A restate-sdk app for the in-process checkpoint tests (`adapters.aws.checkpoints`).

`Paced/five_sleep_five`: five `ctx.run` steps, a durable sleep, five more steps; every step is
recorded in the side-effects file (`examples.side_effects`). `Paced/steps_then_wait`: `n` steps, each
after a pause of `pause_ms` inside the closure (time for a test to kill the function mid-way).
`Paced/send_between_steps`: a one-way call between two steps (a command with effects: the run after
it is committed by the control plane, not in the function). `Paced/steps_then_a_long_one`: `n` quick
steps, then one that awaits `long_ms` before it records itself (longer than a function's timeout).
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import restate

from examples.side_effects import record_side_effect

paced = restate.Service("Paced")


def _step(handler: str, invocation_id: str, name: str, value: int, pause_ms: int = 0):
    def run_step() -> int:
        if pause_ms:
            time.sleep(pause_ms / 1000)
        record_side_effect("Paced", handler, invocation_id, name)
        return value

    return run_step


@paced.handler()
async def five_sleep_five(ctx: restate.Context, sleep_ms: int) -> list:
    """Steps 1..5, `ctx.sleep(sleep_ms)`, steps 6..10; returns `[1, ..., 10]`."""
    invocation_id = ctx.request().id
    out: list[int] = []
    for index in range(1, 11):
        if index == 6:
            await ctx.sleep(timedelta(milliseconds=sleep_ms))
        name = f"step-{index}"
        out.append(await ctx.run_typed(name, _step("five_sleep_five", invocation_id, name, index)))
    return out


@paced.handler()
async def slow_steps(ctx: restate.Context, request: dict) -> int:
    """`request["n"]` steps, each sleeping `request["pause_ms"]` in its closure; returns their sum."""
    invocation_id = ctx.request().id
    total = 0
    for index in range(1, int(request["n"]) + 1):
        name = f"step-{index}"
        total += await ctx.run_typed(name, _step("slow_steps", invocation_id, name, index, int(request["pause_ms"])))
    return total


@paced.handler()
async def send_between_steps(ctx: restate.Context, label: str) -> int:
    """Step 1, a one-way call of `Paced/slow_steps` (no steps), steps 2 and 3; returns their sum."""
    invocation_id = ctx.request().id
    total = await ctx.run_typed("step-1", _step("send_between_steps", invocation_id, "step-1", 1))
    ctx.service_send(slow_steps, arg={"n": 0, "pause_ms": 0})
    for index in (2, 3):
        name = f"step-{index}"
        total += await ctx.run_typed(name, _step("send_between_steps", invocation_id, name, index))
    return total


@paced.handler()
async def steps_then_a_long_one(ctx: restate.Context, request: dict) -> int:
    """`request["n"]` quick steps, then step `long` that awaits `request["long_ms"]` ms, records
    itself and returns 100; returns the sum of all."""
    invocation_id = ctx.request().id
    total = 0
    for index in range(1, int(request["n"]) + 1):
        name = f"step-{index}"
        total += await ctx.run_typed(name, _step("steps_then_a_long_one", invocation_id, name, index))

    async def long_step() -> int:
        await asyncio.sleep(int(request["long_ms"]) / 1000)
        record_side_effect("Paced", "steps_then_a_long_one", invocation_id, "long")
        return 100

    return total + await ctx.run_typed("long", long_step)


app = restate.app(services=[paced])
