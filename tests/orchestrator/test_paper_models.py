"""The paper's models, embedder and bank writers as configs (issue 8 item 6), no Ray."""

from __future__ import annotations

import pytest

from distillery.orchestrator.core.compose import compose, rewrite_role_overrides
from distillery.orchestrator.core.config import ConfigError, to_config
from distillery.orchestrator.planning.plan import plan_sweep
from distillery.orchestrator.tracking.results import point_descriptors
from distillery.workers.llm.servers import vllm_command

STUDENTS = {  # config -> (served model, tool parser, reasoning parser, thinking)
    "qwen3_1_7b": ("Qwen/Qwen3-1.7B", "hermes", "qwen3", False),
    "qwen3_4b": ("Qwen/Qwen3-4B", "hermes", "qwen3", False),
    "qwen3_8b": ("Qwen/Qwen3-8B", "hermes", "qwen3", False),
    "qwen3_14b": ("Qwen/Qwen3-14B", "hermes", "qwen3", False),
    "gemma4_e4b": ("google/gemma-4-E4B-it", "gemma4", "gemma4", False),
    "llama3_1_8b": ("meta-llama/Llama-3.1-8B-Instruct", "llama3_json", None, None),
}
TEACHERS = {  # config -> (backend, model id, token limit parameter)
    "gpt5_mini": ("external", "gpt-5-mini", "max_completion_tokens"),
    "gpt5_5": ("external", "gpt-5.5", "max_completion_tokens"),
    "deepseek_v4_pro": ("external", "deepseek-v4-pro", "max_tokens"),
    "qwen3_32b": ("vllm", "Qwen/Qwen3-32B", "max_tokens"),
}


def config(*overrides: str):
    return to_config(compose(rewrite_role_overrides(list(overrides))))


@pytest.mark.parametrize("name", sorted(STUDENTS))
def test_paper_students_are_served_as_the_authors_served_them(name):
    served, tools, reasoning, thinking = STUDENTS[name]
    student = config(f"student={name}").student
    assert (student.backend, student.model, student.enable_thinking) == ("vllm", served, thinking)
    assert student.temperature == 0.0  # the authors' BFCL scripts: TEMPERATURE=0.0
    command = vllm_command(student, "127.0.0.1", 8000)
    line = " ".join(command)
    assert f"--tool-call-parser {tools}" in line and "--enable-auto-tool-choice" in line
    assert "--enable-prefix-caching" in command
    # Qwen3 at its 40,960 positions, as the authors serve it (run_vllm_qwen3_4b.sh)
    context = 40960 if served.startswith("Qwen/Qwen3") else 32768
    assert f"--max-model-len {context}" in line
    assert ("--reasoning-parser" in command) == (reasoning is not None)


@pytest.mark.parametrize("name", sorted(TEACHERS))
def test_paper_teachers_are_configs(name):
    backend, model, token_limit = TEACHERS[name]
    teacher = config(f"teacher={name}").teacher
    assert (teacher.backend, teacher.model, teacher.token_limit_param) == (
        backend,
        model,
        token_limit,
    )
    if backend == "external":
        assert teacher.api_key_env and teacher.base_url.startswith("https://")


def test_the_papers_embedder_is_a_config_beside_the_offline_default():
    default = config().memory.embedder
    assert (default.kind, default.model) == ("sentence_transformers", "all-MiniLM-L6-v2")
    paper = config("memory/embedder=text_embedding_3_small").memory.embedder
    assert (paper.kind, paper.model, paper.api_key_env) == (
        "openai",
        "text-embedding-3-small",
        "OPENAI_API_KEY",
    )
    assert config().retrieval_for("amd_wf_st_fn").thresholds_set_for == "text-embedding-3-small"


def _points(cfg):
    graph = plan_sweep([cfg])
    return graph, {p.method_name: p for p in graph.points.values()}


def test_student_memory_is_written_by_the_student_and_tagged():
    methods = "methods=[amd_wf,student_memory]"
    cfg = config("teacher=gpt5_mini", "student=qwen3_4b", methods, "benchmark.limit=2")
    graph, points = _points(cfg)
    writers = {
        name: graph.stages[point.bank_stage].model.name
        for name, point in points.items()
        if graph.stages[point.bank_stage].model is not None
    }
    assert writers == {"amd_wf": "gpt-5-mini", "student_memory": "qwen3-4b"}
    assert point_descriptors(points["student_memory"])["memory_writer"] == "qwen3-4b"
    assert point_descriptors(points["amd_wf"])["memory_writer"] == "gpt-5-mini"
    assert "thresholds_embedder" in point_descriptors(points["amd_wf"])
    paper = config(
        "teacher=gpt5_mini", methods, "benchmark.limit=2", "memory/embedder=text_embedding_3_small"
    )
    assert "thresholds_embedder" not in point_descriptors(_points(paper)[1]["amd_wf"])

    # Who writes is configurable, and part of the bank's identity.
    by_teacher = config(
        "teacher=gpt5_mini",
        "student=qwen3_4b",
        methods,
        "benchmark.limit=2",
        "memory.builder.student_memory_model=teacher",
    )
    graph2, points2 = _points(by_teacher)
    assert graph2.stages[points2["student_memory"].bank_stage].model.name == "gpt-5-mini"
    assert points2["student_memory"].bank_stage != points["student_memory"].bank_stage
    assert points2["amd_wf"].bank_stage == points["amd_wf"].bank_stage
    with pytest.raises(ConfigError, match="memory.builder.student_memory_model"):
        config("memory.builder.student_memory_model=ghost")
