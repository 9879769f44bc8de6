// VirtualObjectCommandInterpreter (object): runs a list of commands over awaitables (awakeables,
// sleeps, runs, signals) with the SDK's combinators; each command's result is appended to state
// `results`; returns the last result.
import { setTimeout as delay } from "node:timers/promises";
import * as restate from "@restatedev/restate-sdk";
import type { ObjectContext, ObjectSharedContext, RestatePromise } from "@restatedev/restate-sdk";

type AwaitableCommand =
  | { type: "createAwakeable"; awakeableKey: string }
  | { type: "sleep"; timeoutMillis: number }
  | { type: "runReturns"; value: string }
  | { type: "runThrowTerminalException"; reason: string }
  | { type: "createSignal"; signalName: string };

type Command =
  | { type: "awaitOne"; command: AwaitableCommand }
  | { type: "awaitAny"; commands: AwaitableCommand[] }
  | { type: "awaitAnySuccessful"; commands: AwaitableCommand[] }
  | { type: "awaitFirstCompleted"; commands: AwaitableCommand[] }
  | { type: "awaitFirstSucceededOrAllFailed"; commands: AwaitableCommand[] }
  | { type: "awaitAllSucceededOrFirstFailed"; commands: AwaitableCommand[] }
  | { type: "awaitAllCompleted"; commands: AwaitableCommand[] }
  | { type: "awaitAwakeableOrTimeout"; awakeableKey: string; timeoutMillis: number }
  | { type: "resolveAwakeable"; awakeableKey: string; value: string }
  | { type: "rejectAwakeable"; awakeableKey: string; reason: string }
  | { type: "getEnvVariable"; envName: string };

type InterpretRequest = { commands: Command[] };
type ResolveAwakeable = { awakeableKey: string; value: string };
type RejectAwakeable = { awakeableKey: string; reason: string };

const RESULTS = "results";
const awakeableStateKey = (key: string) => `awk-${key}`;

function createAwakeable(ctx: ObjectContext, key: string): RestatePromise<string> {
  const { id, promise } = ctx.awakeable<string>();
  ctx.set(awakeableStateKey(key), id);
  return promise;
}

function awaitable(ctx: ObjectContext, cmd: AwaitableCommand): RestatePromise<string> {
  switch (cmd.type) {
    case "createAwakeable":
      return createAwakeable(ctx, cmd.awakeableKey);
    case "sleep":
      return ctx.sleep(cmd.timeoutMillis).map(() => "sleep");
    case "runReturns":
      // Real asynchronous work inside the run, as the contract asks.
      return ctx.run<string>("runReturns", async () => {
        await delay(1);
        return cmd.value;
      });
    case "runThrowTerminalException":
      return ctx.run<string>("runThrowTerminalException", () => {
        throw new restate.TerminalError(cmd.reason);
      });
    case "createSignal":
      return ctx.signal<string>(cmd.signalName);
    default:
      throw new restate.TerminalError(`unknown awaitable command ${JSON.stringify(cmd)}`);
  }
}

/** RestatePromise.any, but "all failed" is a terminal error naming each failure. */
async function firstSucceeded(promises: RestatePromise<string>[]): Promise<string> {
  try {
    return await restate.RestatePromise.any(promises);
  } catch (e) {
    if (e instanceof AggregateError) {
      const reasons = e.errors.map((x) => (x instanceof Error ? x.message : String(x)));
      throw new restate.TerminalError(`all failed: ${reasons.join("|")}`);
    }
    throw e;
  }
}

async function awaitAwakeableOrTimeout(
  ctx: ObjectContext,
  key: string,
  timeoutMillis: number
): Promise<string> {
  try {
    return await createAwakeable(ctx, key).orTimeout(timeoutMillis);
  } catch (e) {
    if (e instanceof restate.TimeoutError) {
      throw new restate.TerminalError("await-timeout");
    }
    throw e;
  }
}

async function awakeableId(ctx: ObjectSharedContext, key: string): Promise<string> {
  const id = await ctx.get<string>(awakeableStateKey(key));
  if (id === null || id === undefined) {
    throw new restate.TerminalError("awakeable is not registered yet");
  }
  return id;
}

async function resolveAwakeable(ctx: ObjectSharedContext, req: ResolveAwakeable): Promise<void> {
  ctx.resolveAwakeable(await awakeableId(ctx, req.awakeableKey), req.value);
}

async function rejectAwakeable(ctx: ObjectSharedContext, req: RejectAwakeable): Promise<void> {
  ctx.rejectAwakeable(await awakeableId(ctx, req.awakeableKey), req.reason);
}

async function interpret(ctx: ObjectContext, cmd: Command): Promise<string> {
  switch (cmd.type) {
    case "awaitOne":
      return await awaitable(ctx, cmd.command);
    case "awaitAny":
    case "awaitFirstCompleted":
      return await restate.RestatePromise.race(cmd.commands.map((c) => awaitable(ctx, c)));
    case "awaitAnySuccessful":
    case "awaitFirstSucceededOrAllFailed":
      return await firstSucceeded(cmd.commands.map((c) => awaitable(ctx, c)));
    case "awaitAllSucceededOrFirstFailed": {
      const values = await restate.RestatePromise.all(cmd.commands.map((c) => awaitable(ctx, c)));
      return values.join("|");
    }
    case "awaitAllCompleted": {
      const settled = await restate.RestatePromise.allSettled(
        cmd.commands.map((c) => awaitable(ctx, c))
      );
      return settled
        .map((r) =>
          r.status === "fulfilled"
            ? `ok:${r.value}`
            : `err:${r.reason instanceof Error ? r.reason.message : String(r.reason)}`
        )
        .join("|");
    }
    case "awaitAwakeableOrTimeout":
      return await awaitAwakeableOrTimeout(ctx, cmd.awakeableKey, cmd.timeoutMillis);
    case "resolveAwakeable":
      await resolveAwakeable(ctx, cmd);
      return "";
    case "rejectAwakeable":
      await rejectAwakeable(ctx, cmd);
      return "";
    case "getEnvVariable": {
      const name = cmd.envName;
      return await ctx.run<string>("getEnvVariable", () => process.env[name] ?? "");
    }
    default:
      throw new restate.TerminalError(`unknown command ${JSON.stringify(cmd)}`);
  }
}

export const virtualObjectCommandInterpreter = restate.object({
  name: "VirtualObjectCommandInterpreter",
  handlers: {
    async interpretCommands(ctx: ObjectContext, req: InterpretRequest): Promise<string> {
      let last = "";
      for (const cmd of req.commands) {
        last = await interpret(ctx, cmd);
        const results = (await ctx.get<string[]>(RESULTS)) ?? [];
        results.push(last);
        ctx.set(RESULTS, results);
      }
      return last;
    },

    resolveAwakeable: restate.handlers.object.shared(resolveAwakeable),

    rejectAwakeable: restate.handlers.object.shared(rejectAwakeable),

    hasAwakeable: restate.handlers.object.shared(
      async (ctx: ObjectSharedContext, awakeableKey: string): Promise<boolean> => {
        return ((await ctx.get<string>(awakeableStateKey(awakeableKey))) ?? null) !== null;
      }
    ),

    getResults: restate.handlers.object.shared(
      async (ctx: ObjectSharedContext): Promise<string[]> => {
        return (await ctx.get<string[]>(RESULTS)) ?? [];
      }
    ),
  },
});
