"""The AMD student (paper Algorithm 1) as episode hooks: proactive Workflow + Subtask
injection into the system prompt, reactive Function hints inside failing tool results.

Knows retrieval and injection, nothing of Ray or of a benchmark's internals: it sees
user turns, the system prompt and `ToolResult`s. Every hit's provenance is re-checked
against the protocol's isolation rule and counted, so a run can prove its isolation.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from distillery.workers.envs.base import ToolResult
from distillery.workers.llm.types import ChatResult, InvalidReply, RequestRejected, Usage
from distillery.workers.memory.amd import appworld_prompts, fn_ranking, toolsandbox_prompts
from distillery.workers.memory.amd.code_trajectory import code_of, failing_apis, render_schema
from distillery.workers.memory.amd.records import (
    FunctionRecord,
    MemorySource,
    SubtaskSegment,
    WorkflowMemory,
)
from distillery.workers.memory.amd.settings import BFCL, BenchmarkProfile, RetrievalConfig

DECOMPOSE_PROMPT = """Break the given task into sequential subtasks.
Rules:
- Each subtask is a short description of one specific operation (at most 8 words).
- Follow the order in which the operations must happen.
- Reply with ONLY a JSON array of strings. At most {max_subtasks} subtasks.
Example:
Task: Move 'report.txt' from the documents folder into a new 'archive' folder, then post a tweet saying it is archived.
["go to the documents folder", "create the archive folder", "move the report into archive", "post a tweet about the archive"]
Task: {instruction}"""

# The student's decomposition prompt by benchmark profile (BFCL's above otherwise).
DECOMPOSE_PROMPTS = {"appworld": appworld_prompts.DECOMPOSE_PROMPT}

MEMORY_HEADER = (
    "The following memory was distilled from a stronger agent's successful runs on "
    "similar tasks. Use it as guidance; the user's request always takes precedence."
)


class Hit(Protocol):
    @property
    def entry(self) -> Any: ...
    @property
    def score(self) -> float: ...


class MemoryLookup(Protocol):
    """Retrieval over one memory bank per type, isolation applied for `task_id`."""

    async def workflow(
        self, query: str, task_id: str, k: int, threshold: float | None
    ) -> list[Hit]: ...

    async def subtasks(
        self, queries: list[str], task_id: str, k: int, threshold: float | None
    ) -> list[Hit]: ...

    async def functions(
        self, function: str, instruction: str, task_id: str, k: int, threshold: float | None
    ) -> list[Hit]: ...


IsolationCheck = Callable[[MemorySource], bool]
AskModel = Callable[[list[dict[str, Any]]], Awaitable[ChatResult]]


@dataclass
class RetrievalLog:
    """What was injected where, for the episode record and the isolation audit."""

    events: list[dict[str, Any]] = field(default_factory=list)
    checked: int = 0
    violations: int = 0
    decomposition: list[str] | None = None
    decomposition_fallback: bool = False
    usage: Usage = Usage()
    llm_calls: int = 0
    # A non-BFCL profile and the settings it read (BFCL's logs stay as they were).
    profile: dict[str, Any] | None = None
    query: str | None = None  # set when RetrievalConfig.query is not the user's turn

    def as_dict(self) -> dict[str, Any]:
        out = {
            "retrievals": self.events,
            "isolation_checked": self.checked,
            "isolation_violations": self.violations,
            "decomposition": self.decomposition,
            "decomposition_fallback": self.decomposition_fallback,
        }
        if self.profile is not None:
            out["profile"] = self.profile
        if self.query is not None:
            out["query"] = self.query
        return out


class AmdHooks:
    """EpisodeHooks for one student episode with AMD memory."""

    def __init__(
        self,
        task_id: str,
        lookup: MemoryLookup,
        config: RetrievalConfig,
        allows: IsolationCheck,
        ask_model: AskModel | None = None,
        user_turns: list[str] | None = None,
        profile: BenchmarkProfile = BFCL,
        hidden_query: str | None = None,
        tools: Sequence[dict[str, Any]] = (),
    ) -> None:
        ranks_calls = config.fn_ranking == "call_ngrams" and "fn" in config.types
        if ranks_calls and profile.actions == "code":
            raise ValueError(
                f"fn_ranking=call_ngrams ranks by a step's tool calls; {profile.name}'s "
                "actions are code: use fn_ranking=embedding"
            )
        self.task_id = task_id
        self.profile = profile
        self.lookup = lookup
        self.config = config
        self.allows = allows
        self.ask_model = ask_model
        self.user_turns = user_turns or []
        # The benchmark's simulated user's own instruction (config.query's option).
        self.hidden_query = hidden_query
        # The task's tools by name (OpenAI `tools` entries): the descriptions a
        # Function hint leads with (`fn_description`), as the student was given them.
        self.tool_schemas = _schemas_by_name(tools)
        # What the episode's first retrieval asked with (`_query`): the task query that
        # `fn_ranking=call_ngrams` ranks by when no example has a reasoning.
        self._task_query: str | None = None
        self.log = RetrievalLog()
        if profile != BFCL:
            self.log.profile = {"name": profile.name, "settings": config.read_settings()}
        self._workflow_block = ""
        self._subtask_block = ""

    def model_usage(self) -> tuple[int, Usage]:
        return self.log.llm_calls, self.log.usage

    def record(self) -> dict[str, Any]:
        return self.log.as_dict()

    # -- proactive injection -------------------------------------------------------

    async def before_turn(self, turn_index: int, user_text: str, system_prompt: str) -> str:
        cfg = self.config
        user_text = self._query(turn_index, user_text)
        if turn_index == 0 and "wf" in cfg.types:
            hits = await self.lookup.workflow(
                user_text, self.task_id, cfg.k("wf"), cfg.threshold("wf")
            )
            self._workflow_block = self._render_workflow(self._audit("wf", turn_index, hits))
        if "st" in cfg.types:
            if cfg.subtask_query == "per_turn":
                hits = await self.lookup.subtasks(
                    [user_text], self.task_id, cfg.k("st"), cfg.threshold("st")
                )
                self._subtask_block = self._render_subtasks(self._audit("st", turn_index, hits))
            elif turn_index == 0:
                labels = await self._decompose(user_text)
                hits = await self.lookup.subtasks(
                    labels, self.task_id, cfg.k("st"), cfg.threshold("st")
                )
                self._subtask_block = self._render_subtasks(self._audit("st", turn_index, hits))
        block = self._memory_block()
        return f"{block}\n\n{system_prompt}" if block else system_prompt

    def _query(self, turn_index: int, user_text: str) -> str:
        """What the proactive retrieval is asked with (`RetrievalConfig.query`): the
        user's turn, or the simulated user's hidden instruction for the first turn
        where the option asks for it and the benchmark has one (else the turn, logged)."""
        if turn_index != 0 or self.config.query != "hidden_user_instruction":
            if turn_index == 0:
                self._task_query = user_text
            return user_text
        self.log.query = (
            "hidden_user_instruction" if self.hidden_query else "user_turn (none hidden)"
        )
        self._task_query = self.hidden_query or user_text
        return self._task_query

    def _memory_block(self) -> str:
        parts = [p for p in (self._workflow_block, self._subtask_block) if p]
        if not parts:
            return ""
        block = "\n\n".join([MEMORY_HEADER, *parts])
        cap = self.config.block_max_chars
        if len(block) > cap:
            block = block[: cap - 30].rstrip() + "\n[memory truncated]"
        return block

    def _render_workflow(self, hits: list[Hit]) -> str:
        if not hits:
            return ""
        code = self.config.representation("wf") == "code"
        bodies = []
        for hit in hits:
            entry: WorkflowMemory = hit.entry
            bodies.append(entry.code if code else entry.text)
        return "[Workflow]\n" + "\n\n".join(bodies)

    def _render_subtasks(self, hits: list[Hit]) -> str:
        if not hits:
            return ""
        code = self.config.representation("st") == "code"
        bodies = []
        for hit in hits:
            seg: SubtaskSegment = hit.entry
            body = seg.code if code or not seg.text else seg.text
            bodies.append(f"[Subtask] {seg.label}: {seg.description}\n{body}")
        return "\n\n".join(bodies)

    async def _decompose(self, instruction: str) -> list[str]:
        """The student's own decomposition (paper figure 15); one retry, then the user
        turns seen so far serve as labels."""
        if self.ask_model is None:
            self.log.decomposition_fallback = True
            self.log.decomposition = [instruction]
            return [instruction]
        prompt = DECOMPOSE_PROMPTS.get(self.profile.name, DECOMPOSE_PROMPT).format(
            max_subtasks=self.config.max_subtasks, instruction=instruction
        )
        messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
        for _ in range(2):
            try:
                result = await self.ask_model(messages)
            except (RequestRejected, InvalidReply):
                break  # the model's failure to answer: fall back like an invalid answer
            self.log.usage = self.log.usage + result.usage
            self.log.llm_calls += 1
            labels, problem = parse_subtask_labels(result.text, self.config.max_subtasks)
            if labels:
                self.log.decomposition = labels
                return labels
            messages += [
                {"role": "assistant", "content": result.text},
                {
                    "role": "user",
                    "content": f"Invalid answer: {problem}. Reply with ONLY a JSON array of strings.",
                },
            ]
        self.log.decomposition_fallback = True
        self.log.decomposition = [instruction]
        return [instruction]

    # -- reactive injection --------------------------------------------------------

    async def after_step(
        self, turn_index: int, user_text: str, observations: list[ToolResult]
    ) -> list[ToolResult]:
        if "fn" not in self.config.types:
            return observations
        if self.profile.actions == "code":
            return [await self._code_function_hint(turn_index, user_text, o) for o in observations]
        out = []
        for i, obs in enumerate(observations):
            if obs.error and obs.function:
                hits = await self._function_examples(user_text, observations, i)
                hits = self._audit("fn", turn_index, hits, function=obs.function)
                hint = self._render_functions(obs.function, hits)
                if hint:
                    obs = _with_content(obs, obs.content + "\n\n" + hint)
            out.append(obs)
        return out

    async def _function_examples(
        self, user_text: str, step: list[ToolResult], failing: int
    ) -> list[Hit]:
        """The failing call's examples: the memory service's top k by embedding, or
        (`fn_ranking=call_ngrams`) every allowed record of the tool ranked here by the
        step's calls, as the authors' ToolSandbox student ranks them (fn_ranking.py)."""
        function = step[failing].function or ""
        cfg = self.config
        if cfg.fn_ranking == "embedding":
            return await self.lookup.functions(
                function, user_text, self.task_id, cfg.k("fn"), cfg.threshold("fn")
            )
        task_query = self._task_query or user_text
        # No threshold: their store has none (store.py:184-216); threshold_fn is unread.
        candidates = await self.lookup.functions(
            function, task_query, self.task_id, fn_ranking.CANDIDATES, None
        )
        records = fn_ranking.bank_order([h.entry for h in candidates])
        context = fn_ranking.recent_calls(step, failing)
        return list(fn_ranking.rank_examples(records, context, task_query, cfg.k("fn")))

    async def _code_function_hint(self, turn: int, user_text: str, obs: ToolResult) -> ToolResult:
        """A code block that failed (AppWorld's ``Execution failed`` output): the
        Function records of each API the error names (`failing_apis`), appended to the
        output the student reads next (Algorithm 1, lines 16-22)."""
        names = failing_apis(code_of(obs.call), obs.content)
        blocks = []
        for name in names:
            hits = await self.lookup.functions(
                name, user_text, self.task_id, self.config.k("fn"), self.config.threshold("fn")
            )
            hits = self._audit("fn", turn, hits, function=name)
            if hits:
                blocks.append(self._render_code_functions(hits))
        if not blocks:
            return obs
        return _with_content(obs, obs.content + "\n\n" + "\n\n".join(blocks))

    def _render_code_functions(self, hits: list[Hit]) -> str:
        """Figure 12's layout: the teacher's example (code), then the API's parameters
        and success response where its doc was seen."""
        code = self.config.representation("fn") == "code"
        header = appworld_prompts.FUNCTION_MEMORY_HEADER.format(function=hits[0].entry.function)
        lines = [header]
        for hit in hits:
            rec: FunctionRecord = hit.entry
            lines.append(rec.code if code or not rec.text else rec.text)
            schema = render_schema(rec.schema) if rec.schema else ""
            if schema:
                lines.append(schema)
        return "\n".join(lines)

    def _render_functions(self, function: str, hits: list[Hit]) -> str:
        """The hint appended to a failing call's result ("" for none): the tool's
        description (`fn_description`: from the task's tools, with or without an
        example, as memory_augmented_agent.py:167-173 adds it), then the examples, each
        led by why its call was made where the record has a reasoning."""
        code = self.config.representation("fn") == "code"
        lines = []
        schema = self.tool_schemas.get(function) if self.config.fn_description else None
        if schema:
            lines.append(function_description(function, schema))
        if not hits:
            return "\n".join(lines)
        lines.append(f"[Function memory] How a successful agent called `{hits[0].entry.function}`:")
        for hit in hits:
            rec: FunctionRecord = hit.entry
            if rec.reasoning:  # built on ToolSandbox only; shown first, as store.py:224-225
                lines.append(f"{toolsandbox_prompts.CALL_REASONING_LABEL}\n{rec.reasoning}")
            if code or not rec.text:
                lines.append(
                    f"Instruction: {rec.instruction}\nCall: {rec.call}\nResult: {rec.result}"
                )
            else:
                lines.append(rec.text)
        return "\n".join(lines)

    # -- isolation audit -----------------------------------------------------------

    def _audit(self, memory_type: str, turn: int, hits: list[Hit], **extra: Any) -> list[Hit]:
        """Re-check every hit's provenance; a disallowed hit is counted and dropped."""
        kept = []
        for hit in hits:
            self.log.checked += 1
            source: MemorySource = hit.entry.source
            allowed = self.allows(source)
            if not allowed:
                self.log.violations += 1
            else:
                kept.append(hit)
            self.log.events.append(
                {
                    "type": memory_type,
                    "turn": turn,
                    "memory_id": hit.entry.memory_id,
                    "source_task_id": source.task_id,
                    "score": round(float(hit.score), 4),
                    "allowed": allowed,
                    **extra,
                }
            )
        return kept


def parse_subtask_labels(text: str, max_subtasks: int) -> tuple[list[str], str | None]:
    """A JSON array of non-empty strings, at most `max_subtasks` (fences tolerated)."""
    match = re.search(r"\[.*\]", text or "", re.DOTALL)
    if not match:
        return [], "no JSON array found"
    try:
        value = json.loads(match.group(0))
    except json.JSONDecodeError as exc:
        return [], f"invalid JSON ({exc.msg})"
    if not isinstance(value, list) or not value:
        return [], "expected a non-empty JSON array"
    labels = [v.strip() for v in value if isinstance(v, str) and v.strip()]
    if len(labels) != len(value):
        return [], "every element must be a non-empty string"
    if len(labels) > max_subtasks:
        return [], f"{len(labels)} subtasks, at most {max_subtasks} allowed"
    return labels, None


def _with_content(obs: ToolResult, content: str) -> ToolResult:
    from dataclasses import replace

    return replace(obs, content=content)


def _schemas_by_name(tools: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """OpenAI `tools` entries (or bare function schemas) by function name."""
    out: dict[str, dict[str, Any]] = {}
    for tool in tools:
        fn = tool.get("function") if isinstance(tool.get("function"), dict) else tool
        if isinstance(fn, dict) and fn.get("name"):
            out[str(fn["name"])] = fn
    return out


def function_description(name: str, schema: dict[str, Any]) -> str:
    """A tool's description and parameters as the AMD authors' ToolSandbox student
    appends them to a failed call's result (memory_augmented_agent.py
    `_format_func_description`), from the OpenAI function schema the teacher was given
    (a record's `schema`; a wrapped ``{"function": {...}}`` is unwrapped)."""
    fn = schema.get("function", schema) if isinstance(schema.get("function"), dict) else schema
    params = fn.get("parameters") or {}
    props = params.get("properties") or {}
    required = set(params.get("required") or [])
    lines = [f"[Function Description] {fn.get('name') or name}: {fn.get('description', '')}"]
    if props:
        lines.append("Parameters:")
        for param, info in props.items():
            mark = " (required)" if param in required else ""
            info = info if isinstance(info, dict) else {}
            lines.append(
                f"  - {param} ({info.get('type', '')}){mark}: {info.get('description', '')}"
            )
    return "\n".join(lines)
