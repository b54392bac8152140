"""`python -m bisectbot.cli`: the same command line as the `bisectbot` script."""

from bisectbot.cli import main

main()
