#!/usr/bin/env bash
# The main job: set up a virtualenv, install Torpor and the example services, and run the demo
# (torpor dev on its embedded SQLite store, driving real restate-sdk services end to end).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
step() { echo "scripts/demo.sh: $*"; }
[ -x .venv/bin/python ] || { step "creating the virtualenv .venv"; "$PYTHON" -m venv .venv; }
step "installing Torpor, the example services and SQL introspection into .venv (pip; a minute or two the first time)"
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[examples,query]'  # query: SQL introspection, for Restate's CLI (README)
step "running the demo (python -m examples.demo)"
exec .venv/bin/python -m examples.demo "$@"
