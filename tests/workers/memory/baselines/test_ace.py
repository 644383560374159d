"""ACE: reading the reflector's and curator's answers (untrusted JSON), the playbook's
text, the adaptation loop (the generator reads the playbook as it grows; reflect and
re-play rounds; ADD-only delta updates and helpful/harmful counts; one retry, counted
fallbacks; semantic de-duplication), and the student's hooks (the whole playbook)."""

from __future__ import annotations

import json

import pytest

from distillery.workers.llm.config import ModelConfig
from distillery.workers.memory.ace.method import Ace
from distillery.workers.memory.ace.playbook import (
    SectionSet,
    json_object,
    parse_curation,
    parse_curation_as_harness,
    parse_initial,
    parse_reflection,
    render,
)
from distillery.workers.memory.ace.records import Bullet
from distillery.workers.memory.ace.settings import AceSettings
from distillery.workers.memory.ace.stage import AceStage
from distillery.workers.memory.entries import MemorySource
from distillery.workers.memory.reflexion.records import Reflection
from tests.workers.memory.baselines.harness import FakeSearch, World, events, run, run_stage, task

TEACHER = ModelConfig(name="tea", backend="external", base_url="http://127.0.0.1:1/v1", model="t")
GENERIC = SectionSet.of("generic")
SOURCE = MemorySource("m0", None, "train", "tea", "e")


def test_answers_are_read_as_json_and_checked():
    assert json_object('Sure! ```json\n{"a": 1}\n``` done') == {"a": 1}
    assert json_object('x {"a": "}", "b": [1, {"c": 2}]} y') == {"a": "}", "b": [1, {"c": 2}]}
    assert json_object("no object here") is None
    reflection, problems = parse_reflection(
        json.dumps(
            {
                "key_insight": "Check units.",
                "bullet_tags": [
                    {"id": "err-00001", "tag": "harmful"},
                    {"id": "nope-1", "tag": "helpful"},
                    {"id": "si-00002", "tag": "great"},
                ],
            }
        ),  # fmt: skip
        {"err-00001", "si-00002"},
    )
    assert not problems and reflection is not None
    assert reflection.text == "key_insight: Check units."
    assert reflection.tags == (("err-00001", "harmful"),)  # unknown ids and tags ignored
    assert parse_reflection('{"bullet_tags": []}', set())[1][0].code == "empty"
    additions, problems = parse_curation(json.dumps({"operations": [
        {"type": "ADD", "section": "Common Mistakes To Avoid", "content": "Check units."},
        {"type": "ADD", "section": "made-up section", "content": "Box it."},
        {"type": "UPDATE", "section": "others", "content": "x"}]}), GENERIC)  # fmt: skip
    assert not problems and additions is not None
    assert [(a.section, a.known_section) for a in additions] == [
        ("common_mistakes_to_avoid", True), ("others", False)
    ]  # fmt: skip
    assert parse_curation('{"operations": [{"type": "DELETE"}]}', GENERIC)[1][0].code == "not_add"
    assert parse_curation('{"operations": []}', GENERIC) == ([], [])
    assert parse_curation("[]", GENERIC)[1][0].code == "not_json"


def test_a_curator_answer_applied_as_acess_appworld_harness_applies_it():
    """adaptation_react.py `curator_call`: the whole answer or nothing, a section outside
    the playbook's skipped alone; `valid_adds` (ours) keeps the valid ADDs instead."""
    appworld = SectionSet.of("appworld")
    mixed = json.dumps({"reasoning": "r", "operations": [
        {"type": "ADD", "section": "verification_checklist", "content": "Check units."},
        {"type": "UPDATE", "section": "others", "content": "x"}]})  # fmt: skip
    assert parse_curation_as_harness(mixed, appworld)[0] == []  # discarded whole
    assert [a.content for a in parse_curation(mixed, appworld)[0] or []] == ["Check units."]
    no_reasoning = json.dumps({"operations": [
        {"type": "ADD", "section": "verification_checklist", "content": "Check units."}]})  # fmt: skip
    additions, problems = parse_curation_as_harness(no_reasoning, appworld)
    assert additions == [] and problems[0].code == "no_reasoning"
    lower = json.dumps({"reasoning": "r", "operations": [
        {"type": "add", "section": "others", "content": "x"}]})  # fmt: skip
    assert parse_curation_as_harness(lower, appworld)[0] == []  # type must be "ADD"
    good = json.dumps({"reasoning": "r", "operations": [
        {"type": "ADD", "section": "Verification Checklist", "content": " Check units. "},
        {"type": "ADD", "section": "made-up", "content": "Box it."}]})  # fmt: skip
    additions, problems = parse_curation_as_harness(good, appworld)
    assert not problems and additions is not None
    assert [(a.section, a.content, a.known_section) for a in additions] == [
        ("verification_checklist", "Check units.", True), ("others", "Box it.", False)
    ]  # fmt: skip


def test_the_playbook_text_and_an_initial_playbook_file():
    bullets = parse_initial(
        "## STRATEGIES & INSIGHTS\n[si-00001] Read twice.\n\n## OTHERS\n"
        "[misc-00004] helpful=2 harmful=1 :: Box the answer.\nnot a bullet\n",
        GENERIC,
    )
    assert [(b.memory_id, b.section, b.helpful, b.harmful) for b in bullets] == [
        ("si-00001", "strategies_and_insights", 0, 0), ("misc-00004", "others", 2, 1)
    ]  # fmt: skip
    text = render(bullets, GENERIC, counts=True)
    assert text.startswith(
        "## STRATEGIES & INSIGHTS\n[si-00001] helpful=0 harmful=0 :: Read twice."
    )
    assert "## OTHERS\n[misc-00004] helpful=2 harmful=1 :: Box the answer." in text
    assert "[misc-00004] Box the answer." in render(bullets, GENERIC, counts=False)


def _stage(curates: bool = True, **settings) -> AceStage:
    others = {"reflector": TEACHER, "curator": TEACHER} if curates else {}
    return AceStage(
        identity={"benchmark": "gsm8k", "settings": settings},
        upstream=(),
        label="ace",
        model=TEACHER,
        other_models=others,
        memory_kind="ace",
        settings=AceSettings(**settings),
        split="train",
    )


def _outcome(task_id: str, attempt: int, shown: list) -> bool:
    """m0 solved at once; m1 once a reflection of its own is shown; m2 once the playbook
    holds a bullet; m3 never."""
    bullets = [e for e in shown if isinstance(e, Bullet)]
    own = [e for e in shown if isinstance(e, Reflection) and e.source.task_id == task_id]
    return task_id == "m0" or (task_id == "m1" and bool(own)) or (task_id == "m2" and bool(bullets))


def _answer(role: str, messages: list) -> str:
    text = messages[-1]["content"]
    if role == "reflector":
        ids = [line.split("]")[0][1:] for line in text.splitlines() if line.startswith("[")]
        tags = [{"id": i, "tag": "helpful"} for i in ids]
        return json.dumps({"key_insight": "Count each item once.", "bullet_tags": tags})
    if text.startswith("You are a master curator"):
        step = text.split("Training progress: task ")[1].split(" ")[0]
        content = f"Tip {step}: count each item once."
        op = {"type": "ADD", "section": "common_mistakes_to_avoid", "content": content}
        return json.dumps({"reasoning": "r", "operations": [op]})
    return "Count each item once, carefully."  # a merge


def test_the_playbook_grows_task_by_task_with_delta_updates(tmp_path, monkeypatch):
    world = World(_outcome, _answer)
    stage = _stage(max_rounds=2)
    tasks = ["m0", "m1", "m2", "m3"]
    sweep = run_stage(stage, tasks, world, tmp_path, monkeypatch)
    plays = [(t, a, len([e for e in s if isinstance(e, Bullet)])) for t, a, s in world.plays]
    # Each task's plays read the bullets of the tasks before it; m1 recovers after a
    # reflection, m3 gets 1 + 2 plays (its last re-play is not reflected on).
    assert plays == [("m0", 1, 0), ("m1", 1, 1), ("m1", 2, 1), ("m2", 1, 2),
                     ("m3", 1, 3), ("m3", 2, 3), ("m3", 3, 3)]  # fmt: skip
    roles = [role for role, _ in world.asks]
    assert roles == ["reflector", "curator", "reflector", "curator", "reflector", "curator",
                     "reflector", "reflector", "curator"]  # fmt: skip
    curator_prompt = world.asks[1][1][0]["content"]
    assert "Training progress: task 1 of 4" in curator_prompt and "80000 tokens" in curator_prompt
    assert "The task was solved." in world.asks[0][1][0]["content"]  # the binary verdict
    (bank,) = world.banks
    bullets = {b.memory_id: b for b in bank["bullets"]}
    assert sorted(bullets) == ["err-00001", "err-00002", "err-00003", "err-00004"]
    assert bullets["err-00001"].content == "Tip 1: count each item once."
    # The reflector tagged every bullet shown helpful: counts (the counter layer).
    assert bullets["err-00001"].helpful == 4 and bullets["err-00003"].helpful == 2
    assert world.bank_stats[0]["events.curated"] == 4
    assert ("m3", "committed") in events(sweep, stage)


def test_the_harness_single_play_and_no_feedback(tmp_path, monkeypatch):
    world = World(_outcome, _answer)
    run_stage(_stage(max_rounds=0, feedback="none"), ["m1"], world, tmp_path, monkeypatch)
    assert [(t, a) for t, a, _ in world.plays] == [("m1", 1)]
    assert "[not available]" in world.asks[0][1][0]["content"]


def test_unusable_answers_are_retried_once_then_skipped_and_counted(tmp_path, monkeypatch):
    answers = iter(["not json", '{"key_insight": "k"}', "{}", '{"operations": "x"}'])
    world = World(_outcome, lambda role, messages: next(answers))
    stage = _stage(max_rounds=0)
    sweep = run_stage(stage, ["m0"], world, tmp_path, monkeypatch)
    kinds = [k for _, k in events(sweep, stage)]
    assert kinds.count("reflection_invalid") == 1 and "reflection_fallback" not in kinds
    assert kinds.count("curation_invalid") == 2 and kinds.count("curation_fallback") == 1
    assert world.asks[1][1][-1]["content"].startswith("Your answer is not the JSON object")
    assert world.banks == [{"bullets": [], "reflections": []}]


def test_duplicates_are_merged_into_the_first_bullet_or_dropped(tmp_path, monkeypatch):
    def answer(role, messages):
        text = messages[-1]["content"]
        if text.startswith("You are a master curator"):
            op = {"type": "ADD", "section": "others", "content": "Count each item once."}
            return json.dumps({"operations": [op, {**op, "content": "Draw a picture first."}]})
        return _answer(role, messages)

    world = World(lambda *a: True, answer)
    stage = _stage(max_rounds=0, dedup_threshold=0.9)
    sweep = run_stage(stage, ["m0", "m1"], world, tmp_path, monkeypatch)
    bullets = {b.memory_id: b for b in world.banks[0]["bullets"]}
    # m1's two additions: one is m0's first bullet again (merged into it by the
    # curator, its counts summed), the other is m0's second again (merged too).
    assert sorted(bullets) == ["misc-00001", "misc-00002"]
    assert bullets["misc-00001"].content == "Count each item once, carefully."
    assert [k for _, k in events(sweep, stage)].count("dedup_merged") == 2
    assert world.similarity_calls == 2  # m0's additions (vs none), m1's
    dropped = World(lambda *a: True, answer)
    run_stage(_stage(max_rounds=0, dedup_threshold=0.9, dedup_merge=False), ["m0", "m1"],
              dropped, tmp_path / "drop", monkeypatch)  # fmt: skip
    assert sorted(b.content for b in dropped.banks[0]["bullets"]) == [
        "Count each item once.", "Draw a picture first."
    ]  # fmt: skip


def test_without_a_builder_model_the_playbook_stays_empty(tmp_path, monkeypatch):
    world = World(lambda *a: True, _answer)
    run_stage(_stage(curates=False), ["m0", "m1"], world, tmp_path, monkeypatch)
    assert world.asks == [] and world.banks == [{"bullets": [], "reflections": []}]


def _bullet(bullet_id: str, section: str, content: str, task_id: str = "m0") -> Bullet:
    return Bullet(bullet_id, MemorySource(task_id, None, "train", "tea", "e"), section, content,
                  1, 0, int(bullet_id[-1]))  # fmt: skip


def test_the_student_reads_the_whole_playbook():
    bank = [_bullet("err-00002", "common_mistakes_to_avoid", "Count once."),
            _bullet("si-00001", "strategies_and_insights", "Read twice."),
            _bullet("misc-00003", "others", "Leaked.", task_id="test_1")]  # fmt: skip
    allows = lambda source: source.task_id != "test_1"  # noqa: E731
    hooks = Ace().hooks(task("test_1"), FakeSearch({"bullets": bank}), AceSettings(), allows, None)
    prompt = run(hooks.before_turn(0, "an unrelated question", "SYSTEM"))
    assert prompt.startswith("[ACE playbook]") and "### PLAYBOOK BEGIN" in prompt
    assert prompt.index("Read twice.") < prompt.index("Count once.")  # by section
    assert "helpful=1 harmful=0 :: Count once." in prompt and "Leaked." not in prompt
    log = hooks.record()
    assert log["bullets_shown"] == 2 and log["isolation_violations"] == 1
    bare = Ace().hooks(task("t"), FakeSearch({"bullets": bank[:1]}),
                       AceSettings(frame=False, show_counts=False), allows, None)  # fmt: skip
    assert run(bare.before_turn(0, "q", "SYSTEM")) == (
        "## STRATEGIES & INSIGHTS\n\n## FORMULAS & CALCULATIONS\n\n## CODE SNIPPETS & TEMPLATES"
        "\n\n## COMMON MISTAKES TO AVOID\n[err-00002] Count once.\n\n## PROBLEM-SOLVING "
        "HEURISTICS\n\n## CONTEXT CLUES & INDICATORS\n\n## OTHERS\n\nSYSTEM"
    )
    empty = Ace().hooks(task("t"), FakeSearch(), AceSettings(), allows, None)
    assert run(empty.before_turn(0, "q", "SYSTEM")) == "SYSTEM"
    assert empty.record()["empty_playbook"] == 1


def _harness_answer(role: str, messages: list) -> str:
    text = messages[-1]["content"]
    if role == "reflector":
        return json.dumps({"reasoning": "r", "key_insight": "Paginate every list API."})
    ops = [{"type": "ADD", "section": "verification_checklist", "content": "Loop over page_index."},
           {"type": "ADD", "section": "made_up_section", "content": "Skipped by the harness."}]  # fmt: skip
    assert text.startswith("You are a master curator of knowledge.")
    return json.dumps({"reasoning": "r", "operations": ops})


def test_ace_appworld_runs_the_harness_prompts_and_initial_playbook(tmp_path, monkeypatch):
    from distillery.workers.memory.ace import appworld_prompts

    world = World(_outcome, _harness_answer)
    stage = _stage(max_rounds=0, feedback="none", sections="appworld", show_counts=False,
                   prompts="appworld", initial_playbook="appworld")  # fmt: skip
    sweep = run_stage(stage, ["m3"], world, tmp_path, monkeypatch)
    reflector, curator = (messages[0]["content"] for _, messages in world.asks)
    # The harness's no-GT reflector, verbatim up to its filled slots, then the history.
    head = appworld_prompts.REFLECTOR_NO_GT.split("{{generated_code}}")[0]
    assert reflector.startswith(head) and "=== FULL CONVERSATION HISTORY ===" in reflector
    assert "{{playbook}}" not in reflector and "[0] " in reflector
    assert "Paginate every list API." in curator  # the reflection, as its guidebook
    # The initial playbook's bullets, then the ADD to a known section; the unknown one
    # is skipped and counted.
    (bank,) = world.banks
    contents = [b.content for b in bank["bullets"]]
    assert "Loop over page_index." in contents and "Skipped by the harness." not in contents
    assert len(contents) > 1
    assert ("m3", "curation_unknown_section_skipped") in events(sweep, stage)
    assert appworld_prompts.TEXTS[0] in stage.program().texts()


def test_ace_appworld_discards_a_curator_answer_the_harness_would_and_asks_no_more(
    tmp_path, monkeypatch
):
    """With curator_answer: as_harness (the ace_appworld entry), an answer holding one
    non-ADD operation changes nothing and is not asked again; the first version kept its
    valid ADDs after a retry."""

    def answer(role, messages):
        if role == "reflector":
            return json.dumps({"key_insight": "Paginate every list API.", "bullet_tags": []})
        return json.dumps({"reasoning": "r", "operations": [
            {"type": "ADD", "section": "verification_checklist", "content": "Loop pages."},
            {"type": "UPDATE", "section": "others", "content": "x"}]})  # fmt: skip

    world = World(_outcome, answer)
    stage = _stage(max_rounds=0, feedback="none", sections="appworld", show_counts=False,
                   prompts="appworld", curator_answer="as_harness")  # fmt: skip
    sweep = run_stage(stage, ["m3"], world, tmp_path, monkeypatch)
    assert [role for role, _ in world.asks] == ["reflector", "curator"]  # asked once
    assert ("m3", "curation_discarded") in events(sweep, stage)
    (bank,) = world.banks
    assert bank["bullets"] == []


def test_the_vendored_harness_texts_are_verbatim():
    from distillery.workers.memory.ace import appworld_prompts

    vendor = _vendor()
    for text, path in (
        (appworld_prompts.REFLECTOR_NO_GT, "prompts/appworld_react_reflector_no_gt_prompt.txt"),
        (appworld_prompts.CURATOR, "prompts/appworld_react_curator_prompt.txt"),
        (appworld_prompts.INITIAL_PLAYBOOK, "playbooks/appworld_initial_playbook.txt"),
    ):
        assert text == (vendor / path).read_text(), path


def _vendor():
    from tests.support import REPO_ROOT

    places = (REPO_ROOT, REPO_ROOT.parent, REPO_ROOT.parent.parent)  # checkout, worktrees
    found = [p / "shared" / "vendor" / "ace-appworld" / "experiments" for p in places]
    vendor = next((v for v in found if v.is_dir()), found[0])
    if not vendor.is_dir():
        pytest.skip(f"no ACE AppWorld harness at {vendor}")
    return vendor


def test_where_ace_follows_the_harness_not_ace_py_is_tagged_on_the_run():
    from distillery.workers.memory.ace.settings import ACE_PY_DEVIATIONS

    tags = Ace().tags(AceSettings(), "all-MiniLM-L6-v2")
    assert tags["ace_deviations"].split(",") == list(ACE_PY_DEVIATIONS)
    appworld = AceSettings(prompts="appworld", sections="appworld", initial_playbook="appworld")
    assert "ace_deviations" not in Ace().tags(appworld, "all-MiniLM-L6-v2")


def test_the_harness_keeps_the_final_playbook_and_shows_its_reflector_all_of_it():
    """What the documented deviations from ace.py rest on, read from the vendored
    AppWorld harness: its evaluation reads the playbook file its adaptation rewrites
    after every task (no best-on-validation selection), its reflector is given the whole
    playbook (no cited bullets), and its curator the task and the conversation."""
    vendor = _vendor()

    def playbook_file(config: str) -> str:
        text = (vendor / "configs" / config).read_text()
        (line,) = [ln for ln in text.splitlines() if '"trained_playbook_file_path"' in ln]
        return line.split(":", 1)[1].strip().rstrip(",")

    assert playbook_file("ACE_offline_no_GT_evaluation.jsonnet") == playbook_file(
        "ACE_offline_no_GT_adaptation.jsonnet"
    )
    react = (vendor / "code" / "ace" / "adaptation_react.py").read_text()
    assert '.replace("{{playbook}}", self.playbook or "N/A")' in react
    assert "best" not in react.lower() and "bullet_ids" not in react
    curator = react[react.index("def curator_call") :]
    assert "question_context=question_context" in curator
    assert "content += conversation_history" in curator
