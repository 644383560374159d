"""Thinking models' reasoning, kept apart from their answers.

Servers hand reasoning back in one of two ways: a separate message field
(`reasoning_content`, or `reasoning` in newer vLLM, when it runs a reasoning parser;
OpenAI reasoning models return none at all) or inline `<think>...</think>` blocks in
the content (llama.cpp, vLLM without a reasoning parser). `split_reasoning` makes the
answer the text without any of it, so reasoning never enters the next request's
history and never reaches a parser (action parsing, subtask labels, memory
builders); the reasoning text is returned beside it. Reasoning tokens are the
server's own count (`usage.completion_tokens_details.reasoning_tokens`).
"""

from __future__ import annotations

import re
from typing import Any

_THINK_BLOCK = re.compile(r"<think>(.*?)</think>", re.DOTALL | re.IGNORECASE)
_OPEN = re.compile(r"<think>", re.IGNORECASE)
_CLOSE = re.compile(r"</think>", re.IGNORECASE)


def split_think_blocks(text: str) -> tuple[str, str]:
    """(answer, reasoning) of a content string with inline think blocks.

    Also handles the two broken shapes: a closing tag with no opening one (templates
    that put `<think>` into the prompt: everything before it is reasoning), and an
    opening tag never closed (the cap cut the reasoning: everything after it is).
    """
    if not text or "think>" not in text.lower():
        return text or "", ""
    reasoning: list[str] = []

    def keep(match: re.Match[str]) -> str:
        reasoning.append(match.group(1))
        return ""

    answer = _THINK_BLOCK.sub(keep, text)
    closes = list(_CLOSE.finditer(answer))
    if closes:  # opened in the prompt
        last = closes[-1]
        reasoning.insert(0, _CLOSE.sub("", answer[: last.start()]))
        answer = answer[last.end() :]
    opened = _OPEN.search(answer)
    if opened:  # cut off while thinking
        reasoning.append(answer[opened.end() :])
        answer = answer[: opened.start()]
    return answer.strip(), "\n".join(r.strip() for r in reasoning if r.strip())


def split_reasoning(message: dict[str, Any]) -> tuple[str, str]:
    """(answer, reasoning) of a chat completion message."""
    answer, inline = split_think_blocks(message.get("content") or "")
    parts = []
    for key in ("reasoning_content", "reasoning"):
        value = message.get(key)
        if isinstance(value, str) and value.strip():
            parts.append(value.strip())
            break  # servers that send both send the same text twice
    if inline:
        parts.append(inline)
    return answer, "\n".join(parts)


def reasoning_tokens(usage: dict[str, Any]) -> int:
    details = usage.get("completion_tokens_details")
    if not isinstance(details, dict):
        return 0
    value = details.get("reasoning_tokens")
    return value if isinstance(value, int) and value > 0 else 0
