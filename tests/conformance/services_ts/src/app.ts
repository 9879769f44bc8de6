// The conformance test services, every one at one endpoint, served request/response over
// HTTP/1.1 by node's own http server and the SDK's http1Handler({bidirectional: false}).
//
// Usage: node app.ts --port P   (listens on 127.0.0.1:P; PORT is the fallback, then 9080)
// Environment: TORPOR_CONFORMANCE_IDENTITY_KEY — optional, one or more `publickeyv1_…` keys
// (comma-separated): the endpoint then accepts only requests signed with one of them.
import * as http from "node:http";
import { createRequire } from "node:module";
import * as restate from "@restatedev/restate-sdk";

import { blockAndWaitWorkflow } from "./workflow.ts";
import {
  cancelTestBlockingService,
  cancelTestRunner,
  killTestRunner,
  killTestSingleton,
} from "./cancel_kill.ts";
import { failing } from "./failing.ts";
import { virtualObjectCommandInterpreter } from "./interpreter.ts";
import { nonDeterministic } from "./non_deterministic.ts";
import { proxy } from "./proxy.ts";
import { awakeableHolder, counter, listObject, mapObject } from "./state.ts";
import { testUtilsService } from "./test_utils.ts";

const SERVICES = [
  counter,
  proxy,
  listObject,
  mapObject,
  awakeableHolder,
  blockAndWaitWorkflow,
  cancelTestRunner,
  cancelTestBlockingService,
  killTestRunner,
  killTestSingleton,
  failing,
  nonDeterministic,
  testUtilsService,
  virtualObjectCommandInterpreter,
];

function parsePort(argv: string[]): number {
  const i = argv.indexOf("--port");
  const raw = i >= 0 ? argv[i + 1] : (process.env.PORT ?? "9080");
  const port = Number(raw);
  if (!Number.isInteger(port) || port <= 0 || port > 65535) {
    console.error(`bad port ${JSON.stringify(raw)}: expected --port 1..65535`);
    process.exit(2);
  }
  return port;
}

const port = parsePort(process.argv.slice(2));
const identityKeys = (process.env.TORPOR_CONFORMANCE_IDENTITY_KEY ?? "")
  .split(",")
  .map((k) => k.trim())
  .filter((k) => k !== "");

let endpoint = restate.endpoint();
for (const s of SERVICES) {
  endpoint = endpoint.bind(s);
}
if (identityKeys.length > 0) {
  endpoint = endpoint.withIdentityV1(...identityKeys);
}

const server = http.createServer(endpoint.http1Handler({ bidirectional: false }));
// Keep idle connections longer than the runtimes' client pools do, so that a pooled connection is
// not closed under a request being sent on it.
server.keepAliveTimeout = 120_000;

const sdkVersion = (createRequire(import.meta.url)("@restatedev/restate-sdk/package.json") as {
  version: string;
}).version;

server.listen(port, "127.0.0.1", () => {
  const signing = identityKeys.length > 0 ? ", requests must be signed" : "";
  console.log(
    `conformance services (TypeScript, @restatedev/restate-sdk ${sdkVersion}, node ${process.version}) ` +
      `listening on http://127.0.0.1:${port}${signing}`
  );
});

// SIGTERM/SIGINT: stop accepting, let attempts in flight finish (at most 5 s), then exit.
for (const signal of ["SIGTERM", "SIGINT"] as const) {
  process.once(signal, () => {
    server.close(() => process.exit(0));
    server.closeIdleConnections();
    setTimeout(() => process.exit(0), 5_000).unref();
  });
}
