"""Scripted AppWorld students for the agreement test (a scripted server's script).

A request's model name says which student plays (`...student-<plan>`); each plan is a
list of replies, one per step. A student knows its step from the marker ``[sN]`` that
opens each of its replies (the last one it sees in the conversation), so it plays the
same whichever harness sends the conversation, and whatever history a harness leaves
out. After its plan's last reply it keeps writing that one.
"""

from __future__ import annotations

import re
from typing import Any

PROFILE = "profile = apis.supervisor.show_profile()\nprint(profile)"
COMPLETE_EMAIL = "apis.supervisor.complete_task(answer=profile['email'])"


def _fenced(text: str, code: str) -> str:
    return f"{text}\n```python\n{code}\n```"


PLANS: dict[str, list[str]] = {
    # Code in fences: look the profile up, then answer with its email.
    "fenced": [
        _fenced("[s1] First the supervisor's profile.", PROFILE),
        _fenced("[s2] Now the answer.", COMPLETE_EMAIL) + "\nThat should do it.",
    ],
    # A reply without code runs no code; the episode goes on.
    "no_code": [
        "[s1] Let me think about which app holds this before writing any code.",
        _fenced("[s2] The supervisor app.", PROFILE),
        _fenced("[s3] Done.", COMPLETE_EMAIL),
    ],
    # Two blocks: only the first runs, and the reply is kept cut after it.
    "two_blocks": [
        "[s1] Two blocks.\n```python\nchoice = 'first'\nprint(choice)\n```\n"
        "and then\n```python\nchoice = 'second'\nprint(choice)\n```\nthe end.",
        _fenced("[s2] Answer.", "apis.supervisor.complete_task(answer=choice)"),
    ],
    # An unclosed fence is code too (the reply is kept with the fence closed).
    "unclosed": [
        "[s1] Unclosed.\n```python\nprofile = apis.supervisor.show_profile()\n"
        "print(profile['email'])",
        "[s2] Answer.\n```python\n" + COMPLETE_EMAIL,
    ],
    # Only ```python opens code: a ```py fence is no code.
    "py_fence": [
        "[s1] Short fence.\n```py\nprint('not run')\n```",
        _fenced("[s2] Real fence.", PROFILE),
        _fenced("[s3] Answer.", COMPLETE_EMAIL),
    ],
    # An output of 30,000 characters: cut to 20,000 and a note.
    "huge_output": [
        _fenced("[s1] A lot of output.", "print('x' * 30000)"),
        _fenced("[s2] Profile.", PROFILE),
        _fenced("[s3] Answer.", COMPLETE_EMAIL),
    ],
    # complete_task at the first step ends the episode there (a wrong answer).
    "complete_midway": [
        _fenced("[s1] I will guess.", "apis.supervisor.complete_task(answer='nobody')"),
        _fenced("[s2] Never asked for.", PROFILE),
    ],
    # Logs into Spotify with the password the supervisor app shows (a wrong one first:
    # AppWorld's 401 raises, its traceback is the output), prints the token (its expiry
    # drawn from AppWorld's random_seed) and answers with the account's first name.
    "login": [
        _fenced(
            "[s1] Passwords first.",
            "passwords = apis.supervisor.show_account_passwords()\nprint(passwords)",
        ),
        _fenced(
            "[s2] A guess.",
            "print(apis.spotify.login(username='ada@example.com', password='wrong-pass'))",
        ),
        _fenced(
            "[s3] The real one.",
            "password = next(p['password'] for p in passwords if p['account_name'] == 'spotify')\n"
            "login = apis.spotify.login(username='ada@example.com', password=password)\n"
            "print(login)",
        ),
        _fenced(
            "[s4] The account.",
            "account = apis.spotify.show_account(access_token=login['access_token'])\n"
            "print(account)",
        ),
        _fenced("[s5] Answer.", "apis.supervisor.complete_task(answer=account['first_name'])"),
    ],
    # Never finishes: only the 40-step budget ends it.
    "long": [],
    # Code that raises (an API AppWorld does not have, then a Python error): AppWorld's
    # "Execution failed" traceback as the output, and the episode goes on.
    "raises": [
        _fenced("[s1] Try an API.", "apis.supervisor.show_nothing_at_all()"),
        _fenced("[s2] And a bug.", "profile = None\nprint(profile['email'])"),
        _fenced("[s3] Properly now.", PROFILE),
        _fenced("[s4] Answer.", COMPLETE_EMAIL),
    ],
}
_MARK = re.compile(r"^\[s(\d+)\]")


def step_of(messages: list[dict[str, Any]]) -> int:
    """The step this request asks for: one after the last marker the student wrote."""
    for message in reversed(messages):
        if message.get("role") == "assistant":
            found = _MARK.match(message.get("content") or "")
            if found:
                return int(found.group(1)) + 1
    return 1


def reply(plan: str, step: int) -> str:
    replies = PLANS[plan]
    if not replies:  # "long"
        return _fenced(f"[s{step}] Still working.", f"print({step})")
    return replies[min(step, len(replies)) - 1]


def play(request: dict[str, Any]) -> dict[str, Any]:
    plan = str(request.get("model", "")).rpartition("student-")[2]
    if plan not in PLANS:
        return {"content": "OK"}  # the client's preflight, or no student of ours
    return {"content": reply(plan, step_of(request["messages"]))}
