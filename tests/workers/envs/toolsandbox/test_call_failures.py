"""ToolSandbox raising while it executes the agent's calls (protocol 2): its own runner
scores a scenario whose play raised as a failure (similarity 0), so the world says
the call failed and ends the task there, and scores it so; before, the exception was an
infrastructure error, retried and then left unscored."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from distillery.workers.envs.isolated import server
from distillery.workers.envs.isolated.venv import venv_python
from distillery.workers.envs.toolsandbox import world
from distillery.workers.envs.toolsandbox.benchmark import ToolSandbox

pytestmark = pytest.mark.slow
PROBE = Path(__file__).resolve().parent / "raising_world.py"
CONTACT = "add_contact_with_name_and_phone_number"


def test_toolsandbox_raising_on_a_call_is_the_calls_failure_scored_as_its_runner_does(
    toolsandbox_ready,
):
    python = venv_python(toolsandbox_ready / ToolSandbox.env_spec.default_path().name)
    done = subprocess.run(
        [str(python), "-I", str(PROBE), server.__file__, world.__file__, CONTACT],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    (result,) = answer["step"]
    assert result["failed"] is True and result["task_done"] is True
    assert "ToolSandbox raised: RecursionError" in result["error"]
    evaluation = answer["evaluate"]
    assert evaluation["success"] is False and evaluation["error_type"] == "toolsandbox:exception"
    assert evaluation["details"]["similarity"] == 0.0
