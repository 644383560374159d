"""What a run records: MLflow's parent and child runs (Tracker), episode traces, links to the UI,
live and stage runs, and the results and tables each evaluation point leaves for the report.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from distillery.orchestrator.tracking.links import markdown_link, run_url
    from distillery.orchestrator.tracking.live_runs import LiveRuns
    from distillery.orchestrator.tracking.results import (
        MethodResult,
        RunResult,
        SweepResult,
        config_params,
        git_sha,
        local_or_uri,
        log_gpu_time,
        log_infra_counts,
        log_points,
        package_versions,
        point_descriptors,
        point_params,
        results_frame,
        shared_params,
        stage_rows,
        sweep_parent,
        write_sweep_tables,
    )
    from distillery.orchestrator.tracking.stage_runs import (
        log_stage_runs,
        stage_reports,
        write_stage_figures,
    )
    from distillery.orchestrator.tracking.trace_export import TraceExporter, writer_settings
    from distillery.orchestrator.tracking.trace_log import TraceLog
    from distillery.orchestrator.tracking.traces import (
        episode_trace,
        sample_episodes,
        success_label,
    )
    from distillery.orchestrator.tracking.tracker import (
        CHANGED_PARAM_TAG,
        POINT_ID_TAG,
        EvalDataset,
        Tracker,
        safe_params,
        ui_hint,
    )

__all__ = [
    "CHANGED_PARAM_TAG",
    "EvalDataset",
    "LiveRuns",
    "MethodResult",
    "POINT_ID_TAG",
    "RunResult",
    "SweepResult",
    "TraceExporter",
    "TraceLog",
    "Tracker",
    "config_params",
    "episode_trace",
    "git_sha",
    "local_or_uri",
    "log_gpu_time",
    "log_infra_counts",
    "log_points",
    "log_stage_runs",
    "markdown_link",
    "package_versions",
    "point_descriptors",
    "point_params",
    "results_frame",
    "run_url",
    "safe_params",
    "sample_episodes",
    "shared_params",
    "stage_reports",
    "stage_rows",
    "success_label",
    "sweep_parent",
    "ui_hint",
    "write_stage_figures",
    "write_sweep_tables",
    "writer_settings",
]

# Each name's module is imported when the name is first read, so importing one module of the
# package does not import the others (MLflow); pyright sees the imports above
# (core/exports.py).
if not TYPE_CHECKING:
    from distillery.orchestrator.core.exports import lazy_exports

    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "links": ("markdown_link", "run_url"),
            "live_runs": ("LiveRuns",),
            "results": (
                "MethodResult",
                "RunResult",
                "SweepResult",
                "config_params",
                "git_sha",
                "local_or_uri",
                "log_gpu_time",
                "log_infra_counts",
                "log_points",
                "package_versions",
                "point_descriptors",
                "point_params",
                "results_frame",
                "shared_params",
                "stage_rows",
                "sweep_parent",
                "write_sweep_tables",
            ),
            "stage_runs": ("log_stage_runs", "stage_reports", "write_stage_figures"),
            "trace_export": ("TraceExporter", "writer_settings"),
            "trace_log": ("TraceLog",),
            "traces": ("episode_trace", "sample_episodes", "success_label"),
            "tracker": (
                "CHANGED_PARAM_TAG",
                "EvalDataset",
                "POINT_ID_TAG",
                "Tracker",
                "safe_params",
                "ui_hint",
            ),
        },
    )
