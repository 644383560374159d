"""`benchmark=math`: MATH (Hendrycks et al., 2021), competition problems; the variant
``math500`` is MATH-500, the 500 test problems of OpenAI's PRM800K split.

Data in the folder ``benchmark.options.data_path``:

- ``variant=full`` (the default): the official release (``MATH.tar`` from
  github.com/hendrycks/math, unpacked): ``train/<subject>/<n>.json`` and
  ``test/<subject>/<n>.json``, each ``{"problem", "level", "type", "solution"}``
  (7,500 and 5,000 problems); the folder may be ``MATH`` itself or hold it.
- ``variant=math500``: ``test.jsonl`` of PRM800K's ``prm800k/math_splits`` (one
  ``{"problem", "solution", "answer", "subject", "level", "unique_id"}`` a line).

Unset, the hub through `datasets`: ``EleutherAI/hendrycks_math`` (one config per
subject) for the full set, ``HuggingFaceH4/MATH-500`` for MATH-500.

Task order, ours (the paper names none): subjects alphabetically, then problems by
their file's number (on the hub mirror, which keeps no file names, by row: the two
sources may number a subject's problems differently; their digests then differ too, so
their episodes never mix). Task ids: ``<split>_<subject>_<n>`` (``test_algebra_1``);
MATH-500's problems keep the id of the same problem in the full test set. Splits:
``test`` (the default), ``train`` and the AgentBrew paper's partitions (its appendix
A.2): ``agentbrew_brew``, "the first 1,000 problems" of train, and ``agentbrew_test``,
the full test set; ``agentbrew_train`` is all of train in the brew order (Figure 4's
500..2,000 are its prefixes, `protocol.memory_limit`). The gold answer is the last
``\\boxed{}`` of the reference solution (MATH-500's ``answer``, the same).

The brew order (`brew_order`). Which order the paper's "first 1,000" were first in is
unknowable: the release is a folder per subject with no order across them, and the
loader most copies of MATH descend from (huggingface/datasets,
datasets/competition_math/competition_math.py, ``_generate_examples``) yields
``glob.glob(os.path.join(math_dir, split, "*/*"))`` unsorted, i.e. the order of the
file system it was built on; in an order that keeps a subject's files together (ours,
the hub mirror's one config per subject) the first 1,000 are algebra alone (1,744
problems) when algebra comes first, as alphabetically it does. So by default (``stratified``, ours) the brew order is a seeded
(``brew_order_seed``, 0) interleaving of the seven subjects, each shuffled, such that
every prefix holds each subject in its share of train within one problem: the first
1,000 hold ~232 algebra, ~103 counting & probability, ~116 geometry, ~173 intermediate
algebra, ~116 number theory, ~161 prealgebra, ~99 precalculus. ``release`` is the
loader's order above (algebra only), for comparison.

Prompt and grading: `mathgrade/base.py` (Qwen2.5-Math's chat prompt; math-verify).
"""

from __future__ import annotations

import random
import re
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
from distillery.workers.envs.base import Task
from distillery.workers.envs.mathgrade.answers import math_gold
from distillery.workers.envs.mathgrade.base import MathBenchmark, MathOptions
from distillery.workers.envs.mathgrade.equivalence import grader_same_answer

SUBJECTS = (
    "algebra",
    "counting_and_probability",
    "geometry",
    "intermediate_algebra",
    "number_theory",
    "prealgebra",
    "precalculus",
)
HUB_FULL = "EleutherAI/hendrycks_math"
HUB_500 = "HuggingFaceH4/MATH-500"
BREW_SIZE = 1000  # AgentBrew appendix A.2: the first 1,000 training problems
BREW_SPLITS = ("agentbrew_brew", "agentbrew_train")
DATA_HELP = {
    "full": "unpack MATH.tar (github.com/hendrycks/math) and set "
    "benchmark.options.data_path=<the folder holding train/ and test/>",
    "math500": "put test.jsonl of PRM800K's prm800k/math_splits (github.com/openai/prm800k) "
    "in a folder and set benchmark.options.data_path=<folder>",
}
_UNIQUE_ID = re.compile(r"^(train|test)/([a-z_]+)/(\d+)\.json$")
_MEMO = Memo()


class MathBenchOptions(MathOptions):
    variant: Literal["full", "math500"] = Field(
        default="full",
        description="full: MATH (7,500 train / 5,000 test) | math500: MATH-500 (500 test)",
    )
    split: Literal["test", "train", "agentbrew_brew", "agentbrew_train", "agentbrew_test"] = Field(
        default="test",
        description="test | train | agentbrew_brew (the first 1,000 of train in the brew "
        "order) | agentbrew_train (all of train in the brew order) | agentbrew_test (all "
        "of test); MATH-500 has test only",
    )
    # ours (module docstring): the paper's order is unknowable; subjects in proportion.
    brew_order: Literal["stratified", "release"] = Field(
        default="stratified",
        description="agentbrew_brew/agentbrew_train order: stratified (seeded, every prefix "
        "holds the seven subjects in proportion) | release (subjects alphabetically: the "
        "first 1,000 are algebra only)",
    )
    brew_order_seed: int = Field(default=0, description="the stratified brew order's seed")

    @model_validator(mode="after")
    def _math500_is_a_test_set(self) -> MathBenchOptions:
        if self.variant == "math500" and self.split not in ("test", "agentbrew_test"):
            raise ValueError(f"split: MATH-500 is a test set; {self.split!r} needs variant=full")
        return self

    def records(self) -> list[dict[str, Any]]:
        if self.variant == "math500":
            return load_math500(self)
        source = "train" if self.split in ("train", *BREW_SPLITS) else "test"
        records = load_full(self, source)
        if self.split not in BREW_SPLITS:
            return records
        if self.brew_order == "stratified":
            records = stratified_order(records, self.brew_order_seed)
        return records[:BREW_SIZE] if self.split == "agentbrew_brew" else records


def stratified_order(records: list[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    """`records` in a seeded order whose every prefix holds each subject in its share of
    the whole within one record: each subject shuffled (one generator, the subjects in
    order), then at each position the subject furthest below its share so far (ties:
    the first subject)."""
    by_subject: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_subject.setdefault(record["subject"], []).append(record)
    rng = random.Random(seed)
    for subject in sorted(by_subject):
        rng.shuffle(by_subject[subject])
    total = len(records)
    sizes = {subject: len(rows) for subject, rows in by_subject.items()}
    taken = dict.fromkeys(by_subject, 0)
    order = sorted(by_subject)
    out = []
    for position in range(1, total + 1):
        open_ = [s for s in order if taken[s] < sizes[s]]
        subject = max(open_, key=lambda s: position * sizes[s] / total - taken[s])
        out.append(by_subject[subject][taken[subject]])
        taken[subject] += 1
    return out


def _release_root(data_path: str) -> Path:
    root = Path(data_path).expanduser()
    if not (root / "train").is_dir() and (root / "MATH").is_dir():
        root = root / "MATH"
    return root


def load_full(options: MathBenchOptions, source: str) -> list[dict[str, Any]]:
    if options.data_path:
        root = _release_root(options.data_path)
        files = sorted((root / source).glob("*/*.json")) if (root / source).is_dir() else []
        key = ("folder", folder_signature(files), source)
        return _MEMO.get(key, lambda: _full_from_folder(root, source))
    hub = HubSource(options.hub_id or HUB_FULL, None, options.hub_revision)
    return _MEMO.get(("hub", hub, source), lambda: _full_from_hub(hub, source))


def _problem(record: dict[str, Any], where: str) -> dict[str, Any]:
    require_fields([record], {"problem": str, "solution": str}, where)
    return record


def _full_from_folder(root: Path, source: str) -> list[dict[str, Any]]:
    help_text = DATA_HELP["full"]
    folder = root / source
    if not folder.is_dir():
        raise DataProblem(f"math: no {source}/ folder in {root}", help_text)
    records = []
    for subject in SUBJECTS:
        files = [p for p in (folder / subject).glob("*.json") if p.stem.isdigit()]
        for path in sorted(files, key=lambda p: int(p.stem)):
            try:
                row = _problem(read_json(path), str(path))
                records.append(_record(source, subject, int(path.stem), row, row["solution"]))
            except ValueError as exc:
                raise DataProblem(f"math: {exc}", help_text) from None
    if not records:
        raise DataProblem(f"math: no problem files (<subject>/<n>.json) under {folder}", help_text)
    return records


def _full_from_hub(hub: HubSource, source: str) -> list[dict[str, Any]]:
    records = []
    for subject in SUBJECTS:
        by_subject = HubSource(hub.path, subject, hub.revision)
        rows = hub_rows(by_subject, source, DATA_HELP["full"])
        for index, row in enumerate(rows):
            try:
                row = _problem(row, f"{hub.path} {subject} row {index}")
                records.append(_record(source, subject, index, row, row["solution"]))
            except ValueError as exc:
                raise DataProblem(f"math: {exc}", DATA_HELP["full"]) from None
    return records


def _record(
    source: str,
    subject: str,
    number: int,
    row: dict[str, Any],
    solution: str,
    gold: str | None = None,
) -> dict[str, Any]:
    return {
        "task_id": f"{source}_{subject}_{number}",
        "problem": row["problem"],
        "solution": solution,
        "gold": gold if gold is not None else math_gold(solution),
        "subject": subject,
        "level": str(row.get("level", "")),
    }


def load_math500(options: MathBenchOptions) -> list[dict[str, Any]]:
    if options.data_path:
        path = Path(options.data_path).expanduser() / "test.jsonl"
        key = ("folder500", folder_signature([path]))
        return _MEMO.get(key, lambda: _math500_from_folder(path))
    hub = HubSource(options.hub_id or HUB_500, None, options.hub_revision)
    rows = _MEMO.get(("hub500", hub), lambda: hub_rows(hub, "test", DATA_HELP["math500"]))
    return _MEMO.get(("hub500records", hub), lambda: _math500(rows, hub.describe()))


def _math500_from_folder(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise DataProblem(f"math (math500): no test.jsonl in {path.parent}", DATA_HELP["math500"])
    try:
        rows = read_json_lines(path)
    except ValueError as exc:
        raise DataProblem(f"math (math500): {exc}", DATA_HELP["math500"]) from None
    return _math500(rows, str(path))


def _math500(rows: list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    fields = {"problem": str, "solution": str, "answer": str, "unique_id": str}
    records = []
    try:
        require_fields(rows, fields, f"math500 {where}")
        for index, row in enumerate(rows):
            found = _UNIQUE_ID.match(row["unique_id"])
            if not found:
                raise ValueError(f"record {index + 1}: unique_id {row['unique_id']!r}")
            source, subject, number = found.group(1), found.group(2), int(found.group(3))
            records.append(_record(source, subject, number, row, row["solution"], row["answer"]))
    except ValueError as exc:
        raise DataProblem(f"math (math500) {where}: {exc}", DATA_HELP["math500"]) from None
    if not records:
        raise DataProblem(f"math (math500) {where}: no problems", DATA_HELP["math500"])
    return records


class Math(MathBenchmark):
    name: ClassVar[str] = "math"
    options_model = MathBenchOptions
    # A stated answer is the gold one when the grader says so (the leakage guard).
    same_answer = classmethod(grader_same_answer)

    def task(self, record: dict[str, Any]) -> Task:
        return Task(
            task_id=record["task_id"],
            benchmark=self.name,
            turns=(record["problem"],),
            tools=(),
            function_docs=(),
            group_id=record["subject"],
            metadata={"level": record["level"], "subject": record["subject"]},
        )
