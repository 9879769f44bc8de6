"""`torpor dev` that sweeps every `TORPOR_TEST_SWEEP_INTERVAL_MS` ms instead of every minute (tests only).

Run as `python -m tests.helpers.sweeping_dev dev ARGS...`: with `--workers N`, each worker forked
from it sweeps that often too, so every process keeps re-arming every unfinished invocation while a
load runs (what must never make an invocation run twice). The product code knows nothing of this.
"""

from __future__ import annotations

import os

SWEEP_ENV = "TORPOR_TEST_SWEEP_INTERVAL_MS"

if __name__ == "__main__":
    import adapters.local.dev

    adapters.local.dev._SWEEP_INTERVAL_S = int(os.environ[SWEEP_ENV]) / 1000
    from adapters.cli import main

    main()
