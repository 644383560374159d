"""Stage identities cannot miss a code change: every stage kind's, memory method's and
benchmark's code is pinned beside its version (tests/support/code_lock.py), and a
version raised moves exactly the keys of the stages it produces and of their readers."""

from __future__ import annotations

import json
import textwrap

import pytest

from distillery.orchestrator.cli.app import validate_sweep
from distillery.orchestrator.core.compose import rewrite_role_overrides, sweep_points
from distillery.orchestrator.planning.plan import plan_sweep
from tests.orchestrator.test_appworld_plans import use_listing
from tests.support import code_lock

SOURCE = textwrap.dedent(
    '''
    """A module."""

    LIMIT = 3


    def cut(text: str) -> str:
        """The first LIMIT characters."""
        return text[:LIMIT]  # a slice
    '''
)


def test_the_lock_holds_the_code_and_version_of_every_unit():
    locked = json.loads(code_lock.LOCK.read_text())
    now = code_lock.current()
    changed = code_lock.differences(locked, now)
    assert not changed, (
        f"code or versions changed since tests/orchestrator/code_lock.json: {changed}; "
        "decide per unit and renew: python -m tests.support.code_lock --renew "
        "[--keep UNIT ...] (see its docstring)"
    )


def test_docstrings_comments_and_formatting_do_not_count_and_behaviour_does():
    digest = code_lock.code_digest(SOURCE)
    reworded = SOURCE.replace('"""A module."""', '"""Another word."""').replace(
        "# a slice", "# the head"
    )
    reformatted = SOURCE.replace("return text[:LIMIT]", "return (\n        text[:LIMIT]\n    )")
    assert code_lock.code_digest(reworded) == digest
    assert code_lock.code_digest(reformatted) == digest
    assert code_lock.code_digest(SOURCE.replace("LIMIT = 3", "LIMIT = 4")) != digest
    assert code_lock.code_digest(SOURCE.replace("[:LIMIT]", "[-LIMIT:]")) != digest


def test_a_unit_reaches_what_it_imports_in_functions_too():
    units = {u.name: u for u in code_lock.project_units()}
    digests: dict[str, str] = {}
    brew = code_lock.modules_of(units["stage:brew"].roots, digests)
    # The leakage guard (what a brew may store) and the agent loop (its plays).
    assert "distillery.workers.memory.agentbrew.leakage" in brew
    assert "distillery.workers.agents.loop" in brew
    assert "distillery.orchestrator.execution.ordered_run" in brew
    # A driver-only module (scheduling) is no part of any output.
    assert not any(m.startswith("distillery.orchestrator.execution.schedule") for m in brew)
    amd = code_lock.modules_of(units["method:amd"].roots, digests)
    assert "distillery.workers.memory.amd.bank" in amd  # imported inside a method


def _edited(lock: dict, module: str) -> dict:
    edited = json.loads(json.dumps(lock))
    edited["modules"][module] = "0" * 16
    return edited


def test_renewing_needs_a_decision_for_code_changed_with_its_version_kept():
    now = code_lock.current()
    module = "distillery.workers.memory.agentbrew.leakage"
    locked = _edited(now, module)
    touched = sorted(code_lock.differences(locked, now))
    assert touched and all(module in now["units"][u]["modules"] for u in touched)
    assert "stage:brew" in touched and "benchmark:bfcl_multi_turn_base" not in touched
    with pytest.raises(code_lock.UndecidedChange, match="stage:brew") as raised:
        code_lock.renewed(locked, now, keep=[])
    assert "--keep" in str(raised.value)
    lines = code_lock.renewed(locked, now, keep=touched)
    assert all("declared the same" in line for line in lines)
    # A raised version is a decision of its own.
    bumped = json.loads(json.dumps(locked))
    for unit in touched:
        bumped["units"][unit]["version"] = "old"
    assert all("recomputed" in line for line in code_lock.renewed(bumped, now, keep=[]))


def _graph(monkeypatch, experiment: str):
    use_listing(monkeypatch)
    points = sweep_points(rewrite_role_overrides([f"experiment={experiment}"]), False)
    return plan_sweep(validate_sweep(points))


def test_raising_a_kinds_version_moves_its_stages_and_their_readers_only(monkeypatch, tmp_path):
    from distillery.workers.memory.agentbrew.stage import BrewStage

    monkeypatch.chdir(tmp_path)
    before = _graph(monkeypatch, "agentbrew_table1_gsm8k")
    affected: set = set()
    for key, stage in before.stages.items():  # upstream first
        if key.kind == "brew" or any(u in affected for u in stage.upstream):
            affected.add(key)
    kinds = {k.kind for k in affected}
    assert "brew" in kinds and "evaluate" in kinds  # the brews and what reads them
    assert len(affected) < len(before.stages)  # the plays that read no brew among others
    monkeypatch.setattr(BrewStage, "code_version", "raised")
    after = set(_graph(monkeypatch, "agentbrew_table1_gsm8k").stages)
    assert set(before.stages) - affected <= after  # every other key kept
    assert not affected & after  # every brew and reader moved
    assert len(after - set(before.stages)) == len(affected)


def test_project_benchmarks_carry_versions_and_the_lock_holds_their_code():
    """The project's answer benchmarks and venv worlds carry a declared version in their
    keys (a comment in a grading module or world moves none), while the lock holds that
    code: the grading modules and the world module (run by its venv, never imported)."""
    from distillery.workers.envs.registry import benchmark_class

    units = {u.name: u for u in code_lock.project_units()}
    digests: dict[str, str] = {}
    for name in ("gsm8k", "math", "mbpp", "humaneval"):
        cls = benchmark_class(name)
        assert cls.grading_version, name  # type: ignore[attr-defined]
        assert f"grading:{cls.grading_version}" in cls.fingerprint()  # type: ignore[attr-defined]
        held = code_lock.modules_of(units[f"benchmark:{name}"].roots, digests)
        grading = {m.__name__ for m in cls.grading_modules()}  # type: ignore[attr-defined]
        assert grading <= set(held), name
    for name in ("appworld", "toolsandbox"):
        cls = benchmark_class(name)
        assert f"world:{cls.world_version}" in cls.fingerprint()  # type: ignore[attr-defined]
        held = code_lock.modules_of(units[f"benchmark:{name}"].roots, digests)
        assert f"distillery.workers.envs.{name}.world" in held


def test_an_answer_benchmark_without_a_version_hashes_its_grading_code():
    """A plugin's answer benchmark that declares no version never misses a change."""
    from distillery.workers.envs.answering import AnswerBenchmark

    class Toy(AnswerBenchmark):
        name = "toy"

    (grading,) = [t for t in Toy.fingerprint() if t.startswith("grading:")]
    assert len(grading.removeprefix("grading:")) == 64
