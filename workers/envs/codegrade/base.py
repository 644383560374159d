"""What `mbpp` (and MBPP+) and `humaneval` share: the answer is a program, run in the
sandbox (`distillery.workers.sandbox`) against the task's tests.

- The program of a reply is EvalPlus's sanitized reading of it (`extract.py`).
- Each check is a fresh sandbox; a timeout, a crash or a limit hit fails the task; a
  sandbox that cannot start is an infrastructure error (the episode is retried).
- ``tools=true`` makes the task a tool-use environment: the model may call
  ``run_tests(code=...)`` (native tool calling, or ``[run_tests(code="...")]`` in the
  prompt format) to run a program against the tests the prompt shows, up to
  `max_steps_per_turn` times, and its reply without a call is the answer, graded as
  always.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from distillery.workers.envs import answering
from distillery.workers.envs.answering import AnswerBenchmark, AnswerOptions, Attempt
from distillery.workers.envs.base import (
    TOOL_CALLS,
    BenchmarkUnavailable,
    ParsedAction,
    ToolResult,
)
from distillery.workers.envs.calls import CallLimits, parse_native_calls, parse_text_calls
from distillery.workers.envs.codegrade import asserts, checks, evalplus, extract
from distillery.workers.envs.codegrade.checks import Verdict
from distillery.workers.sandbox import (
    jail,
    launcher,
    packages,
    pool,
    runner,
    seccomp,
    values,
    warm,
)
from distillery.workers.sandbox.jail import Sandbox

RUN_TESTS = "run_tests"
RUN_TESTS_DOC = {
    "name": RUN_TESTS,
    "description": "Run a complete Python program against the tests shown in the task "
    "and see whether they pass (and the error when they do not).",
    "parameters": {
        "type": "dict",
        "properties": {"code": {"type": "string", "description": "The complete program."}},
        "required": ["code"],
    },
}
RUN_TESTS_TOOL = {
    "type": "function",
    "function": {**RUN_TESTS_DOC, "parameters": {**RUN_TESTS_DOC["parameters"], "type": "object"}},
}
# ours: the system prompt of the tool-use option (no official harness has one).
TOOLS_PROMPT = {
    "native": "You can run a program against the tests shown in the task with the "
    "run_tests tool before you answer. When you are done, reply with your final "
    "program in a ```python code block and no tool call.",
    "prompt": "You can run a program against the tests shown in the task before you "
    'answer: reply with exactly [run_tests(code="""<the complete program>""")] and '
    "nothing else, and the result comes back to you. When you are done, reply with "
    "your final program in a ```python code block.",
}
# Tool calls carry whole programs: larger than the call lists of other benchmarks.
TOOL_LIMITS = CallLimits(max_text_chars=100_000, max_call_chars=64_000, max_calls=1)
FEEDBACK = "Your program did not pass the tests ({reason}). Please write a corrected program."


class CodeOptions(AnswerOptions):
    memory_mb: int = Field(
        default=4096,
        ge=64,
        le=65536,
        description="Address-space limit of a check's process (EvalPlus's 4 GB).",
    )
    asserts_outside: bool = Field(
        default=True,
        description="Tests that are plain `assert f(args) == expected` lines: the calls are "
        "made in the sandbox and compared outside it (as MBPP+ does), so neither an "
        "always-equal object nor a forged verdict passes; other tests run in-process as "
        "in the official harness (counted: tests_in_process). False: every test in-process.",
    )
    tools: bool = Field(
        default=False,
        description="A tool-use environment: the model may call run_tests(code=...) on the "
        "tests the prompt shows before answering (not the official single reply).",
    )


class CodeBenchmark(AnswerBenchmark):
    """Base of the code benchmarks (see the module docstring)."""

    max_steps_per_turn: ClassVar[int] = 10  # ours: run_tests calls before the answer
    counters: ClassVar[tuple[str, ...]] = (
        "sandbox_unisolated",
        "tests_compared_outside",
        "tests_in_process",
    )
    settings: CodeOptions

    @classmethod
    def prompt_texts(cls) -> tuple[str, ...]:
        return (*TOOLS_PROMPT.values(), FEEDBACK, str(RUN_TESTS_TOOL))

    @classmethod
    def trajectory_contents(cls, options: AnswerOptions) -> frozenset[str]:
        # With the run_tests tool, an episode has steps of executed calls.
        return frozenset({TOOL_CALLS}) if getattr(options, "tools", False) else frozenset()

    # The sha256 of grading_modules' source (the jail's included) as of the code lock's
    # introduction (every key as it was); pinned since by tests/orchestrator/code_lock.json:
    # a sandbox change that changes no verdict keeps it.
    grading_version: ClassVar[str | None] = (
        "a7af0b49307d568a02b72dab09ad53dac62b27814f7f84cff6a93f8814656dc6"
    )

    @classmethod
    def grading_modules(cls) -> tuple[Any, ...]:
        from distillery.workers.envs.codegrade import base

        return (checks, asserts, evalplus, extract, base, answering, jail, launcher, runner,
                seccomp, packages, pool, warm, values)  # fmt: skip

    def prepare(self) -> None:
        self.sandbox = Sandbox(allow_process=self.settings.sandbox_without_namespaces)
        why = jail.namespaces_unavailable(self.sandbox.python)
        if why is not None and not self.settings.sandbox_without_namespaces:
            raise BenchmarkUnavailable(
                f"{self.name}: no sandbox for model-written code here ({why})",
                jail.NO_NAMESPACES_HELP,
            )

    # -- what a code benchmark defines ----------------------------------------------

    def entry_point(self, record: dict[str, Any]) -> str | None:
        raise NotImplementedError

    def verdict(self, record: dict[str, Any], program: str) -> Verdict:
        """The graded check of `program` (the task's own tests)."""
        raise NotImplementedError

    def visible_check(self, record: dict[str, Any], program: str) -> Verdict:
        """`run_tests`: `program` against the tests the prompt shows."""
        raise NotImplementedError

    def reference(self, record: dict[str, Any]) -> str:
        raise NotImplementedError

    # -- answers ---------------------------------------------------------------------

    def system_prompt(self, action_format: str) -> str:
        return TOOLS_PROMPT[action_format] if self.settings.tools else ""

    def tools(self) -> tuple[tuple[dict[str, Any], ...], tuple[dict[str, Any], ...]]:
        """(tools, function_docs) of a task."""
        return ((RUN_TESTS_TOOL,), (RUN_TESTS_DOC,)) if self.settings.tools else ((), ())

    def program(self, record: dict[str, Any], reply: str) -> str:
        """The program a reply holds: EvalPlus's sanitized reading (see extract.py)."""
        return extract.sanitize(reply, self.entry_point(record))

    def grade(self, record: dict[str, Any], reply: str) -> Attempt:
        program = self.program(record, reply)
        verdict = self.verdict(record, program)
        counted = {"sandbox_unisolated": 1} if verdict.isolation == "process" else {}
        compared = verdict.details.get("tests_compared")
        if compared is not None:
            counted["tests_compared_outside" if compared == "outside" else "tests_in_process"] = 1
        if verdict.passed:
            return Attempt(True, program, counters=counted)
        error_type = {
            "no_code": "no_code",
            "timeout": "timeout",
            "crashed": "crashed",
            "malformed": "crashed",
        }.get(verdict.status, "tests_failed")
        return Attempt(False, program, verdict.reason, error_type, counted)

    def feedback(self, attempt: Attempt) -> str:
        return FEEDBACK.format(reason=attempt.reason or attempt.error_type)

    def oracle_answer(self, record: dict[str, Any]) -> str:
        return f"```python\n{self.reference(record).strip()}\n```"

    # -- the run_tests tool ----------------------------------------------------------

    def parse_text(self, record: dict[str, Any], text: str) -> ParsedAction:
        if not self.settings.tools:
            return ParsedAction()
        return parse_text_calls(text, {RUN_TESTS}, TOOL_LIMITS, positional_args=True)

    def parse_tool_calls(
        self, record: dict[str, Any], tool_calls: list[dict[str, Any]]
    ) -> ParsedAction:
        if not self.settings.tools:
            return super().parse_tool_calls(record, tool_calls)
        return parse_native_calls(tool_calls, {RUN_TESTS}, TOOL_LIMITS)

    def run_tool(self, record: dict[str, Any], action: ParsedAction) -> list[ToolResult]:
        results = []
        for call in action.calls:
            program = call.kwargs.get("code", call.args[0] if call.args else None)
            if not isinstance(program, str):
                error = "run_tests needs code=<the complete program>"
                results.append(ToolResult(call.source[:300], f"Error: {error}", error,
                                          RUN_TESTS, call.call_id))  # fmt: skip
                continue
            verdict = self.visible_check(record, program)
            if verdict.passed:
                content, error = "All tests passed.", None
            else:
                content, error = f"Tests failed: {verdict.reason}", verdict.reason
            if verdict.output:
                content += f"\nThe program printed:\n{verdict.output}"
            results.append(ToolResult(f"{RUN_TESTS}(code=...)", content, error, RUN_TESTS,
                                      call.call_id))  # fmt: skip
        return results
