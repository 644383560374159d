"""A finished sweep seen as a user sees it in MLflow: a real `mlflow server` on loopback
over the sweep's store, read through MLflow's own REST API (and, in
bench/mlflow_compare.py, rendered in headless Chromium).

The sweep is the AMD acceptance case (tests/orchestrator/test_amd_acceptance.py): an
oracle teacher's memory lets a student that knows no procedure of its own solve two of
four tasks it fails zero-shot, so the two evaluation runs disagree task by task.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from distillery.orchestrator.cli import rewrite_role_overrides, sweep_points
from distillery.orchestrator.config import to_config
from distillery.orchestrator.results import SweepResult
from distillery.orchestrator.run import run_sweep
from distillery.testing.scripted_server import run_stub_server
from distillery.workers.llm.servers import free_port

COMPARISON_TASKS = [f"multi_turn_base_{n}" for n in (120, 124, 127, 146)]


def comparison_sweep(root: Path, progress: bool = False) -> SweepResult:
    """Zero-shot and AMD (WF+ST+FN) of one scripted student on four BFCL tasks, into
    `root/runs` with MLflow in `root/mlflow.db` (see the module docstring)."""
    with run_stub_server(script="distillery.testing.bfcl_scripts:memory_procedure_text") as url:
        argv = rewrite_role_overrides(
            [
                f"output_dir={root / 'runs'}",
                f"tracking.uri=sqlite:///{root / 'mlflow.db'}",
                "agent.retry_backoff_s=0",
                f"benchmark.task_ids=[{','.join(COMPARISON_TASKS)}]",
                "benchmark.limit=null",
                "methods=[zero_shot,amd_wf_st_fn]",
                "protocol=self_excluded",
                "memory.retrieval.threshold_st=0.2",
                "memory.retrieval.subtask_query=per_turn",
                "student=external",
                f"student.base_url={url}",
                "student.model=scripted",
                "student.action_format=prompt",
                "student.max_retries=1",
                "student.retry_backoff_s=0",
            ]
        )
        configs = [to_config(c) for _, c in sweep_points(argv, multirun=False)]
        return run_sweep(configs, progress=progress)


@contextlib.contextmanager
def mlflow_server(db: Path, artifacts: Path, log: Path | None = None) -> Iterator[str]:
    """`mlflow server` on 127.0.0.1 over a SQLite store; yields its base URL."""
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--backend-store-uri",
        f"sqlite:///{db}",
        "--default-artifact-root",
        artifacts.resolve().as_uri(),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
    ]
    sink = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115 - closed below
    process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"mlflow server exited with {process.returncode}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise TimeoutError("mlflow server did not become healthy in 120 s")
            time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
        if log:
            sink.close()  # type: ignore[union-attr]


def rest(url: str, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    response = httpx.request(method, f"{url}/api/{path}", json=body, timeout=30)
    response.raise_for_status()
    return response.json()


def evaluation_runs(url: str, experiment_id: str) -> list[dict[str, Any]]:
    """The experiment's GenAI evaluation runs (the UI's Evaluations view lists these)."""
    found = rest(
        url,
        "POST",
        "2.0/mlflow/runs/search",
        {
            "experiment_ids": [experiment_id],
            "filter": "tags.`mlflow.runType` = 'genai_evaluate'",
            "max_results": 100,
        },
    )
    return found.get("runs", [])


def run_traces(url: str, experiment_id: str, run_id: str) -> list[dict[str, Any]]:
    """Trace infos (with their assessments) of one run, all pages."""
    traces: list[dict[str, Any]] = []
    token = None
    while True:
        body: dict[str, Any] = {
            "locations": [
                {"type": "MLFLOW_EXPERIMENT", "mlflow_experiment": {"experiment_id": experiment_id}}
            ],
            "filter": f"metadata.`mlflow.sourceRun` = '{run_id}'",
            "max_results": 100,
        }
        if token:
            body["page_token"] = token
        page = rest(url, "POST", "3.0/mlflow/traces/search", body)
        traces += page.get("traces", [])
        token = page.get("next_page_token")
        if not token:
            return traces


def verdicts(trace_infos: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """task id -> {assessment name: value} from trace infos as the REST API returns
    them (the task id is the trace's session)."""
    out: dict[str, dict[str, Any]] = {}
    for info in trace_infos:
        task = info["trace_metadata"]["mlflow.trace.session"]
        values: dict[str, Any] = {}
        for assessment in info.get("assessments", []):
            feedback = assessment.get("feedback", {})
            values[assessment["assessment_name"]] = feedback.get("value")
        out[task] = values
    return out
