// Proxy (service): forwards raw bytes to any handler, as a call or a one-way send.
import * as restate from "@restatedev/restate-sdk";
import type { Context } from "@restatedev/restate-sdk";

/** The suite's ProxyRequest: `message` is the callee's input bytes as a JSON array of ints. */
type ProxyRequest = {
  serviceName: string;
  virtualObjectKey?: string | null;
  handlerName: string;
  message: number[];
  delayMillis?: number | null;
  idempotencyKey?: string | null;
  scope?: string | null;
  limitKey?: string | null;
};

type ManyCallRequest = {
  proxyRequest: ProxyRequest;
  oneWayCall: boolean;
  awaitAtTheEnd: boolean;
};

function call(ctx: Context, req: ProxyRequest) {
  return ctx.genericCall({
    service: req.serviceName,
    method: req.handlerName,
    key: req.virtualObjectKey ?? undefined,
    parameter: new Uint8Array(req.message),
    inputSerde: restate.serde.binary,
    outputSerde: restate.serde.binary,
    idempotencyKey: req.idempotencyKey ?? undefined,
    scope: req.scope ?? undefined,
    limitKey: req.limitKey ?? undefined,
  });
}

function send(ctx: Context, req: ProxyRequest) {
  return ctx.genericSend({
    service: req.serviceName,
    method: req.handlerName,
    key: req.virtualObjectKey ?? undefined,
    parameter: new Uint8Array(req.message),
    inputSerde: restate.serde.binary,
    delay: req.delayMillis ?? undefined,
    idempotencyKey: req.idempotencyKey ?? undefined,
    scope: req.scope ?? undefined,
    limitKey: req.limitKey ?? undefined,
  });
}

export const proxy = restate.service({
  name: "Proxy",
  handlers: {
    /** Calls the target; returns its raw output bytes as a JSON array of ints. */
    async call(ctx: Context, req: ProxyRequest): Promise<number[]> {
      return Array.from(await call(ctx, req));
    },

    /** Sends to the target (after `delayMillis` if given); returns the callee's invocation id. */
    async oneWayCall(ctx: Context, req: ProxyRequest): Promise<string> {
      return await send(ctx, req).invocationId;
    },

    /** Issues the requests in order; awaits the calls marked `awaitAtTheEnd` after all are issued. */
    async manyCalls(ctx: Context, reqs: ManyCallRequest[]): Promise<void> {
      const pending = [];
      for (const r of reqs) {
        if (r.oneWayCall) {
          send(ctx, r.proxyRequest);
        } else {
          const p = call(ctx, r.proxyRequest);
          if (r.awaitAtTheEnd) {
            pending.push(p);
          }
        }
      }
      for (const p of pending) {
        await p;
      }
    },
  },
});
