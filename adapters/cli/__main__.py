"""`python -m adapters.cli ...`: the same as the `torpor` console script."""

from adapters.cli import main

main()
