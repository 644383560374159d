"""Stub-server scripts that play thinking models (see
distillery/testing/scripted_server.py): reasoning comes back inline (`<think>` blocks, a server without a reasoning parser) or as
`reasoning_content` (vLLM with one), always full of text a parser would misread."""

from __future__ import annotations

from typing import Any

THOUGHT_ONLY = "only_in_thoughts"


def thinking_prompt_agent(request: dict[str, Any]) -> dict[str, Any]:
    """A thinking model without a server-side reasoning parser: its content carries a
    think block full of would-be calls, then the real answer (a ground-truth call in
    BFCL's prompt format). Refuses (HTTP 400) any request whose history holds reasoning
    or lacks the thinking switch, so a leak or a missing field cannot pass unnoticed."""
    for message in request["messages"]:
        content = str(message.get("content") or "")
        if "<think>" in content or "reasoning_content" in message or THOUGHT_ONLY in content:
            return {"status": 400, "content": "reasoning was sent back in the history"}
    if request.get("chat_template_kwargs") != {"enable_thinking": True}:
        return {"status": 400, "content": "expected chat_template_kwargs.enable_thinking"}
    from distillery.testing.bfcl_scripts import replay_text

    answer = replay_text(request)
    thinking = f"<think>Let me think. [cd(folder='{THOUGHT_ONLY}')] or [rm(file_name='x')]</think>"
    return {
        "content": f"{thinking}\n\n{answer.get('content', '')}",
        "reasoning_tokens": 12,
    }


def thinking_decomposer(request: dict[str, Any]) -> dict[str, Any]:
    """A student asked for subtask labels: it thinks in brackets first."""
    return {
        "content": '<think>Maybe [open, "x"] or [[1, 2]?</think>\n["open the file", "mail it"]',
        "reasoning_tokens": 9,
    }


def reasoning_parser_agent(request: dict[str, Any]) -> dict[str, Any]:
    """vLLM with --reasoning-parser: the thinking arrives as reasoning_content, which
    must never be sent back (DeepSeek's API refuses such a history with HTTP 400)."""
    for message in request["messages"]:
        if "reasoning_content" in message or THOUGHT_ONLY in str(message.get("content")):
            return {"status": 400, "content": "reasoning_content must not be sent back"}
    from distillery.testing.bfcl_scripts import replay_native

    reply = replay_native(request)
    return {**reply, "reasoning_content": f"I could cd to {THOUGHT_ONLY} first."}
