"""BFCL V3 multi-turn base's tasks and what a model is shown of them: the entries,
function docs and ground truth packaged with `bfcl-eval` (read once per process), each
task built from them, and BFCL's prompting system prompt assembled from bfcl-eval's own
templates. Playing and scoring an episode is `bfcl.py`'s (the adapter and its
environment), which imports this module inside its bfcl-eval guard.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
from importlib import resources
from pathlib import Path
from typing import Any

from bfcl_eval.constants import default_prompts
from bfcl_eval.constants.executable_backend_config import MULTI_TURN_FUNC_DOC_FILE_MAPPING

from distillery.workers.envs.base import Task
from distillery.workers.envs.bfcl_tools import bfcl_tool, json_schema_tool

BENCHMARK_NAME = "bfcl_multi_turn_base"
CATEGORY = "multi_turn_base"
DATA_FILE = "BFCL_v4_multi_turn_base.json"

# BFCL appends this to every function description of Python categories
# (bfcl_eval.utils._get_language_specific_hint); models are evaluated with it.
PYTHON_HINT = " Note that the provided function is in Python 3 syntax."

# The prompt variant our "prompt" format reproduces: BFCL's default.
PROMPT_VARIANT = (
    "ret_fmt=python&tool_call_tag=False&func_doc_fmt=json&prompt_fmt=plaintext&style=classic"
)


def _data_dir() -> Path:
    return Path(str(resources.files("bfcl_eval") / "data"))


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _task_number(task_id: str) -> int:
    return int(task_id.rsplit("_", 1)[1])


@functools.cache
def class_docs(class_name: str) -> tuple[dict[str, Any], ...]:
    path = _data_dir() / "multi_turn_func_doc" / MULTI_TURN_FUNC_DOC_FILE_MAPPING[class_name]
    return tuple(_read_jsonl(path))


def _function_docs(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """The docs BFCL shows for `entry`: every function of its involved classes.

    bfcl-eval's own harness (populate_test_cases_with_predefined_functions) offers them
    all, `excluded_function` included, so the official numbers are comparable only if we
    do the same.
    """
    docs = []
    for class_name in entry["involved_classes"]:
        for doc in class_docs(class_name):
            doc = copy.deepcopy(doc)
            doc["description"] += PYTHON_HINT
            docs.append(doc)
    return docs


def _turn_text(messages: list[dict[str, Any]]) -> str:
    return "\n\n".join(m["content"] for m in messages if m.get("role") == "user")


def _build_task(entry: dict[str, Any], ground_truth: list[list[str]]) -> Task:
    docs = _function_docs(entry)
    classes = list(entry["involved_classes"])
    # Which class owns each function, so memory can name it `Class.method`.
    function_classes = {doc["name"]: cls for cls in classes for doc in class_docs(cls)}
    return Task(
        task_id=entry["id"],
        benchmark=BENCHMARK_NAME,
        turns=tuple(_turn_text(turn) for turn in entry["question"]),
        tools=tuple(bfcl_tool(doc) for doc in docs),
        function_docs=tuple(docs),
        group_id="+".join(sorted(classes)),
        metadata={
            "involved_classes": classes,
            "function_classes": function_classes,
            "initial_config": entry["initial_config"],
            "ground_truth": ground_truth,
            "excluded_function": list(entry.get("excluded_function", [])),
        },
    )


@functools.lru_cache(maxsize=1)
def load_data() -> tuple[dict[str, dict[str, Any]], dict[str, list[list[str]]], tuple[Task, ...]]:
    """(official entries by id, ground truth by id, tasks in id order), once per process."""
    data = _data_dir()
    entries = {e["id"]: e for e in _read_jsonl(data / DATA_FILE)}
    answers = {
        a["id"]: a["ground_truth"] for a in _read_jsonl(data / "possible_answer" / DATA_FILE)
    }
    missing = sorted(set(entries) - set(answers))
    if missing:
        raise RuntimeError(f"bfcl-eval data has no ground truth for {missing[:5]}")
    ordered = sorted(entries, key=_task_number)
    # Tasks get their own copies: the official entries stay pristine for scoring.
    tasks = tuple(
        _build_task(copy.deepcopy(entries[i]), copy.deepcopy(answers[i])) for i in ordered
    )
    return entries, answers, tasks


# ------------------------------------------------------------------------ prompts


def prompt_system_prompt(function_docs: list[dict[str, Any]] | tuple[dict[str, Any], ...]) -> str:
    """BFCL's default prompting system prompt, assembled from bfcl-eval's own templates.

    Mirrors `formulate_system_prompt` for `PROMPT_VARIANT` (python calls, no tool-call
    tag, JSON docs, plaintext, classic style) without importing its heavy module.
    """
    return _format_prompt(json.dumps(list(function_docs), indent=4))


def _format_prompt(functions_json: str) -> str:
    style = default_prompts.PROMPT_STYLE_TEMPLATES["classic"]
    tool_call_format = style["tool_call_no_tag"].format(
        output_format=default_prompts.OUTPUT_FORMAT_MAPPING["python"],
        param_types=default_prompts.PARAM_TYPE_MAPPING["python"],
    )
    available_tools = style["available_tools"].format(format="json", functions=functions_json)
    return default_prompts.PROMPT_TEMPLATE_MAPPING["plaintext"].format(
        persona=style["persona"],
        task=style["task"],
        tool_call_format=tool_call_format,
        multiturn_behavior=style["multiturn_behavior"],
        available_tools=available_tools,
    )


# Dumping ~20 docs with indent takes ~1 ms of pure-Python JSON per episode. A task's
# docs are its classes' docs in order, so the prompt is assembled from each class's
# docs dumped once per process; the result is the same string, character for character.


@functools.cache
def _class_doc_items(class_name: str) -> tuple[str, ...]:
    """Each doc of the class as `json.dumps(docs, indent=4)` writes a list item."""
    items = []
    for doc in class_docs(class_name):
        doc = copy.deepcopy(doc)
        doc["description"] += PYTHON_HINT
        # Raw newlines in JSON are structural (newlines in strings are escaped), so
        # indenting every line by one level gives the item's encoding inside a list.
        items.append("    " + json.dumps(doc, indent=4).replace("\n", "\n    "))
    return tuple(items)


@functools.lru_cache(maxsize=512)
def _classes_prompt(involved_classes: tuple[str, ...]) -> str:
    items = [item for name in involved_classes for item in _class_doc_items(name)]
    return _format_prompt("[\n" + ",\n".join(items) + "\n]" if items else "[]")


@functools.cache
def json_schema_task(task_id: str) -> Task:
    """The task with plain JSON-schema tools (the `json_schema_tools` option)."""
    task = _loaded_tasks()[task_id]
    return dataclasses.replace(
        task, tools=tuple(json_schema_tool(doc) for doc in task.function_docs)
    )


@functools.cache
def _loaded_tasks() -> dict[str, Task]:
    return {task.task_id: task for task in load_data()[2]}


def task_prompt(task: Task) -> str:
    """`prompt_system_prompt(task.function_docs)`, shared by tasks built from the data
    (tasks are read-only; any other docs are dumped as they are)."""
    loaded = _loaded_tasks().get(task.task_id)
    if loaded is not None and loaded.function_docs is task.function_docs:
        entry = load_data()[0][task.task_id]  # the pristine official entry
        return _classes_prompt(tuple(entry["involved_classes"]))
    return prompt_system_prompt(task.function_docs)
