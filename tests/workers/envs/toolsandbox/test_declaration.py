"""The distillery side of `toolsandbox` without its venv: registration, options, the
venv's spec read from the checkout, and what says it is not installed."""

from __future__ import annotations

import pytest

from distillery.workers.envs.base import BenchmarkUnavailable
from distillery.workers.envs.conventions import conventions_of
from distillery.workers.envs.registry import benchmark_class
from distillery.workers.envs.toolsandbox import benchmark as ts
from distillery.workers.envs.toolsandbox.benchmark import ToolSandbox, ToolSandboxOptions


def _checkout(root, pin="openai==1.17.0", source="x = 1\n"):
    (root / "tool_sandbox").mkdir(parents=True)
    (root / "tool_sandbox" / "__init__.py").write_text(source)
    (root / "pyproject.toml").write_text(
        f'[project]\nname = "tool_sandbox"\ndependencies = ["{pin}", "polars==0.20.31"]\n'
    )
    return root


def test_registered_by_name():
    assert benchmark_class("toolsandbox") is ToolSandbox


def test_defaults_are_all_base_scenarios_without_a_scripted_user():
    options = ToolSandboxOptions()
    assert options.variant == "base" and options.network is True  # all 129, as the paper
    assert options.world_options() == {
        "variant": "base",
        "network": True,
        "user_model": "gpt-4o-2024-05-13",  # ToolSandbox's own default user
        "user_base_url": None,  # OpenAI's
        "user_api_key_env": "OPENAI_API_KEY",
        "scripted_user": {},
    }
    assert options.identity() == {} and options.deviations() == ()
    with pytest.raises(ValueError):
        ToolSandboxOptions(variant="5_distraction_tools")


def test_the_user_is_its_own_and_the_world_speaks_for_it():
    conventions = conventions_of(ToolSandbox)
    assert conventions.user_turns == "environment" and conventions.world_ends_episode


def test_the_users_model_identifies_episodes_its_endpoint_does_not():
    served = ToolSandboxOptions(
        user_model="qwen3-32b", user_base_url="http://h:8000/v1", user_api_key_env="MY_KEY"
    )
    assert served.identity() == {"user_model": "qwen3-32b"}
    assert served.world_options()["user_base_url"] == "http://h:8000/v1"  # the world needs it
    elsewhere = served.model_copy(update={"user_base_url": "http://other:9000/v1"})
    assert elsewhere.identity() == served.identity()


def test_leaving_the_network_scenarios_out_is_a_recorded_deviation():
    offline = ToolSandboxOptions(network=False)
    assert offline.deviations() == ("network_scenarios_excluded",)
    assert offline.identity() == {"network": False}
    assert "RAPID_API_KEY" not in offline.required_environment()


def test_a_run_needs_the_keys_its_tools_and_user_call():
    assert set(ToolSandboxOptions().required_environment()) == {"RAPID_API_KEY", "OPENAI_API_KEY"}
    served = ToolSandboxOptions(user_base_url="http://h:8000/v1", network=False)
    assert served.required_environment() == {}  # a served user: no key asked for
    scripted = ToolSandboxOptions(scripted_user={"s": []}, user_api_key_env="MINE")
    assert set(scripted.required_environment()) == {"RAPID_API_KEY"}


def test_a_scripted_user_is_a_recorded_deviation():
    options = ToolSandboxOptions(scripted_user={"s": ["more"]})
    assert options.deviations() == ("scripted_user",)
    assert options.identity() == {"scripted_user": {"s": ["more"]}}


def test_the_users_key_reaches_the_worker_by_its_variable_and_nowhere_else(monkeypatch):
    monkeypatch.setenv("MY_KEY", "sk-secret")
    bench = object.__new__(ToolSandbox)  # no venv needed to ask what the worker gets
    bench.settings = ToolSandboxOptions(user_api_key_env="MY_KEY")
    assert bench.worker_environment() == {"MY_KEY": "sk-secret"}
    assert "sk-secret" not in str(bench.settings.world_options())
    bench.settings = ToolSandboxOptions(user_api_key_env="MY_KEY", scripted_user={"s": []})
    assert bench.worker_environment() == {}  # a scripted user calls no endpoint


def test_the_venv_holds_the_checkouts_pins_and_installs_a_copy_of_it(tmp_path):
    spec = ts.env_spec(_checkout(tmp_path / "ts"))
    assert spec.requirements == ("openai==1.17.0", "polars==0.20.31")
    assert spec.python == "3.11"
    ((flag, script, source),) = spec.post_install
    assert flag == "-c" and source == str(tmp_path / "ts")
    assert "copytree" in script and "--no-deps" in script  # the checkout is never built in place
    other = ts.env_spec(_checkout(tmp_path / "other", pin="openai==1.30.0"))
    assert other.default_path() != spec.default_path()  # other pins: another venv


def test_the_checkout_is_named_by_its_variable(tmp_path, monkeypatch):
    monkeypatch.setenv(ts.CHECKOUT_VARIABLE, str(tmp_path / "mine"))
    assert ts.checkout() == (tmp_path / "mine").resolve()
    monkeypatch.delenv(ts.CHECKOUT_VARIABLE)
    assert ts.checkout() == ts.DEFAULT_CHECKOUT.resolve()


def test_the_fingerprint_follows_the_checkouts_sources(tmp_path, monkeypatch):
    root = _checkout(tmp_path / "ts")
    monkeypatch.setenv(ts.CHECKOUT_VARIABLE, str(root))
    before = ToolSandbox.fingerprint()
    assert before == ToolSandbox.fingerprint()
    (root / "tool_sandbox" / "__init__.py").write_text("x = 2\n")
    assert ToolSandbox.fingerprint() != before


def test_without_its_venv_it_is_unavailable_with_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setenv("DISTILLERY_ENVS_DIR", str(tmp_path))
    with pytest.raises(BenchmarkUnavailable) as err:
        ToolSandbox()
    assert "isolated install toolsandbox" in str(err.value.fix)
    assert ToolSandbox.versions() == {}


def test_the_config_group_selects_it_with_its_options():
    from distillery.orchestrator.core.compose import compose, rewrite_role_overrides
    from distillery.orchestrator.core.config import ConfigError, to_config

    overrides = ["benchmark=toolsandbox", "methods=[teacher]"]
    cfg = to_config(
        compose(rewrite_role_overrides([*overrides, "+benchmark.options.variant=all_tools"]))
    )
    assert cfg.benchmark.name == "toolsandbox" and cfg.benchmark.options == {"variant": "all_tools"}
    with pytest.raises(ConfigError):
        to_config(compose(rewrite_role_overrides([*overrides, "+benchmark.options.variant=nope"])))


def test_calls_refused_before_toolsandboxs_console_are_a_recorded_deviation():
    from distillery.workers.envs.registry import known_deviations

    assert known_deviations("toolsandbox") == ("invalid_calls_refused_before_the_context",)
