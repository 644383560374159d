"""A point (or cell) whose episodes all failed on infrastructure has no rate, and says
so in the same words everywhere: the console summary, MLflow's `success` tag and the
report (it used to be tagged `nan% [nan–nan]` and shown as `– n=0`). And the memory
service costs its embedding model only once something is embedded: starting it to
check a cached bank in the store loads none."""

from __future__ import annotations

import math

from distillery.orchestrator.core.stats import NO_SCORED_EPISODES
from distillery.orchestrator.report.stats import cell_label
from distillery.orchestrator.tracking.traces import success_label
from distillery.workers.memory.config import EmbedderConfig, StoreConfig
from distillery.workers.memory_service import MemoryServiceImpl

ALL_INFRA = {
    "success_rate": math.nan,
    "success_rate_ci_low": math.nan,
    "success_rate_ci_high": math.nan,
    "n_scored": 0,
}


def test_an_all_infra_point_is_no_scored_episodes_in_mlflow_and_the_report():
    assert success_label(ALL_INFRA) == NO_SCORED_EPISODES == "no scored episodes"
    assert cell_label(0, 0, math.nan, math.nan, 1) == NO_SCORED_EPISODES
    scored = {**ALL_INFRA, "success_rate": 0.5, "n_scored": 4}
    scored.update(success_rate_ci_low=0.15, success_rate_ci_high=0.85)
    assert success_label(scored) == "50.0% [15.0–85.0] n=4"


def test_the_memory_service_loads_its_embedder_only_to_embed(tmp_path, monkeypatch):
    from distillery.workers import memory_service

    loaded = []
    monkeypatch.setattr(memory_service, "make_embedder", lambda cfg: loaded.append(cfg) or cfg)
    service = MemoryServiceImpl(StoreConfig(path=str(tmp_path / "q")), EmbedderConfig(), "")
    try:
        assert service.ready()["embedder"] == "sentence_transformers:all-MiniLM-L6-v2"
        assert not service.has_bank("e" * 64) and service.drop_bank("e" * 64) == []
        assert loaded == []  # a cached bank's check, nothing embedded: no model in memory
        assert service.embedder is service.embedder and len(loaded) == 1
    finally:
        service.close()
