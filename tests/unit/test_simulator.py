"""The deterministic simulator (tests/simulator, `scripts/simulate.sh`): a few hundred seeds keep
every invariant, a seed replays exactly, and each deliberate bug (`MUTANTS`) is caught within
2,000 seeds, proof that the checks can fail."""

from __future__ import annotations

import pytest

from tests.simulator.__main__ import main
from tests.simulator.sim import MUTANTS, run_scenario

SEEDS = range(150)


def test_every_seed_keeps_every_invariant() -> None:
    failed = {seed: s.violations for seed in SEEDS if (s := run_scenario(seed)).violations}
    assert failed == {}


def test_a_seed_replays_exactly() -> None:
    first, again = run_scenario(131), run_scenario(131)
    assert (first.calls, first.crashes, first.races, first.run_executions) == (
        again.calls,
        again.crashes,
        again.races,
        again.run_executions,
    )
    assert first.crashes
    assert first.races


@pytest.mark.parametrize("mutant", MUTANTS)
def test_each_mutant_is_caught_within_2000_seeds(mutant: str) -> None:
    caught = next((seed for seed in range(2000) if run_scenario(seed, mutant).violations), None)
    assert caught is not None, f"mutant {mutant} survived 2,000 seeds"


def test_the_command_line_prints_the_count_and_the_seed_of_each_violation(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--seeds", "3"]) == 0
    assert capsys.readouterr().out.startswith("3 scenarios, 0 violations")
    assert main(["--seeds", "2000", "--mutant", "skip-fence", "--first"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("seed ")
    assert " scenarios, 1 violations (mutant skip-fence)" in out


@pytest.mark.xfail(
    reason="seed 317: an invocation paused while it waited in its object key's queue, then resumed, is "
    "queued a second time (Operations.resume enqueues it under a new seq; the entry it had stays); once it "
    "completes, one entry is left in the key's queue for it (released only by the next arrival's pump)",
    strict=True,
)
def test_a_resumed_invocation_leaves_nothing_in_its_key_queue() -> None:
    assert run_scenario(317).violations == []
