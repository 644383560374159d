"""Whole episodes against every hostile reply (real HTTP, real BFCL environment):
nothing a server sends aborts the run; an unusable reply is scored as the model's
failure; a repaired one plays on, each observation going to the call it answers; the
record is always written and readable; memory stays bounded with 32 hostile episodes
in flight."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest

from distillery.testing.scripted_server import run_stub_server
from distillery.workers.agents.reply_bounds import MAX_HISTORY_CALLS, MAX_HISTORY_TEXT
from distillery.workers.episodes import AgentJob, EpisodeRunner
from distillery.workers.llm.config import ModelConfig
from distillery.workers.llm.types import ChatResult, Usage
from distillery.workers.trajectories import SCORED_TERMINATIONS, read_episodes
from tests.support.hostile import MODES

TASK = "multi_turn_base_0"
# Repairs that leave the perfect player's calls as they were: the episode must succeed.
CALLS_UNCHANGED = {
    "content_parts",
    "content_surrogate",
    "content_nul",
    "content_huge",
    "ids_missing",
    "ids_empty",
    "ids_int",
    "ids_object",
    "ids_list",
    "ids_duplicate",
    "arguments_object",
    "arguments_escaped_nul",
    "usage_strings",
    "usage_list",
    "usage_negative",
    "usage_huge",
    "usage_float",
    "finish_reason_number",
    "body_invalid_utf8",
    "body_gzip",
}


@pytest.fixture(scope="module")
def hostile_url():
    with run_stub_server("tests.support.hostile:hostile") as url:
        yield url


def _runner(tmp_path, url, mode, format_="native", **model_fields):
    model = ModelConfig(
        name=f"hostile-{mode}",
        backend="external",
        model=mode,
        base_url=url,
        action_format=format_,
        max_retries=0,
        retry_backoff_s=0,
        request_timeout_s=10.0,
        max_response_bytes=512 * 1024,  # reached long before the timeout, even under load
        **model_fields,
    )
    job = AgentJob(
        run_id="r",
        stage="evaluate",
        role="student",
        model=model,
        benchmark="bfcl_multi_turn_base",
        episodes_dir=str(tmp_path / mode.replace("@", "_at_") / format_),
        episode_retries=0,
        retry_backoff_s=0,
    )
    return EpisodeRunner(job, endpoints=[url])


def _play_all(runners):
    async def go():
        return await asyncio.gather(*(r.run_task(TASK) for r in runners))

    return asyncio.run(go())


# Every reply hostile, or only a later one (earlier turns then carry the repaired
# reply); native tool calls and BFCL's prompt format.
@pytest.mark.parametrize("at,format_", [("", "native"), ("@2", "native"), ("", "prompt")])
def test_no_hostile_reply_aborts_an_episode_or_hides_a_model_failure(
    tmp_path, hostile_url, at, format_
):
    modes = sorted(MODES)
    runners = [_runner(tmp_path, hostile_url, mode + at, format_) for mode in modes]
    # In the prompt format the text is the call: a character more makes it no call.
    # BFCL reads a reply as the server sent it: content given as parts is no text to
    # its prompting decoder, and an escaped NUL stays in a native call's argument.
    unchanged = CALLS_UNCHANGED - {"arguments_escaped_nul"}
    if format_ == "prompt":
        unchanged = unchanged - {"content_surrogate", "content_huge", "content_parts"}
    summaries = _play_all(runners)  # raises nothing, whatever the replies
    for mode, runner, summary in zip(modes, runners, summaries, strict=True):
        expected, _ = MODES[mode]
        (record,) = read_episodes(runner.job.episodes_dir)  # written, and readable
        assert record.termination == summary.termination
        if expected == "infra":
            assert summary.success is None and summary.termination in ("infra_error", "timeout")
            continue
        assert summary.termination in SCORED_TERMINATIONS, (mode, summary.error_message)
        assert summary.success is not None, mode
        if expected == "invalid":
            assert summary.termination == "invalid_reply" and summary.success is False, mode
            assert summary.error_message.startswith("invalid reply: ")
        if mode in unchanged:
            assert summary.success, (mode, summary.error_message)
        if expected == "repair" and mode != "body_gzip" and format_ == "native":
            notes = json.loads(record.extra_json).get("reply_notes", [])
            assert notes, mode
        messages = json.loads(record.messages_json)  # the transcript is valid UTF-8 JSON
        assert max(len(m.get("tool_calls", [])) for m in messages) <= MAX_HISTORY_CALLS
        assert all(len(s.calls) <= MAX_HISTORY_CALLS for s in record.steps)
        assert max(record.tokens_in, record.tokens_out) < 10**9


def test_an_oversize_reply_is_not_kept_verbatim(tmp_path, hostile_url):
    (summary,) = _play_all([_runner(tmp_path, hostile_url, "content_huge")])
    runner_dir = tmp_path / "content_huge" / "native"
    (record,) = read_episodes(runner_dir)
    assert summary.success
    # ~300 KB of text per reply, ~10 replies: the history keeps MAX_HISTORY_TEXT of each.
    assert len(record.messages_json) < (MAX_HISTORY_TEXT + 20_000) * (record.n_llm_calls + 5)
    notes = json.loads(record.extra_json)["reply_notes"]
    assert any("cut to" in note for note in notes)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * 4096


def test_worker_memory_stays_bounded_with_32_hostile_episodes(tmp_path, hostile_url):
    """32 episodes in flight, each fed endless bodies or megabyte replies: the
    worker's resident memory grows by far less than today's 2.4 GB for two."""
    modes = ["body_endless", "content_huge", "body_huge", "content_surrogate"] * 8
    runners = [_runner(tmp_path, hostile_url, f"{m}") for m in modes[:4]]
    runners = [runners[i % 4] for i in range(32)]  # 8 concurrent episodes per runner
    peak = [0]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], _rss_bytes())
            time.sleep(0.02)

    baseline = _rss_bytes()
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.monotonic()
    try:

        async def go():
            return await asyncio.gather(
                *(r.run_task(f"multi_turn_base_{i}") for i, r in enumerate(runners))
            )

        summaries = asyncio.run(go())
    finally:
        stop.set()
        sampler.join()
    assert time.monotonic() - started < 300
    assert all(s.success is not None for s in summaries), [s.error_message for s in summaries]
    growth = peak[0] - baseline
    print(f"RSS growth with 32 hostile episodes: {growth / 2**20:.0f} MiB")
    assert growth < 600 * 2**20, f"RSS grew by {growth / 2**20:.0f} MiB"


class _HandBuiltReplies:
    """A policy backend that bypasses the client (so nothing repaired its replies)."""

    def __init__(self, replies):
        self.replies = list(replies)

    async def chat(self, episode_id, messages, **kwargs):
        return self.replies.pop(0) if self.replies else ChatResult(text="done")

    def end_episode(self, episode_id):
        pass


def test_a_record_parquet_cannot_hold_is_stored_repaired_not_fatal(tmp_path):
    model = ModelConfig(
        name="x", backend="external", model="m", base_url="http://unused/v1", action_format="prompt"
    )
    job = AgentJob(
        run_id="r",
        stage="evaluate",
        role="student",
        model=model,
        benchmark="bfcl_multi_turn_base",
        episodes_dir=str(tmp_path / "episodes"),
        episode_retries=0,
    )
    replies = [ChatResult(text="[pwd()] \ud800", usage=Usage(10**20, -(10**20)))]
    runner = EpisodeRunner(job, chat_backend=_HandBuiltReplies(replies))
    summary = asyncio.run(runner.run_task("multi_turn_base_3"))
    assert summary.success is False and summary.termination == "done"
    (record,) = read_episodes(tmp_path / "episodes")
    assert record.tokens_in == 2**63 - 1 and record.tokens_out == -(2**63 - 1)
    assert "\ud800" not in record.messages_json
