"""The command line: `distillery` routed to its commands (a sweep, --plan, memory, report,
compare, submit), Hydra's flags, the quiet output and the generated config reference.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from distillery.orchestrator.cli.app import main, route, run_cli, validate_sweep
    from distillery.orchestrator.cli.compare import (
        CompareError,
        find_side,
        side_from_mlflow,
    )
    from distillery.orchestrator.cli.config_reference import reference
    from distillery.orchestrator.cli.hydra_flags import config_documents, parse_flags

__all__ = [
    "CompareError",
    "config_documents",
    "find_side",
    "main",
    "parse_flags",
    "reference",
    "route",
    "run_cli",
    "side_from_mlflow",
    "validate_sweep",
]

# Each name's module is imported when the name is first read, so importing one module of the
# package does not import the others (cli.app imports Hydra);
# pyright sees the imports above (core/exports.py).
if not TYPE_CHECKING:
    from distillery.orchestrator.core.exports import lazy_exports

    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "app": ("main", "route", "run_cli", "validate_sweep"),
            "compare": ("CompareError", "find_side", "side_from_mlflow"),
            "config_reference": ("reference",),
            "hydra_flags": ("config_documents", "parse_flags"),
        },
    )
