"""The driver: configs -> a planned, locked, executed and tracked sweep (run_sweep), the one
function the command line, bench/ and the tests call; above tracking, which it drives.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from distillery.orchestrator.driver.run import (
        print_summary,
        ray_session,
        run_experiment,
        run_sweep,
        unscored_points,
    )

__all__ = ["print_summary", "ray_session", "run_experiment", "run_sweep", "unscored_points"]

# Each name's module is imported when the name is first read, so importing one module of the
# package does not import the others (MLflow); pyright sees the imports above
# (core/exports.py).
if not TYPE_CHECKING:
    from distillery.orchestrator.core.exports import lazy_exports

    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "run": (
                "print_summary",
                "ray_session",
                "run_experiment",
                "run_sweep",
                "unscored_points",
            ),
        },
    )
