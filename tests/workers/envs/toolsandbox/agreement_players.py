"""The scripted server's script for the ToolSandbox agreement test: it plays both the
agent's model and the simulated user's model of each run, whichever runner asks.

A request's model name is ``<side>:<run>:agent`` or ``<side>:<run>:user``. The agent
knows its step from the assistant messages in its conversation, so it plays the same
under either runner; its calls carry fixed ids (the server would draw random ones), so
the two runners' histories can be compared as sent. The user answers a question with
`WHEN`, and otherwise ends the conversation (ToolSandbox's `end_conversation` tool).
"""

from __future__ import annotations

from typing import Any

WHEN = "3/22/2024 5PM"
TIMESTAMP_ARGS = {"year": 2024, "month": 3, "day": 22, "hour": 17, "minute": 0, "second": 0}


def _call(call_id: str, function: str, /, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"id": call_id, "name": function, "arguments": arguments}]}


def _reminder(messages: list[dict[str, Any]], step: int) -> dict[str, Any]:
    """Asks when; calls add_reminder without its timestamp (ToolSandbox's error is the
    observation); converts the date; adds the reminder with the tool's timestamp."""
    if step == 0:
        return {"content": "When should I remind you?"}
    if step == 1:
        return _call("call_r1", "add_reminder", content="Buy chocolate milk")
    if step == 2:
        return _call("call_r2", "datetime_info_to_timestamp", **TIMESTAMP_ARGS)
    if step == 3:
        stamp = float(messages[-1]["content"])
        return _call(
            "call_r3", "add_reminder", content="Buy chocolate milk", reminder_timestamp=stamp
        )
    return {"content": "Done: you will be reminded to buy chocolate milk."}


def _contact(messages: list[dict[str, Any]], step: int) -> dict[str, Any]:
    if step == 0:
        return _call("call_c1", "add_contact", name="Stephen Sondheim", phone_number="+19876543210")
    return {"content": "Stephen Sondheim has been added to your contact"}


AGENTS = {"reminder": _reminder, "contact": _contact}


def play(request: dict[str, Any]) -> dict[str, Any]:
    side_run_role = str(request.get("model", "")).split(":")
    if len(side_run_role) != 3:
        return {"content": "OK"}  # a client's preflight
    _, run, role = side_run_role
    messages = request["messages"]
    if role == "user":
        if "when" in str(messages[-1].get("content") or "").lower():
            return {"content": WHEN}
        return _call("call_end", "end_conversation")
    step = sum(1 for m in messages if m.get("role") == "assistant")
    return AGENTS[run](messages, step)
