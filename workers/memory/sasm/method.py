"""SASM as a `MemoryMethod` (kind `sasm`): the orchestrator's view of it.

What is taken from where (the paper's full text was not in reach: its abstract and a
section-level summary of arXiv:2602.21611 were; the AMD authors' port was read in full):

- From the paper (Shen et al., 2026): memory at subtask granularity, one uniform
  entry type (z, d, e) = functional category, description (the retrieval anchor),
  experience abstracted by an LLM with instance-specific details removed; two-stage
  retrieval: the category is a hard filter, then cosine similarity of descriptions.
- From the AMD authors' AppWorld port (taeilkim2465/agentic_memory_distillation,
  appworld/sasm/): the category set for tool use (`records.CATEGORIES`); the build as
  a decomposer request (3-7 subtasks with inclusive step ranges) then one extractor
  request per subtask (3-8 bullets, ✓ / ✗ by the trajectory's outcome); building from
  successful AND failed trajectories (`build_sasm_memory_offline.py` without
  `--only-success`); top-1 per category without a threshold (`SASMMemoryBank.retrieve`);
  the student's own upfront decomposition into (z, d), one retrieval per distinct
  category, fallback to every category described by the instruction, all experiences
  injected before acting (`SASMUpfrontEvaluationReActAgent`); the embedder default
  (all-MiniLM-L6-v2) is the port's too.
- Assumptions of this adaptation: each user turn of a multi-turn task is decomposed as
  a request of its own (`every_turn`; the port's tasks have one instruction); the
  experiences go in front of the system prompt (the port renders them into its agent
  prompt template); the categories' descriptions are rewritten for function calling;
  the validation rules (known category, steps covered in order without gaps, marked
  bullets) and the deterministic fallbacks (`build.py`) are ours; the paper's online
  memory update is not used (the student is evaluated frozen: build-only).
- The port's default student (`sasm_evaluation_react`, its run scripts' and Gemma
  config's) moves one category's experience at each subtask transition the model
  announces in a tag of its reply (`student: transition`, sasm/transition.py): the
  AppWorld paper runs' entry `sasm_amd_appworld`, with the port's prompt
  (`sasm_transition` framing) and its repeated-code warning. It needs a prompt that
  asks for the tag, which only AppWorld's framing has: elsewhere (BFCL, ToolSandbox)
  the `sasm` entry plays the upfront student.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import ConfigDict, Field

from distillery.workers.envs.base import TOOL_CALLS
from distillery.workers.memory.digest import episode_digest
from distillery.workers.memory.entries import CollectionSpec
from distillery.workers.memory.method import BaseMemoryMethod, own_settings
from distillery.workers.memory.port_context import (
    CONTEXT_FIELDS,
    PortContextSettings,
    context_identity,
)
from distillery.workers.memory.sasm import prompts
from distillery.workers.memory.sasm.records import CATEGORIES, COLLECTIONS, STORE_PREFIX

if TYPE_CHECKING:
    from distillery.workers.envs.base import Task
    from distillery.workers.memory.bank import BuiltBank
    from distillery.workers.memory.config import BuilderConfig, MemoryConfig
    from distillery.workers.trajectories import EpisodeRecord

# Bump when what the builders produce changes (prompt texts are hashed besides).
BUILDER_VERSION = "1"


class SasmSettings(PortContextSettings):
    """SASM's read settings (`method_catalog.<name>.retrieval`), with its own defaults.

    - k = 1: the port's `SASMMemoryBank.retrieve` returns the single best entry of the
      category (the paper retrieves top-k within the category; its k is not public
      in what we could read, so the port's is the default).
    - threshold = None: neither the port nor the paper's description gates by score.
    - one_per_category = True: the port's upfront student retrieves once per distinct
      category of its decomposition (`seen` set in `_build_experiences_text`).
    - max_subtasks = 7: the upper end of the port's "3-7 subtasks".
    - every_turn = True: each user turn of a multi-turn task is a request of its own
      and is decomposed (the port's AppWorld tasks have one instruction); False
      decomposes the first turn only and keeps its experiences.
    - block_max_chars = None: the port does not cap the injected text.
    - student = "upfront": decompose, then every experience in the prompt
      (`SASMUpfrontEvaluationReActAgent`); "transition": the port's default student
      (`SASMEvaluationReActAgent`, sasm_run_student_qwen3_4b.sh ->
      SASM_evaluation_qwen3_4b_student.jsonnet:32 and the Gemma config's line 30), one
      category's experience at a time, moved at each transition the student announces
      (k and threshold apply; the decomposition settings do not). The default is ours:
      the transition student needs a prompt asking for its tag, which only the AppWorld
      port has (the `sasm_amd_appworld` entry sets it).
    - repeat_warning = False: True appends the port's warning when the last three steps
      ran the same code (both port students; ours on other benchmarks: the port is
      AppWorld's; `sasm_amd_appworld` sets it).
    - context_trim, context_buffer = None (memory/port_context.py): the benchmark's own
      trim of the student's history. Both port students blank old outputs first, then
      drop messages (sasm_react_base.py `trimmed_messages`, lines 142-171), with their
      loop's default buffer 256 (sasm_evaluation_react.py:50 and :240; no config of
      theirs sets one): `sasm_amd_appworld` sets both.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    k: int = Field(default=1, ge=1, le=10)
    threshold: float | None = Field(default=None, ge=-1, le=1)
    one_per_category: bool = True
    max_subtasks: int = Field(default=7, ge=1, le=12)
    every_turn: bool = True
    block_max_chars: int | None = Field(default=None, ge=200)
    student: Literal["upfront", "transition"] = "upfront"
    repeat_warning: bool = False


def _text(value: Any) -> str:
    return (
        "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    )


class SasmMethod(BaseMemoryMethod):
    """Subtask-level memory of one uniform type, retrieved per subtask within its
    category (Shen et al., 2026)."""

    kind: ClassVar[str] = "sasm"
    # Its bank is built from the episodes' executed calls (memory/applicability.py).
    reads: ClassVar[frozenset[str]] = frozenset({TOOL_CALLS})
    settings_model: ClassVar[type[SasmSettings]] = SasmSettings
    code_version: ClassVar[str] = "1"
    collections: ClassVar[tuple[CollectionSpec, ...]] = COLLECTIONS
    store_prefix: ClassVar[str] = STORE_PREFIX
    # Where its rendering starts a block (prompts.py): inert in built text (memory/bounds.py).
    memory_delimiters: ClassVar[tuple[str, ...]] = (
        r"\[Subtask experience\]",
        r"\[\w+ subtask\]",
    )

    def settings(
        self, defaults: Mapping[str, Any], overrides: Mapping[str, Any], types: Sequence[str] | None
    ) -> SasmSettings:
        return own_settings(SasmSettings, overrides, types)  # one memory type: no `types`

    def read_identity(self, settings: SasmSettings) -> dict[str, Any]:
        # What the student is shown and asked enters its evaluate stages' keys. The
        # student and the warning enter only when they are not the upfront student's
        # defaults (the keys of the runs before them stay), with what they show.
        from distillery.workers.memory.sasm import hooks, transition

        out = settings.model_dump(
            mode="json", exclude={"student", "repeat_warning", *CONTEXT_FIELDS}
        )
        out.update(context_identity(settings))  # only when set, as the two above
        texts = list(self.hook_texts())
        if settings.student != "upfront":
            out["student"] = settings.student
            texts.append(transition.TRANSITION_MESSAGE)
        if settings.repeat_warning:
            out["repeat_warning"] = True
            texts.append(hooks.REPEAT_WARNING)
        return {**out, "texts": hashlib.sha256("\n".join(texts).encode()).hexdigest()[:16]}

    def build_identity(self, memory: MemoryConfig) -> dict[str, Any]:
        # Who writes is the build's `builder_model`; concurrency changes nothing.
        return {"observation_chars": memory.builder.observation_chars}

    def build_fingerprint(self) -> str:
        texts = {n: v for n, v in vars(prompts).items() if n.isupper() and isinstance(v, str)}
        payload = json.dumps(
            {"version": BUILDER_VERSION, "categories": CATEGORIES, "prompts": texts},
            sort_keys=True,
        )
        return "sasm-" + hashlib.sha256(payload.encode()).hexdigest()[:16]

    def bank_id(
        self, episodes: Sequence[EpisodeRecord], memory: MemoryConfig, writer: str, split: str
    ) -> str:
        # Episodes count by what happened in them (and the checker's verdict: failed
        # trajectories are built too), not by their ids, so equal banks are reused.
        payload = {
            "kind": self.kind,
            "episodes": sorted(
                (e.task_id, e.agent, e.success, episode_digest(e))
                for e in episodes
                if e.success is not None
            ),
            "build": self.build_identity(memory),
            "writer": writer,
            "split": split,
            "code": self.build_fingerprint(),
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()

    async def build(
        self,
        episodes: Sequence[EpisodeRecord],
        tasks: Sequence[Task],
        builder: BuilderConfig,
        llm: Any,
        split: str,
    ) -> BuiltBank:
        from distillery.workers.memory.sasm.build import SasmBuilder

        sasm = SasmBuilder(llm, split=split, observation_chars=builder.observation_chars)
        turns = {t.task_id: t.turns for t in tasks}
        return await sasm.build(episodes, turns, builder.concurrency)

    async def render(self, bank: BuiltBank, builder: BuilderConfig, llm: Any) -> BuiltBank:
        return bank  # nothing derived (derived_stage is False)

    def hook_texts(self) -> tuple[str, ...]:
        return (
            prompts.DECOMPOSE_PROMPT,
            prompts.CATEGORY_GUIDE,
            prompts.RETRY_PROMPT,
            prompts.MEMORY_HEADER,
            prompts.ENTRY_TEMPLATE,
        )

    def derived_stage(self, settings: SasmSettings) -> bool:
        return False

    def prompt_framing(self, settings: SasmSettings) -> str | None:
        from distillery.workers.memory.sasm.hooks import SasmHooks
        from distillery.workers.memory.sasm.transition import SasmTransitionHooks

        chosen = SasmTransitionHooks if settings.student == "transition" else SasmHooks
        return chosen.prompt_framing

    def hooks(
        self,
        task: Task,
        search: Any,
        settings: SasmSettings,
        allows: Callable[[Any], bool],
        ask_model: Callable[[list[dict[str, Any]]], Awaitable[Any]],
    ) -> Any:
        from distillery.workers.memory.sasm.hooks import SasmHooks
        from distillery.workers.memory.sasm.transition import SasmTransitionHooks

        if settings.student == "transition":
            instruction = task.turns[0] if task.turns else ""
            return SasmTransitionHooks(task.task_id, instruction, search, settings, allows)
        return SasmHooks(task.task_id, search, settings, allows, ask_model)

    def metrics(self, records: Sequence[EpisodeRecord]) -> dict[str, float]:
        """Isolation audit, injections per category and decomposition fallbacks."""
        out = {
            "isolation_violations": 0.0,
            "isolation_checked": 0.0,
            "off_category": 0.0,
            "injected": 0.0,
            "decomposition_fallbacks": 0.0,
            **{f"injected_{z}": 0.0 for z in CATEGORIES},
        }
        for record in records:
            log = json.loads(record.extra_json or "{}")
            out["isolation_violations"] += log.get("isolation_violations", 0)
            out["isolation_checked"] += log.get("isolation_checked", 0)
            out["off_category"] += log.get("off_category", 0)
            out["decomposition_fallbacks"] += sum(
                bool(d.get("fallback")) for d in log.get("decompositions", [])
            )
            for event in log.get("retrievals", []):
                if event.get("allowed"):
                    out["injected"] += 1
                    out[f"injected_{event['category']}"] += 1
        return out

    def tags(self, settings: SasmSettings, embedder: str) -> dict[str, str]:
        return {f"sasm_{k}": v for k, v in self.descriptors(settings).items()}

    def report_columns(self, settings: SasmSettings) -> dict[str, Any]:
        # k is an integer: the report draws success against it; the others (a float,
        # booleans) are plain settings that tell two SASM cells apart.
        return {
            "sasm_k": settings.k,
            "sasm_threshold": settings.threshold,
            "sasm_one_per_category": settings.one_per_category,
            "sasm_every_turn": settings.every_turn,
        }

    def label(self, settings: SasmSettings) -> str:
        return f"sasm k={settings.k}" + (" transition" if settings.student == "transition" else "")

    def descriptors(self, settings: SasmSettings) -> dict[str, str]:
        return {k: _text(v) for k, v in settings.model_dump().items()}
