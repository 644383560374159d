"""A benchmark's options are declared by its options model: `benchmark.options.KEY`
(the key the math and code benchmarks' docs show, `data_path` first) is set without
`+`, a key the model does not declare is refused by name, and `distillery --help` and
the configuration reference list each benchmark's keys. Before issue 31,
`benchmark.options.data_path=...` was refused as unknown (conf/'s `options: {}`)."""

from __future__ import annotations

import json

import pytest

from distillery.orchestrator.cli.app import run_cli
from distillery.orchestrator.planning.tasks import resolve_tasks
from tests.support.sweep_config import sweep_config

ANSWER_BENCHMARKS = ("gsm8k", "math", "mbpp", "humaneval")


@pytest.mark.parametrize("name", ANSWER_BENCHMARKS)
def test_data_path_is_set_without_a_plus(name, tmp_path, capsys):
    """The key is taken and reaches the benchmark: an empty folder is refused by the
    benchmark itself, naming the folder and the file it lacks (not as an unknown key).
    `--cfg job` prints the config all the same (issue 36: what is missing is the
    pre-flight's to list) and says why it is not planned."""
    code = run_cli(
        [
            "--cfg",
            "job",
            f"benchmark={name}",
            "methods=[zero_shot]",
            f"benchmark.options.data_path={tmp_path}",
        ]
    )
    err = capsys.readouterr().err
    assert "unknown key" not in err
    assert code == 0 and "not planned" in err and str(tmp_path) in err, err
    assert "+benchmark.options" not in err  # the advice names the key as it is set


def test_the_folder_is_where_the_tasks_come_from(tmp_path):
    problems = [
        {"question": "What is 2 + 3?", "answer": "2 + 3 = 5\n#### 5"},
        {"question": "What is 7 - 4?", "answer": "7 - 4 = 3\n#### 3"},
    ]
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(p) + "\n" for p in problems))
    cfg = sweep_config(
        tmp_path,
        "benchmark=gsm8k",
        "methods=[zero_shot]",
        f"benchmark.options.data_path={tmp_path}",
    )
    assert cfg.benchmark.options["data_path"] == str(tmp_path)
    tasks = resolve_tasks(cfg)
    assert len(tasks) == 2


def test_the_plus_form_still_works(tmp_path, capsys):
    code = run_cli(
        [
            "--cfg",
            "job",
            "benchmark=gsm8k",
            "methods=[zero_shot]",
            f"+benchmark.options.data_path={tmp_path}",
        ]
    )
    err = capsys.readouterr().err
    assert code == 0 and "no test.jsonl in" in err and "unknown key" not in err, err


def test_an_undeclared_option_is_refused_by_name(capsys):
    code = run_cli(
        ["--cfg", "job", "benchmark=gsm8k", "methods=[zero_shot]", "benchmark.options.dat_path=x"]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "benchmark.options.dat_path: unknown key" in err


def test_help_and_the_reference_list_the_keys(capsys):
    from distillery.orchestrator.cli.config_reference import reference

    assert run_cli(["--help"]) == 0
    out = capsys.readouterr().out
    for name in ANSWER_BENCHMARKS:
        line = next(line for line in out.splitlines() if line.startswith(f"  {name}: "))
        assert "data_path" in line and "split" in line, line
    text = reference()
    assert "`benchmark.options.KEY=VALUE`" in text and "+benchmark.options" not in text
    assert "benchmark.options.data_path" in text
