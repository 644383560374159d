"""Thinking models (issue 8 item 2): reasoning is split off every reply, never enters
the next request's history nor any parser, and its tokens are counted apart.

That is the loop's normalized reading of a reply (`conventions.reply="normalized"`),
which every benchmark gets unless its own runner re-sends the server's message: BFCL's
does (tests/workers/envs/test_bfcl_agreement.py), so these episodes play BFCL with its
`rebuild_assistant_message` option, which is that reading."""

from __future__ import annotations

import asyncio
import json

import pytest

from distillery.testing.scripted_server import run_stub_server
from distillery.workers.agents.policies import LlmPolicy
from distillery.workers.episodes import AgentJob, EpisodeRunner
from distillery.workers.llm.config import ModelConfig
from distillery.workers.llm.reasoning import split_reasoning, split_think_blocks
from distillery.workers.llm.router import RoutedChat
from distillery.workers.llm.servers import vllm_command
from distillery.workers.memory.amd.hooks import AmdHooks
from distillery.workers.memory.amd.settings import RetrievalConfig
from distillery.workers.trajectories import read_episodes
from tests.support.thinking_scripts import THOUGHT_ONLY
from tests.workers.llm.test_compat import shipped


@pytest.mark.parametrize(
    ("content", "answer", "reasoning"),
    [
        ("[ls()]", "[ls()]", ""),
        ("<think>a [b]</think>\n\n[ls()]", "[ls()]", "a [b]"),
        ("<think>\n\n</think>\n\n[ls()]", "[ls()]", ""),  # Qwen3 with thinking off
        ("x <THINK>one</THINK> y <think>two</think> z", "x  y  z", "one\ntwo"),
        ("opened in the prompt [rm()]</think>[ls()]", "[ls()]", "opened in the prompt [rm()]"),
        ("[ls()] <think>cut off by the cap [rm(", "[ls()]", "cut off by the cap [rm("),
    ],
)
def test_think_blocks_are_split_off_in_every_shape(content, answer, reasoning):
    assert split_think_blocks(content) == (answer, reasoning)


def test_reasoning_fields_are_split_off_too():
    message = {"content": "<think>inline</think>ok", "reasoning_content": "field"}
    assert split_reasoning(message) == ("ok", "field\ninline")
    assert split_reasoning({"content": None, "reasoning": "new vLLM name"}) == (
        "",
        "new vLLM name",
    )


def test_vllm_launch_line_carries_the_matching_reasoning_parser():
    for name, parser, tools in (
        ("qwen3_4b", "qwen3", "hermes"),
        ("gemma4_e4b", "gemma4", "gemma4"),
        ("llama3_1_8b", None, "llama3_json"),
    ):
        command = vllm_command(shipped(name, "student"), "127.0.0.1", 8000)
        assert command[command.index("--tool-call-parser") + 1] == tools
        assert ("--reasoning-parser" in command) == (parser is not None)
        if parser:
            assert command[command.index("--reasoning-parser") + 1] == parser


def _thinking_student(url: str, fmt: str) -> ModelConfig:
    return ModelConfig(
        name="thinker",
        backend="external",
        model="thinker",
        base_url=url,
        action_format=fmt,
        enable_thinking=True,
        max_retries=0,
    )


def _run(tmp_path, cfg: ModelConfig, url: str, task_id: str = "multi_turn_base_0"):
    job = AgentJob(
        run_id="r",
        stage="evaluate",
        role="student",
        model=cfg,
        benchmark="bfcl_multi_turn_base",
        benchmark_options={"rebuild_assistant_message": True},
        episodes_dir=str(tmp_path / "episodes"),
        episode_retries=0,
        retry_backoff_s=0,
    )
    runner = EpisodeRunner(job, chat_backend=RoutedChat.from_config(cfg, [url]))
    return asyncio.run(runner.run_task(task_id))


def test_inline_thinking_never_reaches_the_parser_nor_the_history(tmp_path):
    # The script refuses (HTTP 400, ending the episode) any request whose history holds
    # reasoning or lacks enable_thinking; its think blocks hold calls the parser would
    # otherwise execute (cd into a folder that does not exist).
    with run_stub_server("tests.support.thinking_scripts:thinking_prompt_agent") as url:
        summary = _run(tmp_path, _thinking_student(url, "prompt"), url)
    (record,) = read_episodes(tmp_path / "episodes")
    assert summary.termination == "done" and summary.success, record.error_message
    transcript = record.messages_json
    assert "<think>" not in transcript and THOUGHT_ONLY not in transcript
    assert all(THOUGHT_ONLY not in c.call for s in record.steps for c in s.calls)
    assert record.tokens_reasoning == 12 * record.n_llm_calls
    assert summary.tokens_reasoning == record.tokens_reasoning


def test_reasoning_content_is_never_sent_back(tmp_path):
    with run_stub_server("tests.support.thinking_scripts:reasoning_parser_agent") as url:
        cfg = _thinking_student(url, "native").model_copy(update={"enable_thinking": None})
        summary = _run(tmp_path, cfg, url)
    (record,) = read_episodes(tmp_path / "episodes")
    assert summary.termination == "done" and summary.success, record.error_message
    assert "reasoning_content" not in record.messages_json
    assert all("reasoning_content" not in m for m in json.loads(record.messages_json))


def test_subtask_labels_are_parsed_from_the_answer_not_the_thinking():
    with run_stub_server("tests.support.thinking_scripts:thinking_decomposer") as url:
        cfg = _thinking_student(url, "prompt")
        routed = RoutedChat.from_config(cfg, [url])
        policy = LlmPolicy(routed, "e", "prompt", 0.0, 256, None)

        class NoLookup:
            async def subtasks(self, queries, task_id, k, threshold):
                return []

        hooks = AmdHooks(
            "t",
            NoLookup(),
            RetrievalConfig(types=("st",), subtask_query="decompose"),
            allows=lambda source: True,
            ask_model=lambda messages: policy.respond(messages, None),
        )

        async def go():
            try:
                await hooks.before_turn(0, "Open the file and mail it.", "BASE")
            finally:
                await routed.aclose()

        asyncio.run(go())
    assert hooks.log.decomposition == ["open the file", "mail it"]
    assert not hooks.log.decomposition_fallback and hooks.log.llm_calls == 1
    assert hooks.log.usage.reasoning_tokens == 9


def test_episode_files_from_before_reasoning_tokens_read_as_zero(tmp_path):
    from dataclasses import asdict

    import pyarrow as pa
    import pyarrow.parquet as pq

    from distillery.workers import trajectories
    from tests.workers.test_trajectories import _record

    old_schema = pa.schema([f for f in trajectories.EPISODE_SCHEMA if f.name != "tokens_reasoning"])
    row = asdict(_record())
    row.pop("tokens_reasoning")
    pq.write_table(pa.Table.from_pylist([row], schema=old_schema), tmp_path / "old.parquet")
    (record,) = trajectories.read_episodes(tmp_path)
    assert record.tokens_reasoning == 0 and record.task_id == row["task_id"]
