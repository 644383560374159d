"""How memory banks are built, embedded and stored, and the memory methods' shared
read-settings defaults (`memory.retrieval`).

Read settings are each method's own (its `settings_model`, e.g. AMD's
`amd/settings.py:RetrievalConfig`): this module names no method and validates none of
them; `DistilleryConfig` has each method validate what it reads, errors naming the key
(`memory.retrieval.<key>` or `method_catalog.<name>.retrieval.<key>`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class BuilderConfig(BaseModel):
    """How memory banks are built from successful trajectories."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Which model writes insights, segmentations and text renderings of a bank of
    # teacher trajectories: "teacher" (the teacher's own model, as in the paper),
    # "student", "none" (deterministic entries only, also what the oracle gets: it is
    # no model), or a model config name defined under `builder_models`.
    model: str = "teacher"
    # The same for `student_memory` banks (the student's own zero-shot trajectories):
    # by default the student's own model writes them (the paper's "student-generated
    # memories"). Who wrote a bank is part of its identity and tagged on every run.
    student_memory_model: str = "student"
    concurrency: int = Field(default=8, ge=1)
    max_segments: int = Field(default=6, ge=1, le=12)
    observation_chars: int = Field(default=500, ge=50)
    function_result_chars: int = Field(default=300, ge=50)


class StoreConfig(BaseModel):
    """Where the Qdrant collections live: an embedded folder, or a server."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str | None = None  # embedded (local) mode; None -> <output_dir>/qdrant
    url: str | None = None  # server mode, e.g. http://qdrant:6333
    api_key_env: str | None = None


class EmbedderConfig(BaseModel):
    """Which embedding model turns memory keys and queries into vectors."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["sentence_transformers", "openai"] = "sentence_transformers"
    model: str = "all-MiniLM-L6-v2"
    base_url: str | None = None  # openai: any OpenAI-compatible embeddings endpoint
    api_key_env: str | None = None
    batch_size: int = Field(default=64, ge=1)

    @model_validator(mode="after")
    def _url_for_openai(self) -> EmbedderConfig:
        if self.kind == "openai" and not self.base_url:
            raise ValueError("kind=openai needs base_url (e.g. https://api.openai.com/v1)")
        return self


class MemoryBounds(BaseModel):
    """Ours (no paper sets them): safety limits on what a bank holds and what an episode
    reads of it, for every memory method alike (`memory/bounds.py`). Far above what any
    method writes or injects on a faithful run, so they only stop builder output of
    megabytes (ReasoningBank and SASM stored any length) from reaching a student's
    requests. Each cut and each neutralised marker is counted (build stats
    `bounds:*`, episode records `memory_injection_cut`); values off these defaults
    enter the identity of the banks and episodes they shape."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_field_chars: int = Field(default=16_000, ge=200, description="One text field of an entry.")
    max_entry_chars: int = Field(default=64_000, ge=200, description="All text fields of an entry.")
    max_injected_chars: int = Field(
        default=32_000,
        ge=200,
        description="What one hook call adds to a prompt, message or result.",
    )
    neutralise_markers: bool = Field(
        default=True,
        description="Chat-template control tokens and the methods' memory delimiters in "
        "built text are made inert (counted).",
    )

    def identity(self) -> dict[str, Any]:
        """The bounds off their defaults (what changes a bank's or episode's identity)."""
        return self.model_dump(mode="json", exclude_defaults=True)


class MemoryConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    builder: BuilderConfig = BuilderConfig()
    bounds: MemoryBounds = MemoryBounds()
    embedder: EmbedderConfig = EmbedderConfig()
    store: StoreConfig = StoreConfig()
    # Defaults of the read settings of the methods that take them from this shared
    # block (AMD: `memory.retrieval.k_st=3` sets every AMD entry's k_st); a catalog
    # entry's own `retrieval` overrides them. Validated by those methods' models.
    retrieval: dict[str, Any] = Field(default_factory=dict)
