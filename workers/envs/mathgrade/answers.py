"""Which answer a reply gives, and which answer is the gold one, as Qwen2.5-Math's
evaluator reads them (QwenLM/Qwen2.5-Math, evaluation/parser.py: `extract_answer`,
`parse_ground_truth`), the evaluation framework the AgentBrew paper scores MATH and
GSM8K with (its §3.1.1).

- A reply's answer: the content of its last ``\\boxed{...}`` (braces balanced), else
  what follows the last "he answer is" / "final answer is", else the last number in
  it with commas removed; then trimmed as `extract_answer` trims it (line breaks,
  a leading colon, a trailing period or slash).
- GSM8K's gold: what follows ``####`` in the answer field, commas removed.
- MATH's gold: the last ``\\boxed{...}`` of the reference solution (MATH-500's
  ``answer`` field holds the same).

Qwen's evaluator then normalises both strings (`strip_string`) and compares them with
its own sympy grader, which is on no package index; here both go to math-verify,
which normalises LaTeX itself (`grader.py`): the known deviation `grader_math_verify`.
"""

from __future__ import annotations

import re

_LAST_NUMBER = re.compile(r"-?\d*\.?\d+")


def boxed(text: str) -> str | None:
    """The content of the last ``\\boxed`` in `text` (Qwen's reading: after the last
    "boxed", a braced group with balanced braces, else up to the next ``$``); None
    when there is none."""
    if "boxed" not in text:
        return None
    tail = text.split("boxed")[-1]
    if not tail:
        return ""
    if tail[0] != "{":
        return tail.split("$")[0].strip()
    depth, out = 1, []
    for char in tail[1:]:
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                break
        out.append(char)
    return "".join(out)


def extract_answer(reply: str) -> str:
    """The answer `reply` gives (see the module docstring); "" when it gives none."""
    text = reply.replace("\u043a\u0438", "")  # Qwen's: a tokenizer artefact ("ки")
    found = boxed(text)
    if "final answer is $" in text and "$. I hope" in text:  # Minerva's format
        answer = text.split("final answer is $", 1)[1].split("$. I hope", 1)[0].strip()
    elif found is not None:
        answer = found
    elif "he answer is" in text:
        answer = text.split("he answer is")[-1].strip()
    elif "final answer is" in text:
        answer = text.split("final answer is")[-1].strip()
    else:
        numbers = _LAST_NUMBER.findall(text.replace(",", ""))
        answer = numbers[-1] if numbers else ""
    answer = re.sub(r"\n\s*", "", answer)
    if answer.startswith(":"):
        answer = answer[1:]
    if answer.endswith("."):
        answer = answer[:-1]
    if answer.endswith("/"):
        answer = answer[:-1]
    return answer.strip()


def gsm8k_gold(answer_field: str) -> str:
    """GSM8K's gold answer: after ``####``, commas removed."""
    if "####" not in answer_field:
        raise ValueError("a GSM8K answer has no '####' line")
    return answer_field.split("####")[-1].strip().replace(",", "")


def math_gold(solution: str) -> str:
    """MATH's gold answer: the last boxed expression of the reference solution."""
    found = boxed(solution)
    if not found:
        raise ValueError("a MATH solution has no \\boxed answer")
    return found.strip()
