"""`benchmark=gsm8k`: GSM8K (openai/grade-school-math), one word problem a task.

Data: ``train.jsonl`` and ``test.jsonl`` of the release (grade_school_math/data/ in
github.com/openai/grade-school-math; 7,473 and 1,319 problems, one JSON object a line
with ``question`` and ``answer``, the gold number after ``####``) in the folder
``benchmark.options.data_path``; or, unset, the hub dataset ``openai/gsm8k`` (config
``main``) through `datasets`. Splits: ``test`` (the default), ``train``, and the
AgentBrew paper's partitions (its appendix A.2): ``agentbrew_brew``, the first 1,000
training problems, and ``agentbrew_test``, the full test set. Task ids are
``<file>_<line index>`` (``test_0``...), the same in every split that holds a problem.

Prompt and grading: `mathgrade/base.py` (Qwen2.5-Math's chat prompt; math-verify).
"""

from __future__ import annotations

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
from distillery.workers.envs.base import Task
from distillery.workers.envs.mathgrade.answers import gsm8k_gold
from distillery.workers.envs.mathgrade.base import MathBenchmark, MathOptions
from distillery.workers.envs.mathgrade.equivalence import grader_same_answer

HUB = HubSource("openai/gsm8k", "main")
BREW_SIZE = 1000  # AgentBrew appendix A.2: the first 1,000 training problems
DATA_HELP = (
    "put train.jsonl and test.jsonl of github.com/openai/grade-school-math "
    "(grade_school_math/data/) in a folder and set benchmark.options.data_path=<folder>"
)
# GSM8K's answers mark calculator steps as <<48/2=24>>: not shown to anyone.
_CALCULATOR = re.compile(r"<<[^>]*>>")
_MEMO = Memo()


class Gsm8kOptions(MathOptions):
    split: Literal["test", "train", "agentbrew_brew", "agentbrew_test"] = Field(
        default="test",
        description="test (1,319) | train (7,473) | agentbrew_brew (the first 1,000 of "
        "train) | agentbrew_test (all of test)",
    )

    def records(self) -> list[dict[str, Any]]:
        source = "train" if self.split in ("train", "agentbrew_brew") else "test"
        records = load_file(self, source)
        return records[:BREW_SIZE] if self.split == "agentbrew_brew" else records


def load_file(options: Gsm8kOptions, source: str) -> list[dict[str, Any]]:
    """The checked records of the release's `source` file (train or test)."""
    if options.data_path:
        path = Path(options.data_path).expanduser() / f"{source}.jsonl"
        key = ("folder", folder_signature([path]), source)
        return _MEMO.get(key, lambda: _from_folder(path, source))
    hub = HubSource(options.hub_id or HUB.path, HUB.name, options.hub_revision)
    return _MEMO.get(("hub", hub, source), lambda: _from_hub(hub, source))


def _from_hub(hub: HubSource, source: str) -> list[dict[str, Any]]:
    return _records(hub_rows(hub, source, DATA_HELP), source, hub.describe())


def _from_folder(path: Path, source: str) -> list[dict[str, Any]]:
    if not path.is_file():
        raise DataProblem(f"gsm8k: no {path.name} in {path.parent}", DATA_HELP)
    try:
        rows = read_json_lines(path)
    except ValueError as exc:
        raise DataProblem(f"gsm8k: {exc}", DATA_HELP) from None
    return _records(rows, source, str(path))


def _records(rows: list[dict[str, Any]], source: str, where: str) -> list[dict[str, Any]]:
    try:
        require_fields(rows, {"question": str, "answer": str}, f"gsm8k {where}")
        records = [
            {
                "task_id": f"{source}_{index}",
                "question": row["question"],
                "solution": row["answer"],
                "gold": gsm8k_gold(row["answer"]),
            }
            for index, row in enumerate(rows)
        ]
    except ValueError as exc:
        raise DataProblem(f"gsm8k {where}: {exc}", DATA_HELP) from None
    if not records:
        raise DataProblem(f"gsm8k {where}: no problems", DATA_HELP)
    return records


class Gsm8k(MathBenchmark):
    name: ClassVar[str] = "gsm8k"
    options_model = Gsm8kOptions
    # A stated answer is the gold one when the grader says so (the leakage guard).
    same_answer = classmethod(grader_same_answer)

    def task(self, record: dict[str, Any]) -> Task:
        return Task(
            task_id=record["task_id"],
            benchmark=self.name,
            turns=(record["question"],),
            tools=(),
            function_docs=(),
        )

    def oracle_answer(self, record: dict[str, Any]) -> str:
        worked = _CALCULATOR.sub("", record["solution"].split("####")[0]).strip()
        return f"{worked}\n\nThe final answer is $\\boxed{{{record['gold']}}}$."
