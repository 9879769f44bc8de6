#!/usr/bin/env bash
# Starts the TypeScript conformance services: `run.sh --port P` serves every test service on
# http://127.0.0.1:P (request/response, HTTP/1.1) in this process (exec). Run install.sh first.
# Environment: TORPOR_CONFORMANCE_IDENTITY_KEY (optional publickeyv1_… key: accept only signed requests).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec "$HERE/../../../scripts/node_app.sh" run conformance-ts "$HERE" src/app.ts "$@"
