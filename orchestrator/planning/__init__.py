"""Whether a sweep can run and what it will cost, before anything starts: the stage graph (plan),
its --plan check and totals, pre-flight and readiness checks, requirements, point descriptors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from distillery.orchestrator.planning.descriptors import name_sweep
    from distillery.orchestrator.planning.plan import EvalPoint, StageGraph, plan_sweep, server_key
    from distillery.orchestrator.planning.plan_check import plan_command
    from distillery.orchestrator.planning.plan_clock import (
        WallForecast,
        forecast_wall,
        format_forecast,
    )
    from distillery.orchestrator.planning.plan_listing import (
        PlannedStatus,
        format_plan,
        stage_line,
        stage_status,
    )
    from distillery.orchestrator.planning.plan_totals import (
        BUILD_CALLS_PER_TASK,
        StageWork,
        measured_units,
        stage_work,
    )
    from distillery.orchestrator.planning.preflight import (
        PreflightError,
        check_benchmark_environment,
        check_cluster,
        check_config,
        check_node_variables,
        check_output_dir,
        check_required_env,
        check_run,
        endpoints_in_use,
        run_notices,
        variables_read_on_nodes,
    )
    from distillery.orchestrator.planning.requirements_check import (
        RequirementsError,
        check_requirements,
        missing_requirements,
        models_in_use,
    )
    from distillery.orchestrator.planning.tasks import resolve_tasks

__all__ = [
    "BUILD_CALLS_PER_TASK",
    "EvalPoint",
    "PlannedStatus",
    "PreflightError",
    "RequirementsError",
    "StageGraph",
    "StageWork",
    "WallForecast",
    "check_benchmark_environment",
    "check_cluster",
    "check_config",
    "check_node_variables",
    "check_output_dir",
    "check_required_env",
    "check_requirements",
    "check_run",
    "endpoints_in_use",
    "forecast_wall",
    "format_forecast",
    "format_plan",
    "measured_units",
    "missing_requirements",
    "models_in_use",
    "name_sweep",
    "plan_command",
    "plan_sweep",
    "resolve_tasks",
    "run_notices",
    "server_key",
    "stage_line",
    "stage_status",
    "stage_work",
    "variables_read_on_nodes",
]

# Each name's module is imported when the name is first read, so importing one module of the
# package does not import the others (plan imports the ledger's pyarrow); pyright sees the
# imports above (core/exports.py).
if not TYPE_CHECKING:
    from distillery.orchestrator.core.exports import lazy_exports

    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "descriptors": ("name_sweep",),
            "plan": ("EvalPoint", "StageGraph", "plan_sweep", "server_key"),
            "plan_listing": ("PlannedStatus", "format_plan", "stage_line", "stage_status"),
            "tasks": ("resolve_tasks",),
            "plan_check": ("plan_command",),
            "plan_clock": ("WallForecast", "forecast_wall", "format_forecast"),
            "plan_totals": ("BUILD_CALLS_PER_TASK", "StageWork", "measured_units", "stage_work"),
            "preflight": (
                "PreflightError",
                "check_benchmark_environment",
                "check_cluster",
                "check_config",
                "check_node_variables",
                "check_output_dir",
                "check_required_env",
                "check_run",
                "endpoints_in_use",
                "run_notices",
                "variables_read_on_nodes",
            ),
            "requirements_check": (
                "RequirementsError",
                "check_requirements",
                "missing_requirements",
                "models_in_use",
            ),
        },
    )
