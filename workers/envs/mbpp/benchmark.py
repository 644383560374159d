"""`benchmark=mbpp`: MBPP (Austin et al., 2021), sanitized; the variant ``plus`` is
MBPP+ v0.2.0 (EvalPlus, Liu et al., 2023).

Data in the folder ``benchmark.options.data_path``:

- ``variant=sanitized`` (the default): ``sanitized-mbpp.json`` of
  github.com/google-research/google-research (``mbpp/``): 427 problems with
  ``task_id``, ``prompt``, ``code``, ``test_imports``, ``test_list``;
- ``variant=plus``: EvalPlus's release file ``MbppPlus.jsonl.gz`` (or unpacked,
  ``MbppPlus.jsonl``; its cache name ``MbppPlus-v0.2.0.jsonl`` too) from
  github.com/evalplus/mbppplus_release, release v0.2.0: 378 problems with
  ``task_id`` (``Mbpp/N``), ``prompt``, ``entry_point``, ``canonical_solution``,
  ``base_input``, ``plus_input``, ``atol``.

Unset, through `datasets`: ``google-research-datasets/mbpp`` (config ``sanitized``),
and for MBPP+ the release file itself by its URL (the ``json`` builder: the hub's
``evalplus/mbppplus`` is another layout, whose tests compare outputs inside the
program under test).

Splits (``split``; unset: the variant's evaluation set): sanitized — ``test`` (task ids
11–510, 257), ``train`` (601–974), ``validation`` (511–600), ``prompt`` (1–10),
``full``, and the AgentBrew paper's (its appendix A.2) ``agentbrew_brew`` (11–510) and
``agentbrew_test`` (above 510, 163); plus — ``full`` (378) and ``agentbrew_test``
(the 154 whose ids are not in 11–510). Task ids are EvalPlus's, ``Mbpp/N``, in both
variants.

Prompts: MBPP's, as in its paper (zero-shot: the description and the three tests);
MBPP+'s, EvalPlus's chat instruction with the docstring prompt. The program of a reply:
for MBPP, its longest run of lines that parses (the code block), run as written, as
MBPP's harness runs a completion; for MBPP+, EvalPlus's sanitizer (`extract.py`). Grading (in the
sandbox): MBPP's test imports, the program and its three asserts; MBPP+'s EvalPlus
differential test on the base and plus inputs (`codegrade/checks.py`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from distillery.workers.envs.answer_data import (
    DataProblem,
    HubSource,
    Memo,
    folder_signature,
    hub_rows,
    read_json,
    read_json_lines,
    require_fields,
)
from distillery.workers.envs.answering import AnswerOptions
from distillery.workers.envs.base import Task
from distillery.workers.envs.codegrade import checks, extract
from distillery.workers.envs.codegrade.asserts import plain_asserts
from distillery.workers.envs.codegrade.base import CodeBenchmark, CodeOptions
from distillery.workers.envs.codegrade.checks import EvalPlusTask, Verdict
from distillery.workers.sandbox.jail import Limits

# Austin et al. 2021 (§2.1, the prompt of the paper's few-shot runs, used zero-shot).
MBPP_PROMPT = (
    "You are an expert Python programmer, and here is your task: {prompt} "
    "Your code should pass these tests:\n\n{tests}"
)
# EvalPlus's instruction for chat models (evalplus/codegen.py `instruction_prefix`; the
# OpenAI provider sends it with the prompt in a python code block).
EVALPLUS_INSTRUCTION = (
    "Please provide a self-contained Python script that solves the following problem "
    "in a markdown code block:"
)
RELEASE_URL = (
    "https://github.com/evalplus/mbppplus_release/releases/download/v0.2.0/MbppPlus.jsonl.gz"
)
HUB_SANITIZED = HubSource("google-research-datasets/mbpp", "sanitized")
HUB_PLUS = HubSource("json", data_files=RELEASE_URL)
PLUS_FILES = ("MbppPlus.jsonl.gz", "MbppPlus.jsonl", "MbppPlus-v0.2.0.jsonl.gz",
              "MbppPlus-v0.2.0.jsonl")  # fmt: skip
# ours: MBPP's harness gives no limit; EvalPlus caps a task's check at 60 s.
TIMEOUT_S = 60.0
DATA_HELP = {
    "sanitized": "put sanitized-mbpp.json (github.com/google-research/google-research, "
    "mbpp/) in a folder and set benchmark.options.data_path=<folder>",
    "plus": "put MbppPlus.jsonl.gz of github.com/evalplus/mbppplus_release (release v0.2.0) "
    "in a folder and set benchmark.options.data_path=<folder>",
}
SPLITS = {
    "test": lambda n: 11 <= n <= 510,
    "train": lambda n: 601 <= n <= 974,
    "validation": lambda n: 511 <= n <= 600,
    "prompt": lambda n: 1 <= n <= 10,
    "full": lambda n: True,
    "agentbrew_brew": lambda n: 11 <= n <= 510,
    "agentbrew_test": lambda n: n > 510,
}
PLUS_SPLITS = {"full": lambda n: True, "agentbrew_test": lambda n: not 11 <= n <= 510}
_MEMO = Memo()


class MbppOptions(CodeOptions):
    variant: Literal["sanitized", "plus"] = Field(
        default="sanitized",
        description="sanitized: MBPP sanitized (427) | plus: MBPP+ v0.2.0 (378)",
    )
    split: (
        Literal["test", "train", "validation", "prompt", "full", "agentbrew_brew", "agentbrew_test"]
        | None
    ) = Field(
        default=None,
        description="Unset: the variant's evaluation set (sanitized: test; plus: full). "
        "sanitized: test | train | validation | prompt | full | agentbrew_brew | "
        "agentbrew_test; plus: full | agentbrew_test",
    )
    timeout_s: float = Field(
        default=TIMEOUT_S,
        gt=0,
        le=3600,
        description="Wall clock of one MBPP check (its asserts); MBPP+ uses EvalPlus's "
        "limits (4 x the reference's time per input, at least 4 s, at most 60 s a check).",
    )

    @model_validator(mode="after")
    def _split_of_the_variant(self) -> MbppOptions:
        if self.variant == "plus" and self.split not in (None, *PLUS_SPLITS):
            raise ValueError(f"split: MBPP+ has {' and '.join(PLUS_SPLITS)}, not {self.split!r}")
        return self

    def chosen_split(self) -> str:
        return self.split or ("full" if self.variant == "plus" else "test")

    def records(self) -> list[dict[str, Any]]:
        keep = (PLUS_SPLITS if self.variant == "plus" else SPLITS)[self.chosen_split()]
        loaded = load_plus(self) if self.variant == "plus" else load_sanitized(self)
        return [r for r in loaded if keep(r["number"])]


def load_sanitized(options: MbppOptions) -> list[dict[str, Any]]:
    help_text = DATA_HELP["sanitized"]
    if options.data_path:
        path = Path(options.data_path).expanduser() / "sanitized-mbpp.json"
        key = ("folder", folder_signature([path]))
        return _MEMO.get(key, lambda: _sanitized(_read_sanitized(path), str(path)))
    hub = HubSource(options.hub_id or HUB_SANITIZED.path, HUB_SANITIZED.name, options.hub_revision)

    def from_hub() -> list[dict[str, Any]]:
        rows = [row for split in ("prompt", "test", "validation", "train")
                for row in hub_rows(hub, split, help_text)]  # fmt: skip
        return _sanitized(sorted(rows, key=lambda r: r.get("task_id", 0)), hub.describe())

    return _MEMO.get(("hub", hub), from_hub)


def _read_sanitized(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise DataProblem(f"mbpp: no sanitized-mbpp.json in {path.parent}", DATA_HELP["sanitized"])
    try:
        rows = read_json(path)
    except ValueError as exc:
        raise DataProblem(f"mbpp: {exc}", DATA_HELP["sanitized"]) from None
    if not isinstance(rows, list):
        raise DataProblem(f"mbpp: {path} is not a JSON list of problems", DATA_HELP["sanitized"])
    return rows


def _sanitized(rows: list[Any], where: str) -> list[dict[str, Any]]:
    fields = {"task_id": int, "prompt": str, "code": str, "test_imports": list, "test_list": list}
    try:
        if not all(isinstance(row, dict) for row in rows):
            raise ValueError("a problem is not a JSON object")
        require_fields(rows, fields, f"mbpp {where}")
        records = []
        for row in rows:
            tests = [str(t) for t in row["test_list"]]
            entry = extract.tested_function(row["code"], tests)
            if entry is None:
                raise ValueError(f"task {row['task_id']}: no tested function in its code")
            records.append({
                "task_id": f"Mbpp/{row['task_id']}",
                "number": row["task_id"],
                "prompt": row["prompt"],
                "code": row["code"],
                "test_imports": [str(t) for t in row["test_imports"]],
                "test_list": tests,
                "entry_point": entry,
            })  # fmt: skip
    except ValueError as exc:
        raise DataProblem(f"mbpp {where}: {exc}", DATA_HELP["sanitized"]) from None
    if not records:
        raise DataProblem(f"mbpp {where}: no problems", DATA_HELP["sanitized"])
    return records


def load_plus(options: MbppOptions) -> list[dict[str, Any]]:
    help_text = DATA_HELP["plus"]
    if options.data_path:
        folder = Path(options.data_path).expanduser()
        found = [folder / name for name in PLUS_FILES if (folder / name).is_file()]
        if not found:
            raise DataProblem(
                f"mbpp (plus): none of {', '.join(PLUS_FILES)} in {folder}", help_text
            )
        key = ("plus", folder_signature(found[:1]))
        return _MEMO.get(key, lambda: _plus(_read_plus(found[0]), str(found[0])))
    hub = HubSource(options.hub_id, None, options.hub_revision) if options.hub_id else HUB_PLUS
    split = "train"  # what `datasets` names the rows of plain data files
    return _MEMO.get(("hub-plus", hub), lambda: _plus(hub_rows(hub, split, help_text),
                                                      hub.describe()))  # fmt: skip


def _read_plus(path: Path) -> list[dict[str, Any]]:
    try:
        return read_json_lines(path)
    except ValueError as exc:
        raise DataProblem(f"mbpp (plus): {exc}", DATA_HELP["plus"]) from None


def _plus(rows: list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    fields = {"task_id": str, "prompt": str, "entry_point": str, "canonical_solution": str,
              "base_input": list, "plus_input": list, "atol": (int, float)}  # fmt: skip
    records = []
    try:
        require_fields(rows, fields, f"mbpp+ {where}")
        for row in rows:
            number = row["task_id"].rsplit("/", 1)[-1]
            if not row["task_id"].startswith("Mbpp/") or not number.isdigit():
                raise ValueError(f"task id {row['task_id']!r} is not Mbpp/<number>")
            records.append({
                "task_id": row["task_id"],
                "number": int(number),
                "prompt": row["prompt"],
                "entry_point": row["entry_point"],
                "canonical_solution": row["canonical_solution"],
                "base_input": row["base_input"],
                "plus_input": row["plus_input"],
                "atol": row["atol"],
            })  # fmt: skip
    except ValueError as exc:
        raise DataProblem(f"mbpp (plus) {where}: {exc}", DATA_HELP["plus"]) from None
    if not records:
        raise DataProblem(f"mbpp (plus) {where}: no problems", DATA_HELP["plus"])
    return records


def _asserts(text: str) -> tuple[str, ...]:
    return tuple(line.strip() for line in text.splitlines() if line.strip().startswith("assert"))


class Mbpp(CodeBenchmark):
    name: ClassVar[str] = "mbpp"
    options_model = MbppOptions
    settings: MbppOptions

    @classmethod
    def prompt_texts(cls) -> tuple[str, ...]:
        return (MBPP_PROMPT, EVALPLUS_INSTRUCTION, *super().prompt_texts())

    @classmethod
    def truth_texts(cls, options: AnswerOptions, record: dict[str, Any]) -> tuple[str, ...]:
        # Its test cases as text: MBPP's asserts; MBPP+'s are inputs (data), its text
        # test the assert its prompt shows.
        if getattr(options, "variant", "sanitized") == "plus":
            return _asserts(record["prompt"])
        return tuple(str(t).strip() for t in record["test_list"])

    def prepare(self) -> None:
        super().prepare()
        self._plus: dict[str, EvalPlusTask] = {}

    def task(self, record: dict[str, Any]) -> Task:
        if self.settings.variant == "plus":
            text = f"{EVALPLUS_INSTRUCTION}\n```python\n{record['prompt'].strip()}\n```"
        else:
            text = MBPP_PROMPT.format(prompt=record["prompt"], tests="\n".join(record["test_list"]))
        tools, docs = self.tools()
        return Task(task_id=record["task_id"], benchmark=self.name, turns=(text,), tools=tools,
                    function_docs=docs, metadata={"entry_point": record["entry_point"]})  # fmt: skip

    def entry_point(self, record: dict[str, Any]) -> str | None:
        return record["entry_point"]

    def program(self, record: dict[str, Any], reply: str) -> str:
        if self.settings.variant == "plus":
            return super().program(record, reply)
        # MBPP's own harness runs the completion as written: the reply's code as it
        # is (EvalPlus's first step), without the pruning EvalPlus adds for MBPP+ (which
        # drops, among others, a helper that yields and never returns).
        return extract.code_extract(reply)

    def reference(self, record: dict[str, Any]) -> str:
        if self.settings.variant == "plus":
            return record["prompt"] + record["canonical_solution"]
        return record["code"]

    def verdict(self, record: dict[str, Any], program: str) -> Verdict:
        if self.settings.variant == "plus":
            return self._evalplus(record).verdict(self.sandbox, program, self.settings.memory_mb)
        preamble, tests = checks.mbpp_tests(record["test_imports"], record["test_list"])
        calls = plain_asserts(tests) if self.settings.asserts_outside else None
        if calls is not None:
            return checks.call_check(self.sandbox, program, calls, self._limits(), preamble)
        verdict = checks.program_check(self.sandbox, program, tests, self._limits(), preamble)
        return dataclasses.replace(verdict, details={"tests_compared": "in_process"})

    def visible_check(self, record: dict[str, Any], program: str) -> Verdict:
        if self.settings.variant == "plus":
            shown = list(_asserts(record["prompt"]))
            # ours: the shown assert may use math (math.isclose): imported before it.
            return checks.program_check(self.sandbox, program, "\n".join(shown) + "\n",
                                        self._limits(), "import math\n")  # fmt: skip
        return self.verdict(record, program)

    def _limits(self) -> Limits:
        return Limits(timeout_s=self.settings.timeout_s, memory_mb=self.settings.memory_mb)

    def _evalplus(self, record: dict[str, Any]) -> EvalPlusTask:
        task_id = record["task_id"]
        if task_id not in self._plus:
            self._plus.setdefault(task_id, EvalPlusTask(record))
        return self._plus[task_id]
