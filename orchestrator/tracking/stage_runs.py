"""What stages report of themselves (`stages.StageReport`): a table of figures for
`distillery report` (`stage_figures.parquet`) and one MLflow child run per reporting
stage under the sweep's parent.

A stage kind that reports (AgentBrew's `brew`: its training statistics, the paper's
Table 3) says so through `Stage.report`; the orchestrator names no kind. Each such run
holds the stage's figures as metrics, its cost rows (`cost.<role>.<count>`), the
stage's identity as params, its documents (e.g. the event log and the final bank) as
JSON artifacts, its plays' episode files as artifacts and one trace per play (a task's
plays are told apart by their attempt: `<task>#<attempt>`). Re-logging a stage (a
resumed sweep) updates its run in place, found by the stage's key.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any

import pandas as pd

from distillery.orchestrator.state.sweep_tables import STAGE_FIGURES, write_sweep_table
from distillery.redaction import redact_obj

if TYPE_CHECKING:
    from distillery.orchestrator.execution.sweep import Sweep
    from distillery.orchestrator.stages.stage import StageKey, StageReport
    from distillery.orchestrator.tracking.tracker import Tracker
    from distillery.workers.trajectories import EpisodeRecord

log = logging.getLogger(__name__)

STAGE_KEY_TAG = "distillery.stage_key"


def stage_reports(sweep: Sweep) -> dict[StageKey, StageReport]:
    """Every stage's own report, for the stages that have one."""
    out = {}
    for key, stage in sweep.graph.stages.items():
        report = stage.report(sweep.ledger, set(sweep.graph.needs.get(key, set())))
        if report is not None:
            out[key] = report
    return out


def write_stage_figures(
    sweep: Sweep, reports: dict[StageKey, StageReport], runs: dict[StageKey, str]
) -> None:
    """`stage_figures.parquet` (nothing when no stage reports)."""
    rows = []
    for key, report in reports.items():
        stage = sweep.graph.stages[key]
        for position, figure in enumerate(report.figures):
            rows.append(
                {
                    "stage_hash": key.digest,
                    "kind": key.kind,
                    "label": stage.label,
                    "title": report.title,
                    "position": position,
                    "metric": figure.metric,
                    "name": figure.label,
                    "value": float(figure.value),
                    "unit": figure.unit,
                    "mlflow_run_id": runs.get(key),
                }
            )
    target = sweep.sweep_dir / STAGE_FIGURES.file
    if rows:
        write_sweep_table(target, STAGE_FIGURES, rows)


def log_stage_runs(
    sweep: Sweep,
    tracker: Tracker,
    parent_id: str,
    tags: dict[str, str],
    reports: dict[StageKey, StageReport],
) -> dict[StageKey, str]:
    """One child run of `parent_id` per reporting stage; their run ids. Tracking
    trouble is a warning: it never loses the sweep."""
    from distillery.orchestrator.tracking.results import stage_rows
    from distillery.orchestrator.tracking.tracker import flatten

    runs: dict[StageKey, str] = {}
    for key, report in reports.items():
        stage = sweep.graph.stages[key]
        metrics: dict[str, float] = {f.metric: float(f.value) for f in report.figures}
        for row in stage_rows(sweep, key):
            for count in ("tokens_in", "tokens_out", "n_llm_calls"):
                name = f"cost.{row['role']}.{count}"
                metrics[name] = metrics.get(name, 0.0) + float(row[count])
            metrics["wall_s"] = max(metrics.get("wall_s", 0.0), float(row["wall_s"]))
        params = {
            f"identity.{k}": str(v)[:6000] for k, v in flatten(redact_obj(stage.identity)).items()
        }
        params.update({"stage.kind": key.kind, "stage.key": key.digest})
        run_tags = {
            **tags,
            STAGE_KEY_TAG: key.digest,
            "stage": str(key),
            "distillery.descriptor": stage.label,
            **{f"model.{role}": m.name for role, m in stage.models.items()},
        }
        records = _play_records(report.episode_files)
        try:
            run_id = tracker.log_agent(
                run_name=f"{key} {stage.label}",
                params=params,
                tags=run_tags,
                metrics=metrics,
                results=_plays_frame(records),
                episodes_dir=None,
                documents={
                    **dict(report.documents),
                    "figures.json": [asdict(f) for f in report.figures],
                },
                run_id=_find_stage_run(tracker, parent_id, key),
                parent_run_id=parent_id,
                traces=records,
                trace_sample=sweep.cfg.tracking.trace_sample,
            )
        except Exception as exc:  # tracking must never lose a finished sweep
            log.warning("MLflow run of %s not logged: %s", key, exc, exc_info=True)
            continue
        runs[key] = run_id
        if sweep.cfg.tracking.log_trajectories:
            folder = sweep.ledger.episodes_dir(key)
            if folder.is_local and folder.local_path.exists():
                with contextlib.suppress(Exception):
                    tracker.client.log_artifacts(
                        run_id, str(folder.local_path), artifact_path="trajectories"
                    )
    return runs


def _find_stage_run(tracker: Tracker, parent_id: str, key: StageKey) -> str | None:
    runs = tracker.client.search_runs(
        [tracker.experiment_id],
        filter_string=(
            f"tags.`mlflow.parentRunId` = '{parent_id}' AND tags.`{STAGE_KEY_TAG}` = '{key.digest}'"
        ),
        order_by=["attributes.start_time ASC"],
        max_results=1,
    )
    return runs[0].info.run_id if runs else None


def _play_records(files: tuple[str, ...]) -> list[EpisodeRecord]:
    """The plays' full records, each labelled `<task>#<attempt>` so that every play of
    a task is a trace of its own."""
    from distillery.workers.storage import Location
    from distillery.workers.trajectories import read_episode_file_bytes

    out = []
    for uri in files:
        try:
            rows = read_episode_file_bytes(Location.of(uri).read_bytes())
        except Exception as exc:  # a damaged or vanished file: no trace, no crash
            log.warning("episode file %s unreadable (%s); no trace of it", uri, exc)
            continue
        out.extend(replace(r, task_id=f"{r.task_id}#{r.attempt}") for r in rows)
    return out


def _plays_frame(records: list[EpisodeRecord]) -> pd.DataFrame:
    columns = ["task_id", "attempt", "success", "termination", "error_type", "total_steps",
               "n_llm_calls", "tokens_in", "tokens_out", "wall_s"]  # fmt: skip
    rows: list[dict[str, Any]] = [
        {c: getattr(r, c) for c in columns} | {"task_id": r.task_id.rsplit("#", 1)[0]}
        for r in records
    ]
    return pd.DataFrame(rows, columns=columns)
