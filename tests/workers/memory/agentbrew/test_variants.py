"""The paper's Table 2 variants, resolved as the shipped experiment composes them: each
differs from the full system (`agentbrew`) in exactly the setting it names, and the full
system is the paper's Table 3 one (a note never certified reaches the curator: direct
writes)."""

from __future__ import annotations

from typing import Any

from tests.support.sweep_config import sweep_config


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, inner in value.items():
            out.update(_flat(inner, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): value}


def _resolved(cfg, name: str) -> dict[str, Any]:
    return _flat(cfg.retrieval_for(name).model_dump(mode="json"))


# Table 2's variant -> the one setting it names (w/o Memory is zero_shot: no memory).
TABLE2 = {
    "agentbrew_no_ralph": {"brew.r_max": 0},
    "agentbrew_no_suppression": {"suppression": False},
    "agentbrew_strong_student": {"brew.student": "teacher"},
}


def test_table2_variants_differ_from_the_full_system_in_exactly_their_setting(tmp_path):
    cfg = sweep_config(tmp_path, "experiment=agentbrew_table2")
    assert set(TABLE2) | {"agentbrew", "zero_shot"} == set(cfg.methods)
    full = _resolved(cfg, "agentbrew")
    assert not cfg.method("zero_shot").uses_memory
    for name, named in TABLE2.items():
        variant = _resolved(cfg, name)
        differs = {key: variant[key] for key in full if variant[key] != full[key]}
        assert differs == named, name


def test_the_full_system_is_table3s_with_direct_writes(tmp_path):
    cfg = sweep_config(tmp_path, "experiment=agentbrew_table2")
    full = _resolved(cfg, "agentbrew")
    assert full["brew.unvalidated"] == "curate" and full["brew.r_max"] > 0
    assert _resolved(cfg, "agentbrew_no_ralph")["brew.unvalidated"] == "curate"


# ace_appworld keeps its own `none` (the authors' no-GT AppWorld harness: the reflector
# reads "[not applicable]"), an entry's own value winning over the shared one.
LEARNERS = ("agentbrew", "reflexion_k2", "expel", "ace")


def _feedback(cfg, name: str) -> str:
    settings = cfg.retrieval_for(name)
    brew = getattr(settings, "brew", None)
    return brew.feedback if brew is not None else settings.feedback


def test_one_feedback_setting_for_agentbrew_and_every_baseline(tmp_path):
    cfg = sweep_config(tmp_path, "experiment=agentbrew_table1_math")
    # The paper's regime by default: binary, for every method that learns from outcomes.
    assert {_feedback(cfg, name) for name in LEARNERS} == {"binary"}
    told = sweep_config(
        tmp_path, "experiment=agentbrew_table1_math", "memory.retrieval.feedback=category"
    )
    assert {_feedback(told, name) for name in LEARNERS} == {"category"}
    # AMD reads no failure: the shared key is not its setting (no error, no change).
    amd = sweep_config(tmp_path, "methods=[amd_wf]", "memory.retrieval.feedback=category")
    assert "feedback" not in amd.retrieval_for("amd_wf").model_dump()
    # A catalog entry's own value wins over the shared one.
    own = sweep_config(tmp_path, "experiment=agentbrew_table1_math", "memory.retrieval.feedback=category",
                       "+method_catalog.reflexion_k2.retrieval.feedback=binary")  # fmt: skip
    assert _feedback(own, "reflexion_k2") == "binary" and _feedback(own, "expel") == "category"


def test_the_report_shows_each_methods_feedback(tmp_path):
    from distillery.workers.memory.registry import memory_method

    cfg = sweep_config(tmp_path, "experiment=agentbrew_table1_math")
    for name in LEARNERS:
        settings = cfg.retrieval_for(name)
        columns = memory_method(cfg.method(name).kind).report_columns(settings)
        assert columns["learning_feedback"] == "binary", name


def test_the_strong_student_ablation_tells_the_teacher_about_deepseek(tmp_path, monkeypatch):
    from distillery.orchestrator.planning.plan import plan_sweep
    from tests.orchestrator.test_appworld_plans import use_listing

    use_listing(monkeypatch)
    cfg = sweep_config(tmp_path, "experiment=agentbrew_table2", "benchmark=gsm8k")
    graph = plan_sweep([cfg])
    students = {p.method_name: graph.stages[p.bank_stage].extra["student"]
                for p in graph.points.values() if p.method_name.startswith("agentbrew")}  # fmt: skip
    weak, strong = students["agentbrew"], students["agentbrew_strong_student"]
    assert weak["model"] == "Qwen/Qwen3-14B" and "multi-step arithmetic" in weak["weaknesses"]
    assert strong["model"] == "deepseek/deepseek-chat-v3.1"
    assert strong["weaknesses"] and "multi-step arithmetic" not in strong["weaknesses"]


def test_every_model_the_paper_names_has_known_weaknesses():
    import yaml

    from tests.support import REPO_ROOT

    for name in ("qwen3_14b", "deepseek_chat_v3_1", "glm_5_1", "deepseek_v4_pro"):
        config = yaml.safe_load((REPO_ROOT / "conf" / "model" / f"{name}.yaml").read_text())
        assert len(config.get("known_weaknesses") or "") > 40, name


def test_a_bad_shared_feedback_is_refused_at_its_key(tmp_path):
    import pytest

    from distillery.orchestrator.core.config import ConfigError

    for method in ("agentbrew", "expel"):
        with pytest.raises(ConfigError, match=r"^invalid config at memory\.retrieval\.feedback"):
            sweep_config(tmp_path, f"methods=[{method}]", "memory.retrieval.feedback=bogus")
