// The example services, written with the Restate TypeScript SDK exactly as for restate-server.
// Their names start with "Ts" so that they can be registered next to the Python examples
// (Greeter, Counter, ...) on one runtime.
import * as restate from "@restatedev/restate-sdk";
import type { Context, ObjectContext, ObjectSharedContext } from "@restatedev/restate-sdk";

/** TsGreeter (service): `greet("Ann")` → `"Hello, Ann!"`; journals nothing. */
export const greeter = restate.service({
  name: "TsGreeter",
  handlers: {
    async greet(_ctx: Context, name: string): Promise<string> {
      return `Hello, ${name}!`;
    },
  },
});

const COUNT = "count";

/** TsCounter (virtual object): a number per key, under state key `count`. */
export const counter = restate.object({
  name: "TsCounter",
  handlers: {
    /** Adds `n` (a JSON number) to the key's count; returns the new count. */
    async add(ctx: ObjectContext, n: number): Promise<number> {
      const count = ((await ctx.get<number>(COUNT)) ?? 0) + n;
      ctx.set(COUNT, count);
      return count;
    },

    /** The key's count, 0 when never set (shared: runs beside an `add` in flight). */
    get: restate.handlers.object.shared(async (ctx: ObjectSharedContext): Promise<number> => {
      return (await ctx.get<number>(COUNT)) ?? 0;
    }),
  },
});

/** TsSleeper (service): `sleep(ms)` waits `ms` milliseconds on a durable timer, then answers. */
export const sleeper = restate.service({
  name: "TsSleeper",
  handlers: {
    async sleep(ctx: Context, ms: number): Promise<string> {
      if (!Number.isInteger(ms) || ms < 0) {
        throw new restate.TerminalError(`expected a whole number of milliseconds >= 0, got ${JSON.stringify(ms)}`, {
          errorCode: 400,
        });
      }
      // Served request/response, the attempt suspends here and the runtime invokes the handler
      // again once the timer has fired; the journal replays the sleep as completed.
      await ctx.sleep(ms);
      return `slept ${ms} ms`;
    },
  },
});
