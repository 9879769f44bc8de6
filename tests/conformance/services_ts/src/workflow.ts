// BlockAndWaitWorkflow (workflow): run blocks on a durable promise that unblock resolves.
import * as restate from "@restatedev/restate-sdk";
import type { WorkflowContext, WorkflowSharedContext } from "@restatedev/restate-sdk";

const STATE = "my-state";
const PROMISE = "durable-promise";

export const blockAndWaitWorkflow = restate.workflow({
  name: "BlockAndWaitWorkflow",
  handlers: {
    /** Stores `input` under `my-state`, waits on `durable-promise`, returns its value. */
    async run(ctx: WorkflowContext, input: string): Promise<string> {
      ctx.set(STATE, input);
      const output = await ctx.promise<string>(PROMISE);
      if ((await ctx.promise<string>(PROMISE).peek()) === undefined) {
        throw new restate.TerminalError("the durable promise should be completed");
      }
      return output;
    },

    /** Resolves `durable-promise` with `output`. */
    async unblock(ctx: WorkflowSharedContext, output: string): Promise<void> {
      await ctx.promise<string>(PROMISE).resolve(output);
    },

    /** The stored input, or null before run stored it. */
    async getState(ctx: WorkflowSharedContext): Promise<string | null> {
      return (await ctx.get<string>(STATE)) ?? null;
    },
  },
});
