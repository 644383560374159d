"""ExpeL: the rule operations as the original applies them, the gathering (Reflexion on
the memory split, reading nothing committed), the critiques (compare pairs, then
seeded chunks of successes) validated with one retry and a counted fallback, the bank,
and the student's hooks (every insight by rank, the similar successes as examples,
each hit audited)."""

from __future__ import annotations

from distillery.workers.llm.config import ModelConfig
from distillery.workers.memory.entries import MemorySource
from distillery.workers.memory.expel.method import Expel
from distillery.workers.memory.expel.records import Example, Insight
from distillery.workers.memory.expel.rules import Rule, apply_operations, parse_operations
from distillery.workers.memory.expel.settings import ExpelSettings
from distillery.workers.memory.expel.stage import ExpelStage, success_chunks
from distillery.workers.memory.reflexion.records import Reflection
from tests.workers.memory.baselines.harness import FakeSearch, World, events, run, run_stage, task

TEACHER = ModelConfig(name="tea", backend="external", base_url="http://127.0.0.1:1/v1", model="t")
SOURCE = MemorySource("m0", None, "train", "tea", "e")


def test_operations_are_read_as_the_original_filters_them():
    answer = (
        "ADD 1: Check the units.\n"
        "EDIT 2: Always re-read the question.\n"
        "ADD 3: no period at the end\n"
        "ADD 4: Do not ADD twice.\n"
        "REMOVE 1: Check the units.\n"
        "AGREE 2: Always re-read the question."
    )
    ops = parse_operations(answer)
    assert [(o.kind, o.number) for o in ops] == [
        ("ADD", 1),
        ("EDIT", 2),
        ("REMOVE", 1),
        ("AGREE", 2),
    ]


def test_operations_apply_with_the_originals_counts_and_order():
    rules = [Rule(1, "Check the units.", 2, SOURCE), Rule(2, "Read twice.", 1, SOURCE)]
    ops = parse_operations(
        "ADD 3: Check the units. Always.\n"  # contains an existing rule: dropped
        "EDIT 2: Read the question twice, slowly.\n"  # rewritten, +1
        "EDIT 9: Nothing at nine.\n"  # names no rule: dropped
        "AGREE 1: Check the units.\n"  # +1
        "ADD 4: Box the final number.\n"  # new at 2
    )
    out, next_id, counts = apply_operations(rules, ops, 20, SOURCE, 3)
    assert [(r.rule_id, r.text, r.importance) for r in out] == [
        (1, "Check the units.", 3),
        (2, "Read the question twice, slowly.", 2),
        (3, "Box the final number.", 2),
    ]
    assert next_id == 4 and counts == {"dropped": 2, "AGREE": 1, "EDIT": 1, "ADD": 1}
    # REMOVE: -1, or -3 once the list holds max_num_rules + 5; at 0 a rule is gone.
    removed, _, _ = apply_operations(
        out, parse_operations("REMOVE 2: Read the question twice, slowly."), 20, SOURCE, 4
    )
    assert [r.rule_id for r in removed] == [1, 3, 2]
    full = [Rule(i, f"Rule number {i}.", 3, SOURCE) for i in range(1, 7)]
    gone, _, _ = apply_operations(full, parse_operations("REMOVE 1: Rule number 1."), 1, SOURCE, 7)
    assert 1 not in {r.rule_id for r in gone}


def test_successes_are_chunked_as_the_original_divides_them():
    chunks = success_chunks(list(range(17)), 8, 42)
    assert [len(c) for c in chunks] == [6, 6, 5] and sorted(sum(chunks, [])) == list(range(17))
    assert chunks == success_chunks(list(range(17)), 8, 42)  # seeded: reproducible
    assert success_chunks([1, 2], 8, 42) in ([[1, 2]], [[2, 1]]) and success_chunks([], 8, 1) == []


def _stage(extracts: bool = True, **settings) -> ExpelStage:
    others = {"reflector": TEACHER, **({"insights": TEACHER} if extracts else {})}
    return ExpelStage(
        identity={"benchmark": "gsm8k", "settings": settings},
        upstream=(),
        label="expel",
        model=TEACHER,
        other_models=others,
        memory_kind="expel",
        settings=ExpelSettings(**settings),
        split="train",
    )


def _outcome(task_id: str, attempt: int, shown: list) -> bool:
    """m0, m2: solved at once; m1 once a reflection of its own is shown; m3 never."""
    own = [e for e in shown if isinstance(e, Reflection) and e.source.task_id == task_id]
    return task_id in ("m0", "m2") or (task_id == "m1" and bool(own))


def _answer(role: str, messages: list) -> str:
    text = messages[-1]["content"]
    if role == "reflector":
        return "Plan: count again."
    if "FAILED TRIAL" in text:
        return "ADD 1: Count every item twice."
    return "AGREE 1: Count every item twice.\nADD 2: Box the final number."


def test_gathering_then_insights_from_pairs_and_successes(tmp_path, monkeypatch):
    world = World(_outcome, _answer)
    stage = _stage(max_reflection_depth=2, success_critique_num=2)
    tasks = ["m0", "m1", "m2", "m3"]
    sweep = run_stage(stage, tasks, world, tmp_path, monkeypatch)
    # Gathering: m1 recovers on its second play, m3 fails 1 + 2 plays; no play reads
    # anything committed (nothing is, until the last task), only its own reflections.
    assert [(t, a) for t, a, _ in world.plays] == [
        ("m0", 1), ("m1", 1), ("m1", 2), ("m2", 1), ("m3", 1), ("m3", 2), ("m3", 3)
    ]  # fmt: skip
    for task_id, _, shown in world.plays:
        assert all(isinstance(e, Reflection) and e.source.task_id == task_id for e in shown)
    roles = [role for role, _ in world.asks]
    # 3 reflections, then 1 compare critique (m1's one failure) and 2 chunks of
    # successes (3 successes in chunks of at most 2).
    assert roles == ["reflector"] * 3 + ["insights"] * 3
    compare = world.asks[3][1][-1]["content"]
    assert "SUCCESSFUL TRIAL" in compare and "FAILED TRIAL" in compare and "(none yet)" in compare
    committed = [k for t, k in events(sweep, stage) if k == "committed"]
    assert len(committed) == 2 and events(sweep, stage)[-1] == ("m3", "committed")
    (bank,) = world.banks
    insights = sorted(bank["insights"], key=lambda e: e.rank)
    assert [(i.text, i.importance) for i in insights] == [
        ("Count every item twice.", 4), ("Box the final number.", 2)
    ]  # fmt: skip
    assert sorted(e.memory_id for e in bank["examples"]) == [
        "example:m0", "example:m1", "example:m2"
    ]  # fmt: skip
    assert all("the answer is 5" in e.trajectory for e in bank["examples"])
    assert bank["reflections"] == []
    assert world.bank_stats[0]["events.rules_updated"] == 3
    rows = {r.role: r for r in stage.cost_rows(sweep.ledger, set(tasks))}
    assert rows["teacher"].n_llm_calls == 7 and rows["insights"].n_llm_calls == 3


def test_an_unreadable_critique_is_retried_once_then_skipped_and_counted(tmp_path, monkeypatch):
    answers = iter(
        ["Plan: count.", "I think it is fine", "still no operation", "no ops", "ADD 1: Box it."]
    )
    world = World(_outcome, lambda role, messages: next(answers))
    stage = _stage(max_reflection_depth=1, success_critique_num=8)
    sweep = run_stage(stage, ["m0", "m1"], world, tmp_path, monkeypatch)
    kinds = [k for _, k in events(sweep, stage)]
    # compare: invalid twice -> fallback; all-success: invalid, then valid.
    assert kinds.count("critique_invalid") == 3 and kinds.count("critique_fallback") == 1
    retry = world.asks[2][1]
    assert retry[-1]["content"].startswith("Your answer holds no operation")
    assert [i.text for i in world.banks[0]["insights"]] == ["Box it."]
    assert world.bank_stats[0]["events.critique_fallback"] == 1


def test_without_a_builder_model_no_insight_is_extracted_and_it_is_counted(tmp_path, monkeypatch):
    world = World(_outcome, _answer)
    stage = _stage(extracts=False, max_reflection_depth=1)
    run_stage(stage, ["m0", "m1"], world, tmp_path, monkeypatch)
    assert [role for role, _ in world.asks] == ["reflector"]
    assert world.banks[0]["insights"] == [] and len(world.banks[0]["examples"]) == 2
    assert world.bank_stats[0]["events.critique_skipped"] == 2


def _insight(rank: int, text: str, source_task: str = "m0") -> Insight:
    source = MemorySource(source_task, None, "train", "tea", "e")
    return Insight(f"insight:{rank}", source, text, 5 - rank, rank)


def _example(task_id: str, question: str, trajectory: str) -> Example:
    return Example(f"example:{task_id}", MemorySource(task_id, None, "train", "tea", "e"),
                   question, trajectory)  # fmt: skip


def test_the_student_reads_every_insight_by_rank_and_the_similar_successes():
    search = FakeSearch(
        entries={
            "insights": [
                _insight(1, "Box the number."),
                _insight(0, "Count twice."),
                _insight(2, "Forbidden rule.", source_task="test_1"),
            ],
            "examples": [
                _example("m1", "how many apples in the basket", "A" * 50),
                _example("m2", "how many apples and pears", "B" * 9000),
                _example("m3", "apples apples", "C" * 40),
                _example("m4", "the speed of a train", "D" * 40),
            ],
        }  # fmt: skip
    )
    settings = ExpelSettings(k=2, max_example_chars=1000)
    allows = lambda source: source.task_id != "test_1"  # noqa: E731
    hooks = Expel().hooks(task("test_1"), search, settings, allows, None)
    prompt = run(hooks.before_turn(0, "how many apples in the basket", "SYSTEM"))
    assert prompt.index("1. Count twice.") < prompt.index("2. Box the number.")
    assert "Forbidden rule." not in prompt  # the audit drops what isolation refuses
    assert "A" * 50 in prompt and "C" * 40 in prompt and "B" * 9000 not in prompt
    assert "D" * 40 not in prompt and prompt.endswith("\n\nSYSTEM")
    log = hooks.record()
    assert log["insights_shown"] == 2 and log["examples_shown"] == 2
    assert log["examples_too_long"] == 1 and log["isolation_violations"] == 1
    assert ("examples", 8) in search.queries  # k * buffer_retrieve_ratio candidates
    quiet = Expel().hooks(task("t"), FakeSearch(), ExpelSettings(k=0, insights=False),
                          allows, None)  # fmt: skip
    assert run(quiet.before_turn(0, "q", "SYSTEM")) == "SYSTEM"


def test_the_embedder_and_example_budget_are_recorded_against_the_originals():
    from distillery.orchestrator.core.compose import compose
    from distillery.orchestrator.core.config import to_config

    settings = ExpelSettings(max_example_chars=20_000)  # the budget: a setting per entry
    tags = Expel().tags(settings, "all-MiniLM-L6-v2")
    assert tags["expel_max_example_chars"] == "20000"
    # Task similarity under another embedder than the original's is said on the run.
    assert tags["expel_embedder"] == "original all-mpnet-base-v2, run with all-MiniLM-L6-v2"
    # The original's is a config beside the offline default, and then nothing is said.
    cfg = to_config(compose(["memory/embedder=all_mpnet_base_v2"]))
    embedder = cfg.memory.embedder
    assert (embedder.kind, embedder.model) == (
        "sentence_transformers", "sentence-transformers/all-mpnet-base-v2"
    )  # fmt: skip
    assert "expel_embedder" not in Expel().tags(settings, embedder.model)


def test_expel_may_run_on_its_own_embedder_in_any_sweep():
    """`retrieval.embedder` (the original's: the catalog's `expel_mpnet`) embeds ExpeL's
    bank and queries whatever the sweep's `memory.embedder`; it is in the bank's and the
    read's identity; unset, both identities are those of old."""
    from distillery.orchestrator.core.compose import compose
    from distillery.orchestrator.core.config import to_config
    from distillery.workers.memory.config import EmbedderConfig

    cfg = to_config(compose([]))
    settings = cfg.retrieval_for("expel_mpnet")
    assert isinstance(settings, ExpelSettings)
    assert settings.embedder == EmbedderConfig(model="sentence-transformers/all-mpnet-base-v2")
    assert Expel().embedder(settings) == settings.embedder
    assert "expel_embedder" not in Expel().tags(settings, cfg.memory.embedder.model)
    assert Expel().read_identity(settings)["embedder"]["model"].endswith("all-mpnet-base-v2")
    plain = cfg.retrieval_for("expel")
    assert isinstance(plain, ExpelSettings)
    assert Expel().embedder(plain) is None and "embedder" not in Expel().read_identity(plain)


def test_expels_own_embedder_endpoint_is_checked_before_a_run():
    from types import SimpleNamespace

    from distillery.orchestrator.core.compose import compose
    from distillery.orchestrator.core.config import to_config
    from distillery.orchestrator.planning.preflight import endpoints_in_use
    from distillery.workers.memory.config import EmbedderConfig

    own = EmbedderConfig(kind="openai", model="m", base_url="http://e:1/v1", api_key_env="EK")
    stage = SimpleNamespace(
        memory_kind="expel", settings=ExpelSettings(embedder=own), models={}, other_models={}
    )
    graph = SimpleNamespace(stages={"s": stage}, configs=[to_config(compose([]))], bank_sources={})
    found = {e.key: e for e in endpoints_in_use(graph, uses_memory=True)}  # type: ignore[arg-type]
    endpoint = found["expel.retrieval.embedder"]
    assert (endpoint.url, endpoint.api_key_env, endpoint.needs_url) == ("http://e:1/v1", "EK", True)
    plain = SimpleNamespace(**{**vars(stage), "settings": ExpelSettings()})
    graph.stages = {"s": plain}
    assert "expel.retrieval.embedder" not in {e.key for e in endpoints_in_use(graph, True)}  # type: ignore[arg-type]


def test_its_own_embedder_is_a_short_descriptor_and_none_is_not_one():
    from distillery.workers.memory.config import EmbedderConfig

    own = ExpelSettings(embedder=EmbedderConfig(model="sentence-transformers/all-mpnet-base-v2"))
    assert Expel().descriptors(own)["expel.embedder"] == (
        "sentence_transformers:sentence-transformers/all-mpnet-base-v2"
    )
    assert "expel.embedder" not in Expel().descriptors(ExpelSettings())
