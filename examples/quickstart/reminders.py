from datetime import timedelta

import restate

reminders = restate.VirtualObject("Reminders")


@reminders.handler()
async def remind(ctx: restate.ObjectContext, text: str) -> str:
    ctx.set("text", text)
    await ctx.sleep(timedelta(seconds=5))  # durable: nothing runs, and nothing is billed, while it waits
    ack_id, ack = ctx.awakeable(type_hint=str)  # a promise anyone can complete by its id
    ctx.set("waiting_for", ack_id)
    by = await ack
    ctx.clear("waiting_for")
    return f"{text}: done, said {by}"


@reminders.handler(kind="shared")
async def status(ctx: restate.ObjectSharedContext) -> dict:
    return {"text": await ctx.get("text"), "waiting_for": await ctx.get("waiting_for")}


app = restate.app([reminders])
