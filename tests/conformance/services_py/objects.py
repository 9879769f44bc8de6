"""State-holding test services: Counter, ListObject, MapObject, AwakeableHolder, BlockAndWaitWorkflow.

Names and JSON shapes follow the SDK conformance suite's test-service contract
(the services of `restatedev/e2e` `sdk-tests/` `contracts/`).
"""

from __future__ import annotations

from typing import Any

from restate import ObjectContext, VirtualObject, Workflow, WorkflowContext, WorkflowSharedContext
from restate.exceptions import TerminalError

counter = VirtualObject("Counter")
COUNTER = "counter"


@counter.handler()
async def add(ctx: ObjectContext, value: int) -> dict[str, int]:
    """Add `value` to the counter: `{"oldValue": n, "newValue": n + value}`."""
    old = await ctx.get(COUNTER, type_hint=int) or 0
    ctx.set(COUNTER, old + value)
    return {"oldValue": old, "newValue": old + value}


@counter.handler(name="addThenFail")
async def add_then_fail(ctx: ObjectContext, value: int) -> None:
    """Add `value`, then fail terminally with the object key as the message (the state change is kept)."""
    old = await ctx.get(COUNTER, type_hint=int) or 0
    ctx.set(COUNTER, old + value)
    raise TerminalError(ctx.key())


@counter.handler()
async def get(ctx: ObjectContext) -> int:
    """The counter's value (0 when never set)."""
    return await ctx.get(COUNTER, type_hint=int) or 0


@counter.handler()
async def reset(ctx: ObjectContext) -> None:
    """Forget the counter."""
    ctx.clear(COUNTER)


list_object = VirtualObject("ListObject")


@list_object.handler(name="append")
async def list_append(ctx: ObjectContext, value: str) -> None:
    """Append one string to the list."""
    items = await ctx.get("list", type_hint=list[str]) or []
    ctx.set("list", [*items, value])


@list_object.handler(name="get")
async def list_get(ctx: ObjectContext) -> list[str]:
    """The list (`[]` when empty)."""
    return await ctx.get("list", type_hint=list[str]) or []


@list_object.handler(name="clear")
async def list_clear(ctx: ObjectContext) -> list[str]:
    """Empty the list; returns what it held."""
    items = await ctx.get("list", type_hint=list[str]) or []
    ctx.clear("list")
    return items


map_object = VirtualObject("MapObject")


@map_object.handler(name="set")
async def map_set(ctx: ObjectContext, entry: dict[str, str]) -> None:
    """`{"key": k, "value": v}`: store v under state key k."""
    ctx.set(entry["key"], entry["value"])


@map_object.handler(name="get")
async def map_get(ctx: ObjectContext, key: str) -> str:
    """The value under `key`, `""` when missing."""
    return await ctx.get(key, type_hint=str) or ""


@map_object.handler(name="clearAll")
async def map_clear_all(ctx: ObjectContext) -> list[dict[str, str]]:
    """Remove every entry; returns them as `[{"key", "value"}]`."""
    entries = []
    for key in await ctx.state_keys():
        entries.append({"key": key, "value": await ctx.get(key, type_hint=str)})
        ctx.clear(key)
    return entries


awakeable_holder = VirtualObject("AwakeableHolder")


@awakeable_holder.handler()
async def hold(ctx: ObjectContext, awakeable_id: str) -> None:
    """Keep an awakeable id so that `unlock` can resolve it later."""
    ctx.set("id", awakeable_id)


@awakeable_holder.handler(name="hasAwakeable")
async def has_awakeable(ctx: ObjectContext) -> bool:
    """Whether an awakeable id is held."""
    return await ctx.get("id", type_hint=str) is not None


@awakeable_holder.handler()
async def unlock(ctx: ObjectContext, payload: Any) -> None:
    """Resolve the held awakeable with `payload`; terminal error when none is held."""
    awakeable_id = await ctx.get("id", type_hint=str)
    if awakeable_id is None:
        raise TerminalError("No awakeable is registered")
    ctx.resolve_awakeable(awakeable_id, payload)


block_and_wait = Workflow("BlockAndWaitWorkflow")


@block_and_wait.main()
async def run(ctx: WorkflowContext, value: str) -> str:
    """Store `value` as state `my-state`, wait for the promise `durable-promise`, return its value."""
    ctx.set("my-state", value)
    output = await ctx.promise("durable-promise", type_hint=str).value()
    if await ctx.promise("durable-promise", type_hint=str).peek() is None:
        raise TerminalError("Durable promise should be completed")
    return output


@block_and_wait.handler()
async def unblock(ctx: WorkflowSharedContext, output: str) -> None:
    """Resolve the promise `durable-promise` with `output`."""
    await ctx.promise("durable-promise", type_hint=str).resolve(output)


@block_and_wait.handler(name="getState")
async def get_state(ctx: WorkflowSharedContext) -> str | None:
    """State `my-state` (null before `run` set it)."""
    return await ctx.get("my-state", type_hint=str)
