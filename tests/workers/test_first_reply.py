"""The first request every agent stage sends (the preflight, shaped like an episode's)
gets a reply like any other: whatever its shape and size, it is data. Only a refusal
of how distillery built the request stops the run (tests/workers/test_episode_refusals.py);
an unusable reply is said in one line and the episodes go on (and score such replies
as the model's)."""

from __future__ import annotations

import asyncio

import pytest

from distillery.testing.scripted_server import run_stub_server, stub_stats
from distillery.workers.episodes import AgentJob, EpisodeRunner
from distillery.workers.llm.config import ModelConfig
from tests.support.hostile import MODES


@pytest.fixture(scope="module")
def hostile_url():
    with run_stub_server("tests.support.hostile:hostile") as url:
        yield url


def _runner(tmp_path, url: str, mode: str) -> EpisodeRunner:
    model = ModelConfig(
        name=f"hostile-{mode}",
        backend="external",
        model=mode,
        base_url=url,
        action_format="native",
        max_retries=0,
        retry_backoff_s=0,
        request_timeout_s=60.0,  # generous: a loaded machine still answers every mode
        max_response_bytes=512 * 1024,
    )
    job = AgentJob(
        run_id="r",
        stage="evaluate",
        role="student",
        model=model,
        benchmark="bfcl_multi_turn_base",
        episodes_dir=str(tmp_path / mode),
        episode_retries=0,
        retry_backoff_s=0,
    )
    return EpisodeRunner(job, endpoints=[url])


def test_no_first_reply_of_any_shape_or_size_stops_the_run(tmp_path, hostile_url):
    # Every mode but the trickling body, which only the request's timeout ends: it is
    # an unreachable server to the preflight, as `body_not_json` is (same path).
    modes = sorted(m for m in MODES if m != "body_trickle")
    runners = [_runner(tmp_path, hostile_url, mode) for mode in modes]

    async def all_preflights():
        # Raises nothing: before the fix an integer content, a body nested 100,000
        # levels or one over the size cap raised InvalidReply out of the preflight,
        # which aborted the sweep (and did so again on every re-run).
        return await asyncio.gather(*(r.preflight() for r in runners))

    notes = asyncio.run(all_preflights())
    assert stub_stats(hostile_url)["preflight"] >= len(modes)
    for mode, note in zip(modes, notes, strict=True):
        expected, _ = MODES[mode]
        if expected == "repair":
            assert note is None, (mode, note)
        else:  # said in one line, naming what was wrong
            assert isinstance(note, str) and note and "\n" not in note, (mode, note)
            assert "Traceback" not in note
    by_mode = dict(zip(modes, notes, strict=True))
    assert "unusable reply" in by_mode["content_number"]
    assert "nested too deeply" in by_mode["body_deep"]
    assert "unreachable" in by_mode["body_not_json"]


def test_after_an_unusable_first_reply_the_episodes_play_and_are_scored(tmp_path, hostile_url):
    runner = _runner(tmp_path, hostile_url, "content_number")

    async def both():
        return await runner.preflight(), await runner.run_task("multi_turn_base_0")

    note, summary = asyncio.run(both())
    assert note is not None
    assert summary.termination == "invalid_reply" and summary.success is False
