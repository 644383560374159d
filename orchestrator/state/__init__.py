"""What lies under the output root: the checksummed ledger of stages, episodes and banks, the
run locks, outcome-driven stages' journals, the sweep tables and where each bank came from.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from distillery.orchestrator.state.journal import Journal
    from distillery.orchestrator.state.ledger import (
        BankOutput,
        Ledger,
        RunRecord,
        read_sweep_record,
    )
    from distillery.orchestrator.state.locks import LOCK_NAME, FileLock, LockHeld, run_locks
    from distillery.orchestrator.state.sweep_tables import (
        EPISODES,
        METHOD_COLUMNS,
        METHOD_COLUMNS_TAG,
        POINTS,
        STAGE_FIGURES,
        STAGES,
        TABLES,
        MethodColumns,
        SweepTableError,
        TableSpec,
        read_sweep_table,
        sweep_table,
        write_sweep_table,
    )

__all__ = [
    "BankOutput",
    "EPISODES",
    "FileLock",
    "Journal",
    "LOCK_NAME",
    "Ledger",
    "LockHeld",
    "METHOD_COLUMNS",
    "METHOD_COLUMNS_TAG",
    "MethodColumns",
    "POINTS",
    "RunRecord",
    "STAGES",
    "STAGE_FIGURES",
    "SweepTableError",
    "TABLES",
    "TableSpec",
    "read_sweep_record",
    "read_sweep_table",
    "run_locks",
    "sweep_table",
    "write_sweep_table",
]

# Each name's module is imported when the name is first read, so importing one module of the
# package does not import the others (the ledger and tables import pyarrow); pyright sees
# the imports above (core/exports.py).
if not TYPE_CHECKING:
    from distillery.orchestrator.core.exports import lazy_exports

    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "journal": ("Journal",),
            "ledger": ("BankOutput", "Ledger", "RunRecord", "read_sweep_record"),
            "locks": ("FileLock", "LOCK_NAME", "LockHeld", "run_locks"),
            "sweep_tables": (
                "EPISODES",
                "METHOD_COLUMNS",
                "METHOD_COLUMNS_TAG",
                "MethodColumns",
                "POINTS",
                "STAGES",
                "STAGE_FIGURES",
                "SweepTableError",
                "TABLES",
                "TableSpec",
                "read_sweep_table",
                "sweep_table",
                "write_sweep_table",
            ),
        },
    )
