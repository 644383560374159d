"""A teacher whose requests its server refuses stops the run at its first request with
one message; the shipped GPT-5-mini config runs and builds a non-empty bank (local
Ray, scripted OpenAI-compatible servers replaying OpenAI's own refusals)."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from distillery.orchestrator.cli import app as cli
from distillery.orchestrator.driver.run import run_sweep
from distillery.testing.scripted_server import run_stub_server, stub_stats
from distillery.workers.llm.types import RequestConfigError
from tests.support.sweep_config import scripted_student as _student
from tests.support.sweep_config import sweep_config as _config

pytestmark = pytest.mark.slow


def _gpt5_teacher(url: str) -> list[str]:
    return [
        "teacher=gpt5_mini",
        f"teacher.base_url={url}",
        "teacher.api_key_env=null",  # the scripted server takes no key
        "teacher.retry_backoff_s=0",
    ]


def test_a_refused_request_stops_the_run_at_its_first_request(tmp_path, ray_local):
    with run_stub_server("tests.support.openai_errors:gpt5") as url:
        # What teacher=gpt5_mini used to send: max_tokens (and a temperature). BFCL's
        # handler sends no token cap: its `model_sampling` option sends the config's.
        old = [
            *_gpt5_teacher(url),
            "teacher.token_limit_param=max_tokens",
            "teacher.max_tokens=4096",
            "+benchmark.options.model_sampling=true",
        ]
        cfg = _config(tmp_path, "benchmark.limit=3", "methods=[teacher,amd_wf]", *old)
        with pytest.raises(RequestConfigError) as info:
            run_sweep([cfg], progress=False)
        stats = stub_stats(url)
    assert stats.get("preflight") == 1 and stats.get("requests", 0) == 0
    text = str(info.value)
    assert "gpt-5-mini" in text and "Change: token_limit_param" in text
    assert "'max_tokens' is not supported with this model" in text
    assert "Traceback" not in text and "RayTaskError" not in text
    # Nothing was scored or recorded, no bank was built.
    runs = Path(cfg.output_dir) / "stages"
    assert not list(runs.glob("*/*/done/*.json"))
    assert not list(runs.glob("build/*/output.json"))


def test_the_cli_prints_one_message_and_exits_2(monkeypatch, capsys):
    def refuse(configs, progress=True):
        raise RequestConfigError("gpt-5-mini refused the request: HTTP 400: no. Change: x")

    monkeypatch.setattr("distillery.orchestrator.driver.run.run_sweep", refuse)
    # No network here: api.openai.com is not reachable for the pre-Ray service check.
    monkeypatch.setattr(
        "distillery.orchestrator.planning.requirements_check._reachable", lambda url: None
    )
    assert cli.run_cli(["teacher=gpt5_mini", "student=oracle"]) == 2
    assert "distillery: gpt-5-mini refused the request" in capsys.readouterr().err


def test_the_shipped_gpt5_mini_config_collects_and_builds_a_bank(tmp_path, ray_local, monkeypatch):
    monkeypatch.setenv("DISTILLERY_TEST_OPENAI_KEY", "sk-test-1234")
    with (
        run_stub_server("tests.support.openai_errors:gpt5") as teacher_url,
        run_stub_server("distillery.testing.bfcl_scripts:replay_native") as student_url,
    ):
        cfg = _config(
            tmp_path,
            "benchmark.limit=2",
            "methods=[teacher,amd_wf]",
            *_gpt5_teacher(teacher_url),
            *_student(student_url, "native"),
        )
        result = run_sweep([cfg], progress=False)
        teacher_stats = stub_stats(teacher_url)
    point = result.points[0]
    teacher, amd = point.method("teacher"), point.method("amd_wf")
    assert teacher.metrics["success_rate"] == 1.0 and teacher.metrics["n_scored"] == 2
    assert teacher.metrics["tokens_reasoning"] == 0  # tool replies carry none here
    assert amd.metrics["bank_wf"] >= 1  # a bank, not an empty one
    assert teacher_stats["preflight"] == 1  # once, before its episodes
    tags = MlflowClient(cfg.tracking_uri).get_run(amd.mlflow_run_id).data.tags
    assert tags["memory_writer"] == "gpt-5-mini"
    assert (
        tags["thresholds_embedder"] == "set for text-embedding-3-small, run with all-MiniLM-L6-v2"
    )


def test_a_refusal_the_preflight_cannot_meet_stops_every_episode(tmp_path, ray_local):
    # OpenAI refuses the tool schemas on each episode's first request: nothing in it
    # was written by the model, so it is how distillery built it.
    with run_stub_server("tests.support.openai_errors:invalid_tool_schema") as url:
        cfg = _config(
            tmp_path,
            "benchmark.limit=6",
            "methods=[zero_shot]",
            *_student(url, "native"),
            "cluster.num_workers=1",
            "cluster.episodes_per_worker=2",
        )
        with pytest.raises(RequestConfigError, match="Invalid schema for function 'cd'"):
            run_sweep([cfg], progress=False)
        stats = stub_stats(url)
    assert stats["preflight"] == 1
    assert stats["requests"] <= 2  # the episodes in flight, not all six
    assert not list((Path(cfg.output_dir) / "stages").glob("*/*/done/*.json"))
