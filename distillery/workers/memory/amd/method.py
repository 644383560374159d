"""AMD as a `MemoryMethod`: what the orchestrator may know of it, behind the protocol.

`AmdMethod` reads memory built from the teacher's collection; `AmdStudentMemory` is the
same method fed by the student's own successful zero-shot runs (paper table 2). Their
kinds ("amd", "student_memory") are the config names, so configs and keys stay.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from distillery.workers.memory.amd.records import MEMORY_TYPES
from distillery.workers.memory.config import MemoryConfig, RetrievalConfig
from distillery.workers.memory.method import BankSourceKind

if TYPE_CHECKING:
    from distillery.workers.agents.loop import EpisodeHooks
    from distillery.workers.envs.base import Task


def _text(value: Any) -> str:
    if isinstance(value, list | tuple):
        return "+".join(str(v) for v in value)
    return "null" if value is None else str(value)


class AmdMethod:
    """Workflow, Subtask and Function memory from the teacher's trajectories."""

    kind: ClassVar[str] = "amd"
    bank_source: ClassVar[BankSourceKind] = "teacher"
    settings_model: ClassVar[type[RetrievalConfig]] = RetrievalConfig
    # The builders carry their own explicit version (amd.bank.BUILDER_VERSION).
    code_version: ClassVar[str] = "1"

    def settings(
        self, defaults: Mapping[str, Any], overrides: Mapping[str, Any], types: Sequence[str] | None
    ) -> RetrievalConfig:
        chosen = tuple(types) if types is not None else MEMORY_TYPES
        return RetrievalConfig.model_validate({**defaults, **overrides, "types": chosen})

    def read_identity(self, settings: RetrievalConfig) -> dict[str, Any]:
        return settings.read_settings()

    def build_identity(self, memory: MemoryConfig) -> dict[str, Any]:
        # Who writes (model, student_memory_model) is the build's `builder_model`;
        # concurrency changes nothing in a bank.
        return memory.builder.model_dump(
            mode="json", exclude={"concurrency", "model", "student_memory_model"}
        )

    def build_fingerprint(self) -> str:
        from distillery.workers.memory.amd.bank import builder_code_version

        return builder_code_version()

    def hook_texts(self) -> tuple[str, ...]:
        from distillery.workers.memory.amd import hooks

        return (hooks.DECOMPOSE_PROMPT, hooks.MEMORY_HEADER)

    def derived_stage(self, settings: RetrievalConfig) -> bool:
        # Text renderings of Subtask and Function entries are written by a render stage.
        return any(
            t in settings.types and settings.representation(t) == "text" for t in ("st", "fn")
        )

    def hooks(
        self,
        task: Task,
        search: Any,
        settings: RetrievalConfig,
        allows: Callable[[Any], bool],
        ask_model: Callable[[list[dict[str, Any]]], Awaitable[Any]],
    ) -> EpisodeHooks:
        from distillery.workers.memory.amd.hooks import AmdHooks

        return AmdHooks(
            task.task_id,
            search,
            settings,
            allows=allows,
            ask_model=ask_model,
            user_turns=list(task.turns),
        )

    def label(self, settings: RetrievalConfig) -> str:
        return "+".join(settings.types)

    def descriptors(self, settings: RetrievalConfig) -> dict[str, str]:
        return {k: _text(v) for k, v in settings.read_settings().items() if k != "types"}


class AmdStudentMemory(AmdMethod):
    """AMD built from the student's own successful zero-shot runs."""

    kind: ClassVar[str] = "student_memory"
    bank_source: ClassVar[BankSourceKind] = "student"
