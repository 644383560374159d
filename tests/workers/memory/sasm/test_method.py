"""SASM behind the MemoryMethod protocol: registration, its own settings and defaults,
stage identity (read settings, builder texts, bank content), metrics and report
columns."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from pydantic import ValidationError

from distillery.workers.memory.config import BuilderConfig, MemoryConfig
from distillery.workers.memory.method import MemoryMethod
from distillery.workers.memory.registry import bank_origin, memory_method
from distillery.workers.memory.sasm import prompts
from distillery.workers.memory.sasm.method import SasmMethod, SasmSettings


def test_registered_as_a_teacher_built_method():
    method = memory_method("sasm")
    assert isinstance(method, SasmMethod) and isinstance(method, MemoryMethod)
    assert bank_origin("sasm") == "teacher" and method.store_prefix == "sasm"
    (spec,) = method.collections
    assert spec.name == "subtasks" and spec.group_field == "category"
    assert not method.derived_stage(SasmSettings())


def test_settings_are_its_own_with_the_ports_defaults():
    method = SasmMethod()
    amd_defaults = {"k_st": 3, "threshold_st": 0.45, "types": ["wf"]}  # memory.retrieval
    settings = method.settings(amd_defaults, {}, None)
    assert settings == SasmSettings()
    assert (settings.k, settings.threshold, settings.one_per_category) == (1, None, True)
    assert method.settings({}, {"k": 3}, None).k == 3
    with pytest.raises(ValidationError, match="types"):
        method.settings({}, {}, ["wf"])  # one uniform memory type
    with pytest.raises(ValidationError, match="top_k"):
        method.settings({}, {"top_k": 3}, None)
    with pytest.raises(ValidationError):
        method.settings({}, {"k": 0}, None)


def test_identity_follows_what_changes_output():
    method = SasmMethod()
    base = method.read_identity(SasmSettings())
    assert method.read_identity(SasmSettings(k=2)) != base
    assert method.read_identity(SasmSettings()) == base
    assert "texts" in base
    assert method.build_fingerprint() == method.build_fingerprint()
    assert method.build_fingerprint().startswith("sasm-")
    memory = MemoryConfig()
    assert method.build_identity(memory) == method.build_identity(
        MemoryConfig(builder=BuilderConfig(concurrency=2))  # no knob of content
    )
    assert prompts.DECOMPOSE_PROMPT in method.hook_texts()


def test_bank_id_is_content_addressed(oracle):
    _, episodes = oracle
    method, memory = SasmMethod(), MemoryConfig()
    bank = method.bank_id(episodes, memory, "none", "all")
    assert method.bank_id(list(reversed(episodes)), memory, "none", "all") == bank
    renamed = [replace(e, episode_id=e.episode_id + "-again", run_id="other") for e in episodes]
    assert method.bank_id(renamed, memory, "none", "all") == bank  # same trajectories
    assert method.bank_id(episodes, memory, "gpt", "all") != bank
    assert method.bank_id(episodes, memory, "none", "memory") != bank
    assert method.bank_id(episodes[:-1], memory, "none", "all") != bank
    failed = [replace(episodes[0], success=False), *episodes[1:]]
    assert method.bank_id(failed, memory, "none", "all") != bank  # verdicts are built in
    unscored = [*episodes, replace(episodes[0], success=None, task_id="x")]
    assert method.bank_id(unscored, memory, "none", "all") == bank  # skipped by the build
    bigger = MemoryConfig(builder=BuilderConfig(observation_chars=900))
    assert method.bank_id(episodes, bigger, "none", "all") != bank


def test_metrics_from_episode_logs(oracle):
    _, episodes = oracle
    logs = [
        {
            "retrievals": [
                {"category": "query", "allowed": True},
                {"category": "execute", "allowed": True},
                {"category": "execute", "allowed": False},
            ],
            "decompositions": [{"fallback": True}, {"fallback": False}],
            "isolation_checked": 3,
            "isolation_violations": 1,
            "off_category": 0,
        },
        {},
    ]
    records = [
        replace(e, extra_json=json.dumps(log)) for e, log in zip(episodes[:2], logs, strict=True)
    ]
    metrics = SasmMethod().metrics(records)
    assert metrics["isolation_violations"] == 1 and metrics["isolation_checked"] == 3
    assert metrics["injected"] == 2 and metrics["injected_execute"] == 1
    assert metrics["injected_verify"] == 0 and metrics["decomposition_fallbacks"] == 1


def test_report_columns_tags_and_descriptors():
    method, settings = SasmMethod(), SasmSettings(k=2, threshold=0.3)
    columns = method.report_columns(settings)
    assert columns == {
        "sasm_k": 2,
        "sasm_threshold": 0.3,
        "sasm_one_per_category": True,
        "sasm_every_turn": True,
    }
    assert method.descriptors(settings)["k"] == "2"
    assert method.descriptors(SasmSettings())["threshold"] == "null"
    assert method.tags(settings, "all-MiniLM-L6-v2")["sasm_k"] == "2"
    assert method.label(settings) == "sasm k=2"
