"""`python -m distillery.orchestrator.cli`: the `distillery` command."""

from distillery.orchestrator.cli import main

main()
