#!/usr/bin/env bash
# Run the conformance suite (Restate's SDK tests as pytest, tests/conformance/) against one runtime.
# Usage: scripts/conformance.sh [--runtime torpor|restate] [pytest args]
#   --runtime torpor   (default) `torpor dev`
#   --runtime restate  restate-server 1.7.12 (npm, installed into .cache/conformance-restate/ on first use)
# Languages of the test services: TORPOR_CONFORMANCE_LANGS=python,typescript (default both).
# Process logs go to .cache/conformance-logs/.
set -euo pipefail
cd "$(dirname "$0")/.."
runtime=torpor
if [ "${1:-}" = "--runtime" ]; then
  runtime=${2:?"--runtime needs torpor or restate"}
  shift 2
elif [[ "${1:-}" == --runtime=* ]]; then
  runtime=${1#--runtime=}
  shift
fi
case "$runtime" in
  torpor|restate) ;;
  *) echo "conformance.sh: unknown runtime '$runtime' (torpor or restate)" >&2; exit 2 ;;
esac
# The test dependencies (pytest, restate-sdk) in .venv, as scripts/test.sh installs them, if missing
# (e.g. after scripts/demo.sh, which installs only the examples); the TypeScript services (npm).
PYTHON=${PYTHON:-.venv/bin/python}
if ! "$PYTHON" -c "import pytest, restate" 2>/dev/null; then
  echo "conformance.sh: installing Torpor with its test dependencies into .venv" >&2
  [ -x .venv/bin/python ] || python3 -m venv .venv
  PYTHON=.venv/bin/python
  "$PYTHON" -m pip install --quiet -e '.[test]'
fi
if [[ ",${TORPOR_CONFORMANCE_LANGS:-python,typescript}," == *,typescript,* ]]; then
  tests/conformance/services_ts/install.sh
fi
export TORPOR_CONFORMANCE_RUNTIME=$runtime
# the whole suite unless test paths are given (e.g. tests/conformance/test_state.py)
target=tests/conformance
for arg in "$@"; do
  case "$arg" in tests/*) target= ;; esac
done
exec "$PYTHON" -m pytest $target -q "$@"
