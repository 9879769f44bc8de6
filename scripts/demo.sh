#!/usr/bin/env bash
# The main job: set up a virtualenv, install Torpor and the example services, and run the demo
# (torpor dev on its embedded SQLite store, driving real restate-sdk services end to end).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[examples]'
exec .venv/bin/python -m examples.demo "$@"
