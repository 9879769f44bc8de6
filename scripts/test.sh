#!/usr/bin/env bash
# Install Torpor with its test dependencies into .venv (and dynalite, the TypeScript SDK, chromium) and run the whole test suite.
# Extra arguments go to pytest (e.g. scripts/test.sh -k crash -x).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
step() { echo "scripts/test.sh: $*"; }
[ -x .venv/bin/python ] || { step "creating the virtualenv .venv"; "$PYTHON" -m venv .venv; }
step "installing Torpor and its test dependencies into .venv (pip; a few minutes the first time)"
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[test]'
# dynalite (npm) for the race tests: it serialises conditional writes as DynamoDB does.
if [ ! -f .cache/dynalite/node_modules/dynalite/cli.js ]; then
  step "installing dynalite into .cache/dynalite (npm)"
  npm install --prefix .cache/dynalite --no-audit --no-fund --silent dynalite@3.2.2
fi
# Restate's own CLI (npm, a prebuilt binary) for tests/integration/test_restate_cli.py.
if ! ls .cache/restate-cli/node_modules/@restatedev/restate-linux-*/bin/restate >/dev/null 2>&1; then
  step "installing Restate's CLI into .cache/restate-cli (npm)"
  npm install --prefix .cache/restate-cli --no-save --no-audit --no-fund --silent --ignore-scripts @restatedev/restate@1.7.12
fi
# restate-server (npm, a prebuilt binary) for the side-by-side checks of the admin API's shapes in
# tests/integration/test_restate_cli.py (the conformance harness would install it on first use too).
if ! ls .cache/conformance-restate/node_modules/@restatedev/restate-server-linux-*/bin/restate-server >/dev/null 2>&1; then
  step "installing restate-server into .cache/conformance-restate (npm)"
  npm install --prefix .cache/conformance-restate --no-save --no-audit --no-fund --silent --ignore-scripts @restatedev/restate-server@1.7.12
fi
# The TypeScript SDK (npm) for the conformance suite's TypeScript services and the TypeScript example,
# and Node 22 from npm when the machine's node is older (all into .cache/, git-ignored).
step "installing the TypeScript conformance services and example (npm; skipped when up to date)"
tests/conformance/services_ts/install.sh
scripts/node_app.sh install ts-example examples/typescript
# Debian's chromium for the web UI's browser tests (Playwright drives it; no browser download).
if ! command -v chromium >/dev/null 2>&1 && [ -z "${TORPOR_CHROMIUM:-}" ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  step "installing chromium (apt-get) for the web UI's browser tests"
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq chromium >/dev/null
fi
# the core type-checks under mypy --strict (pyproject.toml [tool.mypy]): a type error fails the run
step "type-checking the core (mypy, strict)"
.venv/bin/python -m mypy
# the whole suite (no test paths, -k or node ids given): the deterministic simulator over 2,000 seeds
# (tests/simulator; 0 violations, or the run fails naming each seed); TORPOR_SIMULATOR_SEEDS changes the count
if ! printf '%s\n' "$@" | grep -qE '^(tests|-k|.*::)'; then
  step "running the deterministic simulator (scripts/simulate.sh --seeds ${TORPOR_SIMULATOR_SEEDS:-2000})"
  scripts/simulate.sh --seeds "${TORPOR_SIMULATOR_SEEDS:-2000}" --jobs 2
fi
step "running the tests (pytest $*)"
status=0
.venv/bin/python -m pytest "$@" || status=$?
# the whole suite (no test paths, -k or node ids given): the conformance suite once more, in
# bidirectional mode (the Python services over HTTP/2, every invocation streamed); TORPOR_BIDI_PASS=no skips it
if [ "$status" -eq 0 ] && [ "${TORPOR_BIDI_PASS:-yes}" != "no" ] && ! printf '%s\n' "$@" | grep -qE '^(tests|-k|.*::)'; then
  step "running the conformance suite in bidirectional mode (TORPOR_CONFORMANCE_MODE=bidi, Python services over HTTP/2)"
  TORPOR_CONFORMANCE_MODE=bidi TORPOR_CONFORMANCE_LANGS=python .venv/bin/python -m pytest -p no:cacheprovider tests/conformance || status=$?
fi
# and once more on the Lambda path: the Python services a Lambda function of `torpor dev --lambda`
# (local emulator, in-process checkpoints), registered by ARN; TORPOR_LAMBDA_PASS=no skips it
if [ "$status" -eq 0 ] && [ "${TORPOR_LAMBDA_PASS:-yes}" != "no" ] && ! printf '%s\n' "$@" | grep -qE '^(tests|-k|.*::)'; then
  step "running the conformance suite on the Lambda path (TORPOR_CONFORMANCE_MODE=lambda, Python services in torpor dev --lambda)"
  TORPOR_CONFORMANCE_MODE=lambda TORPOR_CONFORMANCE_LANGS=python .venv/bin/python -m pytest -p no:cacheprovider tests/conformance || status=$?
fi
exit "$status"
