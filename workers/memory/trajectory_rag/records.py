"""The one entry type of trajectory RAG: a successful teacher episode, kept whole.

Nothing is distilled: the entry is the task's user turns and every executed call with
its observation, in order, and, on a benchmark that grades a closing reply (the answer
benchmarks), that answer. Retrieval is by task similarity (the task's first user
message, the same query AMD's Workflow memory is retrieved by), so `key_text` is that
message.
"""

from __future__ import annotations

from dataclasses import dataclass

from distillery.workers.memory.entries import CollectionSpec, MemorySource

# The first part of the bank's Qdrant collections (`trajrag_traj_<bank16>`).
STORE_PREFIX = "trajrag"
COLLECTION = "traj"
# Observations are stored cut to this many characters (a BFCL result is far shorter;
# a runaway listing must not bloat the store). The read budget cuts further.
STORED_OBSERVATION_CHARS = 4000
# A stored answer (ours): far above a GSM8K, MATH or MBPP solution, a cap on a runaway.
STORED_ANSWER_CHARS = 16000


@dataclass(frozen=True)
class TrajectoryStep:
    """One executed call of the teacher and what the environment answered."""

    turn: int  # index of the user turn it answered
    call: str  # the canonical call as executed, values kept (naive: nothing masked)
    observation: str  # the tool result, cut to STORED_OBSERVATION_CHARS
    error: bool  # the call returned an error (the teacher recovered: the episode passed)


@dataclass(frozen=True)
class TeacherTrajectory:
    """A whole successful teacher episode."""

    memory_id: str
    source: MemorySource
    request: str  # the task's first user message: the retrieval key
    turns: tuple[str, ...]  # every user message of the task, in order
    steps: tuple[TrajectoryStep, ...]
    # The graded closing reply, on a benchmark that grades one (an answer benchmark's
    # reasoning and answer, its program); empty elsewhere (a tool-use episode's result
    # is its calls). Cut to STORED_ANSWER_CHARS.
    answer: str = ""

    @property
    def key_text(self) -> str:
        return self.request


COLLECTIONS = (CollectionSpec(COLLECTION, TeacherTrajectory),)
