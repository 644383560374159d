"""The AMD authors' AppWorld students' repeated-code warning (and their MemP student's
other loop hints), for any method's hooks.

Their SASM and MemP students (appworld/sasm/experiments/code/ace/sasm_evaluation_react.py,
appworld/memp/experiments/code/ace/memp_student_react.py `_build_loop_hint`) keep the
code of every reply (stripped) and, before asking for the next one, append a user
message of warning when the last three are the same. Here a step's code is what it ran:
its calls as the observations name them (`ToolResult.call`, the canonical call; on
AppWorld one `execute` of the reply's code, empty code included, as theirs), so the
rule is the same and no benchmark's reply format is read.
"""

from __future__ import annotations

import re
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


# -- the MemP port's student's hints (memp_student_react.py `_build_loop_hint`, lines
# 123-185): the same code, the same error, or failures in a row, each `times` times.
# Our wording of theirs; `{times}` and `{error}` are filled as theirs fills them.
SAME_CODE_AND_ERROR = (
    "🚨 CRITICAL: the exact same code has run {times} times and failed every time with the "
    'same error: "{error}". This approach cannot work. You MUST switch to a completely '
    "different method: another API, other parameters, or read the API docs again to find "
    "the right approach.\n\n"
)
SAME_CODE = (
    "⚠️ The exact same code has run {times} times in a row. Stop and take a different approach.\n\n"
)
SAME_ERROR = (
    '⚠️ The same error came back {times} times: "{error}". This error needs another '
    "strategy: read the API docs or change the parameters.\n\n"
)
FAILING_AGAIN = (
    "🚨 The code keeps failing. Stop everything you are trying now, read the task again "
    "from the start and choose an entirely different approach.\n\n"
)
FAILING = (
    "⚠️ Execution has failed several times in a row. Stop repeating the same approach: "
    "think about why it fails and try a completely different strategy.\n\n"
)
LOOP_HINT_TEXTS = (SAME_CODE_AND_ERROR, SAME_CODE, SAME_ERROR, FAILING_AGAIN, FAILING)
# What their student reads as a failed execution (AppWorld's output for an exception).
FAILURE_MARKERS = ("Execution failed.", "Traceback")


def error_signature(output: str) -> str | None:
    """Their `_extract_error_sig`: None unless the output shows a failure; else its
    HTTP status line, else its first line naming an Exception or Error, else its start
    (120 characters at most)."""
    if not any(marker in output for marker in FAILURE_MARKERS):
        return None
    status = re.search(r"(status code is \d+.*?)(?:\n|$)", output)
    if status:
        return status.group(1)[:120]
    for line in output.splitlines():
        if "Exception" in line or "Error" in line:
            return line.strip()[:120]
    return output[:120]


class LoopHints:
    """The MemP port's hints after a step's output, the first that holds: the same code
    and the same error `times` times, the same code, the same error, or `times` failed
    steps in a row (the wording sharper from twice that); counted by kind."""

    def __init__(self, times: int = TIMES) -> None:
        self.times = times
        self.codes: list[tuple[str, ...]] = []
        self.errors: list[str] = []
        self.failures = 0
        self.fired: dict[str, int] = {}

    def after_step(self, observations: Sequence[ToolResult]) -> HookMessage | None:
        output = "\n".join(o.content for o in observations)
        self.codes.append(tuple(o.call.strip() for o in observations))
        if any(marker in output for marker in FAILURE_MARKERS):
            self.failures += 1
        else:
            self.failures = 0
            self.errors.clear()
        error = error_signature(output)
        if error:
            self.errors.append(error)
        k = self.times
        same_code = len(self.codes) >= k and len(set(self.codes[-k:])) == 1
        same_error = error is not None and len(self.errors) >= k and len(set(self.errors[-k:])) == 1
        if same_code and same_error:
            kind, text = "same_code_and_error", SAME_CODE_AND_ERROR
        elif same_code:
            kind, text = "same_code", SAME_CODE
        elif same_error:
            kind, text = "same_error", SAME_ERROR
        elif self.failures >= k:
            again = self.failures // k >= 2
            kind, text = ("failing_again", FAILING_AGAIN) if again else ("failing", FAILING)
        else:
            return None
        self.fired[kind] = self.fired.get(kind, 0) + 1
        n = sum(self.fired.values())
        return HookMessage(f"loop-hint-{n}", text.format(times=k, error=error))
