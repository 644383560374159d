"""Secrets are found by value (env keys, URL userinfo, argument lists, secret-named
values) and redacted from text, nested records, logs and standard streams."""

from __future__ import annotations

import base64
import io
import logging

import pytest

from distillery import redaction
from distillery.redaction import REDACTED, redact, redact_obj, register_secrets, secrets_in
from distillery.workers.llm.config import ModelConfig

ENV_KEY = "sk-env-canary-0123456789"
URL_KEY = "url-canary-0123456789"
ARG_KEY = "arg-canary-0123456789"


@pytest.fixture(autouse=True)
def _clean_registry():
    redaction.clear_secrets()
    yield
    redaction.clear_secrets()


def test_secrets_are_collected_by_value_from_every_place_a_key_can_be():
    model = ModelConfig(
        name="m",
        backend="external",
        model="x",
        base_url=f"http://user:{URL_KEY}@host:8000/v1",
        api_key_env="MY_KEY",
        extra_args=("--api-key", ARG_KEY, "--hf-token=hf-canary-0123", "--port", "8000"),
    )
    config = {
        "student": model,
        "tracking": {"uri": "https://TOKEN-as-user-0123@mlflow.example/"},
        "other": {"password": "db-password-0123", "max_tokens": 512, "api_key_env": "UNSET"},
    }
    found = secrets_in(config, environ={"MY_KEY": ENV_KEY})
    assert found == {
        ENV_KEY,
        URL_KEY,
        ARG_KEY,
        "hf-canary-0123",
        "TOKEN-as-user-0123",
        "db-password-0123",
        # URL userinfo as HTTP Basic sends it (a server may echo the header).
        base64.b64encode(f"user:{URL_KEY}".encode()).decode(),
        base64.b64encode(b"TOKEN-as-user-0123:").decode(),
    }


def test_count_flags_and_numbers_are_not_keys_and_a_json_record_stays_readable(tmp_path):
    # The rehearsal's simulated server took `--cache-tokens 400000`: registered as a key,
    # "400000" was cut out of a ledger run record's wall time (8.558841172400000...),
    # and the record could no longer be read.
    command = (
        "--cache-tokens", "400000", "--max-num-batched-tokens", "65536",
        "--ms-per-token", "0.1", "--api-key", "sk-canary-0123", "--password", "424242",
    )  # fmt: skip
    assert secrets_in({"extra_args": command}) == {"sk-canary-0123", "424242"}

    from distillery.workers.storage import Location

    register_secrets(["400000", "sk-canary-0123"])  # a numeric key still registered
    record = {"wall_s": 8.5588411724000008, "note": "key sk-canary-0123", "n": 1400000}
    target = Location.of(tmp_path / "run.json")
    target.write_json(record)
    back = target.read_json()
    assert back == {"wall_s": 8.5588411724000008, "note": f"key {REDACTED}", "n": 1400000}


def test_redact_replaces_registered_values_and_any_url_userinfo():
    register_secrets([ENV_KEY, "short"])  # too short to replace by value safely
    text = (
        f"Authorization: Bearer {ENV_KEY}; http://u:unregistered-pw@10.0.0.1:6333/x "
        "failed; a short word stays"
    )
    out = redact(text)
    assert ENV_KEY not in out and "unregistered-pw" not in out
    assert f"Bearer {REDACTED}" in out and f"http://{REDACTED}@10.0.0.1:6333/x" in out
    assert "short word" in out
    # Plain URLs and e-mail addresses are untouched.
    assert redact("see http://host/v1 or mail a@b.org") == "see http://host/v1 or mail a@b.org"


def test_redact_obj_walks_dataclasses_dicts_and_lists():
    from distillery.workers.trajectories import CallRecord, StepRecord

    register_secrets([ENV_KEY])
    step = StepRecord(
        0, 0, f"key {ENV_KEY}", [CallRecord("f()", "f", ENV_KEY, None, False)], 1, 1, 0.1, None
    )
    out = redact_obj({"steps": [step], "n": 3})
    assert out["n"] == 3
    assert out["steps"][0].assistant_text == f"key {REDACTED}"
    assert out["steps"][0].calls[0].content == REDACTED
    assert step.assistant_text == f"key {ENV_KEY}"  # the original is left alone


def test_installed_redaction_covers_log_records_and_tracebacks(monkeypatch):
    register_secrets([ENV_KEY])
    monkeypatch.setattr(redaction, "_installed", False)
    previous = logging.getLogRecordFactory()
    try:
        redaction.install()
        stream = io.StringIO()
        handler = logging.StreamHandler(stream)
        logger = logging.getLogger("test_redaction")
        logger.addHandler(handler)
        logger.warning("calling %s with %s", f"http://u:{URL_KEY}@h/v1", ENV_KEY)
        try:
            raise RuntimeError(f"refused key {ENV_KEY}")
        except RuntimeError:
            logger.exception("failed")
        logger.removeHandler(handler)
        written = stream.getvalue()
        assert ENV_KEY not in written and URL_KEY not in written
        assert "refused key <redacted>" in written and "calling http://<redacted>@h/v1" in written
    finally:
        logging.setLogRecordFactory(previous)
        import sys

        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            if isinstance(stream, redaction.RedactingStream):
                setattr(sys, name, stream._target)
