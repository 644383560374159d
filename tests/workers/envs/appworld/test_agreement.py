"""Distillery plays AppWorld as the AMD authors' harness does, request for request.

Each scripted student (students.py: code in fences, no code, two blocks, an unclosed
fence, a ```py fence, a huge output, complete_task at once, code that raises, a 40-step
episode, a login to Spotify with a wrong password first) plays one task of the synthetic AppWorld data twice, against one scripted
OpenAI-compatible server: through ACE's own `evaluation_react.py` (reference_loop.py, in
AppWorld's venv) with the authors' settings of its student, and through distillery's
episode loop with the student's paper config as `experiment=appworld_table1` resolves
it (the shipped prompt, AppWorld's random_seed 123, the student's stop strings,
template kwargs and context). Qwen3-4B plays every plan, Gemma-4-E4B two (its own stop
string, no template kwargs), and two runs have AMD's memory block (rendered by AMD's own
hooks on the AppWorld profile) in the prompt's slot, the reference given the same block
as its playbook. Every request the student is sent (but `seed`, which distillery sends
and the authors' client does not: docs/fidelity/appworld.md), every verdict (AppWorld's
evaluator) and every step count must agree.
ACE's loop trims its history by characters (400,000: never reached here); the AMD
authors' by tokens, which cannot run here (it loads Qwen3's tokenizer): that piece is
re-implemented below (`authors_trimmed`) and a long episode with a small context is
checked against it request by request.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import json
import os
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from distillery.conf.paper_settings import AUTHORS_STUDENTS
from distillery.testing.scripted_server import prompt_tokens, recorded_requests, run_stub_server
from distillery.workers.agents.loop import run_agent_loop
from distillery.workers.agents.policies import LlmPolicy
from distillery.workers.envs.appworld.adapter import BUNDLED_PROMPTS, AppWorld, AppWorldOptions
from distillery.workers.envs.appworld.react import CONTEXT_BUFFER
from distillery.workers.envs.conventions import conventions_of
from distillery.workers.llm.config import ModelConfig
from distillery.workers.llm.router import RoutedChat
from tests.workers.envs.appworld import students
from tests.workers.envs.appworld.conftest import venv_python

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
# ACE's harness, vendored beside the checkout (shared/ next to it, or two levels up from
# a worktree).
_VENDORED = [p / "shared" / "vendor" / "ace-appworld" / "experiments" for p in HERE.parents[3:6]]
EXPERIMENTS = next((v for v in _VENDORED if v.is_dir()), _VENDORED[0])
# The shipped copy of ACE's generator prompt (byte for byte the vendored one).
PROMPT = BUNDLED_PROMPTS["ace_generator"]
REFERENCE = HERE / "reference_loop.py"
# run name -> (the student's plan, task, its paper model config, AMD memory in the slot)
RUNS: dict[str, tuple[str, str, str, bool]] = {
    "fenced": ("fenced", "a1b2c3d_1", "qwen3_4b", False),
    "no_code": ("no_code", "a1b2c3d_1", "qwen3_4b", False),
    "two_blocks": ("two_blocks", "a1b2c3d_2", "qwen3_4b", False),
    "unclosed": ("unclosed", "a1b2c3d_1", "qwen3_4b", False),
    "py_fence": ("py_fence", "e4f5a6b_1", "qwen3_4b", False),
    "huge_output": ("huge_output", "a1b2c3d_1", "qwen3_4b", False),
    "complete_midway": ("complete_midway", "a1b2c3d_2", "qwen3_4b", False),
    "raises": ("raises", "a1b2c3d_1", "qwen3_4b", False),
    "long": ("long", "e4f5a6b_1", "qwen3_4b", False),
    "gemma-fenced": ("fenced", "a1b2c3d_2", "gemma4_e4b", False),
    "amd-fenced": ("fenced", "a1b2c3d_1", "qwen3_4b", True),
    "login": ("login", "c5d6e7f_1", "qwen3_4b", False),
    "gemma-amd-login": ("login", "c5d6e7f_1", "gemma4_e4b", True),
}


# The names the two sides' requests carry (the plan after "student-", students.py).
def _name(side: str, run: str) -> str:
    return f"{side}:{run}:student-{RUNS[run][0]}"


# The long episode again, in a context with room for the opening and ~300 tokens of
# steps (about 18 of them): its later requests must drop their oldest steps.
STEPS_ROOM = 300
EXTRAS = ("jinja2==3.1.6", "MarkupSafe==3.0.2")  # evaluation_react.py imports jinja2


@functools.cache
def _paper_student(model: str) -> ModelConfig:
    """The student's config as the paper's AppWorld experiments resolve it (composed
    once, before the two harnesses' threads start: Hydra's composition is global)."""
    from distillery.orchestrator.core.compose import compose, rewrite_role_overrides
    from distillery.orchestrator.core.config import to_config

    overrides = ["experiment=appworld_table1", f"student={model}", "sweep={}"]
    return to_config(compose(rewrite_role_overrides(overrides))).student


def _student(name: str, model: str, url: str, context: int | None = None) -> ModelConfig:
    """`model`'s paper config served by the scripted server under `name`."""
    paper = _paper_student(model).model_dump()
    return ModelConfig.model_validate(
        {
            **paper,
            "name": name,
            "backend": "external",
            "model": name,
            "base_url": url,
            "max_model_len": context,
            "reasoning_parser": None,  # a vLLM launch flag; the server is scripted
            "tool_call_parser": None,
            "max_retries": 0,
            "retry_backoff_s": 0,
        }
    )


def _authors_generation(model: str) -> dict[str, Any]:
    """What the authors' student config of `model` sends (conf/paper_settings.py cites
    each value): temperature 0, max_tokens 2048, its stop strings, its template kwargs."""
    name = _paper_student(model).name
    authors = {key: value for key, (value, _) in AUTHORS_STUDENTS[name].items()}
    out: dict[str, Any] = {"temperature": 0, "max_tokens": 2048, "stop": authors["stop"]}
    if authors["enable_thinking"] is not None:
        out["chat_template_kwargs"] = {"enable_thinking": authors["enable_thinking"]}
    return out


class _OneWorkflow:
    """AMD's lookup with one Workflow memory for every task (no Subtask or Function)."""

    async def workflow(self, query, task_id, k, threshold):
        from distillery.workers.memory.amd.records import WorkflowMemory
        from distillery.workers.memory.entries import MemorySource

        source = MemorySource("z9_1", "z9", "all", "teacher", "e1")
        entry = WorkflowMemory(
            "wf:z9_1", source, "What is my name?",
            "Read the supervisor's profile with apis.supervisor.show_profile(), print it, "
            "then answer with complete_task(answer=<VALUE>); check the field name first.",
            "profile = apis.supervisor.show_profile()", ("supervisor.show_profile",),
        )  # fmt: skip
        return [_Scored(entry, 0.9)]

    async def subtasks(self, queries, task_id, k, threshold):
        return []

    async def functions(self, function, instruction, task_id, k, threshold):
        return []


class _Scored:
    def __init__(self, entry: Any, score: float) -> None:
        self.entry, self.score = entry, score


def _amd_hooks(task_id: str, instruction: str):
    """AMD's own hooks on AppWorld's profile, reading `_OneWorkflow` (the student's
    decomposition answered locally: it asks no model)."""
    from distillery.workers.llm.types import ChatResult
    from distillery.workers.memory.amd.hooks import AmdHooks
    from distillery.workers.memory.amd.settings import APPWORLD, RetrievalConfig

    async def decompose(messages):
        return ChatResult(text='["read the profile"]')

    config = APPWORLD.label(
        RetrievalConfig.model_validate({**APPWORLD.retrieval, "types": ("wf", "st")})
    )
    return AmdHooks(
        task_id, _OneWorkflow(), config, lambda s: True, decompose, [instruction], APPWORLD
    )


def amd_block(task_id: str, instruction: str) -> str:
    """The memory AMD's hooks put in the prompt's slot for the `amd-*` run."""
    return asyncio.run(_amd_hooks(task_id, instruction).before_turn(0, instruction, "")).strip()


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


def _reference(
    python: Path, extras: Path, url: str, root: Path, work: Path, memory: dict[str, str]
) -> list[dict]:
    playbook = work / "playbook.txt"
    playbook.write_text("")  # zero-shot: the playbook slot empty, as distillery leaves it
    runs = []
    for run, (_, task_id, model, with_memory) in RUNS.items():
        entry = {"model": _name("ref", run), "task_id": task_id}
        entry["generation"] = _authors_generation(model)
        if with_memory:  # AMD's block as the playbook the reference reads
            (work / f"{run}.txt").write_text(memory[run])
            entry["playbook_file"] = str(work / f"{run}.txt")
        runs.append(entry)
    spec = {
        "experiments": str(EXPERIMENTS.resolve()),
        "prompt_file": str(PROMPT.resolve()),
        "playbook_file": str(playbook),
        "base_url": url,
        "generation": _authors_generation("qwen3_4b"),
        "max_steps": 40,
        "runs": runs,
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

    conventions = conventions_of(bench)

    async def play(run: str, name: str, context: int | None = None) -> tuple[str, dict]:
        _, task_id, paper, with_memory = RUNS[run]
        model = _student(name, paper, url, context)
        chat = RoutedChat.from_config(model, [url])
        sent = conventions.sent_sampling(model)  # what an episode sends (episodes.py)
        policy = LlmPolicy(
            chat, name, model.action_format, sent["temperature"], sent["max_tokens"],
            sent["seed"], sent["top_p"], context_tokens=model.max_model_len,
        )  # fmt: skip
        task = tasks[task_id]
        hooks = _amd_hooks(task_id, task.turns[0]) if with_memory else None
        env = bench.make_env(task, name)
        try:
            outcome = await run_agent_loop(
                env, policy, bench.max_steps_per_turn, hooks, conventions=conventions
            )
            score = await asyncio.to_thread(env.score)
        finally:
            await asyncio.to_thread(env.close)
            await chat.aclose()
        return name, {"outcome": outcome, "success": score.success}

    plays = [play(run, _name("ours", run)) for run in RUNS]
    plays.append(play("long", "trimmed:student-long", small_context(bench)))
    return dict(await asyncio.gather(*plays))


def small_context(bench: AppWorld) -> int:
    """A context that holds the long episode's opening and STEPS_ROOM tokens more."""
    (task,) = bench.load_tasks(task_ids=[RUNS["long"][1]])
    opening = bench.opening_messages(task, "prompt", "")
    return prompt_tokens(opening) + 2048 + CONTEXT_BUFFER + STEPS_ROOM


@pytest.fixture(scope="module")
def played(appworld_envs, appworld_data, reference_python, tmp_path_factory):
    """Both harnesses, every student, at once (one reference run, one server)."""
    if not EXPERIMENTS.is_dir():
        pytest.skip(f"ACE's AppWorld experiments are not at {EXPERIMENTS}")
    python, extras = reference_python
    work = tmp_path_factory.mktemp("appworld_agreement")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DISTILLERY_ENVS_DIR", str(appworld_envs))
        paper = _paper_options()
        for _, _, model, _ in RUNS.values():  # composed here, not in the threads below
            _paper_student(model)
        options = AppWorldOptions(
            **{**paper, "root": str(appworld_data), "split": "dev", "spare_workers": 4}
        )
        bench = AppWorld(options)
        tasks = {t.task_id: t for t in bench.load_tasks()}
        memory = {
            run: amd_block(task_id, tasks[task_id].turns[0])
            for run, (_, task_id, _, with_memory) in RUNS.items()
            if with_memory
        }
        with run_stub_server(f"{students.__name__}:play", record=True) as url:
            reference: dict[str, Any] = {}

            def run_reference() -> None:  # beside ours: the two wait on different things
                try:
                    reference["rows"] = _reference(python, extras, url, appworld_data, work, memory)
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
    return reference["rows"], ours, by_model, memory


def _paper_options() -> dict[str, Any]:
    """The benchmark options `experiment=appworld_table1` resolves to (the prompt)."""
    from distillery.orchestrator.core.compose import compose, rewrite_role_overrides
    from distillery.orchestrator.core.config import to_config

    cfg = to_config(compose(rewrite_role_overrides(["experiment=appworld_table1", "sweep={}"])))
    return dict(cfg.benchmark.options)


def _without_model(request: dict[str, Any]) -> dict[str, Any]:
    """What is compared: all but the model's name and `seed` (distillery sends the
    sweep point's; the authors' client sends none: docs/fidelity/appworld.md)."""
    return {k: v for k, v in request.items() if k not in ("model", "seed")}


@pytest.mark.parametrize("run", sorted(RUNS))
def test_requests_verdicts_and_steps_agree_with_the_authors_loop(played, run):
    reference, ours, requests, _ = played
    (theirs,) = [row for row in reference if row["model"] == _name("ref", run)]
    mine = ours[_name("ours", run)]
    sent_theirs = [_without_model(r) for r in requests[_name("ref", run)]]
    sent_mine = [_without_model(r) for r in requests[_name("ours", run)]]
    assert len(sent_mine) == len(sent_theirs)
    for index, (a, b) in enumerate(zip(sent_mine, sent_theirs, strict=True)):
        assert a == b, f"request {index + 1} differs"
    assert mine["success"] == theirs["success"]
    assert mine["outcome"].steps_per_turn == [theirs["steps"]]


def test_the_paper_settings_reach_the_requests(played):
    """The paper configs as they resolve: Qwen3's stop strings and thinking off, Gemma's
    own stop string and no template kwargs, AMD's block in the prompt's slot, the seed
    distillery sends (the sweep point's, 0)."""
    _, _, requests, memory = played
    qwen = requests[_name("ours", "fenced")][0]
    gemma = requests[_name("ours", "gemma-fenced")][0]
    assert qwen["stop"] == ["<|endoftext|>", "<|eot_id|>", "<|start_header_id|>"]
    assert qwen["chat_template_kwargs"] == {"enable_thinking": False}
    assert gemma["stop"] == ["<end_of_turn>"] and "chat_template_kwargs" not in gemma
    assert qwen["seed"] == 0 and "seed" not in requests[_name("ref", "fenced")][0]
    for run in ("amd-fenced", "gemma-amd-login"):  # AMD's block in the prompt's slot
        amd = requests[_name("ours", run)][0]["messages"][0]["content"]
        assert memory[run] and memory[run] in amd
        assert "apis.supervisor.show_profile()" in memory[run]


def test_the_students_exercise_what_the_harness_decides(played):
    reference, ours, requests, _ = played
    verdicts = {row["model"].split(":")[1]: row for row in reference}
    assert verdicts["fenced"]["success"] and verdicts["no_code"]["success"]
    assert not verdicts["two_blocks"]["success"]  # the second block never ran
    assert verdicts["complete_midway"]["steps"] == 1
    assert verdicts["long"]["steps"] == 40 and not verdicts["long"]["success"]
    assert ours[_name("ours", "long")]["outcome"].termination == "step_limit"
    last = requests[_name("ours", "huge_output")][1]["messages"][-1]["content"]
    assert last.endswith("x" * 100 + "\n[REST NOT SHOWN FOR BREVITY]```\n\n")
    assert len(last) == len("Output:\n```\n") + 20_000 + len(
        "\n[REST NOT SHOWN FOR BREVITY]```\n\n"
    )
    no_code = requests[_name("ours", "no_code")][1]["messages"][-1]["content"]
    assert no_code == "Output:\n```\nNo code available to execute.```\n\n"
    kept = requests[_name("ours", "two_blocks")][1]["messages"][-2]["content"]
    assert kept.endswith("print(choice)\n```\n\n") and "second" not in kept
    # Code that raises: AppWorld's traceback is the output, and the episode goes on.
    raised = [r["messages"][-1]["content"] for r in requests[_name("ours", "raises")][1:3]]
    assert all("Execution failed" in out for out in raised), raised
    assert verdicts["raises"]["success"] and verdicts["raises"]["steps"] == 4
    # Logging in: the wrong password raises (AppWorld's 401), the right one returns a
    # token whose expiry AppWorld drew from its random_seed: the two harnesses print the
    # same token only because both seed the world with 123 (the paper configs' value,
    # the reference's `appworld_config`); the account read with it answers the task.
    for run in ("login", "gemma-amd-login"):
        outputs = [r["messages"][-1]["content"] for r in requests[_name("ours", run)][1:5]]
        assert "Invalid credentials" in outputs[1] and "Execution failed" in outputs[1]
        assert '"access_token": "eyJ' in outputs[2] and "Augusta" in outputs[3]
        assert verdicts[run]["success"] and verdicts[run]["steps"] == 5


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
    _, ours, requests, _ = played
    outcome = ours["trimmed:student-long"]["outcome"]
    sent = requests["trimmed:student-long"]
    full = requests[_name("ours", "long")]  # the same student untrimmed: the whole history
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
