#!/usr/bin/env bash
# Installs the TypeScript conformance services' npm packages (package-lock.json, exactly) into
# <repo>/.cache/conformance-ts/ and links services_ts/node_modules to it, plus a Node 22 binary when
# the machine's node is older than 22.6: scripts/node_app.sh, which says how (idempotent, flock).
#
# Usage: install.sh [--check]   (--check also type-checks src/ with tsc)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
echo "services_ts/install.sh: the TypeScript conformance services' npm packages (skipped when up to date)"
exec "$HERE/../../../scripts/node_app.sh" install conformance-ts "$HERE" "$@"
