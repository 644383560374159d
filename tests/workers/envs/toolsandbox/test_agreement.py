"""Distillery plays ToolSandbox as ToolSandbox's own runner does, request for request.

Two scenarios (a reminder over two user turns with a tool error on the way; a contact
added in one call) are played twice against one scripted OpenAI-compatible server
(agreement_players.py plays both the agent's and the simulated user's model): by
ToolSandbox's own runner in its venv (reference_runner.py: its CLI's seed and scenario
building, `Scenario.play_and_evaluate`, its `OpenAIAPIAgent` and `OpenAIAPIUser` roles
given the server's client), and by distillery's episode loop with the student's paper
config as `experiment=toolsandbox_table1` resolves it, ToolSandbox's user role pointed
at the same server. Every request the agent's model gets (messages and tools) and every
request the user's model gets (messages, tools and sampling) must agree, and so must
ToolSandbox's evaluation. What cannot be compared here is in docs/fidelity/toolsandbox.md
("Agreement with ToolSandbox's runner").
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from distillery.testing.scripted_server import recorded_requests, run_stub_server
from distillery.workers.agents.loop import run_agent_loop
from distillery.workers.agents.policies import LlmPolicy
from distillery.workers.envs.conventions import conventions_of
from distillery.workers.envs.isolated import venv
from distillery.workers.envs.toolsandbox.benchmark import ToolSandbox, ToolSandboxOptions, checkout
from distillery.workers.envs.toolsandbox.benchmark import env_spec as toolsandbox_spec
from distillery.workers.llm.config import ModelConfig
from distillery.workers.llm.router import RoutedChat
from tests.workers.envs.toolsandbox import agreement_players

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
RUNS = {
    "reminder": "add_reminder_content_and_date_and_time_multiple_user_turn",
    "contact": "add_contact_with_name_and_phone_number",
}
# What ToolSandbox's OpenAI agent sends besides messages and tools: nothing (model,
# messages, tools). Distillery sends the paper config's sampling; compared apart.
AGENT_FIELDS = ("messages", "tools")
# ToolSandbox draws a fresh uuid4 for every record a tool creates (add_contact returns
# the new contact's id): the one value two plays of a scenario never share.
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _same_ids(value: Any) -> Any:
    return json.loads(UUID.sub("<uuid4>", json.dumps(value)))


def _paper_student(name: str, url: str) -> ModelConfig:
    from distillery.orchestrator.core.compose import compose, rewrite_role_overrides
    from distillery.orchestrator.core.config import to_config

    overrides = ["experiment=toolsandbox_table1", "student=qwen3_4b", "sweep={}"]
    paper = to_config(compose(rewrite_role_overrides(overrides))).student.model_dump()
    return ModelConfig.model_validate(
        {
            **paper,
            "name": name,
            "backend": "external",
            "model": name,
            "base_url": url,
            "max_model_len": None,
            "reasoning_parser": None,
            "tool_call_parser": None,
            "max_retries": 0,
            "retry_backoff_s": 0,
        }
    )


def _reference(envs: Path, url: str, work: Path) -> list[dict[str, Any]]:
    python = venv.venv_python(envs / toolsandbox_spec(checkout()).default_path().name)
    spec = {
        "url": url,
        "out": str(work / "reference.jsonl"),
        "output_dir": str(work / "reference"),
        "runs": [
            {"scenario": s, "agent_model": f"ref:{r}:agent", "user_model": f"ref:{r}:user"}
            for r, s in RUNS.items()
        ],
    }
    (work / "spec.json").write_text(json.dumps(spec))
    done = subprocess.run(
        [str(python), str(HERE / "reference_runner.py"), str(work / "spec.json")],
        capture_output=True, text=True, timeout=900,
        env={**os.environ, "OPENAI_API_KEY": "EMPTY"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return [json.loads(line) for line in (work / "reference.jsonl").read_text().splitlines()]


async def _ours(url: str, run: str) -> dict[str, Any]:
    bench = ToolSandbox(
        ToolSandboxOptions(
            spare_workers=0, user_model=f"ours:{run}:user", user_base_url=url, network=False
        )
    )
    try:
        (task,) = bench.load_tasks(task_ids=[RUNS[run]])
        conventions = conventions_of(bench)
        model = _paper_student(f"ours:{run}:agent", url)
        chat = RoutedChat.from_config(model, [url])
        sent = conventions.sent_sampling(model)
        policy = LlmPolicy(
            chat, model.name, "native", sent["temperature"], sent["max_tokens"],
            sent["seed"], sent["top_p"],
        )  # fmt: skip
        env = bench.make_env(task, model.name)
        try:
            outcome = await run_agent_loop(
                env, policy, bench.max_steps_per_turn, conventions=conventions
            )
            score = await asyncio.to_thread(env.score)
        finally:
            await asyncio.to_thread(env.close)
            await chat.aclose()
        return {"outcome": outcome, "score": score}
    finally:
        bench.close()


@pytest.fixture(scope="module")
def played(toolsandbox_envs, tmp_path_factory):
    work = tmp_path_factory.mktemp("toolsandbox_agreement")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DISTILLERY_ENVS_DIR", str(toolsandbox_envs))
        script = f"{agreement_players.__name__}:play"
        with run_stub_server(script, record=True) as url:
            reference = _reference(toolsandbox_envs, url, work)
            ours = {run: asyncio.run(_ours(url, run)) for run in RUNS}
            requests = recorded_requests(url)
    by_model: dict[str, list[dict]] = {}
    for request in requests:
        by_model.setdefault(request["model"], []).append(request)
    return {r["agent_model"].split(":")[1]: r for r in reference}, ours, by_model


@pytest.mark.parametrize("run", sorted(RUNS))
def test_the_agents_and_the_users_requests_agree_with_toolsandboxs_runner(played, run):
    reference, ours, requests = played
    theirs = requests[f"ref:{run}:agent"]
    mine = requests[f"ours:{run}:agent"]
    assert len(mine) == len(theirs)
    for index, (a, b) in enumerate(zip(mine, theirs, strict=True)):
        for key in AGENT_FIELDS:
            same = _same_ids(a.get(key)) == _same_ids(b.get(key))
            assert same, f"agent request {index + 1}: {key} differs"
    users_theirs = [_same_ids(_but_model(r)) for r in requests[f"ref:{run}:user"]]
    users_mine = [_same_ids(_but_model(r)) for r in requests[f"ours:{run}:user"]]
    assert users_mine == users_theirs and users_mine
    score = ours[run]["score"]
    assert score.success == (reference[run]["similarity"] >= 1.0)
    assert f"similarity={reference[run]['similarity']:.3f}" in (score.error_message or "")


def test_the_runs_exercise_a_tool_error_two_user_turns_and_the_paper_sampling(played):
    reference, ours, requests = played
    assert all(r["similarity"] == 1.0 for r in reference.values())
    sent = requests["ours:reminder:agent"]
    errors = [m for m in sent[2]["messages"] if m["role"] == "tool"]
    assert errors and "missing" in errors[-1]["content"]  # ToolSandbox's error, observed
    assert {"role": "user", "content": agreement_players.WHEN} in sent[1]["messages"]
    # Distillery's agent sends the paper config's sampling; ToolSandbox's agent none.
    assert sent[0]["temperature"] == 0.0 and "temperature" not in requests["ref:reminder:agent"][0]


def _but_model(request: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in request.items() if k != "model"}
