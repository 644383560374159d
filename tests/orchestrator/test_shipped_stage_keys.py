"""Every stage key of every shipped experiment config, pinned: a change that moves code
(a refactor, a new seam) keeps each key byte-identical, and one that changes what a
stage produces shows here which keys it renews.

The pins are `stage_keys.json` (experiment -> its stages' `kind:digest`, sorted).
After a change that legitimately renews keys (a prompt, a code version, a new identity
field), rewrite them with

    DISTILLERY_PIN_STAGE_KEYS=1 python -m pytest tests/orchestrator/test_shipped_stage_keys.py

and say in the commit which keys changed and why. AppWorld and ToolSandbox are planned
on a task listing shaped like theirs (no data folder, no venv: see
test_appworld_plans.use_listing), so their keys hold no data digest here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from distillery.orchestrator.cli.app import validate_sweep
from distillery.orchestrator.core.compose import rewrite_role_overrides, sweep_points
from distillery.orchestrator.planning import tasks as tasks_module
from distillery.orchestrator.planning.plan import plan_sweep
from tests.orchestrator.test_appworld_plans import use_listing
from tests.support import REPO_ROOT

PINS = Path(__file__).with_name("stage_keys.json")
EXPERIMENTS = sorted(p.stem for p in (REPO_ROOT / "conf" / "experiment").glob("*.yaml"))


def planned_keys(experiment: str) -> list[str]:
    points = sweep_points(rewrite_role_overrides([f"experiment={experiment}"]), False)
    graph = plan_sweep(validate_sweep(points))
    return sorted(f"{key.kind}:{key.digest}" for key in graph.stages)


@pytest.fixture(scope="module")
def shipped(tmp_path_factory) -> dict[str, list[str]]:
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("APPWORLD_ROOT", raising=False)  # no data digest: the same keys anywhere
        mp.chdir(tmp_path_factory.mktemp("cwd"))
        real = tasks_module._load_tasks
        listings = use_listing(mp)
        listed = tasks_module._load_tasks

        def load(name, options, limit, task_ids, environment):
            source = listed if name in listings else real
            return source(name, options, limit, task_ids, environment)

        mp.setattr(tasks_module, "_load_tasks", load)
        return {name: planned_keys(name) for name in EXPERIMENTS}


def test_every_stage_key_of_every_shipped_experiment_is_pinned(shipped):
    if os.environ.get("DISTILLERY_PIN_STAGE_KEYS"):
        PINS.write_text(json.dumps(shipped, indent=1, sort_keys=True) + "\n")
    pinned = json.loads(PINS.read_text())
    changed = {
        name: {
            "renewed": sorted(set(shipped.get(name, [])) - set(keys)),
            "gone": sorted(set(keys) - set(shipped.get(name, []))),
        }
        for name, keys in pinned.items()
        if shipped.get(name) != keys
    }
    assert not changed, f"stage keys changed (see this file's docstring): {changed}"
    assert sorted(shipped) == sorted(pinned), "an experiment config was added or removed"
