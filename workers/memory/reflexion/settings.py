"""Reflexion's settings, with the source of each default.

Sources: the original code (noahshinn/reflexion: `programming_runs/run_reflexion.sh`,
`alfworld_runs/alfworld_trial.py`, `hotpotqa_runs/agents.py`) and the AgentBrew paper
(../shared/papers/agentbrew-paper.txt, Table 1 Group II and §3.2 (i)).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from distillery.workers.memory.feedback import DEFAULT_FEEDBACK, Feedback


class ReflexionSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # k: plays of a task at most (the first and k - 1 re-plays, each after a reflection).
    # 2: the original's programming runs (`run_reflexion.sh --max_iters 2`) and the
    # AgentBrew paper's first Reflexion row; its second is k = 3 (catalog reflexion_k3).
    max_attempts: int = Field(default=2, ge=1, le=10)
    # What the reflection is told of a failed play: the one feedback setting of AgentBrew
    # and every baseline (workers/memory/feedback.py; memory.retrieval.feedback sets it
    # for all). "binary", that it failed (the AgentBrew paper's Group II: "explicit
    # binary feedback from the environment", and the original's AlfWorld and HotPotQA
    # runs); "category", that and the failure's category; "message", that and the
    # benchmark's own reason (a failing visible test of MBPP, the original's programming
    # runs' test feedback). On AppWorld the message names the failed hidden checks:
    # "message" there shows the student what it is graded on.
    feedback: Feedback = DEFAULT_FEEDBACK
    # Reflections shown in a play's prompt, the most recent ones: the original's last
    # three (`alfworld_trial.py`: `memory[-3:]`).
    memory_size: int = Field(default=3, ge=1, le=10)
    # What the reflection reads of the failed play (ours: the original passes the whole
    # trial and relies on the model's context; a cut keeps a runaway episode from
    # overflowing the student's window): the transcript's characters, each
    # observation's.
    trajectory_chars: int = Field(default=12_000, ge=1_000, le=200_000)
    observation_chars: int = Field(default=1_000, ge=100, le=20_000)
    # The longest reflection kept (ours: the original asks for "a few sentences" and
    # stops at a newline; a longer answer is cut, counted as `reflections_cut`).
    reflection_chars: int = Field(default=2_000, ge=200, le=20_000)
