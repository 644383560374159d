"""BFCL V3 multi-turn base: 200 stateful API tasks scored by bfcl-eval's own checker.

This module plays and scores an episode (`BfclEnvironment`) and is the adapter
(`BfclMultiTurnBase`); the tasks and the prompting system prompt are `bfcl_tasks.py`'s.

Tasks, function docs and ground truth come from the data packaged with `bfcl-eval`;
calls run on BFCL's own backends through its executor, and an episode is scored by its
`multi_turn_checker`, in-process. Only light bfcl-eval modules are imported (constants,
the multi-turn executor/checker and the backends need nothing beyond `mpmath`).

BFCL's executor keeps each backend instance in its module's globals under
``{model_name}_{test_id}_{class}_instance`` and `eval`s the call strings. So every
episode gets its own model name (isolation), only canonical sources of validated calls
ever reach the executor (see `calls.py`), and `close()` deletes every instance the
episode created, the checker's ``_eval`` and ``_ground_truth_eval`` replays included.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import itertools
import json
import re
import threading
from collections import Counter
from typing import Any

from distillery.workers.envs.base import (
    BenchmarkUnavailable,
    ParsedAction,
    RejectedCall,
    Score,
    Task,
    ToolCall,
    ToolResult,
)
from distillery.workers.envs.bfcl_pipeline import (
    BFCL_CONVENTIONS,
    BfclOptions,
    bfcl_conventions,
)
from distillery.workers.envs.calls import (
    PROTECTION_LIMITS,
    CallLimits,
    parse_native_calls,
    parse_text_calls,
    refusal,
)
from distillery.workers.llm.reasoning import split_think_blocks

# The version the adapter is checked against (tests/workers/envs/test_bfcl_agreement.py).
BFCL_EVAL_REQUIREMENT = "bfcl-eval==2026.3.23"

try:  # bfcl-eval, and the adapter's modules that import it
    from bfcl_eval.constants import default_prompts
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_checker, multi_turn_utils

    from distillery.workers.envs import bfcl_tasks
    from distillery.workers.envs.bfcl_costs import execution_cost_error
    from distillery.workers.envs.bfcl_tasks import (
        BENCHMARK_NAME,
        CATEGORY,
        class_docs,
        json_schema_task,
        load_data,
        task_prompt,
    )
    from distillery.workers.envs.bfcl_tasks import (  # re-exported: imported from here
        PROMPT_VARIANT as PROMPT_VARIANT,
    )
    from distillery.workers.envs.bfcl_tasks import PYTHON_HINT as PYTHON_HINT
    from distillery.workers.envs.bfcl_tasks import (
        prompt_system_prompt as prompt_system_prompt,
    )
    from distillery.workers.envs.bfcl_tools import keyword_call
except ModuleNotFoundError as exc:  # said before a run starts (requirements check)
    if (exc.name or "").partition(".")[0] != "bfcl_eval":
        raise
    raise BenchmarkUnavailable(
        "bfcl-eval is not installed", f"pip install --no-deps {BFCL_EVAL_REQUIREMENT}"
    ) from exc

EXECUTION_ERROR_PREFIX = "Error during execution:"

# What the checker replays for a call that was decoded but not allowed to run: BFCL's
# executor would have run the model's call and got an error; this gets one too
# (a NameError) and changes no state, so the step counts exactly as BFCL counts it.
REJECTED_CALL_SOURCE = "distillery_rejected_call()"

# Only with the `native_system_prompt` option: BFCL's FC handlers send no system prompt.
NATIVE_SYSTEM_PROMPT = (
    "You are an assistant that completes the user's requests by calling the provided "
    "tools. At each turn, try your best to complete everything the user asked within "
    "that turn: keep calling tools, and use their results, until the request is "
    "fulfilled to the best of your ability. If no tool fits, or a required argument is "
    "missing, say so instead of guessing. When you have nothing left to call, reply "
    "without any tool call: that ends the turn."
)

# `BfclEnvironment.limits_fired` key of a call refused by its execution cost.
EXECUTION_COST = "execution_cost"

# How a reply is read, kept and requested (BFCL_CONVENTIONS, the limits): part of the
# fingerprint, so a change re-runs BFCL's episodes.
REPLY_HANDLING = (
    "reply as sent (decoded and re-sent as the server sent it), tool messages paired "
    "in order with the ids as sent, constant arithmetic computed, temperature only; "
    f"protections {dataclasses.astuple(PROTECTION_LIMITS)}"
)

# Name suffixes BFCL's executor appends to the model name (episode, checker replays).
_INSTANCE_SUFFIXES = ("", "_eval", "_ground_truth_eval")

# The executor and the checker are synchronous and never await, so asyncio episodes
# cannot interleave inside them; the lock covers episodes driven from threads.
_EXECUTOR_LOCK = threading.RLock()
_EPISODE_COUNTER = itertools.count()


# -------------------------------------------------------------------- environment


@functools.cache
def _allowed_names(involved_classes: tuple[str, ...]) -> frozenset[str]:
    """The functions of these classes (the names `_function_docs` offers)."""
    return frozenset(doc["name"] for cls in involved_classes for doc in class_docs(cls))


def _model_name(episode_tag: str) -> str:
    """A name unique in this process, safe in the executor's global names."""
    readable = re.sub(r"[^A-Za-z0-9_]", "_", episode_tag)[:48]
    digest = hashlib.sha1(episode_tag.encode("utf-8")).hexdigest()[:8]
    return f"distillery_{readable}_{digest}_{next(_EPISODE_COUNTER)}"


def _result_error(content: str) -> str | None:
    """The failure a tool result reports, if any (executor exception or backend error)."""
    if content.startswith(EXECUTION_ERROR_PREFIX):
        return content
    if content.startswith("{"):
        try:
            payload = json.loads(content)
        except ValueError:
            return None
        if isinstance(payload, dict) and payload.get("error"):
            return str(payload["error"])
    return None


class BfclEnvironment:
    """One isolated episode of one BFCL multi-turn task."""

    def __init__(
        self,
        task: Task,
        entry: dict[str, Any],
        ground_truth: list[list[str]],
        episode_tag: str,
        limits: CallLimits = PROTECTION_LIMITS,
        options: BfclOptions | None = None,
    ) -> None:
        self.task = task
        self.model_name = _model_name(episode_tag)
        # Private copies: nothing the agent does to `task` can change what is scored.
        self._entry = {
            "id": entry["id"],
            "initial_config": copy.deepcopy(entry["initial_config"]),
            "involved_classes": list(entry["involved_classes"]),
        }
        self._ground_truth = copy.deepcopy(ground_truth)
        # From the official docs, not `task`: a tampered Task must not widen what runs.
        self._allowed = _allowed_names(tuple(entry["involved_classes"]))
        self._limits = limits
        self._options = options or BfclOptions()
        self._turns: list[list[list[str]]] = []  # closed turns -> steps -> call sources
        self._current: list[list[str]] = []
        self._closed = False
        # How often each protection refused a call (`RejectedCall.limit`, execution cost).
        self.limits_fired: Counter[str] = Counter()

    # -- prompts and parsing

    def system_prompt(self, action_format: str) -> str:
        """BFCL's prompting system prompt; none in native mode, as BFCL's FC handlers."""
        if action_format == "prompt":
            return task_prompt(self.task)
        if action_format == "native":
            return NATIVE_SYSTEM_PROMPT if self._options.native_system_prompt else ""
        raise ValueError(f"unknown action format {action_format!r}; use 'native' or 'prompt'")

    def parse_tool_calls(self, tool_calls: list[dict[str, Any]]) -> ParsedAction:
        """The reply's tool calls as BFCL's FC handler decodes them: every call's
        arguments must be a JSON object (empty or null ones make the whole response
        undecodable, unless `empty_arguments_as_object`)."""
        if self._options.empty_arguments_as_object:
            tool_calls = [_empty_as_object(call) for call in tool_calls]
        return parse_native_calls(
            tool_calls, self._allowed, self._limits, self._options.report_invalid_calls
        )

    def parse_text(self, text: str) -> ParsedAction:
        """A prompt-format reply as BFCL's prompting handler decodes it: the content as
        sent (a <think> block included, unless `strip_think_blocks`), constant arithmetic
        computed (unless `refuse_arithmetic`)."""
        if self._options.strip_think_blocks and isinstance(text, str):
            text = split_think_blocks(text)[0]
        return parse_text_calls(
            text,
            self._allowed,
            self._limits,
            positional_args=self._options.positional_args,
            report_invalid=self._options.report_invalid_calls,
            arithmetic=not self._options.refuse_arithmetic,
        )

    # -- acting

    def step(self, action: ParsedAction) -> list[ToolResult]:
        """Run the valid calls in order; rejected ones are answered with an error.

        Results keep the response's order. The step is recorded for the checker as
        BFCL's loop records it: every decoded call, a rejected one as a call that
        fails and changes nothing (`REJECTED_CALL_SOURCE`).
        """
        self._require_open()
        runnable: list[ToolCall] = []
        refused: list[RejectedCall] = list(action.rejected)
        for call in action.calls:
            # Re-checked here too: a ParsedAction may have been built by hand. A call
            # whose cost is unbounded is refused too (it could never be stopped).
            found = refusal(call, self._allowed, self._limits)
            if found is None and (cost := execution_cost_error(call)) is not None:
                found = (cost, EXECUTION_COST)
            if found is None:
                runnable.append(call)
            else:
                name = call.name if isinstance(call.name, str) else "<invalid>"
                reason, limit = found
                refused.append(RejectedCall(f"{name[:80]}(...)", reason, call.call_id, limit=limit))
        self.limits_fired.update(r.limit for r in refused if r.limit)
        executed = self._execute(runnable)
        placed = sorted((r for r in refused if r.position >= 0), key=lambda r: r.position)
        ordered: list[ToolResult | RejectedCall] = []
        done = 0
        while placed or done < len(executed):
            if placed and (placed[0].position <= len(ordered) or done == len(executed)):
                ordered.append(placed.pop(0))
            else:
                ordered.append(executed[done])
                done += 1
        ordered += [r for r in refused if r.position < 0]
        results: list[ToolResult] = []
        sources: list[str] = []
        for item in ordered:
            if isinstance(item, ToolResult):
                results.append(item)
                sources.append(item.call)
            else:
                results.append(_rejection(item))
                if item.counted:
                    sources.append(REJECTED_CALL_SOURCE)
        if sources:
            self._current.append(sources)
        return results

    def _execute(self, calls: list[ToolCall]) -> list[ToolResult]:
        if not calls:
            return []
        sources = [call.source for call in calls]
        with _EXECUTOR_LOCK:
            outputs, _ = multi_turn_utils.execute_multi_turn_func_call(
                func_call_list=sources,
                initial_config=self._entry["initial_config"],
                involved_classes=self._entry["involved_classes"],
                model_name=self.model_name,
                test_entry_id=self._entry["id"],
                long_context=False,
                is_evaL_run=False,
            )
        return [
            ToolResult(
                call=source,
                content=output,
                error=_result_error(output),
                function=call.name,
                call_id=call.call_id,
            )
            for call, source, output in zip(calls, sources, outputs, strict=True)
        ]

    def end_turn(self) -> None:
        self._require_open()
        if len(self._turns) >= len(self.task.turns):
            raise RuntimeError(f"{self.task.task_id}: every turn is already closed")
        self._turns.append(self._current)
        self._current = []

    # -- scoring and cleanup

    def score(self) -> Score:
        """The official verdict; an episode that did not close every turn is failed."""
        expected = len(self._ground_truth)
        if len(self._turns) < expected:
            return Score(
                success=False,
                error_type="multi_turn:force_terminated",
                error_message=(
                    f"Model was force-terminated: {len(self._turns)} of {expected} turns "
                    "were completed."
                ),
            )
        # Like BFCL's decoder: steps that decoded to nothing are not steps.
        decoded = [[step for step in turn if step] for turn in self._turns]
        with _EXECUTOR_LOCK:
            self._drop_instances(("_eval", "_ground_truth_eval"))  # a re-score starts fresh
            try:
                result = multi_turn_checker.multi_turn_checker(
                    decoded,
                    copy.deepcopy(self._ground_truth),
                    copy.deepcopy(self._entry),
                    CATEGORY,
                    self.model_name,
                )
            except Exception as exc:  # a checker bug is reported, never raised
                return Score(False, "checker_exception", f"{type(exc).__name__}: {exc}")
            finally:
                self._drop_instances(("_eval", "_ground_truth_eval"))
        if result.get("valid"):
            return Score(success=True)
        message = result.get("error_message")
        return Score(
            success=False,
            error_type=str(result.get("error_type") or "multi_turn:unknown_error"),
            error_message=None if message is None else str(message),
        )

    def close(self) -> None:
        with _EXECUTOR_LOCK:
            self._drop_instances(_INSTANCE_SUFFIXES)
        self._closed = True

    def instance_names(self, suffixes: tuple[str, ...] = _INSTANCE_SUFFIXES) -> list[str]:
        """The executor globals this episode may own (named exactly as BFCL names them)."""
        names = []
        for suffix in suffixes:
            for class_name in self._entry["involved_classes"]:
                raw = f"{self.model_name}{suffix}_{self._entry['id']}_{class_name}_instance"
                names.append(re.sub(r"[-./:]", "_", raw))
        return names

    def _drop_instances(self, suffixes: tuple[str, ...]) -> None:
        namespace = multi_turn_utils.__dict__
        for name in self.instance_names(suffixes):
            namespace.pop(name, None)

    def _require_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"environment of {self.task.task_id} is closed")

    def __enter__(self) -> BfclEnvironment:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _empty_as_object(call: Any) -> Any:
    """`call` with empty or null arguments as {} (the `empty_arguments_as_object`
    repair), in either shape of a tool call."""
    if not isinstance(call, dict):
        return call
    function = call.get("function")
    if isinstance(function, dict):
        if function.get("arguments") in (None, ""):
            return {**call, "function": {**function, "arguments": "{}"}}
        return call
    if call.get("arguments") in (None, ""):
        return {**call, "arguments": "{}"}
    return call


def _rejection(rejected: RejectedCall) -> ToolResult:
    return ToolResult(
        call=rejected.raw,
        # BFCL's executor words every failed call so; this one was never executed.
        content=f"{EXECUTION_ERROR_PREFIX} {rejected.reason}",
        error=rejected.reason,
        function=None,
        call_id=rejected.call_id,
        rejected=True,
    )


# ---------------------------------------------------------------------- benchmark


class BfclMultiTurnBase:
    """The `bfcl_multi_turn_base` benchmark adapter."""

    name = BENCHMARK_NAME
    max_steps_per_turn = default_prompts.MAXIMUM_STEP_LIMIT
    # A task's group is its set of API classes: tasks sharing it are not one scenario.
    groups_are_scenarios = False
    options_model = BfclOptions
    conventions = BFCL_CONVENTIONS
    # Where distillery differs from `bfcl generate` whatever the options (recorded with
    # every run; docs/fidelity/bfcl.md): protections of the machine and of the project's
    # rules. Each refusal is counted in the episode's record (`limits_fired`).
    known_deviations = (
        # calls over PROTECTION_LIMITS are refused (BFCL runs a call of any size)
        "call_size_limits",
        # values only `eval` could compute (names, calls, attributes) are not computed
        "unsafe_arguments_refused",
        # MathAPI calls whose cost has no bound are refused (bfcl_costs.py)
        "execution_cost_limits",
        # a reply over the history bounds is kept cut (loop.MAX_HISTORY_*)
        "history_bounds",
        # NUL and lone surrogates are removed from a reply (it could not be re-sent)
        "unencodable_text_cleaned",
        # an endpoint that keeps failing is an unscored infra_error (BFCL scores the
        # entry as failed with "Error during inference")
        "infra_errors_unscored",
    )

    def __init__(
        self,
        limits: CallLimits = PROTECTION_LIMITS,
        settings: BfclOptions | None = None,
    ) -> None:
        self.limits = limits
        self.settings = settings or BfclOptions()
        # The options that change how the loop plays apply to this adapter's episodes.
        self.conventions = bfcl_conventions(self.settings)

    @classmethod
    def fingerprint(cls) -> tuple[str, ...]:
        """What the model is shown besides the task and its data, read at call time.
        (The order is part of every stage key: append, do not reorder.)"""
        return (
            NATIVE_SYSTEM_PROMPT,
            bfcl_tasks.PROMPT_VARIANT,
            bfcl_tasks.PYTHON_HINT,
            EXECUTION_ERROR_PREFIX,
            REPLY_HANDLING,
        )

    @classmethod
    def versions(cls) -> dict[str, str]:
        from importlib.metadata import PackageNotFoundError, version

        try:
            return {"bfcl-eval": version("bfcl-eval")}
        except PackageNotFoundError:  # importable without its metadata (a source tree)
            return {}

    def load_tasks(self, limit: int | None = None, task_ids: list[str] | None = None) -> list[Task]:
        """Tasks in id order; treat them as read-only (they are shared per process)."""
        _, _, tasks = load_data()
        selected = list(tasks)
        if task_ids is not None:
            known = {t.task_id for t in tasks}
            unknown = [i for i in task_ids if i not in known]
            if unknown:
                raise ValueError(f"unknown {BENCHMARK_NAME} task ids: {unknown[:10]}")
            wanted = set(task_ids)
            selected = [t for t in selected if t.task_id in wanted]
        if limit is not None:
            if limit < 0:
                raise ValueError(f"limit must be >= 0, got {limit}")
            selected = selected[:limit]
        if self.settings.json_schema_tools:
            selected = [json_schema_task(task.task_id) for task in selected]
        return selected

    def make_env(self, task: Task, episode_tag: str) -> BfclEnvironment:
        entries, answers, _ = load_data()
        if task.task_id not in entries:
            raise ValueError(f"unknown {BENCHMARK_NAME} task id {task.task_id!r}")
        return BfclEnvironment(
            task,
            entries[task.task_id],
            answers[task.task_id],
            episode_tag,
            self.limits,
            self.settings,
        )

    def oracle_turns(self, task: Task) -> list[list[str]]:
        """The ground truth per turn, positional arguments named (BFCL's decoder drops
        positional arguments, so the oracle writes every argument by name)."""
        entries, answers, _ = load_data()
        if task.task_id not in answers:
            raise ValueError(f"unknown {BENCHMARK_NAME} task id {task.task_id!r}")
        classes = entries[task.task_id]["involved_classes"]
        return [[keyword_call(call, classes) for call in turn] for turn in answers[task.task_id]]
