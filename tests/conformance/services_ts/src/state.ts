// Objects that keep state: Counter, ListObject, MapObject, AwakeableHolder.
// Contract: /work/shared/conformance.md, "The test-service contract" (names and JSON shapes are
// the ones Restate's conformance suite calls).
import * as restate from "@restatedev/restate-sdk";
import type { ObjectContext, ObjectSharedContext } from "@restatedev/restate-sdk";

const COUNTER = "counter";

/** Counter (object): a number under state key `counter`. */
export const counter = restate.object({
  name: "Counter",
  handlers: {
    /** Adds `n`; returns `{"oldValue","newValue"}`. */
    async add(ctx: ObjectContext, n: number) {
      const oldValue = (await ctx.get<number>(COUNTER)) ?? 0;
      const newValue = oldValue + n;
      ctx.set(COUNTER, newValue);
      return { oldValue, newValue };
    },

    /** Adds `n`, then fails terminally with the object key as message (the state is kept). */
    async addThenFail(ctx: ObjectContext, n: number): Promise<void> {
      const oldValue = (await ctx.get<number>(COUNTER)) ?? 0;
      ctx.set(COUNTER, oldValue + n);
      throw new restate.TerminalError(ctx.key);
    },

    /** The current value, 0 when never set. */
    get: restate.handlers.object.shared(async (ctx: ObjectSharedContext): Promise<number> => {
      return (await ctx.get<number>(COUNTER)) ?? 0;
    }),

    /** Clears the value. */
    async reset(ctx: ObjectContext): Promise<void> {
      ctx.clear(COUNTER);
    },
  },
});

const LIST = "list";

/** ListObject (object): a list of strings under state key `list`. */
export const listObject = restate.object({
  name: "ListObject",
  handlers: {
    async append(ctx: ObjectContext, value: string): Promise<void> {
      const list = (await ctx.get<string[]>(LIST)) ?? [];
      list.push(value);
      ctx.set(LIST, list);
    },

    async get(ctx: ObjectContext): Promise<string[]> {
      return (await ctx.get<string[]>(LIST)) ?? [];
    },

    /** Clears the list; returns what it held. */
    async clear(ctx: ObjectContext): Promise<string[]> {
      const list = (await ctx.get<string[]>(LIST)) ?? [];
      ctx.clear(LIST);
      return list;
    },
  },
});

type Entry = { key: string; value: string };

/** MapObject (object): each entry is its own state key. */
export const mapObject = restate.object({
  name: "MapObject",
  handlers: {
    async set(ctx: ObjectContext, entry: Entry): Promise<void> {
      ctx.set(entry.key, entry.value);
    },

    /** The value under `key`, `""` when missing. */
    async get(ctx: ObjectContext, key: string): Promise<string> {
      return (await ctx.get<string>(key)) ?? "";
    },

    /** Clears every state key; returns the entries it held as `[{"key","value"}]`. */
    async clearAll(ctx: ObjectContext): Promise<Entry[]> {
      const entries: Entry[] = [];
      for (const key of await ctx.stateKeys()) {
        const value = await ctx.get<string>(key);
        if (value !== null && value !== undefined) {
          entries.push({ key, value });
        }
      }
      ctx.clearAll();
      return entries;
    },
  },
});

const AWAKEABLE_ID = "id";

/** AwakeableHolder (object): holds one awakeable id per key, resolves it on `unlock`. */
export const awakeableHolder = restate.object({
  name: "AwakeableHolder",
  handlers: {
    async hold(ctx: ObjectContext, id: string): Promise<void> {
      ctx.set(AWAKEABLE_ID, id);
    },

    async hasAwakeable(ctx: ObjectContext): Promise<boolean> {
      return ((await ctx.get<string>(AWAKEABLE_ID)) ?? null) !== null;
    },

    /** Resolves the held awakeable with `payload` and forgets it; terminal error if none is held. */
    async unlock(ctx: ObjectContext, payload: string): Promise<void> {
      const id = await ctx.get<string>(AWAKEABLE_ID);
      if (id === null || id === undefined) {
        throw new restate.TerminalError("no awakeable is held under this key");
      }
      ctx.resolveAwakeable(id, payload);
      ctx.clear(AWAKEABLE_ID);
    },
  },
});
