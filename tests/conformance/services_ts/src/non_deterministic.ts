// NonDeterministic (object): odd and even attempts per key take different paths, so the second
// attempt's journal diverges from the first (a journal mismatch). Each ends with a one-way
// Counter/{key}/add 1, which must never run when the handler fails.
import * as restate from "@restatedev/restate-sdk";
import type { ObjectContext } from "@restatedev/restate-sdk";
import { counter } from "./state.ts";

const attemptsByKey = new Map<string, number>();

/** True on the 1st, 3rd, ... execution for this key in this process. */
function leftPath(ctx: ObjectContext): boolean {
  const n = (attemptsByKey.get(ctx.key) ?? 0) + 1;
  attemptsByKey.set(ctx.key, n);
  return n % 2 === 1;
}

function incrementCounter(ctx: ObjectContext) {
  ctx.objectSendClient(counter, ctx.key).add(1);
}

export const nonDeterministic = restate.object({
  name: "NonDeterministic",
  handlers: {
    async eitherSleepOrCall(ctx: ObjectContext): Promise<void> {
      if (leftPath(ctx)) {
        await ctx.sleep(100);
      } else {
        await ctx.objectClient(counter, "abc").get();
      }
      await ctx.sleep(100);
      incrementCounter(ctx);
    },

    async callDifferentMethod(ctx: ObjectContext): Promise<void> {
      if (leftPath(ctx)) {
        await ctx.objectClient(counter, "abc").get();
      } else {
        await ctx.objectClient(counter, "abc").reset();
      }
      await ctx.sleep(100);
      incrementCounter(ctx);
    },

    async backgroundInvokeWithDifferentTargets(ctx: ObjectContext): Promise<void> {
      if (leftPath(ctx)) {
        ctx.objectSendClient(counter, "abc").get();
      } else {
        ctx.objectSendClient(counter, "abc").reset();
      }
      await ctx.sleep(100);
      incrementCounter(ctx);
    },

    async setDifferentKey(ctx: ObjectContext): Promise<void> {
      if (leftPath(ctx)) {
        ctx.set("a", "my-state");
      } else {
        ctx.set("b", "my-state");
      }
      await ctx.sleep(100);
      incrementCounter(ctx);
    },
  },
});
