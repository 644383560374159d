"""MLflow: one parent run per sweep, one child run per evaluation point.

Params are the flattened validated config. Keys belong in environment variables (the
config only NAMES them), but a key in a URL's userinfo, in server arguments or under a
secret-looking name is redacted by value (`distillery.redaction`) from every param,
tag, table and document before it reaches MLflow.

Everything is logged from the driver through `MlflowClient` with explicit run ids (never
the fluent active-run stack), so one process can open the parent, log many children in
any order and reopen both when a sweep is resumed. Re-logging a point is idempotent: the
child is found by its `distillery.point_id` tag and updated in place. A child's episodes
are written as traces by `trace_log.TraceLog`, through the same client, or, for a sweep
(`trace_process=True`), by `trace_export.TraceExporter`'s child process beside it.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

import mlflow  # noqa: E402
import pandas as pd  # noqa: E402
from mlflow.data.code_dataset_source import CodeDatasetSource  # noqa: E402
from mlflow.data.pandas_dataset import from_pandas  # noqa: E402
from mlflow.entities import (  # noqa: E402
    DatasetInput,
    InputTag,
    LifecycleStage,
    Metric,
    Param,
    Run,
    RunStatus,
    RunTag,
)
from mlflow.exceptions import MlflowException  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402
from mlflow.utils.mlflow_tags import (  # noqa: E402
    MLFLOW_DATASET_CONTEXT,
    MLFLOW_LOGGED_ARTIFACTS,
    MLFLOW_PARENT_RUN_ID,
    MLFLOW_RUN_TYPE,
    MLFLOW_RUN_TYPE_GENAI_EVALUATE,
)

from distillery.orchestrator.tracking.trace_export import TraceExporter  # noqa: E402
from distillery.orchestrator.tracking.trace_log import TraceLog  # noqa: E402
from distillery.orchestrator.tracking.traces import POINT_ID_TAG, success_label  # noqa: E402
from distillery.redaction import (  # noqa: E402
    REDACTED,
    is_secret_key,
    redact,
    redact_obj,
    register_secrets,
    secrets_in,
)

if TYPE_CHECKING:
    from distillery.workers.trajectories import EpisodeRecord

_log = logging.getLogger(__name__)

_MAX_PARAM_LEN = 6000  # MLflow's MAX_PARAM_VAL_LENGTH
_MAX_TAG_LEN = 8000  # MAX_TAG_VAL_LENGTH
_MAX_KEY_LEN = 250  # MAX_ENTITY_KEY_LENGTH
_MAX_DIGEST_LEN = 36  # MAX_DATASET_DIGEST_SIZE: a full sha256 hex digest does not fit
# log_batch limits per request: 100 params, 100 tags, 1000 metrics, 1000 entities in all.
_BATCH_PARAMS = 100
_BATCH_TAGS = 100
_BATCH_ENTITIES = 1000

CHANGED_PARAM_TAG = "distillery.param_changed."  # + key: a param whose value changed


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(flatten(value, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): data}


def safe_params(config: dict[str, Any]) -> dict[str, str]:
    """The flattened config as MLflow params: secret-named values and every secret value
    (URL userinfo, keys in argument lists, set api_key_env variables) redacted."""
    register_secrets(secrets_in(config))
    params = {}
    for key, value in flatten(config).items():
        if isinstance(value, str) and value and is_secret_key(key):
            value = REDACTED
        text = "" if value is None else redact(str(value))
        params[key] = text[:_MAX_PARAM_LEN]
    return params


def artifact_root_for(uri: str) -> str | None:
    """Artifacts of a local SQLite store go beside the database file."""
    if uri.startswith("sqlite:///"):
        db = Path(uri.removeprefix("sqlite:///"))
        return (db.parent / "mlartifacts").resolve().as_uri()
    return None


@dataclass(frozen=True)
class EvalDataset:
    """The evaluated task split of a point, logged as an `mlflow.data` dataset input so
    runs evaluated on the same tasks share one dataset entry in the MLflow UI."""

    benchmark: str
    task_ids: Sequence[str]
    sha: str  # content hash of the ordered task ids (TaskSplit.eval_ids_sha)
    context: str = "evaluation"

    def __post_init__(self) -> None:
        # A tuple keeps the frozen dataclass hashable whatever sequence the caller passed.
        object.__setattr__(self, "task_ids", tuple(self.task_ids))

    @property
    def name(self) -> str:
        return f"{self.benchmark}:{self.sha[:12]}"

    def to_input(self) -> DatasetInput:
        frame = pd.DataFrame({"task_id": list(self.task_ids)}, dtype="string")
        dataset = from_pandas(
            frame,
            # An explicit source: the default one resolves git/user context on every call.
            source=CodeDatasetSource(tags={"benchmark": self.benchmark, "sha": self.sha}),
            name=self.name,
            digest=self.sha[:_MAX_DIGEST_LEN],
        )
        return DatasetInput(
            dataset._to_mlflow_entity(), tags=[InputTag(MLFLOW_DATASET_CONTEXT, self.context)]
        )


class Tracker:
    def __init__(self, uri: str, experiment: str, trace_process: bool = False) -> None:
        """`trace_process`: a point's traces are exported by a child process (a sweep's
        driver: `close_traces` waits for them), else here, before `log_agent` returns."""
        self.uri = uri
        # Traces are exported through MLflow's global tracer provider, which follows the
        # global tracking URI (not a client's), so the URI must be set globally too.
        mlflow.set_tracking_uri(uri)
        self.client = MlflowClient(uri)
        found = self.client.get_experiment_by_name(experiment)
        if found is None:
            self.experiment_id = self.client.create_experiment(
                experiment, artifact_location=artifact_root_for(uri)
            )
        else:
            self.experiment_id = found.experiment_id
        self.experiment = experiment
        self.parent_run_id: str | None = None
        self._context_tags = _context_tags()
        self.trace_log = TraceLog(self.client, uri, self.experiment_id)
        self.traces: TraceLog | TraceExporter = (
            TraceExporter(uri, self.experiment_id) if trace_process else self.trace_log
        )

    def close_traces(self, wait: bool = True) -> None:
        """Every point's traces exported (each at most `trace_export.STALL_S`), or with
        `wait=False` (a stopped sweep) those not exported yet dropped: the next run of
        the same command logs them."""
        if isinstance(self.traces, TraceExporter):
            self.traces.close(wait)

    def trace_summary(self) -> str | None:
        """What the trace writer wrote, and how long each took (None: nothing)."""
        return self.traces.summary() if isinstance(self.traces, TraceExporter) else None

    @contextmanager
    def exporting_traces(self) -> Iterator[None]:
        """The body's traces are exported when it ends (`close_traces`); a body stopped by
        Ctrl-C or SIGTERM does not wait for them."""
        interrupted = False
        try:
            yield
        except KeyboardInterrupt:
            interrupted = True
            raise
        finally:
            self.close_traces(wait=not interrupted)

    # -- runs -------------------------------------------------------------------------

    @contextmanager
    def parent(
        self,
        run_name: str,
        params: dict[str, str],
        tags: dict[str, str],
        run_id: str | None = None,
    ) -> Iterator[str]:
        """The sweep's parent run; `run_id` reopens the run of an earlier, interrupted
        invocation of the same sweep (a missing or deleted one is replaced, with a
        warning). Marked FINISHED on exit, FAILED or KILLED when the body raises."""
        run = self._reopen(run_id) if run_id else None
        if run is None:
            run = self.client.create_run(
                self.experiment_id, tags=self._context_tags, run_name=run_name
            )
        run_id = run.info.run_id
        self.parent_run_id = run_id
        self._log_run_data(run, params=params, tags=tags)
        try:
            yield run_id
        except KeyboardInterrupt:
            self.client.set_terminated(run_id, RunStatus.to_string(RunStatus.KILLED))
            raise
        except BaseException:
            self.client.set_terminated(run_id, RunStatus.to_string(RunStatus.FAILED))
            raise
        self.client.set_terminated(run_id, RunStatus.to_string(RunStatus.FINISHED))

    def find_child(self, parent_run_id: str | None, point_id: str) -> str | None:
        """The active child run of `parent_run_id` tagged with this point id, if any
        (the oldest one, should an earlier bug have left duplicates)."""
        if not parent_run_id:
            return None
        if "'" in point_id or "'" in parent_run_id:
            raise ValueError(f"a point id cannot contain a quote: {point_id!r}")
        runs = self.client.search_runs(
            [self.experiment_id],
            filter_string=(
                f"tags.`{MLFLOW_PARENT_RUN_ID}` = '{parent_run_id}'"
                f" AND tags.`{POINT_ID_TAG}` = '{point_id}'"
            ),
            order_by=["attributes.start_time ASC"],
            max_results=10,
        )
        if len(runs) > 1:
            _log.warning(
                "%d child runs of %s have point id %s; updating the oldest, %s",
                len(runs),
                parent_run_id,
                point_id,
                runs[0].info.run_id,
            )
        return runs[0].info.run_id if runs else None

    def log_agent(
        self,
        run_name: str,
        params: dict[str, str],
        tags: dict[str, str],
        metrics: dict[str, float],
        results: pd.DataFrame,
        episodes_dir: Path | None,
        documents: dict[str, Any] | None = None,
        *,
        point_id: str | None = None,
        run_id: str | None = None,
        parent_run_id: str | None = None,
        dataset: EvalDataset | None = None,
        traces: Sequence[EpisodeRecord] = (),
        trace_sample: int | None = None,
        trace_tags: Mapping[str, str] | None = None,
        end_time_ms: int | None = None,
    ) -> str:
        """A finished child run (closed at `end_time_ms`, default now): params, metrics, the per-task table, the trajectories,
        small JSON documents (e.g. the evaluated task ids), the evaluated split as a
        dataset input and the episodes of `traces` as traces with the benchmark's
        verdict as feedback (every task; `trace_sample` of them when given, 0: none).

        A run with a `dataset` is an evaluation: it is tagged as an MLflow GenAI
        evaluation run, so the UI's Evaluations view lists it and compares two such runs
        task by task (their traces are matched by their inputs: the task).

        `run_id` (or, without it, the child of the parent tagged `point_id`) is updated in
        place; otherwise a new child of `parent_run_id` (default: the open parent) is
        created. Returns the child's run id."""
        parent_id = parent_run_id or self.parent_run_id
        if run_id is None and point_id is not None:
            run_id = self.find_child(parent_id, point_id)
        run = self._reopen(run_id) if run_id else None
        if run is None:
            system_tags = dict(self._context_tags)
            if parent_id:
                system_tags[MLFLOW_PARENT_RUN_ID] = parent_id
            if point_id is not None:
                system_tags[POINT_ID_TAG] = point_id
            run = self.client.create_run(self.experiment_id, tags=system_tags, run_name=run_name)
        child_id = run.info.run_id
        all_tags = dict(tags)
        if point_id is not None:
            all_tags[POINT_ID_TAG] = point_id
        if dataset is not None:
            all_tags[MLFLOW_RUN_TYPE] = MLFLOW_RUN_TYPE_GENAI_EVALUATE
        if {"success_rate", "success_rate_ci_low", "success_rate_ci_high"} <= set(metrics):
            # One column of the runs table with the rate, its interval and n.
            all_tags["success"] = success_label(metrics)
        try:
            self._log_run_data(run, params=params, tags=all_tags, metrics=metrics)
            if dataset is not None:
                self.client.log_inputs(child_id, datasets=[dataset.to_input()])
            self._log_files(child_id, run, results, episodes_dir, documents or {})
        except BaseException:
            self.client.set_terminated(child_id, RunStatus.to_string(RunStatus.FAILED))
            raise
        if trace_sample != 0:
            self.traces.log(child_id, traces, trace_sample, point_id, trace_tags)
        self.client.set_terminated(
            child_id, RunStatus.to_string(RunStatus.FINISHED), end_time=end_time_ms
        )
        return child_id

    def open_child(
        self,
        run_name: str,
        params: Mapping[str, str],
        tags: Mapping[str, str],
        *,
        point_id: str,
        parent_run_id: str | None = None,
        start_time_ms: int | None = None,
    ) -> str:
        """A point's child run, RUNNING with its params and tags from the moment its
        stage starts: the child of the parent tagged with `point_id` (a resumed sweep
        continues its runs), else a new one started at `start_time_ms` (default now)."""
        parent_id = parent_run_id or self.parent_run_id
        run_id = self.find_child(parent_id, point_id)
        run = self._reopen(run_id) if run_id else None
        if run is None:
            system_tags = {**self._context_tags, POINT_ID_TAG: point_id}
            if parent_id:
                system_tags[MLFLOW_PARENT_RUN_ID] = parent_id
            run = self.client.create_run(
                self.experiment_id, start_time=start_time_ms, tags=system_tags, run_name=run_name
            )
        elif run.info.run_name != run_name:
            self.client.update_run(run.info.run_id, name=run_name)
        self._log_run_data(run, params=params, tags={**tags, POINT_ID_TAG: point_id})
        return run.info.run_id

    def log_progress(self, run_id: str, metrics: Mapping[str, float], step: int) -> None:
        """Running metrics of an open run (MLflow keeps each one's history by step)."""
        now = int(time.time() * 1000)
        rows = [Metric(k, float(v), now, step) for k, v in metrics.items()]
        self.client.log_batch(run_id, metrics=rows)

    def terminate(self, run_id: str, status: str, end_time_ms: int | None = None) -> None:
        """Close a run: FINISHED, FAILED or KILLED (RunStatus names)."""
        self.client.set_terminated(run_id, status, end_time=end_time_ms)

    def _reopen(self, run_id: str) -> Run | None:
        try:
            run = self.client.get_run(run_id)
        except MlflowException as exc:
            _log.warning("MLflow run %s not found (%s); starting a new run", run_id, exc)
            return None
        if run.info.lifecycle_stage == LifecycleStage.DELETED:
            _log.warning("MLflow run %s was deleted; starting a new run", run_id)
            return None
        if run.info.experiment_id != self.experiment_id:
            _log.warning(
                "MLflow run %s belongs to experiment %s, not %s; starting a new run",
                run_id,
                run.info.experiment_id,
                self.experiment_id,
            )
            return None
        self.client.update_run(run_id, status=RunStatus.to_string(RunStatus.RUNNING))
        return run

    def _log_run_data(
        self,
        run: Run,
        params: Mapping[str, str] = {},  # noqa: B006 - read only
        tags: Mapping[str, str] = {},  # noqa: B006 - read only
        metrics: Mapping[str, float] = {},  # noqa: B006 - read only
    ) -> None:
        """Params, tags and metrics in as few `log_batch` calls as MLflow's limits allow.

        MLflow forbids changing a logged param. Params already logged with the same value
        are skipped; a changed one (e.g. a resumed sweep under a new code version) is
        recorded as tag `distillery.param_changed.<key>` with a warning, so a resume never
        crashes on it."""
        existing = run.data.params
        changed: dict[str, str] = {}
        new_params: list[Param] = []
        for key, value in params.items():
            text = redact(str(value))[:_MAX_PARAM_LEN]
            if key not in existing:
                new_params.append(Param(key, text))
            elif existing[key] != text:
                changed[key] = text
        all_tags = {k: redact(str(v))[:_MAX_TAG_LEN] for k, v in tags.items()}
        if changed:
            _log.warning(
                "run %s: %d param(s) changed value since first logged (%s); the new values "
                "are logged as %s* tags",
                run.info.run_id,
                len(changed),
                ", ".join(sorted(changed)[:5]),
                CHANGED_PARAM_TAG,
            )
            for key, text in changed.items():
                tag_key = CHANGED_PARAM_TAG + key
                if len(tag_key) <= _MAX_KEY_LEN:
                    all_tags[tag_key] = text
        now = int(time.time() * 1000)
        metric_rows: list[Metric] = []
        for key, value in metrics.items():
            try:
                number = float(value)
            except (TypeError, ValueError):
                _log.warning(
                    "run %s: metric %s=%r is not a number; skipped", run.info.run_id, key, value
                )
                continue
            # Step 0 and a fresh timestamp: a re-log becomes the metric's latest value.
            metric_rows.append(Metric(key, number, now, 0))
        run_tags = [RunTag(k, v) for k, v in all_tags.items()]
        for m, p, t in _batches(metric_rows, new_params, run_tags):
            self.client.log_batch(run.info.run_id, metrics=m, params=p, tags=t)

    def _log_files(
        self,
        run_id: str,
        run: Run,
        results: pd.DataFrame,
        episodes_dir: Path | None,
        documents: dict[str, Any],
    ) -> None:
        results = results.map(lambda v: redact(v) if isinstance(v, str) else v)
        with tempfile.TemporaryDirectory() as tmp:
            table = Path(tmp) / "results.csv"
            results.to_csv(table, index=False)
            self.client.log_artifact(run_id, str(table))
            # MlflowClient.log_table APPENDS to an existing table artifact, so a re-logged
            # point would double its rows; write the same JSON ("split" orient) ourselves.
            as_json = Path(tmp) / "results.json"
            results.to_json(as_json, orient="split", index=False, date_format="iso")
            self.client.log_artifact(run_id, str(as_json))
        logged = json.loads(run.data.tags.get(MLFLOW_LOGGED_ARTIFACTS, "[]"))
        entry = {"path": "results.json", "type": "table"}
        if entry not in logged:  # makes the table show in the run's Evaluation/Artifacts view
            self.client.set_tag(run_id, MLFLOW_LOGGED_ARTIFACTS, json.dumps([*logged, entry]))
        for name, document in documents.items():
            self.client.log_dict(run_id, redact_obj(document), name)
        if episodes_dir is not None and episodes_dir.exists():
            self.client.log_artifacts(run_id, str(episodes_dir), artifact_path="trajectories")


def _batches(
    metrics: list[Metric], params: list[Param], tags: list[RunTag]
) -> Iterator[tuple[list[Metric], list[Param], list[RunTag]]]:
    """Chunks that each fit one log_batch request."""
    m, p, t = list(metrics), list(params), list(tags)
    while m or p or t:
        p_chunk, p = p[:_BATCH_PARAMS], p[_BATCH_PARAMS:]
        t_chunk, t = t[:_BATCH_TAGS], t[_BATCH_TAGS:]
        room = _BATCH_ENTITIES - len(p_chunk) - len(t_chunk)
        m_chunk, m = m[:room], m[room:]
        yield m_chunk, p_chunk, t_chunk


def _context_tags() -> dict[str, str]:
    """The source/user tags fluent `start_run` would add (who ran what), resolved once."""
    try:
        from mlflow.tracking.context.registry import resolve_tags

        return {k: str(v) for k, v in resolve_tags().items()}
    except Exception as exc:  # context is a nicety; never block tracking on it
        _log.debug("could not resolve MLflow context tags: %s", exc)
        return {}


def ui_hint(uri: str) -> str:
    uri = redact(uri)
    if uri.startswith("sqlite:///"):
        root = artifact_root_for(uri) or ""
        return (
            f"mlflow ui --backend-store-uri {uri} --default-artifact-root {root}"
            " --port 5000   # then open http://127.0.0.1:5000"
        )
    if uri.startswith(("http://", "https://")):
        return f"open {uri} in a browser"
    return f"mlflow ui --backend-store-uri {uri}"
