import math
from types import SimpleNamespace

import pytest

from distillery.orchestrator.core.stats import percentile, wilson_interval
from distillery.orchestrator.execution.metrics import agent_metrics
from distillery.orchestrator.tracking.tracker import safe_params


def test_wilson_matches_hand_computed_values():
    # 8/10: centre (0.8 + 1.92/10)/(1+3.84/10), computed by hand with z=1.96.
    low, high = wilson_interval(8, 10)
    assert low == pytest.approx(0.4902, abs=1e-3)
    assert high == pytest.approx(0.9433, abs=1e-3)
    assert wilson_interval(0, 5)[0] == 0.0
    assert wilson_interval(5, 5)[1] == pytest.approx(1.0)
    assert all(math.isnan(b) for b in wilson_interval(0, 0))  # no trials: no interval


def test_percentile_interpolates():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([10], 95) == 10
    assert percentile([], 50) == 0.0
    assert percentile(list(range(101)), 95) == 95


def _ep(success, termination="done", steps=3, wall=1.0):
    return SimpleNamespace(
        success=success,
        termination=termination,
        total_steps=steps,
        tokens_in=10,
        tokens_out=2,
        wall_s=wall,
    )


def test_infra_errors_are_not_scored():
    eps = [_ep(True), _ep(False), _ep(None, "infra_error", 0, 99.0), _ep(None, "timeout", 0)]
    m = agent_metrics(eps)
    assert m["n_tasks"] == 4
    assert m["n_scored"] == 2
    assert m["success_rate"] == 0.5
    assert m["infra_errors"] == 2
    assert m["latency_p95_s"] == pytest.approx(1.0)  # infra wall times excluded
    assert m["tokens_in"] == 40


def test_a_point_without_scored_episodes_has_no_success_rate():
    m = agent_metrics([_ep(None, "infra_error", 0), _ep(None, "timeout", 0)])
    assert m["n_scored"] == 0 and m["n_unscored"] == 2 and m["infra_errors"] == 2
    for key in ("success_rate", "success_rate_ci_low", "success_rate_ci_high", "mean_steps"):
        assert math.isnan(m[key]), key


def test_secrets_never_reach_params():
    params = safe_params(
        {
            "student": {"api_key_env": "OPENAI_API_KEY", "api_key": "sk-live", "model": "m"},
            "tracking": {"token": "abc"},
        }
    )
    assert params["student.api_key_env"] == "OPENAI_API_KEY"
    assert params["student.api_key"] == "<redacted>"
    assert params["tracking.token"] == "<redacted>"
    assert params["student.model"] == "m"


def test_secret_values_are_redacted_from_params_wherever_they_are(monkeypatch):
    from distillery import redaction

    monkeypatch.setenv("PARAM_TEST_KEY", "sk-param-canary-123")
    params = safe_params(
        {
            "student": {
                "api_key_env": "PARAM_TEST_KEY",
                "base_url": "http://u:url-canary-123@host/v1",
                "extra_args": ["--api-key", "arg-canary-123"],
                "max_tokens": 512,
            },
            "experiment": {"description": "uses sk-param-canary-123"},
        }
    )
    redaction.clear_secrets()
    text = repr(params)
    assert "canary" not in text
    assert params["student.base_url"] == "http://<redacted>@host/v1"
    assert params["student.max_tokens"] == "512"  # a count, not a token
