"""What a BFCL episode's requests carry: BFCL's handler sends the temperature only, the
`model_sampling` option sends the model config's cap and seed too, and a model that is
unusable without a cap (`cap_every_request`, the CPU smoke model) gets its cap, counted
when a reply stops at it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from distillery.workers.episodes import AgentJob, EpisodeRunner
from distillery.workers.llm.config import ModelConfig
from distillery.workers.llm.types import ChatResult
from distillery.workers.trajectories import read_episodes


class RecordingBackend:
    """Answers every request with text (the turn ends), stopped at the cap."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    async def chat(self, episode_id: str, messages: list[dict[str, Any]], **kwargs: Any):
        self.sent.append(kwargs)
        return ChatResult(text="Done.", finish_reason="length")

    def end_episode(self, episode_id: str) -> None:
        return None


def _play(tmp_path, model: ModelConfig, **options: Any):
    backend = RecordingBackend()
    job = AgentJob(
        run_id="r",
        stage="evaluate",
        role="student",
        model=model,
        benchmark="bfcl_multi_turn_base",
        benchmark_options=options,
        episodes_dir=str(tmp_path / "episodes"),
        episode_retries=0,
    )
    asyncio.run(EpisodeRunner(job, chat_backend=backend).run_task("multi_turn_base_0"))
    (record,) = read_episodes(tmp_path / "episodes")
    return backend.sent, json.loads(record.extra_json or "{}")


STUDENT = ModelConfig(
    name="qwen3-8b", backend="vllm", model="Qwen/Qwen3-8B", temperature=0.0, max_tokens=2048
)


@pytest.mark.parametrize(
    ("model", "options", "cap", "seed"),
    [
        (STUDENT, {}, None, None),  # BFCL's handler: the temperature only
        (STUDENT, {"model_sampling": True}, 2048, 0),  # the option: the config's too
        (STUDENT.model_copy(update={"cap_every_request": True}), {}, 2048, None),
    ],
    ids=["bfcl", "model_sampling", "cap_every_request"],
)
def test_bfcl_requests_carry_what_its_handler_sends(tmp_path, model, options, cap, seed):
    sent, extra = _play(tmp_path, model, **options)
    assert {(k["temperature"], k["max_tokens"], k["seed"]) for k in sent} == {(0.0, cap, seed)}
    fired = extra.get("limits_fired", {})
    # Only a cap BFCL would not send is a protection, counted when a reply stops at it.
    assert fired.get("generation_cap") == (len(sent) if model.cap_every_request else None)
