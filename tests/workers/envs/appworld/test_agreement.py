"""Distillery plays AppWorld as the AMD authors' harness does, request for request.

Each scripted student (students.py: code in fences, no code, two blocks, an unclosed
fence, a ```py fence, a huge output, complete_task at once, a 40-step episode) plays one
task of the synthetic AppWorld data twice, against one scripted OpenAI-compatible
server: through ACE's own `evaluation_react.py` (reference_loop.py, in AppWorld's venv)
and through distillery's episode loop with the authors' prompt file. Every request the
student is sent, every verdict (AppWorld's evaluator) and every step count must agree.
ACE's loop trims its history by characters (400,000: never reached here); the AMD
authors' by tokens, which cannot run here (it loads Qwen3's tokenizer): that piece is
re-implemented below (`authors_trimmed`) and a long episode with a small context is
checked against it request by request.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from distillery.testing.scripted_server import prompt_tokens, recorded_requests, run_stub_server
from distillery.workers.agents.loop import run_agent_loop
from distillery.workers.agents.policies import LlmPolicy
from distillery.workers.envs.appworld.adapter import AppWorld, AppWorldOptions
from distillery.workers.envs.appworld.react import CONTEXT_BUFFER
from distillery.workers.envs.conventions import conventions_of
from distillery.workers.llm.config import ModelConfig
from distillery.workers.llm.router import RoutedChat
from tests.workers.envs.appworld import students
from tests.workers.envs.appworld.conftest import venv_python

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
EXPERIMENTS = HERE.parents[3].parent / "shared" / "vendor" / "ace-appworld" / "experiments"
PROMPT = EXPERIMENTS / "prompts" / "appworld_react_generator_prompt.txt"
REFERENCE = HERE / "reference_loop.py"
# The authors' Qwen3 student configs (appworld/*/experiments/configs/*qwen3_4b*.jsonnet).
STOP = ["<|endoftext|>", "<|eot_id|>", "<|start_header_id|>"]
RUNS = {
    "fenced": "a1b2c3d_1",
    "no_code": "a1b2c3d_1",
    "two_blocks": "a1b2c3d_2",
    "unclosed": "a1b2c3d_1",
    "py_fence": "e4f5a6b_1",
    "huge_output": "a1b2c3d_1",
    "complete_midway": "a1b2c3d_2",
    "long": "e4f5a6b_1",
}
# The long episode again, in a context with room for the opening and ~300 tokens of
# steps (about 18 of them): its later requests must drop their oldest steps.
STEPS_ROOM = 300
EXTRAS = ("jinja2==3.1.6", "MarkupSafe==3.0.2")  # evaluation_react.py imports jinja2


def _student(name: str, url: str, context: int | None = None) -> ModelConfig:
    return ModelConfig(
        name=name,
        backend="external",
        model=name,
        base_url=url,
        action_format="prompt",
        temperature=0.0,
        max_tokens=2048,
        seed=None,  # the authors' client sends none
        enable_thinking=False,
        extra_body={"stop": STOP},
        max_model_len=context,
        max_retries=0,
        retry_backoff_s=0,
    )


@pytest.fixture(scope="module")
def reference_python(appworld_envs, tmp_path_factory) -> tuple[Path, Path]:
    """AppWorld's venv (untouched) and a folder of the extra packages the reference
    imports, added to its path ($DISTILLERY_TEST_REFERENCE_EXTRAS keeps one)."""
    python = venv_python(appworld_envs)
    chosen = os.environ.get("DISTILLERY_TEST_REFERENCE_EXTRAS")
    extras = Path(chosen) if chosen else tmp_path_factory.mktemp("reference_extras")
    if not (extras / "jinja2").is_dir():
        done = subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
             "--no-deps", "--target", str(extras), *EXTRAS],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        if done.returncode != 0:
            pytest.skip(f"the package index cannot serve {EXTRAS}: {done.stderr[-300:]}")
    return python, extras


def _reference(python: Path, extras: Path, url: str, root: Path, work: Path) -> list[dict]:
    playbook = work / "playbook.txt"
    playbook.write_text("")  # zero-shot: the playbook slot empty, as distillery leaves it
    spec = {
        "experiments": str(EXPERIMENTS.resolve()),
        "prompt_file": str(PROMPT.resolve()),
        "playbook_file": str(playbook),
        "base_url": url,
        "generation": {
            "temperature": 0,
            "max_tokens": 2048,
            "stop": STOP,
            "chat_template_kwargs": {"enable_thinking": False},
        },
        "max_steps": 40,
        "runs": [{"model": f"ref:student-{p}", "task_id": t} for p, t in RUNS.items()],
        "out": str(work / "reference.jsonl"),
    }
    (work / "spec.json").write_text(json.dumps(spec))
    env = {"APPWORLD_ROOT": str(root), "PYTHONPATH": str(extras), "PATH": os.environ["PATH"]}
    done = subprocess.run(
        [str(python), str(REFERENCE), str(work / "spec.json")],
        env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return [json.loads(line) for line in (work / "reference.jsonl").read_text().splitlines()]


async def _ours(bench: AppWorld, url: str) -> dict[str, dict[str, Any]]:
    tasks = {t.task_id: t for t in bench.load_tasks()}

    async def play(name: str, task_id: str, context: int | None) -> tuple[str, dict]:
        model = _student(name, url, context)
        chat = RoutedChat.from_config(model, [url])
        policy = LlmPolicy(
            chat, name, "prompt", 0.0, 2048, None, None, context_tokens=model.max_model_len
        )
        env = bench.make_env(tasks[task_id], name)
        try:
            outcome = await run_agent_loop(
                env, policy, bench.max_steps_per_turn, conventions=conventions_of(bench)
            )
            score = await asyncio.to_thread(env.score)
        finally:
            await asyncio.to_thread(env.close)
            await chat.aclose()
        return name, {"outcome": outcome, "success": score.success}

    plays = [play(f"ours:student-{p}", t, None) for p, t in RUNS.items()]
    plays.append(play("trimmed:student-long", RUNS["long"], small_context(bench)))
    return dict(await asyncio.gather(*plays))


def small_context(bench: AppWorld) -> int:
    """A context that holds the long episode's opening and STEPS_ROOM tokens more."""
    (task,) = bench.load_tasks(task_ids=[RUNS["long"]])
    opening = bench.opening_messages(task, "prompt", "")
    return prompt_tokens(opening) + 2048 + CONTEXT_BUFFER + STEPS_ROOM


@pytest.fixture(scope="module")
def played(appworld_envs, appworld_data, reference_python, tmp_path_factory):
    """Both harnesses, every student, at once (one reference run, one server)."""
    if not PROMPT.is_file():
        pytest.skip(f"ACE's AppWorld experiments are not at {EXPERIMENTS}")
    python, extras = reference_python
    work = tmp_path_factory.mktemp("appworld_agreement")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DISTILLERY_ENVS_DIR", str(appworld_envs))
        options = AppWorldOptions(
            root=str(appworld_data), split="dev", prompt_file=str(PROMPT), spare_workers=4
        )
        bench = AppWorld(options)
        with run_stub_server(f"{students.__name__}:play", record=True) as url:
            reference: dict[str, Any] = {}

            def run_reference() -> None:  # beside ours: the two wait on different things
                try:
                    reference["rows"] = _reference(python, extras, url, appworld_data, work)
                except BaseException as exc:  # raised again in the test's thread below
                    reference["error"] = exc

            thread = threading.Thread(target=run_reference)
            thread.start()
            try:
                ours = asyncio.run(_ours(bench, url))
            finally:
                thread.join()
                bench.close()
            if "error" in reference:
                raise reference["error"]
            requests = recorded_requests(url)
    by_model: dict[str, list[dict]] = {}
    for request in requests:
        by_model.setdefault(request["model"], []).append(request)
    return reference["rows"], ours, by_model


def _without_model(request: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in request.items() if k != "model"}


@pytest.mark.parametrize("plan", sorted(RUNS))
def test_requests_verdicts_and_steps_agree_with_the_authors_loop(played, plan):
    reference, ours, requests = played
    (theirs,) = [row for row in reference if row["model"] == f"ref:student-{plan}"]
    mine = ours[f"ours:student-{plan}"]
    sent_theirs = [_without_model(r) for r in requests[f"ref:student-{plan}"]]
    sent_mine = [_without_model(r) for r in requests[f"ours:student-{plan}"]]
    assert len(sent_mine) == len(sent_theirs)
    for index, (a, b) in enumerate(zip(sent_mine, sent_theirs, strict=True)):
        assert a == b, f"request {index + 1} differs"
    assert mine["success"] == theirs["success"]
    assert mine["outcome"].steps_per_turn == [theirs["steps"]]


def test_the_students_exercise_what_the_harness_decides(played):
    reference, ours, requests = played
    verdicts = {row["model"].removeprefix("ref:student-"): row for row in reference}
    assert verdicts["fenced"]["success"] and verdicts["no_code"]["success"]
    assert not verdicts["two_blocks"]["success"]  # the second block never ran
    assert verdicts["complete_midway"]["steps"] == 1
    assert verdicts["long"]["steps"] == 40 and not verdicts["long"]["success"]
    assert ours["ours:student-long"]["outcome"].termination == "step_limit"
    last = requests["ours:student-huge_output"][1]["messages"][-1]["content"]
    assert last.endswith("x" * 100 + "\n[REST NOT SHOWN FOR BREVITY]```\n\n")
    assert len(last) == len("Output:\n```\n") + 20_000 + len(
        "\n[REST NOT SHOWN FOR BREVITY]```\n\n"
    )
    no_code = requests["ours:student-no_code"][1]["messages"][-1]["content"]
    assert no_code == "Output:\n```\nNo code available to execute.```\n\n"
    kept = requests["ours:student-two_blocks"][1]["messages"][-2]["content"]
    assert kept.endswith("print(choice)\n```\n\n") and "second" not in kept


def authors_trimmed(messages: list[dict[str, Any]], opening: int, budget: int) -> list[dict]:
    """The AMD authors' `trimmed_messages` (appworld/rb/experiments/code/ace/
    evaluation_react.py), re-implemented: the pieces after the opening's last message
    lose their oldest reply and output, one pair at a time, while the whole conversation
    counts more tokens than the budget (counted as the scripted server counts)."""
    messages = copy.deepcopy(messages)
    pre, post = messages[: opening - 1], messages[opening - 1 :]
    while len(post) > 1 and prompt_tokens(pre + post) > budget:
        post = [post[0], *post[3:]]
    return pre + post


def test_a_long_episode_is_trimmed_as_the_authors_trim_it(played):
    _, ours, requests = played
    outcome = ours["trimmed:student-long"]["outcome"]
    sent = requests["trimmed:student-long"]
    full = requests["ours:student-long"]  # the same student untrimmed: the whole history
    assert outcome.steps_per_turn == [40] and len(sent) == len(full) == 40
    opening = len(full[0]["messages"])
    budget = prompt_tokens(full[0]["messages"]) + STEPS_ROOM
    trimmed = 0
    for index, (mine, whole) in enumerate(zip(sent, full, strict=True)):
        expected = authors_trimmed(whole["messages"], opening, budget)
        assert mine["messages"] == expected, f"request {index + 1}"
        trimmed += len(expected) < len(whole["messages"])
    assert trimmed > 10  # the budget was reached well before the end
    assert any(note.startswith("context: request") for note in outcome.reply_notes)
