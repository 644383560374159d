"""What a method's learning step reads of a failed play: one setting for AgentBrew and
every baseline that learns from outcomes (Reflexion, ExpeL's gathering, ACE's
reflector), so no method is told more than another.

- ``binary`` (the default): that the task was not solved, nothing else. The AgentBrew
  paper's stated regime: "Binary R is the sole external supervision signal from Env"
  (§2.3.1; the teacher is triggered on (x, τ, FAIL)), and its Reflexion re-attempts
  "after observing explicit binary feedback from the environment" (§3.2 (i)).
- ``category``: that and the failure's category as the benchmark's checker names it
  (``wrong_answer``, ``tests_failed``, ``no_answer``, the episode's ending).
- ``message``: that and the checker's message (cut), which on BFCL names ground-truth
  states and on hidden-test graders the failing case: more than the paper's regime.

Set once for all of them with ``memory.retrieval.feedback=<value>`` (the shared
defaults); a catalog entry's own ``feedback`` overrides it for that entry. The report's
method table shows each method's value (``feedback`` column).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

Feedback = Literal["binary", "category", "message"]
DEFAULT_FEEDBACK: Feedback = "binary"
# The shared key in `memory.retrieval` (conf/memory/default.yaml).
SHARED_KEY = "feedback"
MESSAGE_CHARS = 600


class _Shared(BaseModel):
    model_config = ConfigDict(extra="forbid")

    feedback: Feedback


def with_shared_feedback(
    defaults: Mapping[str, Any], overrides: Mapping[str, Any], *path: str
) -> dict[str, Any]:
    """`overrides` with the shared `memory.retrieval.feedback` at `path` (the method's
    own field, e.g. ``("brew", "feedback")``) where the entry does not set it."""
    out = dict(overrides)
    if SHARED_KEY not in defaults:
        return out
    # Checked here, so that a bad value's error is located at the shared key
    # (`memory.retrieval.feedback`), not at the method's own field.
    _Shared.model_validate({SHARED_KEY: defaults[SHARED_KEY]})
    where = path or (SHARED_KEY,)
    node = out
    for key in where[:-1]:
        inner = node.get(key)
        node[key] = dict(inner) if isinstance(inner, Mapping) else {}
        node = node[key]
    node.setdefault(where[-1], defaults[SHARED_KEY])
    return out


def failure_detail(record: Any, feedback: str) -> str:
    """What a learning step is told of a failed play beyond "not solved" (empty for
    ``binary``): its category (and how it ended, when not by the agent), or with
    ``message`` the checker's message too, cut at MESSAGE_CHARS."""
    if feedback == "binary":
        return ""
    parts = [f"failure type: {getattr(record, 'error_type', '') or 'none'}"]
    termination = getattr(record, "termination", "") or ""
    if termination not in ("done", ""):
        parts.append(f"the episode ended by {termination}")
    message = (getattr(record, "error_message", "") or "").strip()
    if feedback == "message" and message:
        if len(message) > MESSAGE_CHARS:
            message = message[:MESSAGE_CHARS] + " …"
        parts.append(f"the checker said: {message}")
    return "; ".join(parts)
