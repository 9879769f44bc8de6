"""A workflow: `run` executes once per workflow id; shared handlers talk to it through durable promises.

`Signup/{id}/run` stores the e-mail, waits for the `confirmation` promise (resolved by the shared
handler `confirm`, before or after `run` awaits it) and returns a summary. `status` reads state;
`peek` peeks the promise.
"""

from __future__ import annotations

import restate

signup = restate.Workflow("Signup")


@signup.main()
async def run(ctx: restate.WorkflowContext, email: str) -> dict:
    """Record the e-mail, wait for the confirmation, finish."""
    ctx.set("email", email)
    ctx.set("stage", "waiting for confirmation")
    code = await ctx.promise("confirmation", type_hint=str).value()
    ctx.set("stage", "confirmed")
    return {"email": email, "confirmed_with": code}


@signup.handler()
async def confirm(ctx: restate.WorkflowSharedContext, code: str) -> str:
    """Resolve the confirmation promise (the first resolution wins; a later one fails)."""
    await ctx.promise("confirmation", type_hint=str).resolve(code)
    return "confirmed"


@signup.handler()
async def status(ctx: restate.WorkflowSharedContext) -> dict:
    """The workflow's state as last committed."""
    return {"email": await ctx.get("email", type_hint=str), "stage": await ctx.get("stage", type_hint=str)}


@signup.handler()
async def peek(ctx: restate.WorkflowSharedContext) -> str:
    """The confirmation code if the promise is completed, else "pending"."""
    value = await ctx.promise("confirmation", type_hint=str).peek()
    return value if value is not None else "pending"


@signup.handler()
async def await_confirmation(ctx: restate.WorkflowSharedContext) -> str:
    """Wait for the confirmation promise beside `run` (a shared handler awaiting it too); its value."""
    return await ctx.promise("confirmation", type_hint=str).value()
