"""Planning AgentBrew (no Ray): the protocols it refuses, what its brew stage's identity
holds (and what shares one brew), who plays, teaches and curates, and that it applies to
the single-reply answer benchmarks."""

from __future__ import annotations

import pytest

from distillery.orchestrator.core.config import ConfigError
from distillery.orchestrator.planning.plan import plan_sweep
from distillery.workers.memory.agentbrew import prompts
from tests.support import REPO_ROOT
from tests.support.sweep_config import sweep_config

MODELS = (
    "teacher=external", "teacher.name=big", "teacher.base_url=http://t/v1", "teacher.model=org/big",
    "student=external", "student.name=small", "student.base_url=http://s/v1",
    "student.model=org/small", "student.params_b=4",
)  # fmt: skip


def _graph(tmp_path, *overrides):
    cfg = sweep_config(tmp_path, "protocol=cross_split", "benchmark.limit=10", *MODELS, *overrides)
    return plan_sweep([cfg])


def _brews(graph):
    return {k: s for k, s in graph.stages.items() if k.kind == "brew"}


@pytest.mark.parametrize("protocol", ["main", "self_excluded"])
def test_protocols_where_a_task_reads_its_own_notes_are_refused(tmp_path, protocol):
    with pytest.raises(ConfigError) as found:
        _graph(tmp_path, "methods=[agentbrew]", f"protocol={protocol}")
    message = str(found.value)
    assert message.startswith("invalid config at protocol.name")
    assert "protocol=split" in message and "protocol=cross_split" in message


def test_serving_variants_share_one_brew_and_brew_settings_make_another(tmp_path):
    graph = _graph(tmp_path, "methods=[agentbrew,agentbrew_no_suppression,agentbrew_no_ralph]")
    brews = _brews(graph)
    assert len(brews) == 2
    by_method = {p.method_name: p.bank_stage for p in graph.points.values()}
    assert by_method["agentbrew"] == by_method["agentbrew_no_suppression"]
    assert by_method["agentbrew_no_ralph"] != by_method["agentbrew"]
    stage = brews[by_method["agentbrew"]]
    identity = stage.identity
    assert identity["teacher"]["model"] == "org/big" and identity["curator"]["model"] == "org/big"
    assert identity["agent"]["model"] == "org/small"
    assert identity["brew"]["r_max"] == 3 and identity["brew"]["unvalidated"] == "curate"
    assert identity["embedder"]["model"] == "all-MiniLM-L6-v2"
    assert identity["memory_task_ids"] and identity["split"] == "memory"
    assert set(stage.models) == {"student", "teacher", "curator"}
    assert len(graph.needs[stage.key]) == 7  # the memory split (70 % of 10)
    # Every prompt is in its key: a changed text is another brew.
    assert stage.code()["program"]
    assert prompts.STUDENT_AWARE_DRAFT in stage.program().texts()


def test_who_brews_teaches_and_curates(tmp_path):
    graph = _graph(tmp_path, "methods=[agentbrew_strong_student,agentbrew_self_taught]")
    by_method = {p.method_name: graph.stages[p.bank_stage] for p in graph.points.values()}
    strong = by_method["agentbrew_strong_student"]
    assert strong.model.name == "big" and strong.identity["agent"]["model"] == "org/big"
    assert strong.extra["student"] == {"model": "org/big", "params_b": None, "weaknesses": None}
    taught = by_method["agentbrew_self_taught"]
    assert taught.other_models["teacher"].name == "small"
    assert taught.other_models["curator"].name == "small"
    # The evaluated student is the point's student either way.
    assert {p.model.name for p in graph.points.values()} == {"small"}


def test_the_students_size_and_weaknesses_reach_the_teacher_and_the_brews_identity(tmp_path):
    def brew(*overrides):
        (stage,) = _brews(_graph(tmp_path, "methods=[agentbrew]", *overrides)).values()
        return stage

    plain = brew()
    assert plain.identity["student_profile"] == {"model": "org/small", "params_b": 4.0}
    assert "of 4 billion parameters" in plain.program()._who()["student_size"]
    from_model = brew("+student.known_weaknesses=drops units")
    assert from_model.program()._who()["weaknesses"] == "drops units"
    assert from_model.identity["student_profile"]["weaknesses"] == "drops units"
    overridden = brew(
        "+student.known_weaknesses=drops units",
        "+method_catalog.agentbrew.retrieval.brew.student_weaknesses=skips steps",
    )
    assert overridden.program()._who()["weaknesses"] == "skips steps"
    # Each profile is another brew (the teacher's prompts differ); the evaluated
    # student's own episodes are not (its answers do not depend on them).
    assert len({plain.key, from_model.key, overridden.key}) == 3
    assert "known_weaknesses" not in from_model.identity["agent"]


def test_a_teacher_that_writes_no_notes_or_an_unknown_model_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"retrieval\.brew\.teacher: oracle is the oracle"):
        plan_sweep([sweep_config(tmp_path, "protocol=cross_split", "benchmark.limit=10",
                                 "methods=[agentbrew]", "teacher=oracle")])  # fmt: skip
    with pytest.raises(ConfigError, match=r"method_catalog\.ab\.retrieval\.brew\.student: 'huge'"):
        _graph(tmp_path, "methods=[ab]", "+method_catalog.ab={kind: agentbrew, "
               "retrieval: {brew: {student: huge}}}")  # fmt: skip


def test_agentbrew_applies_to_the_single_reply_math_benchmarks(tmp_path):
    data = REPO_ROOT.parent / "shared" / "data" / "gsm8k"
    if not data.is_dir():
        pytest.skip(f"no GSM8K data at {data}")
    cfg = sweep_config(
        tmp_path, "benchmark=gsm8k", f"+benchmark.options.data_path={data}",
        "+benchmark.options.sandbox_without_namespaces=true",
        "benchmark.limit=5", "protocol=split", "protocol.memory_split=agentbrew_brew",
        "protocol.memory_limit=20", "methods=[zero_shot,agentbrew]", *MODELS,
    )  # fmt: skip
    graph = plan_sweep([cfg])
    (brew,) = _brews(graph).values()
    assert brew.options["split"] == "agentbrew_brew" and len(graph.needs[brew.key]) == 20
    assert brew.identity["benchmark_options"]["split"] == "agentbrew_brew"
    assert "data" in brew.identity["benchmark_options"]  # the split's digest
    # The leakage guard reads the brew tasks' gold answers.
    assert brew.truths("train_0") == ("72",)


def test_a_seeded_sample_of_the_evaluated_tasks_is_fixed_and_in_benchmark_order(tmp_path):
    def evaluated(*overrides):
        graph = _graph(tmp_path, "methods=[zero_shot]", "benchmark.limit=null", *overrides)
        (point,) = graph.points.values()
        return list(point.split.eval_ids)

    first = evaluated("+benchmark.sample=20")
    assert len(first) == 6 and first == evaluated("+benchmark.sample=20")  # 30 % held out
    order = [int(t.rsplit("_", 1)[1]) for t in first]
    assert order == sorted(order) and max(order) > 19  # a sample, not the first 20
    assert evaluated("+benchmark.sample=20", "+benchmark.sample_seed=1") != first


def test_a_shuffled_memory_split_gives_nested_mixed_brew_sets(tmp_path):
    data = REPO_ROOT.parent / "shared" / "data" / "gsm8k"
    if not data.is_dir():
        pytest.skip(f"no GSM8K data at {data}")

    def brewed(limit):
        cfg = sweep_config(
            tmp_path, "benchmark=gsm8k", f"+benchmark.options.data_path={data}",
            "+benchmark.options.sandbox_without_namespaces=true", "benchmark.limit=3",
            "protocol=split", "protocol.memory_split=train", f"protocol.memory_limit={limit}",
            "+protocol.memory_shuffle_seed=7", "methods=[agentbrew]", *MODELS,
        )  # fmt: skip
        graph = plan_sweep([cfg])
        (brew,) = _brews(graph).values()
        return [t for t in graph.tasks if t in graph.needs[brew.key]], brew

    small, brew_small = brewed(10)
    large, brew_large = brewed(20)
    assert large[:10] == small and small != [f"train_{i}" for i in range(10)]
    assert brew_small.identity["order"] != brew_large.identity["order"]


def test_the_stages_learning_on_the_memory_split_hold_its_identity_alike(tmp_path):
    """ACE, ExpeL and the brew plan their node with one helper
    (`OrderedEpisodeStage.plan_on_memory_split`): the split's episodes, task digest and
    label, the embedder and memory bounds off their defaults (the brew names them
    `memory_bounds`, the name its pinned keys hold), the task count in the label and
    the memory split's tasks to play."""
    graph = _graph(tmp_path, "methods=[ace,expel,agentbrew]", "memory.bounds.max_field_chars=5000")
    stages = {k.kind: s for k, s in graph.stages.items() if k.kind in ("ace", "expel", "brew")}
    assert set(stages) == {"ace", "expel", "brew"}
    for kind, stage in stages.items():
        bounds = "memory_bounds" if kind == "brew" else "bounds"
        assert stage.identity[bounds] == {"max_field_chars": 5000}, kind
        assert stage.identity["split"] == stage.split == "memory"
        assert stage.identity["memory_task_ids"] and stage.identity["embedder"]
        assert stage.label.endswith(" (7 tasks)") and len(graph.needs[stage.key]) == 7
    assert stages["ace"].identity["agent"]["model"] == "org/big"  # the teacher plays
    assert stages["brew"].identity["agent"]["model"] == "org/small"  # the student brews
    assert stages["ace"].identity["method"] == "ace" and "models" in stages["expel"].identity
    # The bounds are part of the key: off their defaults, another node.
    plain = _graph(tmp_path, "methods=[ace]")
    assert [k for k in plain.stages if k.kind == "ace"] != [stages["ace"].key]
