"""One validation everywhere: `--cfg job`, `--plan` and a run refuse a config whose
values cannot work together (checked from the config alone, no I/O) with the same
message and exit status 2, before anything prints or starts (no Ray)."""

from __future__ import annotations

import pytest

from distillery.orchestrator.cli.app import run_cli

BAD = {
    "tracking.uri scheme": (
        ["tracking.uri=bogus://x"],
        "distillery: tracking.uri: unknown scheme 'bogus' in 'bogus://x'",
    ),
    "tracking.uri without ://": (
        ["tracking.uri=mlfow:host"],
        "distillery: tracking.uri: unknown scheme 'mlfow'",
    ),
    "tracking server port": (
        ["tracking.uri=http://127.0.0.1:notaport"],
        "distillery: tracking.uri: 'http://127.0.0.1:notaport' is not a valid URL",
    ),
    "store path and url": (
        [
            "methods=[amd_wf]",
            "memory.store.path=qdrant_here",
            "memory.store.url=http://127.0.0.1:6333",
        ],
        "distillery: memory.store: give path (an embedded Qdrant folder) or url",
    ),
    "student base_url": (
        [
            "student=external",
            "student.model=m",
            "student.base_url=ftp://host/v1",
            "methods=[zero_shot]",
        ],
        "distillery: student.base_url: 'ftp://host/v1' is not an http(s) URL",
    ),
    "embedder base_url": (
        [
            "methods=[amd_wf]",
            "memory.embedder.kind=openai",
            "memory.embedder.base_url=localhost:8000/v1",
        ],
        "distillery: memory.embedder.base_url: 'localhost:8000/v1' is not an http(s) URL",
    ),
    "key in the url and in api_key_env": (
        [
            "student=external",
            "student.model=m",
            "student.base_url=http://user:sk-in-url-0123@127.0.0.1:9/v1",
            "student.api_key_env=DISTILLERY_TEST_KEY",
            "methods=[zero_shot]",
        ],
        "distillery: student.base_url carries a key in its userinfo",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_config_is_refused_identically_by_cfg_plan_and_run(
    case, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)

    def must_not_run(*args, **kwargs):
        raise AssertionError("the run started: validation let the config through")

    monkeypatch.setattr("distillery.orchestrator.driver.run.run_sweep", must_not_run)
    monkeypatch.setattr("distillery.orchestrator.driver.run.plan", must_not_run)
    overrides, starts = BAD[case]
    said = []
    for flag in (["--cfg", "job"], ["--plan"], []):
        argv = ["benchmark.limit=2", f"output_dir={tmp_path / 'runs'}", *overrides, *flag]
        assert run_cli(argv) == 2, flag
        out = capsys.readouterr()
        assert not out.out, flag  # nothing printed before the refusal (no config, no plan)
        assert out.err.startswith(starts), (flag, out.err)
        assert "Traceback" not in out.err
        said.append(out.err)
    assert said[0] == said[1] == said[2]
    assert "sk-in-url-0123" not in said[0]
    assert not (tmp_path / "runs").exists()  # no I/O: the output root is not created


def test_checks_that_need_io_stay_with_the_run(tmp_path, monkeypatch, capsys):
    """An unset key variable is the world's concern, not the config's: `--cfg job`
    prints what would run; `--plan` plans it and its pre-flight names every problem a
    run here would stop on (test_plan_preflight.py), writing nothing."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DISTILLERY_TEST_UNSET_KEY", raising=False)
    argv = [
        "benchmark.limit=2",
        f"output_dir={tmp_path / 'runs'}",
        "student=external",
        "student.model=m",
        "student.base_url=http://127.0.0.1:9/v1",
        "student.api_key_env=DISTILLERY_TEST_UNSET_KEY",
        "methods=[zero_shot]",
    ]
    assert run_cli([*argv, "--cfg", "job"]) == 0
    assert run_cli([*argv, "--plan"]) == 2
    planned = capsys.readouterr()
    assert "evaluate student=external zero_shot" in planned.out
    assert "DISTILLERY_TEST_UNSET_KEY is not set" in planned.err
    assert "nothing answers" in planned.err
    assert not (tmp_path / "runs").exists()
