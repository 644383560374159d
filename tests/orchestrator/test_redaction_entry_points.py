"""Redaction is installed on every entry point, not only on the sweep: each `distillery`
subcommand (report, memory, compare, submit) run as a user runs it, with a canary in
`MLFLOW_TRACKING_URI`, in a URL's userinfo and in a key variable, never prints one (the
report used to print the tracking URI's password on stderr); every Ray worker body
registers its environment's keys too."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import textwrap

from distillery import redaction
from tests.orchestrator.test_report import write_sweep
from tests.support import REPO_ROOT

TRACKING_CANARY = "trackingcanary-6a7b8c9d0e"  # MLFLOW_TRACKING_URI's password
URL_CANARY = "urlcanary-1f2e3d4c5b"  # a URL's userinfo on the command line
KEY_CANARY = "sk-keycanary-9e8d7c6b5a"  # a key variable of the environment
CANARIES = (
    TRACKING_CANARY,
    URL_CANARY,
    KEY_CANARY,
    base64.b64encode(f"mlflow:{TRACKING_CANARY}".encode()).decode(),
    base64.b64encode(f"user:{URL_CANARY}".encode()).decode(),
)

# Each subcommand through `distillery`'s own entry point, in one interpreter (what a
# subcommand prints, its logs and warnings included, goes to the captured streams), and
# each one made to print what would carry a key: the URL it failed to reach, the
# variable it could not use.
SCRIPT = textwrap.dedent(
    """
    import logging, os, sys
    from distillery.orchestrator.cli.app import route
    url = "http://user:{url}@127.0.0.1:9"
    for argv in (
        ["report", sys.argv[1], "--out", sys.argv[2]],
        ["memory", "list", "--url", url],
        ["compare", "0" * 32, "1" * 32, "--root", sys.argv[1], "--tracking-uri", url],
        ["submit", "--address", url, "benchmark.limit=1", "methods=[zero_shot]",
         "student=oracle", "output_dir=" + sys.argv[3]],
    ):
        code = route(argv)
        print("rc", argv[0], code)
    # Whatever else this process logs or prints carries them as well.
    logging.getLogger("x").warning("env: %s %s", os.environ["OPENAI_API_KEY"],
                                   os.environ["MLFLOW_TRACKING_URI"])
    print("echo: Basic", sys.argv[4], sys.argv[5])
    """
).format(url=URL_CANARY)


def test_no_subcommand_prints_a_key(tmp_path):
    sweep = write_sweep(tmp_path / "runs", parent_run_id="0" * 32, tracking_uri="<redacted>")
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO_ROOT),
        "MLFLOW_TRACKING_URI": f"http://mlflow:{TRACKING_CANARY}@127.0.0.1:9",
        "OPENAI_API_KEY": KEY_CANARY,
    }
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            SCRIPT,
            str(sweep),
            str(tmp_path / "report"),
            str(tmp_path / "out"),
            CANARIES[3],
            CANARIES[4],
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    console = done.stdout + done.stderr
    assert done.returncode == 0, console[-3000:]
    for name in ("report", "memory", "compare", "submit"):
        assert f"rc {name} " in done.stdout, console[-3000:]
    # The subcommands did say where they failed: the test is not vacuous.
    assert "http://<redacted>@127.0.0.1:9" in console
    assert [c for c in CANARIES if c in console] == []
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written and not [
        p for p in written if any(c.encode() in p.read_bytes() for c in CANARIES)
    ]


def test_every_ray_worker_body_registers_its_environments_keys(monkeypatch):
    from distillery.orchestrator.execution import memory_stage
    from distillery.workers.episodes import AgentJob, EpisodeWorkerImpl
    from distillery.workers.llm.config import ModelConfig

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://mlflow:{TRACKING_CANARY}@host:5000")
    monkeypatch.setenv("OPENAI_API_KEY", KEY_CANARY)
    redaction.clear_secrets()
    try:
        job = AgentJob(
            "r",
            "collect",
            "teacher",
            ModelConfig(name="oracle", backend="oracle"),
            "bfcl_multi_turn_base",
            "/nonexistent",
        )
        EpisodeWorkerImpl(job)
        assert {TRACKING_CANARY, KEY_CANARY, CANARIES[3]} <= redaction.registered()
        redaction.clear_secrets()

        async def body(*args):
            return None

        memory_stage._run_async(body, None, None, [])  # the build stage's Ray task body
        assert {TRACKING_CANARY, KEY_CANARY} <= redaction.registered()
    finally:
        redaction.clear_secrets()
