"""ACE's two choices of ace.py as options (issue 44, item 3): the best playbook on a
validation split held out of the memory split (`playbook_selection:
best_on_validation`, ace.py `_offline_train`) and a reflector that reads only the
bullets the play cited (`reflector_reads: cited_bullets`, ace.py
`extract_playbook_bullets`); at their defaults (the AppWorld harness's) nothing of the
stage's or the evaluations' identities moves."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest

from distillery.orchestrator.cli.app import validate_sweep
from distillery.orchestrator.core.compose import rewrite_role_overrides, sweep_points
from distillery.orchestrator.core.config import ConfigError
from distillery.orchestrator.execution.ordered_stage import stage_events
from distillery.orchestrator.planning.plan import plan_sweep
from distillery.workers.memory.ace import prompts
from distillery.workers.memory.ace.method import Ace
from distillery.workers.memory.ace.records import Bullet
from distillery.workers.memory.ace.settings import (
    ACE_PY_DEVIATIONS,
    AceSettings,
    AdaptationPlaySettings,
)
from distillery.workers.memory.ace.stage import AceStage
from distillery.workers.memory.ace.validation import validation_split
from tests.workers.memory.baselines.harness import FakeSearch, World, run, run_stage, task
from tests.workers.memory.baselines.test_ace import TEACHER, _answer, _bullet

TRAINING = ["m0", "m1", "m2", "m3"]
VALIDATION = ("v0", "v1")


def _stage(validation_ids: tuple[str, ...] = (), **settings) -> AceStage:
    return AceStage(
        identity={"benchmark": "gsm8k", "settings": settings},
        upstream=(),
        label="ace",
        model=TEACHER,
        other_models={"reflector": TEACHER, "curator": TEACHER},
        memory_kind="ace",
        settings=AceSettings(**settings),
        split="train",
        validation_ids=validation_ids,
    )


def _validated(task_id: str, attempt: int, shown: list) -> bool:
    """Training tasks fail; by the playbook's size (one bullet per task so far): v0 with
    1, 2 or 4 bullets, v1 with 2 or 4. Accuracy after m0..m3: 0.5, 1.0, 0.0, 1.0."""
    size = len([e for e in shown if isinstance(e, Bullet)])
    return (task_id == "v0" and size in (1, 2, 4)) or (task_id == "v1" and size in (2, 4))


def _best_on_validation(
    root, monkeypatch, crash_at: int | None = None
) -> tuple[World, tuple[AceStage, Any]]:
    def outcome(task_id, attempt, shown):
        if crash_at is not None and len(world.plays) == crash_at:
            raise KeyboardInterrupt("killed")  # the run dies here, nothing recorded
        return _validated(task_id, attempt, shown)

    world = World(outcome, _answer)
    stage = _stage(VALIDATION, max_rounds=0, playbook_selection="best_on_validation",
                   eval_steps=1)  # fmt: skip
    sweep = None
    with contextlib.suppress(KeyboardInterrupt):
        sweep = run_stage(stage, TRAINING, world, root, monkeypatch)
    return world, (stage, sweep)


def test_the_bank_is_the_playbook_that_validated_strictly_best(tmp_path, monkeypatch):
    world, (stage, sweep) = _best_on_validation(tmp_path, monkeypatch)
    # After each training task both validation tasks are played with the playbook as
    # that task's curation left it (committed bullets only, nothing staged).
    probes = [(t, len(s)) for t, a, s in world.plays if t in VALIDATION]
    assert probes == [("v0", 1), ("v1", 1), ("v0", 2), ("v1", 2), ("v0", 3), ("v1", 3),
                      ("v0", 4), ("v1", 4)]  # fmt: skip
    # 0.5 (best), 1.0 (best), 0.0, 1.0 (a tie: not strictly above): the bank is the
    # playbook after m1, two bullets, not the last one's four.
    (bank,) = world.banks
    assert sorted(b.memory_id for b in bank["bullets"]) == ["err-00001", "err-00002"]
    log = stage_events(sweep.ledger, stage.key)
    validated = [(r["step"], r["solved"], r["best"]) for r in log if r["kind"] == "validated"]
    assert validated == [(1, 1, True), (2, 2, True), (3, 0, False), (4, 2, False)]
    assert world.bank_stats[0]["chosen_in_task"] == 2
    assert world.bank_stats[0]["bullets.committed"] == 2
    # Every validation play is a recorded episode, counted in the teacher's cost, and
    # no result of the stage's own tasks.
    probed = [r for r in log if r["kind"] == "probed"]
    assert [r["probe"] for r in probed] == list(VALIDATION) * 4
    assert sorted(sweep.ledger.episodes(stage.key)) == TRAINING
    (teacher, *_) = stage.cost_rows(sweep.ledger, set(TRAINING))
    assert teacher.role == "teacher" and teacher.n_llm_calls == 4 + 8  # one call a play


def test_the_best_playbook_starts_as_the_initial_one(tmp_path, monkeypatch):
    """ace.py: `best_playbook` is the initial playbook until an accuracy above 0.0."""
    world = World(lambda *a: False, _answer)
    stage = _stage(VALIDATION, max_rounds=0, playbook_selection="best_on_validation",
                   eval_steps=2, sections="appworld", initial_playbook="appworld")  # fmt: skip
    sweep = run_stage(stage, TRAINING, world, tmp_path, monkeypatch)
    # Nothing validated above 0.0: the bank is the initial playbook as it was, without
    # the curator's additions or the reflector's counts since.
    (bank,) = world.banks
    assert bank["bullets"] and all(b.source.split == "initial" for b in bank["bullets"])
    assert all(b.helpful == b.harmful == 0 for b in bank["bullets"])
    log = stage_events(sweep.ledger, stage.key)
    assert sum(r["added"] for r in log if r["kind"] == "curated") == 4
    assert [r["step"] for r in log if r["kind"] == "validated"] == [2, 4]  # every 2nd task


def test_a_run_killed_during_validation_resumes_to_the_same_bank_and_log(tmp_path, monkeypatch):
    whole, (stage, sweep) = _best_on_validation(tmp_path / "whole", monkeypatch)
    expected = json.dumps(stage_events(sweep.ledger, stage.key)).replace(
        str(tmp_path / "whole"), "<root>"
    )
    # Plays: m0, v0, v1, m1, v0, v1, ...: killed at m0's second validation play, and
    # at m1's first.
    for crash_at in (2, 4):
        root = tmp_path / f"killed{crash_at}"
        killed, _ = _best_on_validation(root, monkeypatch, crash_at=crash_at)
        assert killed.banks == []
        resumed, (stage, sweep) = _best_on_validation(root, monkeypatch)
        log = json.dumps(stage_events(sweep.ledger, stage.key)).replace(str(root), "<root>")
        assert log == expected
        assert resumed.banks == whole.banks
        assert len(killed.plays) + len(resumed.plays) == len(whole.plays)


def test_the_validation_tasks_are_held_out_of_the_memory_split():
    ids = [f"t{i}" for i in range(30)]
    settings = AceSettings(playbook_selection="best_on_validation", eval_steps=5)
    training, validation = validation_split(ids, settings)
    assert len(validation) == 10 and len(training) == 20  # a third
    assert not set(training) & set(validation) and sorted([*training, *validation]) == sorted(ids)
    assert training == [t for t in ids if t in training]  # the split's order kept
    assert validation_split(list(reversed(ids)), settings)[1] == tuple(
        t for t in reversed(ids) if t in validation
    )  # the same draw whatever the order
    assert validation_split(ids, AceSettings()) == (ids, ())
    with pytest.raises(ConfigError, match="nothing is validated"):
        validation_split(ids, AceSettings(playbook_selection="best_on_validation"))


def _plan(method: str, *overrides: str) -> tuple[Any, AceStage, set[str], set[str], Any]:
    argv = rewrite_role_overrides([
        "benchmark=bfcl_multi_turn_base", "benchmark.limit=20", "protocol=cross_split",
        "teacher=oracle", f"methods=[{method}]", *overrides,
    ])  # fmt: skip
    graph = plan_sweep(validate_sweep(sweep_points(argv, False)))
    (ace,) = [s for k, s in graph.stages.items() if k.kind == "ace"]
    assert isinstance(ace, AceStage)
    (point,) = graph.points.values()
    return graph, ace, graph.needs[ace.key], set(point.split.memory_ids), point


def test_planned_the_stage_learns_from_the_rest_and_only_its_plays_cite():
    _, plain, needs, memory, point = _plan("ace")
    assert needs == memory and plain.validation_ids == ()
    assert type(plain.settings) is AceSettings
    # The catalog's ace.py entry, on a memory split of 14 tasks.
    _, ace, needs, memory, point = _plan("ace_py", "+method_catalog.ace_py.retrieval.eval_steps=5")
    assert len(ace.validation_ids) == 4 and len(needs) == 10  # a third of 14 held out
    assert not needs & set(ace.validation_ids) and needs | set(ace.validation_ids) == memory
    assert ace.key != plain.key and "validated on 4" in ace.label
    # The stage's plays are asked to cite; the student reads the method's settings.
    assert isinstance(ace.settings, AdaptationPlaySettings) and ace.settings.cite_bullets
    assert type(point.retrieval) is AceSettings
    with pytest.raises(ConfigError, match="nothing is validated"):
        _plan("ace_py")  # eval_steps 100 after 10 tasks


def test_at_the_defaults_no_identity_moves():
    """The settings added later are left out of the stage's and the evaluations'
    identities at the harness's choices (the shipped keys are pinned in
    tests/orchestrator/test_shipped_stage_keys.py); set, they are in."""
    default = AceSettings()
    new = {"reflector_reads", "playbook_selection", "eval_steps", "validation_fraction"}
    assert not new & set(default.build_identity())
    assert not new & set(Ace().read_identity(default))
    chosen = AceSettings(reflector_reads="cited_bullets", playbook_selection="best_on_validation")
    assert new <= set(chosen.build_identity()) and new <= set(Ace().read_identity(chosen))
    # The stage's texts: the cited-bullets prompts only when asked for.
    assert not set(prompts.CITED_TEXTS) & set(_stage().program().texts())
    assert set(prompts.CITED_TEXTS) <= set(_stage(reflector_reads="cited_bullets")
                                           .program().texts())  # fmt: skip


def test_the_deviations_tag_lists_only_those_in_effect():
    def tag(**settings) -> list[str]:
        return Ace().tags(AceSettings(**settings), "all-MiniLM-L6-v2")["ace_deviations"].split(",")

    assert tag() == list(ACE_PY_DEVIATIONS)
    assert tag(playbook_selection="best_on_validation") == [
        "reflector_reads_playbook", "curator_reads_attempt"
    ]  # fmt: skip
    assert tag(reflector_reads="cited_bullets", playbook_selection="best_on_validation") == [
        "curator_reads_attempt"
    ]


def _two_tips(role: str, messages: list) -> str:
    """The curator adds two bullets a task; the reflector tags every id it was shown
    and one it was not (err-00001) as helpful."""
    text = messages[-1]["content"]
    if role == "reflector":
        ids = {line.split("]")[0][1:] for line in text.splitlines() if line.startswith("[")}
        tags = [{"id": i, "tag": "helpful"} for i in sorted(ids | {"err-00001"})]
        return json.dumps({"key_insight": "Count each item once.", "bullet_tags": tags})
    step = text.split("Training progress: task ")[1].split(" ")[0]
    ops = [{"type": "ADD", "section": "common_mistakes_to_avoid", "content": f"Tip {step}{x}."}
           for x in "ab"]  # fmt: skip
    return json.dumps({"reasoning": "r", "operations": ops})


def _cites(task_id: str, attempt: int, shown: list) -> str:
    if task_id == "m1":  # one bullet of the playbook, one id of none, an index
        return "Following [err-00002] and [calc-00099], counts[0] is 5: the answer is 5"
    return "the answer is 5"


def test_the_reflector_reads_and_tags_only_the_bullets_the_play_cited(tmp_path, monkeypatch):
    world = World(lambda *a: True, _two_tips, reply=_cites)
    stage = _stage(max_rounds=0, reflector_reads="cited_bullets")
    sweep = run_stage(stage, ["m0", "m1", "m2"], world, tmp_path, monkeypatch)
    reflector = [messages[0]["content"] for role, messages in world.asks if role == "reflector"]
    # m0 read an empty playbook and cited nothing; m1 cited err-00002 (and an id that
    # names no bullet); m2 cited nothing of the four bullets it read.
    assert prompts.NONE_CITED in reflector[0]
    assert "Playbook bullets the attempt says it used:" in reflector[1]
    assert "[err-00002] helpful=0 harmful=0 :: Tip 1b." in reflector[1]
    assert "Tip 1a." not in reflector[1] and "## " not in reflector[1]
    assert prompts.NONE_CITED in reflector[2] and "Tip 1a." not in reflector[2]
    # The reflector's tag of err-00001, which m1 did not cite, is not applied.
    bullets = {b.memory_id: b for b in world.banks[0]["bullets"]}
    assert (bullets["err-00001"].helpful, bullets["err-00002"].helpful) == (0, 1)
    cited = [(r["cited"], r["unknown_ids"]) for r in stage_events(sweep.ledger, stage.key)
             if r["kind"] == "bullets_cited"]  # fmt: skip
    assert cited == [([], 0), (["err-00002"], 1), ([], 0)]
    # Under the harness's choice the same answers tag both bullets m1 read.
    whole = World(lambda *a: True, _two_tips, reply=_cites)
    run_stage(_stage(max_rounds=0), ["m0", "m1", "m2"], whole, tmp_path / "whole", monkeypatch)
    reflector = [messages[0]["content"] for role, messages in whole.asks if role == "reflector"]
    assert "Tip 1a." in reflector[1] and "Tip 1b." in reflector[1]
    bullets = {b.memory_id: b for b in whole.banks[0]["bullets"]}
    assert bullets["err-00001"].helpful >= 1 and bullets["err-00002"].helpful >= 1


def test_only_the_stages_plays_are_asked_to_cite():
    bank = [_bullet("err-00002", "common_mistakes_to_avoid", "Count once.")]
    allows = lambda source: True  # noqa: E731
    chosen = AceSettings(reflector_reads="cited_bullets")

    async def no_model(messages: list[dict[str, Any]]) -> Any:
        raise AssertionError("ACE's hooks ask no model")

    def shown(settings) -> str:
        hooks = Ace().hooks(task("m1"), FakeSearch({"bullets": bank}), settings, allows, no_model)
        return run(hooks.before_turn(0, "q", "SYSTEM"))

    generator = shown(AdaptationPlaySettings.of(chosen))
    assert prompts.CITE_BULLETS in generator
    assert generator.index(prompts.END) < generator.index(prompts.CITE_BULLETS)
    assert prompts.CITE_BULLETS not in shown(chosen)  # the student's settings
    assert prompts.CITE_BULLETS not in shown(AdaptationPlaySettings.of(AceSettings()))
    bare = shown(AdaptationPlaySettings.of(chosen.model_copy(update={"frame": False})))
    assert bare.endswith(f"{prompts.CITE_BULLETS}\n\nSYSTEM")
