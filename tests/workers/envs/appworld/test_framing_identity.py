"""A port's framing of AppWorld's prompt is in the identity of that port's evaluate
stages alone: editing one port's prompt moves its stages' keys and no other, and a port
added to framings.py moves none (the benchmark's fingerprint no longer hashes the file)."""

from __future__ import annotations

from dataclasses import replace

from distillery.orchestrator.cli.app import validate_sweep
from distillery.orchestrator.core.compose import rewrite_role_overrides, sweep_points
from distillery.orchestrator.planning.plan import plan_sweep
from distillery.workers.envs.appworld import framings
from distillery.workers.memory.registry import memory_method
from tests.orchestrator.test_appworld_plans import use_listing

SWEEP = ["experiment=appworld_table1", "student=qwen3_4b", "seed=0"]


def _graph(monkeypatch):
    use_listing(monkeypatch)
    return plan_sweep(validate_sweep(sweep_points(rewrite_role_overrides(SWEEP), False)))


def _framing(stage) -> str | None:
    memory = getattr(stage, "memory", None)
    if memory is None:
        return None
    return memory_method(memory.kind).prompt_framing(memory.settings)


def test_one_ports_prompt_moves_its_evaluate_stages_and_nothing_else(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    before = _graph(monkeypatch)
    framed = {k for k, s in before.stages.items() if _framing(s) == "reasoning_bank"}
    others = set(before.stages) - framed
    assert framed and {k.kind for k in framed} == {"evaluate"}
    # Each port of the table frames its own stages (MemP's and SASM's too).
    found = {_framing(s) for s in before.stages.values()}
    assert found >= {"reasoning_bank", "memp", "sasm_transition"}  # the port's default

    *kept, last = framings.REASONING_BANK.edits  # one word more in the port's last edit
    edited = replace(
        framings.REASONING_BANK, edits=(*kept, replace(last, new=last.new + " Be brief."))
    )
    monkeypatch.setattr(framings, "REASONING_BANK", edited)
    after = set(_graph(monkeypatch).stages)
    assert others <= after  # every other key kept: builds, plays, the other ports
    assert not framed & after  # the port's own stages moved
    assert len(after - others) == len(framed)


def test_a_port_added_to_framings_moves_no_key(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    before = set(_graph(monkeypatch).stages)
    known = framings.port_prompt

    def with_new_port(name: str, ace_text: str) -> framings.PortPrompt:
        if name == "new_port":
            return framings.PortPrompt("new_port", "elsewhere", (framings.Edit("a", "b"),))
        return known(name, ace_text)

    monkeypatch.setattr(framings, "PORTS", (*framings.PORTS, "new_port"))
    monkeypatch.setattr(framings, "port_prompt", with_new_port)
    assert set(_graph(monkeypatch).stages) == before


def test_the_hooks_frame_as_their_method_says(monkeypatch):
    """The framing in a stage's identity is the one its hooks ask of the prompt."""
    from distillery.workers.envs.base import Task

    task = Task("t1", "appworld", ("Do it.",), (), (), "t1")

    async def ask(messages):
        raise AssertionError("no model is asked while hooks are made")

    for kind in ("reasoning_bank", "memp", "memp_amd", "sasm", "trajectory_rag"):
        method = memory_method(kind)
        settings = method.settings({}, {}, None)
        hooks = method.hooks(task, object(), settings, lambda s: True, ask)
        assert getattr(hooks, "prompt_framing", None) == method.prompt_framing(settings), kind
    sasm = memory_method("sasm")
    transition = sasm.settings({}, {"student": "transition"}, None)
    hooks = sasm.hooks(task, object(), transition, lambda s: True, ask)
    framing = getattr(hooks, "prompt_framing", None)
    assert framing == sasm.prompt_framing(transition) == "sasm_transition"
