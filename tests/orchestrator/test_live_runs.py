"""Live MLflow runs: a point's child run is RUNNING from the moment its stage starts,
with running metrics; a sweep stopped early leaves its runs KILLED; the same command
continues the same runs and closes them with their stage's times; a plain heartbeat
line goes to output that is not a terminal."""

from __future__ import annotations

import io
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from distillery.orchestrator.cli.app import _sigterm_interrupts
from distillery.orchestrator.core.compose import rewrite_role_overrides, sweep_points
from distillery.orchestrator.core.config import to_config
from distillery.orchestrator.driver.run import run_sweep
from distillery.orchestrator.execution import heartbeat as heartbeat_module
from distillery.orchestrator.execution.sweep import Sweep as SweepRun
from distillery.orchestrator.tracking.live_runs import LiveRuns
from distillery.testing.scripted_server import run_stub_server


def _configs(tmp_path: Path, url: str):
    argv = [
        f"output_dir={tmp_path / 'runs'}",
        f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
        "agent.retry_backoff_s=0",
        "benchmark.limit=3",
        "methods=[zero_shot]",
        "student=external",
        f"student.base_url={url}",
        "student.model=scripted",
        "student.action_format=native",
        "student.max_retries=1",
        "tracking.progress_interval_s=0.001",
        "cluster.num_workers=1",
        "cluster.episodes_per_worker=1",
    ]
    return [to_config(c) for _, c in sweep_points(rewrite_role_overrides(argv), False)]


@pytest.mark.slow
def test_a_stopped_sweep_leaves_its_run_killed_and_the_same_command_continues_it(
    tmp_path, ray_local, monkeypatch, capsys
):
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    seen: dict[str, object] = {}
    original = LiveRuns.episode
    landed = SweepRun._episode_done

    def watched(self, key, summary):  # the live run as the first episode left it
        original(self, key, summary)
        (run_id,) = self.open.values()
        seen.setdefault("run", client.get_run(run_id))
        seen.setdefault("thread", threading.current_thread().name)

    def interrupted(self, key, summary):  # Ctrl-C once the first episode has landed
        landed(self, key, summary)
        raise KeyboardInterrupt

    with run_stub_server(script="distillery.testing.bfcl_scripts:replay_native") as url:
        configs = _configs(tmp_path, url)
        monkeypatch.setattr(LiveRuns, "episode", watched)
        monkeypatch.setattr(SweepRun, "_episode_done", interrupted)
        with pytest.raises(KeyboardInterrupt):
            run_sweep(configs, progress=False)
        monkeypatch.setattr(LiveRuns, "episode", original)
        monkeypatch.setattr(SweepRun, "_episode_done", landed)
        # Told from its own thread, never the stage's (which goes on dispatching).
        assert seen["thread"] == "observer live MLflow runs"
        # While its stage ran, the point's run was RUNNING with its params and progress.
        running = seen["run"]
        assert running.info.status == "RUNNING"
        assert running.data.params["method"] == "zero_shot"
        assert not any(k.startswith("method_catalog.teacher") for k in running.data.params)
        assert running.data.metrics["progress.episodes_done"] == 1
        assert running.data.metrics["progress.episodes_total"] == 3
        child_id = running.info.run_id
        stopped = client.get_run(child_id)
        parent_id = stopped.data.tags["mlflow.parentRunId"]
        assert stopped.info.status == "KILLED"
        assert client.get_run(parent_id).info.status == "KILLED"

        # The same command: the same parent and child runs, finished.
        monkeypatch.setattr(heartbeat_module, "HEARTBEAT_S", 0.05)
        monkeypatch.setattr(heartbeat_module, "output_is_terminal", lambda: False)
        started = time.time()
        result = run_sweep(_configs(tmp_path, url), progress=True)
        ended = time.time()
    (method,) = result.points[0].methods
    assert method.mlflow_run_id == child_id and result.parent_run_id == parent_id
    done = client.get_run(child_id)
    assert done.info.status == "FINISHED"
    assert done.data.metrics["progress.episodes_done"] == 3
    assert done.data.metrics["success_rate"] == method.metrics["success_rate"]
    history = client.get_metric_history(child_id, "progress.episodes_done")
    assert {m.step for m in history} >= {1, 3}  # running values, by episodes done
    # Closed when its stage ended, not when the sweep's logging did.
    assert done.info.end_time <= int(ended * 1000)
    assert done.info.end_time >= int(started * 1000)
    # Output that is no terminal gets plain heartbeat lines.
    out = capsys.readouterr().out
    assert "distillery: [1/1]" in out and "episodes (1 cached" in out


def test_sigterm_stops_a_run_as_ctrl_c_does():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt), _sigterm_interrupts():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # interrupted at once; never waited for
    assert signal.getsignal(signal.SIGTERM) is before


def test_the_heartbeat_line_says_where_the_sweep_is():
    class Stage:
        plays_episodes = True

    class Graph:
        stages = {"evaluate:abc": Stage()}
        needs = {"evaluate:abc": {"t1", "t2", "t3", "t4"}}

    class Ledger:
        def episodes(self, key, verify=True):
            return {"t1": object()}

    class Sweep:
        graph, ledger = Graph(), Ledger()

        def line(self, stage):
            return "evaluate student=qwen3-4b zero_shot"

    from distillery.workers.trajectories import EpisodeSummary

    beat = heartbeat_module.Heartbeat(Sweep(), stream=io.StringIO(), enabled=False)
    beat.stage_started("evaluate:abc", "[2/3]")
    summary = EpisodeSummary("t2", False, "done", 3, 3, 100, 20, 1.0, 1, None, None)
    beat.episode("evaluate:abc", summary)
    line = beat.line()
    assert "[2/3] evaluate student=qwen3-4b zero_shot: 2/4 episodes (1 cached;" in line
    assert "success 0, failed 1, infra errors 0; 120 tokens)" in line


def test_the_heartbeat_says_where_each_running_stage_is():
    """Several stages run at once: a line each, in the order they started."""

    class Stage:
        plays_episodes = True

    class Build:
        plays_episodes = False

    class Graph:
        stages = {"evaluate:a": Stage(), "evaluate:b": Stage(), "build:c": Build()}
        needs = {"evaluate:a": {"t1", "t2"}, "evaluate:b": {"t1", "t2", "t3"}}

    class Ledger:
        def episodes(self, key, verify=True):
            return {}

    class Sweep:
        graph, ledger = Graph(), Ledger()

        def line(self, stage):
            return "build bank" if isinstance(stage, Build) else "evaluate student"

    from distillery.workers.trajectories import EpisodeSummary

    beat = heartbeat_module.Heartbeat(Sweep(), stream=io.StringIO(), enabled=False)
    beat.stage_started("evaluate:a", "[1/3]")
    beat.stage_started("build:c", "[2/3]")
    beat.stage_started("evaluate:b", "[3/3]")
    beat.episode("evaluate:b", EpisodeSummary("t1", True, "done", 3, 3, 10, 2, 1.0, 1, None, None))
    lines = beat.line().splitlines()
    assert len(lines) == 3
    assert "[1/3] evaluate student: 0/2 episodes" in lines[0]
    assert "[2/3] build bank: running for" in lines[1]
    assert "[3/3] evaluate student: 1/3 episodes (0 cached; success 1," in lines[2]
    beat.stage_finished("evaluate:a", True)
    beat.stage_finished("build:c", True)
    beat.stage_finished("evaluate:b", True)
    assert "between stages" in beat.line()
