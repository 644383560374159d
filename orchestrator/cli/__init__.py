"""The command line: `distillery` routed to its commands (a sweep, --plan, memory, report,
compare, submit), Hydra's flags, the quiet output and the generated config reference.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from distillery.orchestrator.cli.app import main

__all__ = ["main"]


def __getattr__(name: str) -> Any:
    # The console script (`distillery = distillery.orchestrator.cli:main`) and
    # `python -m distillery.orchestrator.cli` import cli.app on first use, so importing
    # a sibling (cli.compare, cli.hydra_flags) does not set up the whole command line.
    if name == "main":
        from distillery.orchestrator.cli.app import main

        return main
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
