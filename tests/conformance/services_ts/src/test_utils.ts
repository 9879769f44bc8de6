// TestUtilsService (service): echoes, headers, raw bytes, run flushing, cancel and signals by id.
import * as restate from "@restatedev/restate-sdk";
import type { Context } from "@restatedev/restate-sdk";

type ResolveSignalRequest = { invocationId: string; signalName: string; value: string };
type RejectSignalRequest = { invocationId: string; signalName: string; reason: string };

function invocation(ctx: Context, id: string) {
  return ctx.invocation(restate.InvocationIdParser.fromString(id));
}

export const testUtilsService = restate.service({
  name: "TestUtilsService",
  handlers: {
    async echo(_ctx: Context, input: string): Promise<string> {
      return input;
    },

    async uppercaseEcho(_ctx: Context, input: string): Promise<string> {
      return input.toUpperCase();
    },

    /** The request headers the handler received, as a JSON object. */
    async echoHeaders(ctx: Context): Promise<Record<string, string>> {
      return Object.fromEntries(ctx.request().headers.entries());
    },

    /** Returns its input bytes unchanged (`application/octet-stream` in and out). */
    rawEcho: restate.handlers.handler(
      { input: restate.serde.binary, output: restate.serde.binary },
      async (_ctx: Context, input: Uint8Array): Promise<Uint8Array> => input
    ),

    /**
     * Runs `increments` ctx.run steps that each bump a local (non-durable) counter; returns it.
     * In request/response mode every run suspends to be acknowledged, so replays return 0.
     */
    async countExecutedSideEffects(ctx: Context, increments: number): Promise<number> {
      let executed = 0;
      for (let i = 0; i < increments; i++) {
        await ctx.run("count", (): void => {
          executed += 1;
        });
      }
      return executed;
    },

    async cancelInvocation(ctx: Context, invocationId: string): Promise<void> {
      invocation(ctx, invocationId).cancel();
    },

    async resolveSignal(ctx: Context, req: ResolveSignalRequest): Promise<void> {
      invocation(ctx, req.invocationId).signal<string>(req.signalName).resolve(req.value);
    },

    async rejectSignal(ctx: Context, req: RejectSignalRequest): Promise<void> {
      invocation(ctx, req.invocationId).signal<string>(req.signalName).reject(req.reason);
    },
  },
});
