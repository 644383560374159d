"""AppWorld's interpreter runs the model's code with `import os` allowed: what that code
can print of its environment must hold no secret of the driver's, and it has no
network (AppWorld's world declares it needs none). Issue 21, item 3."""

from __future__ import annotations

from pathlib import Path

import pytest

from distillery.workers.envs.appworld.adapter import AppWorld, AppWorldOptions

pytestmark = pytest.mark.slow
CANARIES = {
    "OPENAI_API_KEY": "sk-canary-openai-aw01",
    "AWS_SECRET_ACCESS_KEY": "canary-aws-aw02",
    "QDRANT_API_KEY": "canary-qdrant-aw03",
    "MLFLOW_TRACKING_URI": "http://user:canary-mlflow-aw04@tracking:5000",
}


def test_the_models_code_sees_no_secret_and_no_network(appworld_ready, monkeypatch):
    for name, value in CANARIES.items():
        monkeypatch.setenv(name, value)
    bench = AppWorld(AppWorldOptions(split="dev", spare_workers=0))
    task = bench.load_tasks()[0]
    env = bench.make_env(task, "canary")
    code = "import os\nprint(dict(os.environ))\n"
    try:
        (result,) = env.step(bench.parse_text(task, f"```python\n{code}\n```"))
        # AppWorld forbids `socket` and `open` to the code: the worker's network
        # namespace is read from here, in /proc/<pid>/net/dev.
        lines = Path(f"/proc/{env.worker_pid}/net/dev").read_text().splitlines()[2:]
        interfaces = sorted(line.split(":")[0].strip() for line in lines)
    finally:
        env.close()
        bench.close()
    output = result.content
    assert "APPWORLD_ROOT" in output and '"HOME"' in output  # the code ran and printed
    assert not [value for value in CANARIES.values() if value in output]
    assert interfaces == ["lo"]  # a network namespace of its own: nothing but a loopback
