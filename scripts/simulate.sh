#!/usr/bin/env bash
# The deterministic simulator (tests/simulator): many invocations in one process on a virtual clock,
# faults chosen by each seed, invariants checked after each scenario.
#   scripts/simulate.sh --seeds 2000            # seeds 0..1999; prints "N scenarios, K violations"
#   scripts/simulate.sh --seed 131              # reproduce one seed exactly
#   scripts/simulate.sh --seeds 2000 --mutant skip-fence --first   # a deliberate bug must be caught
#   scripts/simulate.sh --seeds 20 --jobs 2 --store dynamodb       # over the DynamoDB store on moto (slow)
# Exits 1 if a scenario has a violation. Needs the .venv of scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHONHASHSEED=0 exec .venv/bin/python -m tests.simulator "$@"
