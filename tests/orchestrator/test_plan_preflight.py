"""`--plan` is a pre-flight: every check a run makes before work starts, every problem
at once, and the totals of what would run per model (calls, tokens, USD, GPU-hours).
Nothing starts (no Ray, no MLflow run) and nothing is written."""

from __future__ import annotations

import pytest

from distillery.orchestrator.cli.app import run_cli
from distillery.orchestrator.planning.plan import plan_sweep
from distillery.orchestrator.planning.plan_listing import stage_status
from distillery.orchestrator.planning.plan_totals import plan_totals
from distillery.orchestrator.state.ledger import Ledger
from distillery.testing.scripted_server import run_stub_server
from distillery.workers.llm.servers import free_port
from distillery.workers.trajectories import EpisodeSummary
from tests.support.sweep_config import sweep_config


def _plan(capsys, *argv: str) -> tuple[int, str, list[str]]:
    code = run_cli([*argv, "--plan"])
    captured = capsys.readouterr()
    said = [line.removeprefix("distillery: ") for line in captured.err.splitlines()]
    return code, captured.out, said


def test_every_problem_a_run_would_stop_on_is_reported_at_once(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DISTILLERY_TEST_UNSET_KEY", raising=False)
    monkeypatch.setattr("distillery.orchestrator.planning.readiness.local_gpus", lambda: None)
    closed = free_port()  # nothing listens there
    code, out, said = _plan(
        capsys,
        "benchmark.limit=2",
        f"output_dir={tmp_path / 'runs'}",
        f"tracking.uri=http://127.0.0.1:{closed}",
        "teacher=qwen3_4b",  # served by vLLM: not installed here, no GPU
        "student=external",
        "student.model=m",
        f"student.base_url=http://127.0.0.1:{closed}/v1",
        "student.api_key_env=DISTILLERY_TEST_UNSET_KEY",
        "methods=[teacher,zero_shot]",
    )
    assert code == 2
    assert out.startswith("plan: 1 sweep point(s)")  # the plan and totals come first
    assert "totals of what would run" in out
    text = "\n".join(said)
    assert "student.api_key_env: environment variable DISTILLERY_TEST_UNSET_KEY is not set" in text
    assert f"student.base_url=http://127.0.0.1:{closed}/v1: nothing answers" in text
    assert f"tracking.uri=http://127.0.0.1:{closed}: no MLflow tracking server answers" in text
    assert "teacher=qwen3-4b (backend vllm): vLLM is not installed" in text
    assert "teacher=qwen3-4b (backend vllm): needs 1 GPU(s)" in text
    assert said[-1].startswith("pre-flight: 5 problem(s)")
    assert not (tmp_path / "runs").exists() and not (tmp_path / "mlflow.db").exists()


def test_a_cluster_to_join_and_a_folder_to_write_are_checked(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    (tmp_path / "afile").write_text("x")
    code, _, said = _plan(
        capsys, "benchmark.limit=1", "cluster=ray", f"output_dir={tmp_path / 'afile' / 'runs'}"
    )
    assert code == 2
    assert any(s.startswith("cluster.ray_address: cluster=ray joins") for s in said)
    assert any(s.startswith(f"output_dir: {tmp_path / 'afile' / 'runs'} is inside") for s in said)


def test_the_endpoint_is_sent_the_runs_own_first_request(tmp_path, monkeypatch, capsys):
    """A server that refuses how this model's requests are built (here: OpenAI refusing
    max_tokens for a GPT-5 model) refuses the plan's probe, named with its words."""
    monkeypatch.chdir(tmp_path)
    with run_stub_server("tests.support.openai_errors:gpt5") as url:
        common = [
            "benchmark.limit=1",
            f"output_dir={tmp_path / 'runs'}",
            "methods=[teacher]",
            "teacher=gpt5_mini",
            f"teacher.base_url={url}",
            "teacher.api_key_env=null",
        ]
        # What teacher=gpt5_mini used to send: max_tokens (BFCL's handler sends no cap:
        # its `model_sampling` option sends the config's).
        code, _, said = _plan(
            capsys,
            *common,
            "teacher.token_limit_param=max_tokens",
            "teacher.max_tokens=64",
            "+benchmark.options.model_sampling=true",
        )
        assert code == 2
        (problem, summary) = said
        assert problem.startswith("teacher=gpt-5-mini: its endpoint refuses the run's requests")
        assert "'max_tokens' is not supported with this model" in problem
        assert summary.startswith("pre-flight: 1 problem(s)")
        # As shipped, the config's requests are accepted: every check passes.
        code, out, said = _plan(capsys, *common)
        assert (code, said) == (0, [])
        assert "pre-flight: every check passed" in out


def test_every_model_role_of_a_sweep_is_checked_without_a_traceback(tmp_path, monkeypatch, capsys):
    """One sweep naming a model in every role: teacher, student, a builder model
    (`+builder_models.NAME` with memory.builder.model=NAME: the pre-flight's probe looked
    models up among teachers and students only and died of StopIteration), AgentBrew's
    curator (a builder_models entry) and an OpenAI-kind embedder. Each is probed or
    checked, a missing key is one line naming its key, and nothing raises."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-embedder")
    monkeypatch.delenv("DISTILLERY_TEST_CURATOR_KEY", raising=False)
    with run_stub_server("distillery.testing.scripts:always_text", record=True) as url:
        argv = [
            "benchmark.limit=2",
            "protocol=cross_split",
            "methods=[teacher,zero_shot,amd_wf,agentbrew]",
            f"output_dir={tmp_path / 'runs'}",
            "teacher=external",
            "teacher.model=stub",
            "student=external",
            "student.model=stub",
            f"teacher.base_url={url}",
            f"student.base_url={url}",
            f"+builder_models.writer={{name: writer, backend: external, model: stub, "
            f"base_url: '{url}'}}",
            f"+builder_models.cur={{name: cur, backend: external, model: stub, "
            f"base_url: '{url}', api_key_env: DISTILLERY_TEST_CURATOR_KEY}}",
            "memory.builder.model=writer",
            "+method_catalog.agentbrew.retrieval={brew: {curator: cur}}",
            "memory/embedder=text_embedding_3_small",
            f"memory.embedder.base_url={url}",
        ]
        code, out, said = _plan(capsys, *argv)
        assert code == 2, said
        assert said[0].startswith(
            "builder_models.cur.api_key_env: environment variable DISTILLERY_TEST_CURATOR_KEY "
            "is not set"
        ), said
        assert said[-1].startswith("pre-flight: 1 problem(s)"), said
        # with the curator's key set, every model is sent the run's first request
        monkeypatch.setenv("DISTILLERY_TEST_CURATOR_KEY", "sk-test-curator")
        code, out, said = _plan(capsys, *argv)
        assert (code, said) == (0, []), said
        assert "pre-flight: every check passed" in out


def test_totals_per_model_with_usd_and_gpu_hours(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("distillery.orchestrator.planning.readiness.local_gpus", lambda: 8)
    code, out, said = _plan(
        capsys,
        "benchmark.limit=4",
        f"output_dir={tmp_path / 'runs'}",
        "teacher=gpt5_mini",
        "teacher.api_key_env=null",
        "teacher.base_url=http://127.0.0.1:9/v1",
        "student=qwen3_4b",
        "methods=[teacher,zero_shot]",
        "+cost.prices.gpt-5-mini={input_per_mtok: 0.25, output_per_mtok: 2.0}",
        "+cost.throughput_tokens_per_s.qwen3-4b=2000",
    )
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("  ")}
    teacher, student = rows["gpt-5-mini"], rows["qwen3-4b"]
    assert teacher[1:3] == ["teacher", "4"] and teacher[-2].startswith("$")
    assert student[1:3] == ["student", "4"] and student[-1] != "-"  # GPU-hours
    assert "assumed: 2 calls per user turn" in out
    assert code == 2  # the teacher's endpoint does not answer (said, not hidden)


def test_totals_rest_on_what_already_ran(tmp_path):
    """Once episodes of a model are in the ledger, its remaining ones are estimated
    from their mean, not from the assumptions."""
    cfg = sweep_config(tmp_path, "benchmark.limit=3", "methods=[zero_shot]", "student=qwen3_4b")
    graph = plan_sweep([cfg])
    ledger = Ledger(cfg.output_dir)
    (key,) = [k for k, s in graph.stages.items() if s.plays_episodes]
    first = sorted(graph.needs[key])[0]
    ledger.record_episode(
        key, EpisodeSummary(first, True, "done", 3, 10, 5000, 300, 2.0, 1, None, None)
    )
    (totals,) = plan_totals(graph, stage_status(graph, ledger), ledger)
    assert totals.episodes == 2
    assert (totals.calls, totals.tokens_in, totals.tokens_out) == (20, 10000, 600)
    assert totals.basis == {"measured: mean of 1 finished episode(s)"}


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ("benchmark.limt=5", "unknown key benchmark.limt; did you mean benchmark.limit?"),
        ("+benchmark.limt=5", "invalid config at benchmark.limt: unknown key; did you mean benchmark.limit?"),
        ("benchmak.limit=5", "unknown key benchmak.limit; did you mean benchmark.limit?"),
        ("student.temprature=0", "unknown key student.temprature; did you mean student.temperature?"),
    ],
)  # fmt: skip
def test_a_typo_gets_the_key_it_was_meant_to_be(override, said, capsys):
    assert run_cli([override, "--plan"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[0] == f"distillery: {said}"
    assert "+benchmark" not in err.split("\n", 1)[0]  # never Hydra's "use +key" advice


def test_cfg_prints_one_labelled_yaml_document_per_sweep_point(capsys):
    import yaml

    assert run_cli(["-m", "seed=0,1", "benchmark.limit=1", "--cfg", "job"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("--- # sweep point 1 of 2: seed=0 benchmark.limit=1\n")
    assert "--- # sweep point 2 of 2: seed=1 benchmark.limit=1\n" in out
    assert [d["seed"] for d in yaml.safe_load_all(out)] == [0, 1]
    assert run_cli(["--cfg", "job", "--package", "benchmark", "benchmark.limit=3"]) == 0
    (benchmark,) = yaml.safe_load_all(capsys.readouterr().out)
    assert benchmark["limit"] == 3


def test_hydras_help_flags_work(capsys):
    assert run_cli(["--hydra-help"]) == 0
    assert "== Flags ==" in capsys.readouterr().out
    assert run_cli(["--info", "defaults"]) == 0
    assert "Defaults List" in capsys.readouterr().out
    assert run_cli(["--cfg", "hydra"]) == 0
    assert "--- # Hydra's config" in capsys.readouterr().out
    assert run_cli(["--help"]) == 0
    assert "experiment: " in capsys.readouterr().out  # the config groups and options
    assert run_cli(["--config-name", "x"]) == 2
    assert "is a flag of Hydra applications" in capsys.readouterr().err
