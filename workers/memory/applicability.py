"""Which memory methods apply to which benchmark, decided by what each declares.

A benchmark says what its episodes hold for memory to be built from
(`trajectory_contents`: tool calls, or nothing but a single reply); a memory method
says what its bank is built from (its class attribute `reads`). A method whose needs
the benchmark's episodes lack would build an empty bank and read nothing, a result
that looks like memory but is the zero-shot student: it is refused before anything
starts. A method that declares nothing is assumed to read any episode. Neither side
names the other; the check names neither (docs/benchmarks/memory_methods.md has the
table of the project's own).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from distillery.workers.envs.registry import trajectory_contents
from distillery.workers.memory.registry import memory_method

WHAT = {"tool_calls": "executed tool calls", "answer": "a graded closing reply"}


def refusal(kind: str, benchmark: str, options: Mapping[str, Any] | None) -> str | None:
    """Why memory method `kind` does not apply to `benchmark` with these options (one
    line), or None when it does. A method needs all of its `reads`, and, where it
    declares `reads_one_of` (optional: what it builds from either way, e.g. trajectory
    RAG's calls or answer), at least one of those."""
    method = memory_method(kind)
    contents = trajectory_contents(benchmark, options)
    missing = sorted(method.reads - contents)
    either = frozenset(getattr(method, "reads_one_of", frozenset()))
    if either and not either & contents:
        missing.append(" or ".join(sorted(either)))
    if not missing:
        return None
    lacking = ", ".join(
        " or ".join(WHAT.get(part, part) for part in m.split(" or ")) for m in missing
    )
    return (
        f"the memory method {kind} builds its bank from {lacking}, and {benchmark}'s "
        "episodes have none with these options: list only methods that apply (e.g. "
        "methods=[teacher,zero_shot]; docs/benchmarks/memory_methods.md has the table)"
    )
