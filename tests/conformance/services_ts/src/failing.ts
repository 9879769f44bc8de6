// Failing (object): terminal errors (with metadata), retried invocations, ctx.run retry policies.
// The attempt counters live in process memory, hence one process serves every request.
import * as restate from "@restatedev/restate-sdk";
import type { ObjectContext } from "@restatedev/restate-sdk";

type FailureToPropagate = {
  errorMessage: string;
  metadata?: Record<string, string> | null;
};

let invocationAttempts = 0;
let succeedingRunAttempts = 0;
let failingRunAttempts = 0;

function terminalError(f: FailureToPropagate): restate.TerminalError {
  return new restate.TerminalError(f.errorMessage, { metadata: f.metadata ?? undefined });
}

export const failing = restate.object({
  name: "Failing",
  handlers: {
    /** Fails terminally with the given message and metadata. */
    async terminallyFailingCall(_ctx: ObjectContext, f: FailureToPropagate): Promise<void> {
      throw terminalError(f);
    },

    /** Calls terminallyFailingCall on a random key; its terminal error propagates. */
    async callTerminallyFailingCall(ctx: ObjectContext, f: FailureToPropagate): Promise<string> {
      await ctx.objectClient(failing, ctx.rand.uuidv4()).terminallyFailingCall(f);
      throw new Error("unreachable: the call above fails terminally");
    },

    /** Fails with a retryable error on attempts 1-3, returns 4 on the 4th. */
    async failingCallWithEventualSuccess(_ctx: ObjectContext): Promise<number> {
      invocationAttempts += 1;
      const attempt = invocationAttempts;
      if (attempt >= 4) {
        invocationAttempts = 0;
        return attempt;
      }
      throw new Error(`failed at attempt ${attempt}`);
    },

    /** A ctx.run that fails terminally with the given message and metadata. */
    async terminallyFailingSideEffect(ctx: ObjectContext, f: FailureToPropagate): Promise<void> {
      await ctx.run("failing-side-effect", (): void => {
        throw terminalError(f);
      });
      throw new Error("unreachable: the run above fails terminally");
    },

    /** A ctx.run that fails until its `minimumAttempts`-th execution; returns that count. */
    async sideEffectSucceedsAfterGivenAttempts(
      ctx: ObjectContext,
      minimumAttempts: number
    ): Promise<number> {
      return await ctx.run(
        "failing-side-effect",
        () => {
          succeedingRunAttempts += 1;
          const attempt = succeedingRunAttempts;
          if (attempt >= minimumAttempts) {
            succeedingRunAttempts = 0;
            return attempt;
          }
          throw new Error(`failed at attempt ${attempt}`);
        },
        { retryIntervalFactor: 1, initialRetryInterval: { milliseconds: 10 } }
      );
    },

    /**
     * A ctx.run that always fails, with `maxAttempts` attempts: the handler catches the terminal
     * error the SDK raises when they are exhausted and returns how many times the run executed.
     */
    async sideEffectFailsAfterGivenAttempts(
      ctx: ObjectContext,
      maxAttempts: number
    ): Promise<number> {
      try {
        await ctx.run(
          "failing-side-effect",
          (): void => {
            failingRunAttempts += 1;
            throw new Error(`failed at attempt ${failingRunAttempts}`);
          },
          {
            maxRetryAttempts: maxAttempts,
            retryIntervalFactor: 1,
            initialRetryInterval: { milliseconds: 10 },
          }
        );
      } catch (e) {
        if (e instanceof restate.TerminalError) {
          return failingRunAttempts;
        }
        throw e;
      }
      throw new restate.TerminalError("the run was supposed to fail");
    },
  },
});
