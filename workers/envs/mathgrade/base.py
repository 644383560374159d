"""What `gsm8k` and `math` share: the prompt, the grading and the grader's isolation.

- Prompt: Qwen2.5-Math's chat prompt ``qwen25-math-cot`` (QwenLM/Qwen2.5-Math,
  evaluation/utils.py PROMPT_TEMPLATES), zero-shot as its evaluation scripts run GSM8K
  and MATH: the system message below, the problem as the user's message.
- Grading: the reply's answer as Qwen2.5-Math's evaluator extracts it
  (`answers.py`), compared with the gold answer for symbolic equivalence by
  math-verify in a grader process with an outer wall-clock limit (`grader.py`). Qwen's
  own grader is on no package index: `grader_math_verify` is a known deviation,
  recorded with every run (where the two differ, and who is right, is in
  docs/benchmarks/math.md and tests/workers/envs/answers/test_math_conformance.py).
  Under the ANTLR 4.9.3 runtime hydra pins, math-verify's LaTeX parser is the one
  regenerated for it (`latex_parser.py`). A grading that hits the limit is a wrong
  answer, counted as ``grader_timeouts``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from distillery.workers.envs import answering
from distillery.workers.envs.answering import AnswerBenchmark, AnswerOptions, Attempt
from distillery.workers.envs.base import BenchmarkUnavailable
from distillery.workers.envs.mathgrade import answers, grader, latex_parser
from distillery.workers.sandbox.jail import NO_NAMESPACES_HELP

# qwen25-math-cot's system message (QwenLM/Qwen2.5-Math evaluation/utils.py).
SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."
# ours: math-verify's own defaults are 5 s for parsing and 5 s for comparing.
GRADER_TIMEOUT_S = 10.0
# The user's message after a wrong answer (attempts > 1): the verdict only, as the
# binary feedback of Reflexion's protocol (ours: the papers give no wording).
FEEDBACK = "Your final answer is not correct. Please try again."


class MathOptions(AnswerOptions):
    grader_timeout_s: float = Field(
        default=GRADER_TIMEOUT_S,
        gt=0,
        le=600,
        description="Outer wall-clock limit of one grading (math-verify in its own "
        "process); hitting it is a wrong answer, counted as grader_timeouts.",
    )


class MathBenchmark(AnswerBenchmark):
    """Base of `gsm8k` and `math` (see the module docstring)."""

    known_deviations: ClassVar[tuple[str, ...]] = ("grader_math_verify",)
    counters: ClassVar[tuple[str, ...]] = ("grader_timeouts", "sandbox_unisolated")
    # The runtime too: which LaTeX parser grades depends on it (latex_parser.py).
    packages: ClassVar[tuple[str, ...]] = (
        "math-verify", "latex2sympy2_extended", "sympy", "antlr4-python3-runtime"
    )  # fmt: skip
    settings: MathOptions

    @classmethod
    def prompt_texts(cls) -> tuple[str, ...]:
        return (SYSTEM_PROMPT, FEEDBACK)

    # The sha256 of grading_modules' source as of the code lock's introduction (every
    # key as it was); pinned since by tests/orchestrator/code_lock.json.
    grading_version: ClassVar[str | None] = (
        "5a96fa1b1e89b1132e1d3e897f7a765d8d55749a3a346c146be843300a92d654"
    )

    @classmethod
    def grading_modules(cls) -> tuple[Any, ...]:
        from distillery.workers.envs.mathgrade import base, server

        return (answers, grader, server, latex_parser, base, answering)

    @classmethod
    def truth_texts(cls, options: AnswerOptions, record: dict[str, Any]) -> tuple[str, ...]:
        return (str(record["gold"]),)  # the gold answer

    def prepare(self) -> None:
        try:
            latex_parser.check()
        except latex_parser.ParserMismatch as exc:
            raise BenchmarkUnavailable(
                f"{self.name}: {exc}",
                f"pip install 'latex2sympy2_extended=={latex_parser.GRAMMAR_RELEASE}' (or "
                f"regenerate {latex_parser.GENERATED.name} from the new release's PS.g4, "
                "as its header says)",
            ) from None
        why = grader.isolation_unavailable()
        if why is not None and not self.settings.sandbox_without_namespaces:
            raise BenchmarkUnavailable(
                f"{self.name}: the math grader parses the model's text and must run "
                f"without network, and no network namespace can be made here ({why})",
                NO_NAMESPACES_HELP,
            )
        self.unisolated = why is not None
        self.grader = grader.shared_grader(network=self.unisolated)

    def system_prompt(self, action_format: str) -> str:
        return SYSTEM_PROMPT

    def grade(self, record: dict[str, Any], reply: str) -> Attempt:
        counted = {"sandbox_unisolated": 1} if self.unisolated else {}
        answer = answers.extract_answer(reply)
        if not answer:
            return Attempt(False, "", "no answer found in the reply", "no_answer", counted)
        verdict = self.grader.grade(record["gold"], answer, self.settings.grader_timeout_s)
        if verdict.timed_out:
            reason = f"grading did not finish within {self.settings.grader_timeout_s:g} s"
            return Attempt(False, answer, reason, "grader_timeout",
                           {**counted, "grader_timeouts": 1})  # fmt: skip
        if verdict.correct:
            return Attempt(True, answer, counters=counted)
        return Attempt(
            False, answer, f"{answer!r} is not the answer"[:300], "wrong_answer", counted
        )

    def feedback(self, attempt: Attempt) -> str:
        return FEEDBACK

    def oracle_answer(self, record: dict[str, Any]) -> str:
        return f"{record['solution'].strip()}\n\nThe final answer is $\\boxed{{{record['gold']}}}$."
