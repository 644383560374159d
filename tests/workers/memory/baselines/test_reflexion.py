"""Reflexion: attempts and stopping, reflections validated with a counted fallback,
staged for the task's own re-plays only (no cross-task leakage, nothing committed), the
hooks' block, the metrics and cost rows, and the plan (its own stage kind, no bank)."""

from __future__ import annotations

import json

import pytest

from distillery.orchestrator.core.config import ConfigError
from distillery.orchestrator.execution.ordered_stage import Reply
from distillery.orchestrator.planning.plan import plan_sweep
from distillery.workers.llm.config import ModelConfig
from distillery.workers.memory.reflexion import prompts
from distillery.workers.memory.reflexion.method import Reflexion
from distillery.workers.memory.reflexion.records import Reflection
from distillery.workers.memory.reflexion.reflect import verdict
from distillery.workers.memory.reflexion.settings import ReflexionSettings
from distillery.workers.memory.reflexion.stage import ReflexionStage
from distillery.workers.trajectories import read_episode_file
from tests.support.sweep_config import sweep_config
from tests.workers.memory.baselines.harness import (
    FakeSearch,
    World,
    events,
    record,
    run,
    run_stage,
    task,
)

STUDENT = ModelConfig(name="stu", backend="external", base_url="http://127.0.0.1:1/v1", model="m")
TASKS = ["a", "b", "c"]


def _stage(**settings) -> ReflexionStage:
    return ReflexionStage(
        identity={"benchmark": "gsm8k", "settings": settings},
        upstream=(),
        label="reflexion",
        model=STUDENT,
        other_models={"reflector": STUDENT},
        memory_kind="reflexion",
        settings=ReflexionSettings(**settings),
        wave_size=2,
    )


def _outcome(task_id: str, attempt: int, shown: list) -> bool:
    """a: solved at once; b: solved once a reflection of its own is shown; c: never."""
    own = [e for e in shown if isinstance(e, Reflection) and e.source.task_id == task_id]
    return task_id == "a" or (task_id == "b" and bool(own))


def test_attempts_stop_at_the_first_success_or_at_k(tmp_path, monkeypatch):
    world = World(_outcome, lambda role, messages: "I misread the question. Plan: recount.")
    stage = _stage(max_attempts=3)
    sweep = run_stage(stage, TASKS, world, tmp_path, monkeypatch)
    plays = [(t, a) for t, a, _ in world.plays]
    assert sorted(plays) == [("a", 1), ("b", 1), ("b", 2), ("c", 1), ("c", 2), ("c", 3)]
    # One reflection before each re-play, by the reflector (the student's own model).
    assert [role for role, _ in world.asks] == ["reflector"] * 3
    done = sweep.ledger.episodes(stage.key)
    assert {t: (s.success, s.attempt) for t, s in done.items()} == {
        "a": (True, 1), "b": (True, 2), "c": (False, 3)
    }  # fmt: skip
    # A task's result is its first successful play, with every play's tokens.
    assert done["b"].tokens_in == 20 and done["c"].tokens_in == 30
    (b,) = read_episode_file(done["b"].file).to_pylist()
    assert b["attempt"] == 2 and b["success"] is True
    # Nothing is committed and no bank is written: a test-time protocol.
    assert world.banks == [] and ("b", "committed") not in events(sweep, stage)
    # Every play read only its own task's reflections (no leakage across tasks).
    for (task_id, _, shown), staged in zip(world.plays, world.staged_of_play, strict=True):
        assert all(e.source.task_id == task_id for e in shown)
        assert shown == list(staged)
    c_plays = [shown for t, _, shown in world.plays if t == "c"]
    assert [len(s) for s in c_plays] == [0, 1, 2]
    rows = stage.cost_rows(sweep.ledger, set(TASKS))
    assert [(r.role, r.model, r.n_llm_calls, r.tokens_in) for r in rows] == [
        ("student", "stu", 6, 60),
        ("reflector", "reflector-model", 3, 21),
    ]
    assert stage.status(sweep.ledger, set(TASKS)).cached


def test_the_reflection_prompt_reads_the_attempt_the_verdict_and_earlier_reflections(
    tmp_path, monkeypatch
):
    world = World(_outcome, lambda role, messages: "Plan: recount the apples.")
    run_stage(_stage(max_attempts=3), ["c"], world, tmp_path, monkeypatch)
    first, second = (messages[0]["content"] for _, messages in world.asks)
    assert task("c").turns[0] in first and "the answer is 5" in first
    assert prompts.VERDICT_BINARY in first and "expected 4" not in first  # binary feedback
    assert "Attempt 1: Plan: recount the apples." in second  # earlier reflections shown
    graded = World(_outcome, lambda role, messages: "Plan.")
    run_stage(_stage(feedback="message"), ["c"], graded, tmp_path / "g", monkeypatch)
    assert "the checker said: expected 4, got 5" in graded.asks[0][1][0]["content"]


def test_an_unusable_reflection_is_retried_once_then_a_counted_fallback(tmp_path, monkeypatch):
    answers = iter(["", "   ", Reply("", refused="context_overflow"), "x" * 5000])
    world = World(lambda *a: False, lambda role, messages: next(answers))
    stage = _stage(max_attempts=3, reflection_chars=300)
    sweep = run_stage(stage, ["c"], world, tmp_path, monkeypatch)
    # Play 1: empty twice (one retry) -> the fixed fallback; play 2: refused -> no
    # retry, fallback; (no third reflection: k = 3 plays).
    assert len(world.asks) == 3
    kinds = [k for _, k in events(sweep, stage)]
    assert kinds.count("reflection_invalid") == 3 and kinds.count("reflection_fallback") == 2
    staged = world.staged_of_play[-1]
    assert [e.fallback for e in staged] == [True, True]
    assert staged[0].text == prompts.FALLBACK.format(attempt=1, reason="wrong_answer")
    cut = World(lambda *a: False, lambda role, messages: "y" * 5000)
    sweep = run_stage(_stage(reflection_chars=300), ["c"], cut, tmp_path / "cut", monkeypatch)
    assert len(cut.staged_of_play[-1][0].text) == 302  # cut, marked, counted
    assert ("c", "reflection_cut") in events(sweep, _stage(reflection_chars=300))


def _reflection(task_id: str, attempt: int, text: str, fallback: bool = False) -> Reflection:
    from distillery.workers.memory.entries import MemorySource

    source = MemorySource(task_id, None, "test-time", "stu", f"e{attempt}")
    return Reflection(f"reflection:{task_id}:{attempt}", source, "q", text, attempt, fallback)


def test_the_hooks_show_only_the_tasks_own_last_reflections():
    method = Reflexion()
    settings = ReflexionSettings(memory_size=2)
    first = method.hooks(task("a"), FakeSearch(has_bank=False), settings, lambda s: True, None)
    assert run(first.before_turn(0, "q", "SYSTEM")) == "SYSTEM"  # the zero-shot prompt
    staged = tuple(_reflection("a", i, f"plan {i}", fallback=i == 1) for i in (1, 2, 3))
    staged += (_reflection("b", 1, "another task's plan"),)
    search = FakeSearch(staged=staged, attempt=4, has_bank=False)
    hooks = method.hooks(task("a"), search, settings, lambda s: True, None)
    prompt = run(hooks.before_turn(0, "q", "SYSTEM"))
    assert prompt.startswith(prompts.HEADER) and prompt.endswith("\n\nSYSTEM")
    assert "plan 2" in prompt and "plan 3" in prompt and "plan 1" not in prompt
    assert "another task" not in prompt
    log = hooks.record()
    assert log == {"attempt": 4, "reflections_staged": 4, "reflections_shown": 2,
                   "reflection_fallbacks": 1, "reflection_task_mismatch": 1}  # fmt: skip
    records = [
        record("a", 1, True, "", "reflexion"),
        record("b", 3, True, "", "reflexion"),
        record("c", 2, False, "", "reflexion"),
    ]
    records = [r.__class__(**{**r.__dict__, "extra_json": json.dumps(log)}) for r in records]
    metrics = method.metrics(records)
    assert metrics["plays"] == 6 and metrics["reflections"] == 3
    assert metrics["solved_on_replay"] == 1 and metrics["plays_mean"] == 2


def test_verdict_is_binary_unless_more_is_asked_for():
    failed = type("P", (), {"record": record("c", 1, False, "", "reflexion")})()
    assert verdict(failed, "binary") == prompts.VERDICT_BINARY
    category = verdict(failed, "category")
    assert category.startswith(prompts.VERDICT_GRADER.split("(")[0])
    assert "failure type:" in category and "expected 4" not in category
    assert "the checker said: expected 4, got 5" in verdict(failed, "message")


def test_reflexion_points_are_scored_by_their_own_stage(gsm8k, tmp_path):
    cfg = sweep_config(
        tmp_path, "benchmark=gsm8k", f"+benchmark.options.data_path={gsm8k}",
        "benchmark.limit=3", "methods=[zero_shot,reflexion_k2,reflexion_k3]",
        "student=qwen3_4b", "teacher=gpt5_mini",
    )  # fmt: skip
    graph = plan_sweep([cfg])
    kinds = sorted(k.kind for k in graph.stages)
    assert kinds == ["evaluate", "reflexion", "reflexion"]  # no collect, no build
    points = {p.method_name: p for p in graph.points.values()}
    k2, k3 = (graph.stages[points[n].stage] for n in ("reflexion_k2", "reflexion_k3"))
    assert k2.key != k3.key and k2.test_time() == (2, True) and k3.test_time() == (3, True)
    assert graph.stages[points["zero_shot"].stage].test_time() == (1, False)
    assert not points["reflexion_k2"].uses_teacher and points["reflexion_k2"].bank_stage is None
    assert k2.identity["reflector"]["model"] == cfg.student.model
    assert k2.other_models == {"reflector": cfg.student}
    with pytest.raises(ConfigError, match="student= a model"):
        plan_sweep([sweep_config(tmp_path, "benchmark=gsm8k",
                                 f"+benchmark.options.data_path={gsm8k}", "benchmark.limit=2",
                                 "methods=[reflexion_k2]", "student=oracle")])  # fmt: skip
