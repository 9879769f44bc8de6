"""`python -m tests.simulator --seeds N [--seed S] [--mutant NAME]`: run scenarios, print
`N scenarios, K violations` and, for each violation, the seed that reproduces it exactly.

`--seed S` alone runs that one seed; with `--seeds N` the seeds S .. S+N-1 (default S = 0).
`--store dynamodb` runs them over the DynamoDB store on an in-process moto (slow).
`--mutant NAME` installs a deliberate bug (`MUTANTS`); a seed that has violations without it too
is not counted for it. `--first` stops at the first violation (how many seeds it took to catch a
mutant). Exits 1 if any scenario has a violation.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import multiprocessing
import sys
import time
from collections.abc import Iterator

from tests.simulator.sim import MUTANTS, STORES, Scenario, run_scenario


def _run(seed: int, mutant: str | None, store: str = "sqlite") -> Scenario:
    """`run_scenario` in a worker process, returned without its store (which cannot be pickled)."""
    scenario = run_scenario(seed, mutant, store)
    del scenario.raw, scenario.store, scenario.plane, scenario.deployment, scenario.scheduler, scenario.xrng
    return scenario


def main(argv: list[str] | None = None) -> int:
    """Run the scenarios the arguments ask for; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m tests.simulator", description=__doc__)
    parser.add_argument("--seeds", type=int, default=None, help="how many seeds to run")
    parser.add_argument("--seed", type=int, default=None, help="the (first) seed")
    parser.add_argument("--mutant", choices=MUTANTS, default=None, help="install a deliberate bug")
    parser.add_argument("--jobs", type=int, default=1, help="processes to run seeds in (each seed stays exact)")
    parser.add_argument("--trace", action="store_true", help="print what each scenario did, in order")
    parser.add_argument("--store", choices=STORES, default="sqlite", help="the store (dynamodb: on moto, slow)")
    parser.add_argument("--first", action="store_true", help="stop at the first scenario with a violation")
    args = parser.parse_args(argv)
    first = args.seed or 0
    count = args.seeds if args.seeds is not None else (1 if args.seed is not None else 100)
    started = time.monotonic()
    scenarios = violations = failed = crashes = races = zombies = 0
    seeds = range(first, first + count)
    with contextlib.ExitStack() as stack:
        if args.jobs > 1:
            pool = stack.enter_context(multiprocessing.get_context("fork").Pool(args.jobs))
            results: Iterator[Scenario] = pool.imap(
                functools.partial(_run, mutant=args.mutant, store=args.store), seeds, chunksize=8
            )
        else:
            results = (run_scenario(seed, args.mutant, args.store) for seed in seeds)
        for scenario in results:
            scenarios += 1
            seed = scenario.seed
            if args.trace:
                print("\n".join(scenario.trace))
            crashes += scenario.crashes
            races += scenario.races
            zombies += scenario.zombie_runs
            if scenario.violations and args.mutant and run_scenario(seed, None, args.store).violations:
                print(f"seed {seed}: violations without the mutant too (a finding of its own): not counted")
                continue
            if scenario.violations:
                failed += 1
                violations += len(scenario.violations)
                for what in scenario.violations:
                    print(f"seed {seed}: {what}")
                if args.first:
                    break
    elapsed = time.monotonic() - started
    mutant = f" (mutant {args.mutant})" if args.mutant else ""
    print(
        f"{scenarios} scenarios, {violations} violations{mutant} (in {failed} scenarios); {crashes} crashes and "
        f"{races} concurrent executors injected, {zombies} runs executed again by executors that had lost their "
        f"lease; {elapsed:.1f} s"
    )
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
