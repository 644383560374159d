"""AMD memory builders (section 3.2, appendix C): Workflow, Subtask and Function memory.

Input: the teacher's SUCCESSFUL episodes (`EpisodeRecord.success is True`; anything
else is refused by `build` and skipped, counted, by `build_all`). Output: the entries of
`memory/records.py`, each with its `MemorySource` provenance.

A "step" is one EXECUTED call: the calls of every `StepRecord` flattened in order,
rejected calls skipped (they never reached the environment). Calls that ran and
failed are kept in Workflow/Subtask memory (recoveries are worth showing) but never
become Function records.

Model output is untrusted and validated:

- Workflow insight (`validate_insight`): one paragraph of 2-4 sentences, under 120
  words; names at least one function the trajectory used in ``Class.method`` form
  (a bare method name counts only for a function whose class is unknown); names no
  ``Class.method`` of a known class that the trajectory did not call; contains no
  concrete argument value of the trajectory (`masking.find_values`); has a validation
  cue and a failure pattern (keyword check).
- Subtask segmentation (`parse_segments`): a JSON array (fences and surrounding prose
  stripped) of at most `max_segments` objects with integer 1-based
  ``start_step``/``end_step``, a label of at most 5 words and a non-empty description,
  covering every step exactly once (no gap, no overlap, in range).
- Text rendering: non-empty, no code fences, at most `max_words` words.

An invalid answer is retried ONCE with a message naming the violations; a second
invalid answer, or a request the server refuses (`RequestRejected`, e.g. a context
overflow), falls back to a deterministic entry built from the trajectory with
``fallback=True``. `InfraError` propagates: the caller retries or records the stage.
Every request, retry, fallback and violation is counted in `BuildStats`.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

from distillery.workers.agents.loop import OBSERVATION_NAME
from distillery.workers.llm.types import ChatResult, InvalidReply, RequestRejected
from distillery.workers.memory import prompts
from distillery.workers.memory.masking import (
    find_values,
    function_name,
    mask_call_detailed,
    mask_text,
    placeholders_in,
    preferred_placeholder,
    sanitise_observation,
)
from distillery.workers.memory.records import (
    FunctionRecord,
    MemorySource,
    SegmentStep,
    SubtaskSegment,
    WorkflowMemory,
)
from distillery.workers.trajectories import EpisodeRecord

SEGMENT_OBSERVATION_CHARS = 500
FUNCTION_RESULT_CHARS = 300
PROMPT_OBSERVATION_CHARS = 300  # observations as shown to the builder LLM
MAX_INSIGHT_WORDS = 120  # exclusive
MAX_LABEL_WORDS = 5

T = TypeVar("T")
R = TypeVar("R")


class BuilderLLM(Protocol):
    """What a builder needs from the LLM layer (e.g. a router bound to one request id)."""

    async def chat(self, messages: list[dict[str, Any]], **kwargs: Any) -> ChatResult: ...


@dataclass
class BuildStats:
    """Counts per builder kind (``wf``, ``st``, ``text``), for the orchestrator to log.

    `invalid` and `skipped` are keyed ``"<kind>:<reason>"`` (e.g. ``"wf:leak"``,
    ``"st:gap"``, ``"wf:unsuccessful"``). One instance may be shared by all builders.
    """

    requests: Counter[str] = field(default_factory=Counter)
    retries: Counter[str] = field(default_factory=Counter)
    fallbacks: Counter[str] = field(default_factory=Counter)
    # Built deterministically by design (no builder LLM configured, e.g. for the oracle
    # teacher): not a failure, so not counted as a fallback.
    deterministic: Counter[str] = field(default_factory=Counter)
    accepted: Counter[str] = field(default_factory=Counter)  # LLM answers used
    invalid: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    tokens_in: Counter[str] = field(default_factory=Counter)
    tokens_out: Counter[str] = field(default_factory=Counter)

    def merge(self, other: BuildStats) -> BuildStats:
        for name in self.__dataclass_fields__:
            getattr(self, name).update(getattr(other, name))
        return self

    def as_dict(self) -> dict[str, int]:
        """Flat metrics: ``{"wf.requests": 3, "invalid.wf:leak": 1, ...}``."""
        out: dict[str, int] = {}
        for name in (
            "requests",
            "retries",
            "fallbacks",
            "deterministic",
            "accepted",
            "tokens_in",
            "tokens_out",
        ):
            for kind, count in sorted(getattr(self, name).items()):
                out[f"{kind}.{name}"] = count
        for name in ("invalid", "skipped"):
            for key, count in sorted(getattr(self, name).items()):
                out[f"{name}.{key}"] = count
        return out


@dataclass(frozen=True)
class Violation:
    code: str  # short, stable: counted in BuildStats.invalid
    message: str  # told to the model on the retry


# --- trajectories -----------------------------------------------------------------


@dataclass(frozen=True)
class TrajectoryStep:
    index: int  # 1-based over the executed calls of the whole episode
    turn: int  # 0-based user turn
    function: str
    cls: str | None  # API class, when known
    call: str  # canonical source (concrete values)
    masked: str  # masked call
    observation: str  # raw content returned to the model
    error: str | None

    @property
    def qualified(self) -> str:
        return f"{self.cls}.{self.function}" if self.cls else self.function

    @property
    def failed(self) -> bool:
        return bool(self.error) or _looks_like_error(self.observation)


@dataclass(frozen=True)
class Trajectory:
    """A successful episode prepared for the builders: turns, executed steps, values."""

    episode: EpisodeRecord
    turns: tuple[str, ...]
    steps: tuple[TrajectoryStep, ...]
    values: dict[str, str]  # concrete value -> placeholder, over all calls
    known_classes: frozenset[str] = frozenset()

    @classmethod
    def from_episode(
        cls,
        episode: EpisodeRecord,
        turns: Sequence[str] | None = None,
        docs_by_function: Mapping[str, Mapping[str, Any]] | None = None,
        class_of_function: Mapping[str, str] | None = None,
    ) -> Trajectory:
        if episode.success is not True:
            raise ValueError(
                f"memory is built from successful episodes only; {episode.task_id} "
                f"({episode.episode_id}) has success={episode.success}"
            )
        turns = tuple(turns) if turns is not None else tuple(user_turns(episode))
        if not turns:
            raise ValueError(
                f"no user turns in {episode.task_id}'s messages_json; pass turns= explicitly"
            )
        docs = docs_by_function or {}
        classes = class_of_function or {}
        executed = [
            (record.turn, call, call.function or function_name(call.call) or "call")
            for record in episode.steps
            for call in record.calls
            if not call.rejected
        ]
        # Pass 1: every value's candidate placeholders over all calls; pass 2: each
        # call masked again with one placeholder per value, so a value reads the same
        # in every call, observation and description of the trajectory's entries.
        candidates: dict[str, list[str]] = {}
        for _, call, name in executed:
            for value, placeholder in mask_call_detailed(call.call, docs.get(name)).values.items():
                candidates.setdefault(value, []).append(placeholder)
        values = {value: preferred_placeholder(phs) for value, phs in candidates.items()}
        steps = tuple(
            TrajectoryStep(
                index=index,
                turn=turn,
                function=name,
                cls=classes.get(name),
                call=call.call,
                masked=mask_call_detailed(call.call, docs.get(name), values).masked,
                observation=call.content or "",
                error=call.error,
            )
            for index, (turn, call, name) in enumerate(executed, 1)
        )
        return cls(episode, turns, steps, values, frozenset(classes.values()))

    @property
    def query(self) -> str:
        return self.turns[0]

    def instruction(self, turn: int) -> str:
        return self.turns[turn] if 0 <= turn < len(self.turns) else ""

    @property
    def functions(self) -> tuple[str, ...]:
        """Functions called, in order of first use."""
        return tuple(dict.fromkeys(s.function for s in self.steps))

    @property
    def qualified_functions(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(s.qualified for s in self.steps))

    @property
    def placeholders(self) -> list[str]:
        """Placeholders of the masked calls, in order of first use."""
        return placeholders_in(" ".join(s.masked for s in self.steps))

    @property
    def ignore(self) -> set[str]:
        """Names that are not leaks even when an argument had the same text."""
        names = {s.function for s in self.steps} | {s.cls for s in self.steps if s.cls}
        return names | set(self.known_classes)

    @property
    def checked_values(self) -> list[str]:
        """The concrete values an insight must not contain (what `leaks` looks for)."""
        return [v for v in self.values if self.leaks(v)]

    def leaks(self, text: str) -> list[str]:
        return find_values(text, self.values, self.ignore)

    def mask(self, text: str) -> str:
        return mask_text(text, self.values, self.ignore)

    def source(self, split: str, teacher: str | None) -> MemorySource:
        ep = self.episode
        return MemorySource(ep.task_id, ep.group_id, split, teacher or ep.agent, ep.episode_id)

    def render(self, with_masked: bool = False) -> str:
        """The trajectory as the builder LLM reads it: turns, numbered steps, results."""
        lines = []
        by_turn: dict[int, list[TrajectoryStep]] = {}
        for step in self.steps:
            by_turn.setdefault(step.turn, []).append(step)
        for turn, text in enumerate(self.turns):
            lines.append(f"User turn {turn + 1}: {text}")
            steps = by_turn.get(turn, [])
            if not steps:
                lines.append("  (no function calls)")
            for step in steps:
                prefix = f"{step.cls}." if step.cls else ""
                lines.append(f"  Step {step.index}: {prefix}{step.call}")
                if with_masked:
                    lines.append(f"    masked: {step.masked}")
                label = "result (error)" if step.failed else "result"
                obs = sanitise_observation(step.error or step.observation, PROMPT_OBSERVATION_CHARS)
                lines.append(f"    {label}: {obs}")
        return "\n".join(lines)


def user_turns(episode: EpisodeRecord) -> list[str]:
    """The user messages of an episode's transcript (observation messages excluded)."""
    try:
        messages = json.loads(episode.messages_json or "[]")
    except json.JSONDecodeError:
        return []
    turns = []
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        if message.get("name") == OBSERVATION_NAME:
            continue
        content = message.get("content")
        if isinstance(content, list):  # content parts
            content = " ".join(
                p.get("text", "") for p in content if isinstance(p, dict) and p.get("text")
            )
        turns.append(str(content or ""))
    return turns


def _looks_like_error(content: str) -> bool:
    text = (content or "").strip()
    if not text.startswith("{"):
        return False
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        return False
    return isinstance(parsed, dict) and "error" in parsed


# --- LLM plumbing -----------------------------------------------------------------

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"^\s*```[\w-]*\s*\n?(.*?)\n?\s*```\s*$", re.DOTALL)


def _strip_reasoning(text: str) -> str:
    text = _THINK.sub("", text or "")
    if "</think>" in text:  # an unterminated block from a truncated template
        text = text.rsplit("</think>", 1)[1]
    return text.strip()


def _strip_fences(text: str) -> str:
    match = _FENCE.match(text)
    return match.group(1).strip() if match else text


class _LLMClient:
    """Prompt -> validated value, with one retry naming the violations."""

    def __init__(
        self,
        llm: BuilderLLM | None,
        kind: str,
        stats: BuildStats,
        chat_kwargs: Mapping[str, Any] | None,
    ) -> None:
        self.llm, self.kind, self.stats = llm, kind, stats
        self.chat_kwargs = dict(chat_kwargs or {})

    def count_fallback(self) -> None:
        counter = self.stats.deterministic if self.llm is None else self.stats.fallbacks
        counter[self.kind] += 1

    async def ask(
        self, prompt: str, validate: Callable[[str], tuple[T | None, list[Violation]]]
    ) -> T | None:
        """The first valid answer's value, or None (the caller falls back)."""
        if self.llm is None:
            return None
        messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
        for attempt in range(2):
            self.stats.requests[self.kind] += 1
            try:
                result = await self.llm.chat(messages, **self.chat_kwargs)
            except RequestRejected:
                self.stats.invalid[f"{self.kind}:request_rejected"] += 1
                return None
            except InvalidReply:
                self.stats.invalid[f"{self.kind}:invalid_reply"] += 1
                return None
            self.stats.tokens_in[self.kind] += result.usage.prompt_tokens
            self.stats.tokens_out[self.kind] += result.usage.completion_tokens
            text = _strip_reasoning(result.text or "")
            value, problems = validate(text)
            if not problems:
                self.stats.accepted[self.kind] += 1
                return value
            for problem in problems:
                self.stats.invalid[f"{self.kind}:{problem.code}"] += 1
            if attempt == 0:
                self.stats.retries[self.kind] += 1
                messages = [
                    *messages,
                    {"role": "assistant", "content": text},
                    {
                        "role": "user",
                        "content": prompts.RETRY_PROMPT.format(
                            problems="; ".join(p.message for p in problems)
                        ),
                    },
                ]
        return None


async def gather_ordered(
    items: Iterable[T], fn: Callable[[T], Awaitable[R]], concurrency: int
) -> list[R]:
    """`fn` over `items`, at most `concurrency` at a time, results in input order.

    The first exception cancels the rest and propagates unchanged (not as a group).
    """
    semaphore = asyncio.Semaphore(max(1, concurrency))

    async def one(item: T) -> R:
        async with semaphore:
            return await fn(item)

    tasks = [asyncio.ensure_future(one(item)) for item in items]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def _successful(
    episodes: Iterable[EpisodeRecord], kind: str, stats: BuildStats
) -> list[EpisodeRecord]:
    kept = []
    for episode in episodes:
        if episode.success is True:
            kept.append(episode)
        else:
            stats.skipped[f"{kind}:unsuccessful"] += 1
    return kept


# --- text helpers -----------------------------------------------------------------

_ABBREVIATIONS = re.compile(r"\b(e\.g|i\.e|etc|vs|cf|approx)\.", re.IGNORECASE)
_SENTENCE_END = re.compile(r"[.!?]+[\"')\]]*(?=\s|$)")
_MARKDOWN_LINE = re.compile(r"^\s*(?:[-*•+]\s|\d+[.)]\s|#{1,6}\s|```|>\s)", re.MULTILINE)
_QUALIFIED = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)\b")
_VALIDATION_CUE = re.compile(
    r"\b(verif\w*|check\w*|confirm\w*|ensur\w*|validat\w*|assert\w*|make sure|inspect\w*)\b",
    re.IGNORECASE,
)
_FAILURE_CUE = re.compile(
    r"\b(fail\w*|error\w*|avoid\w*|mistake\w*|pitfall\w*|wrong\w*|never|don't|do not|"
    r"instead of|forget\w*|miss\w*)\b",
    re.IGNORECASE,
)


def count_sentences(text: str) -> int:
    """Sentences of a paragraph ("e.g." and ``Class.method`` do not end one)."""
    protected = _ABBREVIATIONS.sub(lambda m: m.group(1).replace(".", "_") + "_", text)
    pieces = _SENTENCE_END.split(protected)
    return sum(1 for piece in pieces if re.search(r"[A-Za-z0-9<]", piece))


def count_words(text: str) -> int:
    return len(text.split())


def _clean_paragraph(text: str) -> str:
    text = _strip_fences(text.strip())
    text = re.sub(r"^\s*(?:\*\*)?insight(?:\*\*)?\s*:\s*", "", text, flags=re.IGNORECASE)
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        text = text[1:-1].strip()
    return text


# --- Workflow memory ----------------------------------------------------------------


def validate_insight(text: str, trajectory: Trajectory) -> list[Violation]:
    """Every rule the insight breaks (empty list: valid). See the module docstring."""
    problems: list[Violation] = []
    if not text.strip():
        return [Violation("empty", "the answer is empty; write the paragraph")]
    if _MARKDOWN_LINE.search(text) or re.search(r"\n\s*\n", text.strip()):
        problems.append(
            Violation("format", "write one plain paragraph: no bullets, headings or fences")
        )
    sentences = count_sentences(text)
    if not 2 <= sentences <= 4:
        problems.append(
            Violation("sentences", f"it has {sentences} sentence(s); write 2 to 4 sentences")
        )
    words = count_words(text)
    if words >= MAX_INSIGHT_WORDS:
        problems.append(
            Violation("too_long", f"it has {words} words; stay under {MAX_INSIGHT_WORDS} words")
        )
    valid = {s.qualified for s in trajectory.steps if s.cls}
    bare = {s.function for s in trajectory.steps if not s.cls}
    mentioned = {f"{m.group(1)}.{m.group(2)}" for m in _QUALIFIED.finditer(text)}
    unsupported = sorted(
        q for q in mentioned if q.split(".")[0] in trajectory.known_classes and q not in valid
    )
    named = bool(mentioned & valid) or any(
        re.search(rf"(?<![\w.]){re.escape(name)}\b", text) for name in bare
    )
    if not named:
        listed = ", ".join(trajectory.qualified_functions[:8])
        problems.append(
            Violation(
                "no_function",
                f"it names none of the functions used in Class.method form (e.g. {listed})",
            )
        )
    if unsupported:
        problems.append(
            Violation(
                "unsupported_function",
                "it names functions the trajectory never called: " + ", ".join(unsupported),
            )
        )
    leaks = trajectory.leaks(text)
    if leaks:
        shown = ", ".join(f"{v!r} -> {trajectory.values[v]}" for v in leaks[:10])
        problems.append(
            Violation("leak", f"it contains concrete values; write placeholders instead: {shown}")
        )
    if not _VALIDATION_CUE.search(text):
        problems.append(
            Violation("no_validation_cue", "add one validation cue (what to check or verify)")
        )
    if not _FAILURE_CUE.search(text):
        problems.append(
            Violation("no_failure_pattern", "add one common failure or mistake to avoid")
        )
    return problems


def fallback_insight(trajectory: Trajectory, max_functions: int = 6) -> str:
    """A deterministic insight: functions in order, placeholders, a cue, a pitfall."""
    qualified = list(trajectory.qualified_functions)
    shown = qualified[:max_functions]
    listed = _join(shown) + (" and related calls" if len(qualified) > len(shown) else "")
    placeholders = trajectory.placeholders[:4]
    first = f"Solve this kind of request by calling {listed}, in that order"
    if placeholders:
        first += f", passing typed placeholders such as {_join(placeholders)}"
    sentences = [first + "."]
    if len(trajectory.turns) > 1:
        sentences.append(
            "Handle each user turn in order and build on the state left by earlier calls."
        )
    sentences.append(
        "Validation cue: check that each result reports no error before issuing the next call."
    )
    failed = next((s for s in trajectory.steps if s.failed), None)
    if failed is not None:
        excerpt = _plain_excerpt(trajectory.mask(failed.error or failed.observation), 10)
        detail = f" ({excerpt})" if excerpt else ""
        sentences.append(
            f"Common failure to avoid: {failed.qualified} once returned an error{detail}, "
            "so fix its arguments or preconditions before retrying."
        )
    elif len(shown) > 1:
        sentences.append(
            f"Common failure to avoid: calling {shown[-1]} before {shown[0]} has set up the "
            "state it needs, or passing arguments of the wrong type."
        )
    else:
        sentences.append(
            f"Common failure to avoid: calling {shown[0]} with arguments of the wrong type "
            "or with values not taken from the request."
        )
    return " ".join(sentences)


class WorkflowBuilder:
    """One insight per successful trajectory, keyed by the task's first user message."""

    kind = "wf"

    def __init__(
        self,
        llm: BuilderLLM | None,
        *,
        docs_by_function: Mapping[str, Mapping[str, Any]] | None = None,
        class_of_function: Mapping[str, str] | None = None,
        split: str = "all",
        teacher: str | None = None,
        stats: BuildStats | None = None,
        chat_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        self.docs_by_function = docs_by_function or {}
        self.class_of_function = class_of_function or {}
        self.split, self.teacher = split, teacher
        self.stats = stats if stats is not None else BuildStats()
        self._client = _LLMClient(llm, self.kind, self.stats, chat_kwargs)

    def prepare(self, episode: EpisodeRecord, turns: Sequence[str] | None = None) -> Trajectory:
        return Trajectory.from_episode(
            episode, turns, self.docs_by_function, self.class_of_function
        )

    async def build(
        self, episode: EpisodeRecord, turns: Sequence[str] | None = None
    ) -> WorkflowMemory | None:
        """The entry for one successful episode; None when it executed no call."""
        trajectory = self.prepare(episode, turns)
        if not trajectory.steps:
            self.stats.skipped[f"{self.kind}:no_calls"] += 1
            return None
        insight = await self._client.ask(self.prompt(trajectory), self._validator(trajectory))
        fallback = insight is None
        if fallback:
            self._client.count_fallback()
            insight = fallback_insight(trajectory)
        return WorkflowMemory(
            memory_id=f"wf:{episode.episode_id}",
            source=trajectory.source(self.split, self.teacher),
            query=trajectory.query,
            text=insight,
            code="\n".join(s.masked for s in trajectory.steps),
            functions=trajectory.functions,
            fallback=fallback,
        )

    async def build_all(
        self,
        episodes: Iterable[EpisodeRecord],
        concurrency: int = 8,
        turns_by_task: Mapping[str, Sequence[str]] | None = None,
    ) -> list[WorkflowMemory]:
        """Entries of every successful episode, in input order (others are skipped)."""
        turns_by_task = turns_by_task or {}
        kept = _successful(episodes, self.kind, self.stats)
        built = await gather_ordered(
            kept, lambda ep: self.build(ep, turns_by_task.get(ep.task_id)), concurrency
        )
        return [entry for entry in built if entry is not None]

    def prompt(self, trajectory: Trajectory) -> str:
        forbidden = trajectory.checked_values
        return prompts.WORKFLOW_INSIGHT_PROMPT.format(
            instruction=trajectory.query,
            n_turns=len(trajectory.turns),
            trajectory=trajectory.render(with_masked=True),
            functions=", ".join(trajectory.qualified_functions),
            placeholders=", ".join(trajectory.placeholders) or "(none)",
            forbidden_values=", ".join(repr(v) for v in forbidden[:40]) or "(none)",
        )

    @staticmethod
    def _validator(trajectory: Trajectory) -> Callable[[str], tuple[str | None, list[Violation]]]:
        def validate(text: str) -> tuple[str | None, list[Violation]]:
            paragraph = _clean_paragraph(text)
            problems = validate_insight(paragraph, trajectory)
            return (None if problems else " ".join(paragraph.split())), problems

        return validate


# --- Subtask memory -----------------------------------------------------------------


@dataclass(frozen=True)
class Segment:
    start_step: int  # 1-based, inclusive
    end_step: int
    label: str
    description: str


def parse_segments(
    text: str, n_steps: int, max_segments: int = 6
) -> tuple[list[Segment] | None, list[Violation]]:
    """Parse and validate a segmentation answer (see the module docstring)."""
    raw = _strip_fences(_strip_reasoning(text))
    start, end = raw.find("["), raw.rfind("]")
    if start < 0 or end <= start:
        return None, [Violation("bad_json", "reply with a JSON array of segment objects")]
    try:
        items = json.loads(raw[start : end + 1])
    except json.JSONDecodeError as exc:
        return None, [Violation("bad_json", f"the JSON array does not parse ({exc.msg})")]
    if not isinstance(items, list) or not items:
        return None, [Violation("bad_json", "reply with a non-empty JSON array of objects")]
    problems: list[Violation] = []
    segments: list[Segment] = []
    for number, item in enumerate(items, 1):
        if not isinstance(item, dict):
            problems.append(Violation("bad_fields", f"item {number} is not an object"))
            continue
        first, last = _as_int(item.get("start_step")), _as_int(item.get("end_step"))
        label = item.get("label")
        description = item.get("description")
        if first is None or last is None:
            problems.append(
                Violation("bad_fields", f"item {number} needs integer start_step and end_step")
            )
            continue
        if not 1 <= first <= last <= n_steps:
            problems.append(
                Violation(
                    "out_of_range",
                    f"item {number} spans steps {first}-{last}; steps run from 1 to {n_steps} "
                    "and start_step must not exceed end_step",
                )
            )
        if not isinstance(label, str) or not label.strip():
            problems.append(Violation("empty_label", f"item {number} has no label"))
            label = ""
        elif count_words(label) > MAX_LABEL_WORDS:
            problems.append(
                Violation(
                    "label_too_long",
                    f"label {label!r} has {count_words(label)} words; use at most "
                    f"{MAX_LABEL_WORDS}",
                )
            )
        if not isinstance(description, str) or not description.strip():
            problems.append(Violation("empty_description", f"item {number} has no description"))
            description = ""
        segments.append(
            Segment(first, last, " ".join(label.split()), " ".join(description.split()))
        )
    if len(items) > max_segments:
        problems.append(
            Violation("too_many", f"there are {len(items)} segments; use at most {max_segments}")
        )
    problems += _coverage(segments, n_steps)
    if problems:
        return None, problems
    return sorted(segments, key=lambda s: s.start_step), []


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _coverage(segments: list[Segment], n_steps: int) -> list[Violation]:
    ranged = sorted(
        (s for s in segments if 1 <= s.start_step <= s.end_step <= n_steps),
        key=lambda s: (s.start_step, s.end_step),
    )
    problems: list[Violation] = []
    expected = 1
    for seg in ranged:
        if seg.start_step > expected:
            problems.append(
                Violation("gap", f"steps {expected}-{seg.start_step - 1} are in no segment")
            )
        elif seg.start_step < expected:
            problems.append(
                Violation(
                    "overlap",
                    f"segment {seg.start_step}-{seg.end_step} overlaps the previous one "
                    f"(steps {seg.start_step}-{min(expected - 1, seg.end_step)} twice)",
                )
            )
        expected = max(expected, seg.end_step + 1)
    if expected <= n_steps:
        problems.append(Violation("gap", f"steps {expected}-{n_steps} are in no segment"))
    return problems


def breakpoint_hints(trajectory: Trajectory) -> list[str]:
    """Rule-based boundaries: a new user turn, a change of API class."""
    hints = []
    for prev, step in zip(trajectory.steps, trajectory.steps[1:], strict=False):
        if step.turn != prev.turn:
            hints.append(f"- step {step.index} starts user turn {step.turn + 1}")
        elif step.cls and prev.cls and step.cls != prev.cls:
            hints.append(f"- step {step.index} switches from {prev.cls} to {step.cls}")
    return hints


def fallback_segmentation(trajectory: Trajectory, max_segments: int = 6) -> list[Segment]:
    """Deterministic segments at API boundaries covering every step exactly once.

    User-turn boundaries first; while there is room, runs are split further where the
    API class changes; then the adjacent pair with the fewest steps is merged until at
    most `max_segments` remain.
    """
    steps = trajectory.steps
    if not steps:
        return []
    runs: list[list[TrajectoryStep]] = []
    for step in steps:
        if runs and runs[-1][-1].turn == step.turn:
            runs[-1].append(step)
        else:
            runs.append([step])
    while len(runs) < max_segments:
        split = next(
            (
                (r, i)
                for r, run in enumerate(runs)
                for i in range(1, len(run))
                if run[i].cls and run[i - 1].cls and run[i].cls != run[i - 1].cls
            ),
            None,
        )
        if split is None:
            break
        r, i = split
        runs[r : r + 1] = [runs[r][:i], runs[r][i:]]
    while len(runs) > max(1, max_segments):
        sizes = [len(runs[i]) + len(runs[i + 1]) for i in range(len(runs) - 1)]
        i = sizes.index(min(sizes))
        runs[i : i + 2] = [runs[i] + runs[i + 1]]
    return [
        Segment(
            run[0].index,
            run[-1].index,
            _fallback_label(run),
            _fallback_description(run, trajectory),
        )
        for run in runs
    ]


def _fallback_label(run: list[TrajectoryStep]) -> str:
    words = [
        "use",
        *dict.fromkeys(s.cls for s in run if s.cls),
        *dict.fromkeys(s.function for s in run),
    ]
    return " ".join(words[:MAX_LABEL_WORDS])


def _fallback_description(run: list[TrajectoryStep], trajectory: Trajectory) -> str:
    first, last = run[0].turn, run[-1].turn
    where = f"user turn {first + 1}" if first == last else f"user turns {first + 1}-{last + 1}"
    excerpt = _plain_excerpt(trajectory.mask(trajectory.instruction(first)), 12)
    request = f" ({excerpt})" if excerpt else ""
    functions = _join(list(dict.fromkeys(s.qualified for s in run)))
    return f"Handle {where}{request} by calling {functions}."


class SubtaskBuilder:
    """Labelled segments of each successful trajectory, keyed by label + description."""

    kind = "st"

    def __init__(
        self,
        llm: BuilderLLM | None,
        max_segments: int = 6,
        *,
        docs_by_function: Mapping[str, Mapping[str, Any]] | None = None,
        class_of_function: Mapping[str, str] | None = None,
        split: str = "all",
        teacher: str | None = None,
        stats: BuildStats | None = None,
        chat_kwargs: Mapping[str, Any] | None = None,
        observation_chars: int = SEGMENT_OBSERVATION_CHARS,
    ) -> None:
        if max_segments < 1:
            raise ValueError("max_segments must be at least 1")
        self.max_segments = max_segments
        self.docs_by_function = docs_by_function or {}
        self.class_of_function = class_of_function or {}
        self.split, self.teacher = split, teacher
        self.observation_chars = observation_chars
        self.stats = stats if stats is not None else BuildStats()
        self._client = _LLMClient(llm, self.kind, self.stats, chat_kwargs)

    def prepare(self, episode: EpisodeRecord, turns: Sequence[str] | None = None) -> Trajectory:
        return Trajectory.from_episode(
            episode, turns, self.docs_by_function, self.class_of_function
        )

    async def build(
        self, episode: EpisodeRecord, turns: Sequence[str] | None = None
    ) -> list[SubtaskSegment]:
        trajectory = self.prepare(episode, turns)
        n_steps = len(trajectory.steps)
        if not n_steps:
            self.stats.skipped[f"{self.kind}:no_calls"] += 1
            return []
        segments = await self._client.ask(
            self.prompt(trajectory),
            lambda text: parse_segments(text, n_steps, self.max_segments),
        )
        fallback = segments is None
        if segments is None:
            self._client.count_fallback()
            segments = fallback_segmentation(trajectory, self.max_segments)
        source = trajectory.source(self.split, self.teacher)
        return [
            SubtaskSegment(
                memory_id=f"st:{episode.episode_id}:{index}",
                source=source,
                index=index,
                label=trajectory.mask(seg.label),
                description=trajectory.mask(seg.description),
                steps=tuple(
                    SegmentStep(
                        call=step.masked,
                        observation=sanitise_observation(
                            trajectory.mask(step.observation or step.error or ""),
                            self.observation_chars,
                        ),
                    )
                    for step in trajectory.steps[seg.start_step - 1 : seg.end_step]
                ),
                text="",
                fallback=fallback,
            )
            for index, seg in enumerate(segments)
        ]

    async def build_all(
        self,
        episodes: Iterable[EpisodeRecord],
        concurrency: int = 8,
        turns_by_task: Mapping[str, Sequence[str]] | None = None,
    ) -> list[SubtaskSegment]:
        turns_by_task = turns_by_task or {}
        kept = _successful(episodes, self.kind, self.stats)
        built = await gather_ordered(
            kept, lambda ep: self.build(ep, turns_by_task.get(ep.task_id)), concurrency
        )
        return [segment for segments in built for segment in segments]

    def prompt(self, trajectory: Trajectory) -> str:
        hints = breakpoint_hints(trajectory)
        return prompts.SUBTASK_SEGMENT_PROMPT.format(
            instruction=trajectory.query,
            n_steps=len(trajectory.steps),
            trajectory=trajectory.render(),
            hints="\n".join(hints) or "- (none: a single user turn and API class)",
            max_segments=self.max_segments,
        )


# --- Function memory ----------------------------------------------------------------


class FunctionBuilder:
    """Every successful call of every successful trajectory (no LLM), keyed by name.

    Identical records within one trajectory (same masked call, result and turn) are
    kept once.
    """

    kind = "fn"

    def __init__(
        self,
        *,
        docs_by_function: Mapping[str, Mapping[str, Any]] | None = None,
        class_of_function: Mapping[str, str] | None = None,
        split: str = "all",
        teacher: str | None = None,
        stats: BuildStats | None = None,
        result_chars: int = FUNCTION_RESULT_CHARS,
    ) -> None:
        self.docs_by_function = docs_by_function or {}
        self.class_of_function = class_of_function or {}
        self.split, self.teacher = split, teacher
        self.result_chars = result_chars
        self.stats = stats if stats is not None else BuildStats()

    def build(
        self, episode: EpisodeRecord, turns: Sequence[str] | None = None
    ) -> list[FunctionRecord]:
        trajectory = Trajectory.from_episode(
            episode, turns, self.docs_by_function, self.class_of_function
        )
        source = trajectory.source(self.split, self.teacher)
        records, seen = [], set()
        for step in trajectory.steps:
            if step.failed:
                self.stats.skipped[f"{self.kind}:failed_call"] += 1
                continue
            result = sanitise_observation(trajectory.mask(step.observation), self.result_chars)
            key = (step.masked, result, step.turn)
            if key in seen:
                self.stats.skipped[f"{self.kind}:duplicate"] += 1
                continue
            seen.add(key)
            records.append(
                FunctionRecord(
                    memory_id=f"fn:{episode.episode_id}:{step.index}",
                    source=source,
                    function=step.function,
                    call=step.masked,
                    result=result,
                    # Shown to the student beside the masked call: masked the same way.
                    instruction=trajectory.mask(trajectory.instruction(step.turn)),
                    schema=dict(self.docs_by_function.get(step.function) or {}),
                )
            )
        self.stats.accepted[self.kind] += len(records)
        return records

    def build_all(
        self,
        episodes: Iterable[EpisodeRecord],
        turns_by_task: Mapping[str, Sequence[str]] | None = None,
    ) -> list[FunctionRecord]:
        turns_by_task = turns_by_task or {}
        kept = _successful(episodes, self.kind, self.stats)
        return [r for ep in kept for r in self.build(ep, turns_by_task.get(ep.task_id))]


# --- text representation -------------------------------------------------------------


def validate_prose(text: str, max_words: int = 200) -> list[Violation]:
    if not text.strip():
        return [Violation("empty", "the answer is empty; write the prose")]
    problems = []
    if "```" in text or "~~~" in text:
        problems.append(Violation("code_fence", "write prose only, without code fences"))
    if count_words(text) > max_words:
        problems.append(
            Violation("too_long", f"it has {count_words(text)} words; use at most {max_words}")
        )
    return problems


def fallback_segment_text(segment: SubtaskSegment) -> str:
    parts = [f"To {segment.label.rstrip('.')}: {segment.description.rstrip('.')}."]
    for number, step in enumerate(segment.steps, 1):
        observed = sanitise_observation(step.observation, 160)
        result = f", which returned {observed}" if observed else ""
        parts.append(f"Step {number} called {_call_in_words(step.call)}{result}.")
    return " ".join(parts)


def fallback_function_text(record: FunctionRecord) -> str:
    request = _plain_excerpt(record.instruction, 20)
    served = f" for the request {request!r}" if request else ""
    result = sanitise_observation(record.result, 160)
    returned = f" and returned {result}" if result else ""
    return f"{record.function} was called{served} with {_call_args(record.call)}{returned}."


def _call_args(call: str) -> str:
    inner = call[call.find("(") + 1 : call.rfind(")")] if "(" in call else ""
    return f"arguments {inner}" if inner.strip() else "no arguments"


def _call_in_words(call: str) -> str:
    name = call.split("(", 1)[0]
    return f"{name} with {_call_args(call)}"


class TextRenderer:
    """Fills `.text` (the `text` representation) of built segments and records.

    Separate from the builders so a representation sweep reuses the built bank.
    """

    kind = "text"

    def __init__(
        self,
        llm: BuilderLLM | None,
        *,
        stats: BuildStats | None = None,
        chat_kwargs: Mapping[str, Any] | None = None,
        max_words: int = 200,
    ) -> None:
        self.max_words = max_words
        self.stats = stats if stats is not None else BuildStats()
        self._client = _LLMClient(llm, self.kind, self.stats, chat_kwargs)

    async def render_segment(self, segment: SubtaskSegment) -> SubtaskSegment:
        steps = "\n".join(
            f"{n}. {s.call} -> {s.observation or '(no output)'}"
            for n, s in enumerate(segment.steps, 1)
        )
        prompt = prompts.SEGMENT_TEXT_PROMPT.format(
            label=segment.label, description=segment.description, steps=steps
        )
        text = await self._render(prompt)
        return replace(segment, text=text if text is not None else fallback_segment_text(segment))

    async def render_function(self, record: FunctionRecord) -> FunctionRecord:
        prompt = prompts.FUNCTION_TEXT_PROMPT.format(
            function=record.function,
            doc=_doc_summary(record.schema) or "(none)",
            instruction=record.instruction or "(unknown)",
            call=record.call,
            result=record.result or "(no output)",
        )
        text = await self._render(prompt)
        return replace(record, text=text if text is not None else fallback_function_text(record))

    async def render_segments(
        self, segments: Sequence[SubtaskSegment], concurrency: int = 8
    ) -> list[SubtaskSegment]:
        return await gather_ordered(segments, self.render_segment, concurrency)

    async def render_functions(
        self, records: Sequence[FunctionRecord], concurrency: int = 8
    ) -> list[FunctionRecord]:
        return await gather_ordered(records, self.render_function, concurrency)

    async def _render(self, prompt: str) -> str | None:
        def validate(text: str) -> tuple[str | None, list[Violation]]:
            problems = validate_prose(text, self.max_words)
            return (None if problems else " ".join(text.split())), problems

        text = await self._client.ask(prompt, validate)
        if text is None:
            self._client.count_fallback()
        return text


def _doc_summary(doc: Mapping[str, Any], limit: int = 600) -> str:
    if not doc:
        return ""
    parts = [str(doc.get("description", "")).strip()]
    props = (doc.get("parameters") or {}).get("properties") or {}
    required = set((doc.get("parameters") or {}).get("required") or [])
    params = [
        f"{name} ({spec.get('type', '?')}{', required' if name in required else ''})"
        for name, spec in props.items()
        if isinstance(spec, Mapping)
    ]
    if params:
        parts.append("Parameters: " + ", ".join(params) + ".")
    return sanitise_observation(" ".join(p for p in parts if p), limit)


# --- small helpers -------------------------------------------------------------------


def _join(items: Sequence[str]) -> str:
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _plain_excerpt(text: str, max_words: int) -> str:
    """A single-clause excerpt: no sentence punctuation, no dotted names, few words."""
    text = sanitise_observation(text, 400)
    text = re.sub(r"[.!?;:\"{}\[\]()`]+", " ", text)
    words = text.split()
    excerpt = " ".join(words[:max_words])
    return excerpt + (" …" if len(words) > max_words else "")
