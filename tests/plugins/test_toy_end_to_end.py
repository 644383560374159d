"""A benchmark of another package, end to end through the real `distillery` command:
the toy plugin (tests/plugins/toy_plugin, never installed, no file of the project
names it) is registered by its distribution's entry points only (`distillery.benchmarks`
for the adapter, `distillery.conf` for `conf/benchmark/toy.yaml`), and one run of
`distillery benchmark=toy ...` collects with the oracle teacher, evaluates the student
zero-shot, with AMD memory and with the plugin's own memory method `toy_recall`
(registered by `distillery.memory_methods` only; collect -> build -> evaluate), logs
to MLflow, then `distillery compare` pairs two of its points and `distillery report`
reads the sweep.

The student is the plugin's own scripted player behind the OpenAI-compatible stub
server (real HTTP), on a private local Ray started by the command itself.

A memory method of another package joins the same run as one more `Method` in
`METHODS` (and its entry point in `ENTRY_POINTS`, its catalog entry in `OVERRIDES`):
`toy_recall` is one.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from distillery.testing.scripted_server import run_stub_server, stub_stats
from distillery.workers.trajectories import read_episodes
from tests.plugins import ENTRY_POINTS, install_toy_plugin
from tests.support import REPO_ROOT

pytestmark = pytest.mark.slow

TASKS = [f"toy_{i}" for i in range(6)]


@dataclass(frozen=True)
class Method:
    """One evaluated method of the run and what its MLflow child run must show."""

    name: str  # as in `methods=[...]` and the child run's `method` tag
    role: str  # "teacher" (the collect stage) or "student"
    metrics: dict[str, float] = field(default_factory=dict)  # exact values expected
    memory: str | None = None  # a marker the student's system prompt must carry


METHODS = [
    Method("teacher", "teacher"),
    Method("zero_shot", "student"),
    Method(
        "amd_wf_st_fn",
        "student",
        # One Workflow insight per successful oracle episode, built without a model (the
        # oracle is none); each of the 6 evaluated tasks is given one, none its own.
        metrics={
            "bank_wf": 6,
            "build.wf.deterministic": 6,
            "injected_wf": 6,
            "isolation_violations": 0,
        },
        memory="[Workflow]",
    ),
    # The toy plugin's own memory method (toy_plugin.memory, entry point toy_recall):
    # one answer per successful oracle episode, each task shown another task's.
    Method(
        "recall",
        "student",
        metrics={"bank_answers": 6, "recalled": 6, "isolation_violations": 0},
        memory="[Toy recall]",
    ),
]
# Extra overrides of the run (e.g. a plugin memory method's +method_catalog entry).
OVERRIDES: list[str] = ["+method_catalog.recall={kind: toy_recall}"]


def _distillery() -> list[str]:
    """The installed console script, as a user runs it (else its module)."""
    script = Path(sys.executable).with_name("distillery")
    return (
        [str(script)]
        if script.is_file()
        else [sys.executable, "-m", "distillery.orchestrator.cli.app"]
    )


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*_distillery(), *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )


def test_a_plugin_benchmark_runs_collect_build_evaluate_mlflow_and_report(tmp_path, monkeypatch):
    paths = install_toy_plugin(tmp_path / "site", ENTRY_POINTS)
    pythonpath = os.pathsep.join([*paths, str(REPO_ROOT)])
    # The stub server's script (toy_plugin.players) and the command both import the
    # plugin from these paths; this process never does.
    monkeypatch.setenv("PYTHONPATH", pythonpath)
    env = {
        **os.environ,
        "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0",
        "HF_HUB_OFFLINE": "1",
        "MLFLOW_DISABLE_TELEMETRY": "true",
    }
    tracking = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with run_stub_server(script="toy_plugin.players:replay") as url:
        argv = [
            "benchmark=toy",
            "benchmark.limit=null",  # the default experiment (quickstart) takes 2 tasks
            f"methods=[{','.join(m.name for m in METHODS)}]",
            "memory.retrieval.subtask_query=per_turn",
            "experiment.name=toy_plugin",
            f"output_dir={tmp_path / 'runs'}",
            f"tracking.uri={tracking}",
            "agent.retry_backoff_s=0",
            "student=external",
            f"student.base_url={url}",
            "student.model=scripted",
            "student.max_retries=1",
            "student.retry_backoff_s=0",
            *OVERRIDES,
        ]
        done = _run(argv, env, tmp_path)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        requests = stub_stats(url)["requests"]
        # The same command plans nothing new: the toy's stage keys are stable across
        # processes (its fingerprint, options and versions read the same).
        again = _run([*argv, "--plan"], env, tmp_path)
        assert again.returncode == 0, again.stderr[-3000:]
        assert "0 to run" in again.stdout
        assert stub_stats(url)["requests"] == requests

    out = done.stdout
    assert "Traceback" not in done.stderr
    assert "benchmark=toy tasks=6" in out
    summary = {
        line.split()[0]: line.split()
        for line in out.splitlines()
        if line.startswith("    ") and " success " in line
    }
    assert sorted(summary) == sorted(m.name for m in METHODS)
    for words in summary.values():  # the scripted player plays the ground truth
        assert words[3] == "100.0%" and "n=6" in words, words
    (sweep_dir,) = re.findall(r"^Report: distillery report (\S+)$", out, re.M)
    assert Path(sweep_dir).name.startswith("toy_plugin-")

    # MLflow: one parent, one child per method, each on the toy's six tasks.
    client = MlflowClient(tracking)
    experiment = client.get_experiment_by_name("distillery")
    runs = client.search_runs([experiment.experiment_id])
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert parent.data.params["benchmark.name"] == "toy"
    assert parent.data.tags["version.toy-plugin"] == "0.1"  # the benchmark's versions()
    children = {
        r.data.tags["method"]: r
        for r in runs
        if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id
    }
    assert sorted(children) == sorted(m.name for m in METHODS)
    for method in METHODS:
        run = children[method.name]
        metrics = run.data.metrics
        assert metrics["success_rate"] == 1.0, method.name
        assert metrics["n_tasks"] == 6 and metrics["infra_errors"] == 0, method.name
        for key, value in method.metrics.items():
            assert metrics.get(key) == value, (method.name, key, metrics.get(key))
        table = pd.read_csv(client.download_artifacts(run.info.run_id, "results.csv"))
        assert sorted(table["task_id"]) == TASKS
    amd_split = client.download_artifacts(children["amd_wf_st_fn"].info.run_id, "split.json")
    assert sorted(json.loads(Path(amd_split).read_text())["eval_task_ids"]) == TASKS

    # The episodes on disk, one folder per stage (points.parquet names each method's):
    # the oracle's collect stage, each student's own, memory in the system prompt of
    # the memory methods' episodes.
    stage_dirs = re.findall(r"^  (\S+/stages/\S+/episodes)$", out, re.M)
    assert len(stage_dirs) == len(METHODS)
    points = pd.read_parquet(Path(sweep_dir) / "points.parquet")
    for method in METHODS:
        (stage,) = points.loc[points["method"] == method.name, "stage"]
        (folder,) = [d for d in stage_dirs if f"/{stage[:16]}/" in d]
        records = read_episodes(folder)
        assert sorted(r.task_id for r in records) == TASKS
        assert all(r.success and r.role == method.role for r in records), method.name
        if method.role == "teacher":
            assert "/stages/collect/" in folder
            assert all(r.agent == "oracle" and r.tokens_in == 0 for r in records)
        for record in records if method.memory else ():
            system = json.loads(record.messages_json)[0]
            assert system["role"] == "system" and method.memory in system["content"]

    # `distillery compare`: zero-shot and a memory method paired on the toy's tasks.
    memory_method = next(m for m in METHODS if m.memory)
    compare = _run(
        [
            "compare",
            children["zero_shot"].info.run_id,
            children[memory_method.name].info.run_id,
            f"--root={tmp_path / 'runs'}",
            f"--tracking-uri={tracking}",
        ],
        env,
        tmp_path,
    )
    assert compare.returncode == 0, compare.stdout[-3000:] + compare.stderr[-3000:]
    assert "Paired on 6 task(s) scored by both" in compare.stdout
    assert "A solved 6/6 (100.0%), B solved 6/6 (100.0%)" in compare.stdout

    # `distillery report` on the sweep: a table per method, logged to the parent run.
    report = _run(["report", sweep_dir], env, tmp_path)
    assert report.returncode == 0, report.stdout[-3000:] + report.stderr[-3000:]
    table = report.stdout.splitlines()
    assert "| student | method | toy |" in table  # a column per benchmark
    for method in METHODS:
        agent = "oracle" if method.role == "teacher" else "external"
        cell = f"| {agent} | {method.name} | 100.0% [61.0–100.0] n=6"
        # A method beside zero-shot carries its paired test against it in the cell.
        assert any(line.startswith(cell + suffix) for line in table for suffix in (" |", " · vs"))
    assert (Path(sweep_dir) / "report" / "report.md").is_file()
    assert "report" in {a.path for a in client.list_artifacts(parent.info.run_id)}
