// Call trees for the Cancellation and KillInvocation classes.
import * as restate from "@restatedev/restate-sdk";
import type { ObjectContext } from "@restatedev/restate-sdk";
import { awakeableHolder } from "./state.ts";

/** The suite's BlockingOperation, a JSON string. */
type BlockingOperation = "CALL" | "SLEEP" | "AWAKEABLE";

const CANCELED = "canceled";
const DAYS_1024_MS = 1024 * 24 * 60 * 60 * 1000;

/** CancelTestRunner (object): calls the blocking service; a 409 from it marks the test cancelled. */
export const cancelTestRunner = restate.object({
  name: "CancelTestRunner",
  handlers: {
    async startTest(ctx: ObjectContext, op: BlockingOperation): Promise<void> {
      try {
        await ctx.objectClient(cancelTestBlockingService, ctx.key).block(op);
      } catch (e) {
        if (e instanceof restate.TerminalError && e.code === 409) {
          ctx.set(CANCELED, true);
          return;
        }
        throw e;
      }
    },

    /** True once startTest saw its call cancelled. */
    async verifyTest(ctx: ObjectContext): Promise<boolean> {
      return (await ctx.get<boolean>(CANCELED)) ?? false;
    },
  },
});

/**
 * CancelTestBlockingService (object): parks on an awakeable handed to AwakeableHolder (same key),
 * then blocks forever on the given operation.
 */
export const cancelTestBlockingService = restate.object({
  name: "CancelTestBlockingService",
  handlers: {
    async block(ctx: ObjectContext, op: BlockingOperation): Promise<void> {
      const { id, promise } = ctx.awakeable<string>();
      await ctx.objectClient(awakeableHolder, ctx.key).hold(id);
      await promise;
      switch (op) {
        case "CALL":
          // An exclusive call to its own key: a deadlock only cancellation ends.
          await ctx.objectClient(cancelTestBlockingService, ctx.key).block(op);
          break;
        case "SLEEP":
          await ctx.sleep(DAYS_1024_MS);
          break;
        case "AWAKEABLE":
          // Nobody ever resolves this awakeable.
          await ctx.awakeable<string>().promise;
          break;
        default:
          throw new restate.TerminalError(`unknown blocking operation ${JSON.stringify(op)}`);
      }
    },

    /** Returns once the key's lock is free. */
    async isUnlocked(_ctx: ObjectContext): Promise<void> {},
  },
});

/** KillTestRunner (object): starts the deadlocked call tree. */
export const killTestRunner = restate.object({
  name: "KillTestRunner",
  handlers: {
    async startCallTree(ctx: ObjectContext): Promise<void> {
      await ctx.objectClient(killTestSingleton, ctx.key).recursiveCall();
    },
  },
});

/** KillTestSingleton (object): parks on an awakeable, then calls itself on the same key. */
export const killTestSingleton = restate.object({
  name: "KillTestSingleton",
  handlers: {
    async recursiveCall(ctx: ObjectContext): Promise<void> {
      const { id, promise } = ctx.awakeable<string>();
      ctx.objectSendClient(awakeableHolder, ctx.key).hold(id);
      await promise;
      await ctx.objectClient(killTestSingleton, ctx.key).recursiveCall();
    },

    async isUnlocked(_ctx: ObjectContext): Promise<void> {},
  },
});
