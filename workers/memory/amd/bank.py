"""Building one AMD bank from trajectories: builders, then (optionally) text renderings.

Plain asyncio, no Ray: the orchestrator runs it inside a Ray task and hands the bank
(a generic `memory.bank.BuiltBank` of AMD's three collections) to the memory service
that owns the store.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from distillery.workers.envs.base import Task
from distillery.workers.memory.amd import prompts
from distillery.workers.memory.amd.call_reasoning import CallReasoningWriter
from distillery.workers.memory.amd.function import FunctionBuilder
from distillery.workers.memory.amd.records import (
    COLLECTIONS,
    STORE_PREFIX,
    FunctionRecord,
    SubtaskSegment,
    WorkflowMemory,
)
from distillery.workers.memory.amd.render import TextRenderer
from distillery.workers.memory.amd.settings import BFCL, profile_of
from distillery.workers.memory.amd.subtask import SubtaskBuilder
from distillery.workers.memory.amd.workflow import WorkflowBuilder
from distillery.workers.memory.bank import BuiltBank
from distillery.workers.memory.building import BuilderLLM, BuildStats
from distillery.workers.memory.config import BuilderConfig
from distillery.workers.trajectories import EpisodeRecord

__all__ = ["BuiltBank", "amd_bank", "bank_id_for", "build_bank", "builder_code_version"]


def amd_bank(
    workflows: Sequence[WorkflowMemory] = (),
    segments: Sequence[SubtaskSegment] = (),
    functions: Sequence[FunctionRecord] = (),
    stats: BuildStats | None = None,
) -> BuiltBank:
    """AMD's three collections as the bank the memory service stores (`stats`: what
    building cost, flat, as the ledger records it)."""
    return BuiltBank(
        STORE_PREFIX,
        COLLECTIONS,
        {"wf": list(workflows), "st": list(segments), "fn": list(functions)},
        (stats or BuildStats()).as_dict(),
    )


# Bump when the builders or masking change what a bank holds in a way neither its
# config nor its prompts show (masking rules, validation, fallbacks). A refactor that
# keeps the entries as they were keeps the version, so built banks stay reused (the
# identity used to hash the builders' source: moving a function rebuilt every bank).
BUILDER_VERSION = "2"  # 2: an explicit version instead of a hash of the source


def builder_code_version() -> str:
    """The builders' explicit version and a fingerprint of every prompt they send
    (stage identity): a changed prompt text is a new bank, a moved function is not."""
    texts = {
        name: value
        for name, value in vars(prompts).items()
        if name.isupper() and isinstance(value, str)
    }
    payload = json.dumps({"version": BUILDER_VERSION, "prompts": texts}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def bank_id_for(
    episodes: Sequence[EpisodeRecord],
    config: BuilderConfig,
    builder_model: str,
    split: str,
    with_text: bool,
) -> str:
    """Content hash of everything that determines the bank's entries.

    Episodes count by what happened in them (their calls and observations), not by
    their ids, so identical trajectories from another run (e.g. the oracle's) map to
    the same bank and it is reused from the store.
    """
    payload = {
        "episodes": sorted(
            (e.task_id, e.agent, _trajectory_digest(e)) for e in episodes if e.success is True
        ),
        # Who writes is `builder_model` (the choice keys only say how it was picked).
        "builder": config.model_dump(
            mode="json", exclude={"concurrency", "model", "student_memory_model"}
        ),
        "builder_model": builder_model,
        "split": split,
        "text": with_text,
        "code": builder_code_version(),
    }
    profile = profile_of(e.benchmark for e in episodes if e.success is True)
    if profile != BFCL and profile.builds_differently:  # BFCL's ids stay as they were
        payload["profile"] = f"{profile.name}:{profile.version()}"
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def _trajectory_digest(episode: EpisodeRecord) -> str:
    steps = [
        (s.turn, s.step, [(c.call, c.content, c.error, c.rejected) for c in s.calls])
        for s in episode.steps
    ]
    return hashlib.sha256(json.dumps(steps, ensure_ascii=False).encode()).hexdigest()


def docs_and_classes(tasks: Sequence[Task]) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Function docs by name, and the class owning each function where the benchmark
    says (`Task.metadata["function_classes"]`)."""
    docs: dict[str, dict[str, Any]] = {}
    classes: dict[str, str] = {}
    for task in tasks:
        for doc in task.function_docs:
            docs.setdefault(doc["name"], doc)
        classes.update(task.metadata.get("function_classes") or {})
    return docs, classes


async def build_bank(
    episodes: Sequence[EpisodeRecord],
    tasks: Sequence[Task],
    config: BuilderConfig,
    llm: BuilderLLM | None,
    split: str,
    with_text: bool,
    chat_kwargs: dict[str, Any] | None = None,
) -> BuiltBank:
    """All three memory types from the SUCCESSFUL episodes (others are skipped)."""
    # One profile per bank (refused when episodes or tasks mix them); the builders
    # read each episode by its benchmark's profile (`TrajectoryBuilder.prepare`).
    profile = profile_of([*(e.benchmark for e in episodes), *(t.benchmark for t in tasks)])
    docs, classes = docs_and_classes(tasks)
    turns = {t.task_id: list(t.turns) for t in tasks}
    stats = BuildStats()
    common: dict[str, Any] = dict(
        docs_by_function=docs,
        class_of_function=classes,
        split=split,
        stats=stats,
    )
    successful = [e for e in episodes if e.success is True]
    by_agent = sorted({e.agent for e in successful})
    teacher = by_agent[0] if len(by_agent) == 1 else ",".join(by_agent)
    wf = WorkflowBuilder(llm, teacher=teacher, chat_kwargs=chat_kwargs, **common)
    st = SubtaskBuilder(
        llm,
        config.max_segments,
        teacher=teacher,
        chat_kwargs=chat_kwargs,
        observation_chars=config.observation_chars,
        **common,
    )
    fn = FunctionBuilder(teacher=teacher, result_chars=config.function_result_chars, **common)
    workflows = await wf.build_all(successful, config.concurrency, turns)
    segments = await st.build_all(successful, config.concurrency, turns)
    functions = fn.build_all(successful, turns)
    if profile.function_reasoning:  # ToolSandbox: why each call was made (call_reasoning.py)
        writer = CallReasoningWriter(llm, stats=stats, chat_kwargs=chat_kwargs)
        functions = await writer.add_reasoning(
            functions, fn.reasoning_prompts(successful, turns), config.concurrency
        )
    if with_text:
        renderer = TextRenderer(llm, stats=stats, chat_kwargs=chat_kwargs)
        segments = await renderer.render_segments(segments, config.concurrency)
        functions = await renderer.render_functions(functions, config.concurrency)
    return amd_bank(workflows, segments, functions, stats)
