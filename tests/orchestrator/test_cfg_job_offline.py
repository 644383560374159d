"""`distillery experiment=NAME --cfg job` prints the composed, validated config of every
shipped experiment on a machine without its data, benchmark venvs, API keys or GPUs
(issue 36 item 5): what needs them is the pre-flight's (`--plan`, a run), which still
refuses; a config error still refuses `--cfg` as before."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from distillery.orchestrator.cli.app import run_cli

EXPERIMENTS = sorted(
    p.stem for p in (Path(__file__).resolve().parents[2] / "conf" / "experiment").glob("*.yaml")
)


@pytest.fixture
def bare_machine(monkeypatch, tmp_path):
    """No AppWorld data, no benchmark venvs, no keys."""
    for name in ("APPWORLD_ROOT", "OPENAI_API_KEY", "RAPID_API_KEY", "TOOLSANDBOX_CHECKOUT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DISTILLERY_ENVS_DIR", str(tmp_path / "no-envs"))


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_cfg_job_prints_every_experiment_without_data_venvs_or_keys(
    experiment, bare_machine, capsys
):
    code = run_cli([f"experiment={experiment}", "--cfg", "job"])
    out, err = capsys.readouterr()
    assert code == 0, err
    documents = [d for d in yaml.safe_load_all(out) if d is not None]
    assert documents and all(d["experiment"]["name"] == experiment for d in documents)
    assert "Traceback" not in err


def test_the_pre_flight_still_refuses_what_is_missing(bare_machine, capsys):
    code = run_cli(["experiment=appworld_table1"])  # a run: vLLM, the data, ...
    _, err = capsys.readouterr()
    assert code == 2 and "not installed" in err
    code = run_cli(["experiment=toolsandbox_table1", "--plan"])  # the plan's pre-flight
    out, err = capsys.readouterr()
    assert code != 0 and "toolsandbox environment" in out + err


def test_a_config_error_still_refuses_cfg(bare_machine, capsys):
    code = run_cli(
        ["experiment=appworld_table1", "+benchmark.options.random_seed=x", "--cfg", "job"]
    )
    _, err = capsys.readouterr()
    assert code == 2 and "random_seed" in err
