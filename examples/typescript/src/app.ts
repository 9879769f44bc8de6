// Serves the example services request/response over HTTP/1.1: node's own http server and the
// SDK's http1Handler({bidirectional: false}), so each attempt is one request and one response
// (what Torpor, Lambda and Cloud Run speak).
//
// Usage: node --experimental-strip-types src/app.ts [--port P] [--host H]
//   P: the port (PORT is the fallback, then 9080; 0 picks a free one); H: 127.0.0.1 unless given.
// Prints `serving TypeScript examples on http://H:P` once it listens.
import * as http from "node:http";
import type { AddressInfo } from "node:net";
import * as restate from "@restatedev/restate-sdk";

import { counter, greeter, sleeper } from "./services.ts";

function option(argv: string[], name: string): string | undefined {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : undefined;
}

const argv = process.argv.slice(2);
const rawPort = option(argv, "--port") ?? process.env.PORT ?? "9080";
const port = Number(rawPort);
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  console.error(`bad port ${JSON.stringify(rawPort)}: expected --port 0..65535`);
  process.exit(2);
}
const host = option(argv, "--host") ?? "127.0.0.1";

const endpoint = restate.endpoint().bind(greeter).bind(counter).bind(sleeper);
const server = http.createServer(endpoint.http1Handler({ bidirectional: false }));
// Idle connections stay open longer than a runtime's client pool keeps them, so a pooled
// connection is never closed under a request being sent on it.
server.keepAliveTimeout = 120_000;

server.listen(port, host, () => {
  const address = server.address() as AddressInfo;
  const shown = address.family === "IPv6" ? `[${address.address}]` : address.address;
  console.log(`serving TypeScript examples on http://${shown}:${address.port}`);
});

// SIGTERM/SIGINT: stop accepting, let attempts in flight finish (at most 5 s), then exit.
for (const signal of ["SIGTERM", "SIGINT"] as const) {
  process.once(signal, () => {
    server.close(() => process.exit(0));
    server.closeIdleConnections();
    setTimeout(() => process.exit(0), 5_000).unref();
  });
}
