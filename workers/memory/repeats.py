"""The AMD authors' AppWorld students' repeated-code warning, for any method's hooks.

Their SASM and MemP students (appworld/sasm/experiments/code/ace/sasm_evaluation_react.py,
appworld/memp/experiments/code/ace/memp_student_react.py `_build_loop_hint`) keep the
code of every reply (stripped) and, before asking for the next one, append a user
message of warning when the last three are the same. Here a step's code is what it ran:
its calls as the observations name them (`ToolResult.call`, the canonical call; on
AppWorld one `execute` of the reply's code, empty code included, as theirs), so the
rule is the same and no benchmark's reply format is read.
"""

from __future__ import annotations

from collections.abc import Sequence

from distillery.workers.agents.hook_messages import HookMessage
from distillery.workers.envs.base import ToolResult

TIMES = 3  # their `max_consecutive_failures` default, which no config of theirs changes


class RepeatedCode:
    """Counts the steps' code; `after_step` gives the warning when the last `times`
    steps ran the same, each time it holds (theirs warns at every such step)."""

    def __init__(self, text: str, times: int = TIMES) -> None:
        self.text, self.times = text, times
        self.recent: list[tuple[str, ...]] = []
        self.fired = 0

    def after_step(self, observations: Sequence[ToolResult]) -> HookMessage | None:
        self.recent.append(tuple(o.call.strip() for o in observations))
        last = self.recent[-self.times :]
        if len(last) < self.times or len(set(last)) != 1:
            return None
        self.fired += 1
        return HookMessage(f"repeated-code-warning-{self.fired}", self.text)
