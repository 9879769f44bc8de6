"""A deterministic simulator of Torpor (issue 23, item 7): `python -m tests.simulator --seeds N`.

See `tests.simulator.sim` for what a scenario does and checks, `tests.simulator.sdk` for the
in-process deployment it drives.
"""
