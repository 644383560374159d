"""Function examples ranked as the AMD authors' ToolSandbox student ranks them
(`RetrievalConfig.fn_ranking="call_ngrams"`), our implementation of the same behaviour.

Sources (taeilkim2465/agentic_memory_distillation, commit 933df96; the same text in
3e60c30 under toolsandbox/roles/ and toolsandbox/memory/):

- the failing call's context, `_build_call_context`
  (toolsandbox/common/roles/memory_augmented_agent.py:199-229): the calls of the
  assistant message that made the failing call, `Previous: <c>; <c>; <c> | Current:
  <failing call>`, each call `name(<arguments as JSON>)`; the previous calls are the
  message's other calls, the last three of them, latest first;
- the vectors, `_local_embed` (toolsandbox/common/memory/store.py:50-57): the text
  lower-cased, every character 2-gram and 3-gram counted into 256 buckets, the count
  vector L2-normalised; similarity is the cosine (`_cosine_sim`, store.py:60-65);
- the ranking, `FunctionMemoryStore.retrieve` (store.py:184-216), over the records of
  the failing tool in stored order: at most `k` of them are returned whole, unranked;
  else, with a context, the records that have a reasoning (`think`, data_model.py:72)
  ranked by the context's similarity to it (records without one left out); else, or
  when none has one, every record ranked by the task query's similarity to the
  record's query; the order is `np.argsort(sims)[::-1]`, the reverse of an ascending
  sort: on equal similarity the record stored later comes first.

What is ours, and why:
- the buckets: their `hash(ngram) % 256` uses Python's string hash, salted per process
  (PYTHONHASHSEED is set in none of their scripts), so which n-grams share a bucket
  changed from run to run; ours is a fixed hash (blake2b), the same 256 buckets in
  every run, so a ranking can be replayed;
- the stored order: the memory service returns a function's records ranked, not in the
  order the bank was written, so ours is the memory ids' natural order
  (`fn:<episode>:<step>`): a trajectory's records in step order, as theirs are appended;
- the records: only those the isolation policy allows are ranked (theirs have none);
- the record's query is the instruction of the turn it was made in (`FunctionRecord.
  instruction`), theirs the trajectory's task query (builder.py:246).
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from distillery.workers.envs.base import ToolResult
from distillery.workers.memory.amd.records import FunctionRecord

# store.py:50 (`dim: int = 256`) and :53 (`for n in (2, 3)`).
NGRAM_BUCKETS = 256
NGRAM_SIZES = (2, 3)
# memory_augmented_agent.py:226 (`prev_calls[-3:]`).
MAX_PREVIOUS_CALLS = 3
# How many of a function's records the memory service is asked for, to be ranked here
# (ours: the service ranks by embedding; with this many, every record of a ToolSandbox
# tool is among them, so the embedding decides nothing).
CANDIDATES = 1000


@dataclass(frozen=True)
class RankedExample:
    """A Function record chosen by the n-gram ranking and its similarity (the hooks'
    `Hit`: the retrieval log records the score)."""

    entry: FunctionRecord
    score: float


@lru_cache(maxsize=4096)
def ngram_vector(text: str) -> np.ndarray:
    """`text`'s character 2- and 3-grams (lower-cased, overlapping, counted) hashed into
    `NGRAM_BUCKETS` buckets, L2-normalised (all zeros for a text under 2 characters)."""
    vector = np.zeros(NGRAM_BUCKETS, dtype=np.float32)
    text = text.lower()
    for n in NGRAM_SIZES:
        for i in range(len(text) - n + 1):
            vector[_bucket(text[i : i + n])] += 1.0
    norm = float(np.linalg.norm(vector))
    vector = vector / norm if norm > 0 else vector
    vector.flags.writeable = False  # shared by the cache
    return vector


def _bucket(ngram: str) -> int:
    digest = hashlib.blake2b(ngram.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % NGRAM_BUCKETS


def similarities(query: str, texts: Sequence[str]) -> list[float]:
    """Cosine of `query`'s n-gram vector with each text's (a zero vector scores 0)."""
    if not texts:
        return []
    matrix = np.stack([ngram_vector(t) for t in texts])
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    matrix = matrix / np.where(norms > 0, norms, 1.0)
    q = ngram_vector(query)
    q = q / (float(np.linalg.norm(q)) or 1.0)
    return [float(s) for s in matrix @ q]


def call_text(result: ToolResult) -> str:
    """One call as the student's history shows it to the model, `name(<JSON object>)`
    (ToolSandbox's `to_openai_messages` writes `json.dumps` of the parsed arguments,
    message_conversion.py:132): rebuilt from the canonical call; a call that is not one
    (a refused call's raw text) as it is."""
    return json_call(result.call, result.function) or result.call


def json_call(call: str, function: str | None = None, ensure_ascii: bool = True) -> str | None:
    """The canonical call `call` written `name(<arguments as a JSON object>)` (`function`
    names it where given), None where `call` is no keyword-only call of literals."""
    try:
        node = ast.parse(call.strip(), mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(node, ast.Call) or node.args or any(k.arg is None for k in node.keywords):
        return None
    try:
        arguments = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
        return f"{function or ast.unparse(node.func)}({json.dumps(arguments, ensure_ascii=ensure_ascii)})"
    except (ValueError, TypeError, SyntaxError):
        return None


def recent_calls(step: Sequence[ToolResult], failing: int) -> str:
    """The context the failing call `step[failing]` is ranked by: the calls of its
    step (one assistant message), as `_build_call_context` writes them."""
    previous = [call_text(r) for i, r in enumerate(step) if i != failing]
    parts = []
    if previous:
        parts.append("Previous: " + "; ".join(reversed(previous[-MAX_PREVIOUS_CALLS:])))
    parts.append("Current: " + call_text(step[failing]))
    return " | ".join(parts)


def bank_order(records: Sequence[FunctionRecord]) -> list[FunctionRecord]:
    """Records in the order the bank wrote them, as far as their ids tell: memory ids
    compared part by part, numbers as numbers (a trajectory's step 10 after step 9)."""
    return sorted(records, key=lambda r: _natural_key(r.memory_id))


def _natural_key(memory_id: str) -> tuple[tuple[int, int | str], ...]:
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", memory_id))


def rank_examples(
    records: Sequence[FunctionRecord], context: str, task_query: str, k: int
) -> list[RankedExample]:
    """At most `k` of one function's `records` (given in bank order), chosen as
    `FunctionMemoryStore.retrieve` chooses (see the module docstring)."""
    if not records:
        return []
    with_reasoning = [r for r in records if r.reasoning]
    if context and with_reasoning:
        ranked, query, keys = with_reasoning, context, [r.reasoning for r in with_reasoning]
    else:
        ranked, query, keys = list(records), task_query, [r.instruction for r in records]
    scores = similarities(query, keys) if query else [0.0] * len(ranked)
    if len(records) <= k:  # store.py:194: every record, unranked (scores only logged)
        by_id = {r.memory_id: s for r, s in zip(ranked, scores, strict=True)}
        return [RankedExample(r, by_id.get(r.memory_id, 0.0)) for r in records]
    if not query:  # store.py:216: no context and no query, the first k
        return [RankedExample(r, 0.0) for r in records[:k]]
    # The reverse of a stable ascending sort: best first, a later record first on ties.
    order = sorted(range(len(ranked)), key=lambda i: (scores[i], i), reverse=True)
    return [RankedExample(ranked[i], scores[i]) for i in order[:k]]
