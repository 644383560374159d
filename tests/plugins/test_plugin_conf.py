"""Config groups of another package: its `distillery.conf` entry point names a config
package, added to Hydra's search path, so `benchmark=toy` (tests/plugins/toy_plugin/
conf/benchmark/toy.yaml) composes, validates and plans like a built-in benchmark; an
entry point that names no config package stops the command naming it."""

from __future__ import annotations

import pytest
from hydra.errors import MissingConfigException

from distillery.orchestrator.cli.app import run_cli
from distillery.orchestrator.core.compose import (
    PluginConfigError,
    compose,
    plugin_config_paths,
    rewrite_role_overrides,
)
from distillery.orchestrator.core.config import ConfigError, to_config
from distillery.orchestrator.planning.plan import plan_sweep
from tests.plugins import ENTRY_POINTS, install_toy_plugin

TOY_TASKS = [f"toy_{i}" for i in range(6)]


def _config(*overrides: str):
    return to_config(compose(rewrite_role_overrides(list(overrides))))


def test_a_plugin_config_package_is_on_the_search_path(toy_plugin):
    assert "pkg://toy_plugin.conf" in plugin_config_paths()
    cfg = _config("benchmark=toy", "benchmark.limit=null", "methods=[teacher,zero_shot,amd_wf]")
    assert cfg.benchmark.name == "toy" and cfg.benchmark.max_steps_per_turn is None
    graph = plan_sweep([cfg])
    assert sorted(graph.tasks) == TOY_TASKS
    assert {key.kind for key in graph.stages} == {"collect", "build", "evaluate"}
    # The plugin's options reach its options model through its own yaml's `options: {}`.
    fewer = _config("benchmark=toy", "benchmark.limit=null", "+benchmark.options.n_tasks=2")
    assert sorted(plan_sweep([fewer]).tasks) == TOY_TASKS[:2]
    assert _config("benchmark=bfcl_multi_turn_base").benchmark.name == "bfcl_multi_turn_base"


def test_distillerys_own_configs_win_over_a_plugins_of_the_same_name(tmp_path, monkeypatch):
    site = tmp_path / "site"
    shadow = site / "shadow_conf" / "benchmark"
    shadow.mkdir(parents=True)
    (site / "shadow_conf" / "__init__.py").write_text("")
    (shadow / "bfcl_multi_turn_base.yaml").write_text("name: shadowed\n")
    (shadow / "shadow_only.yaml").write_text("name: toy\nmax_steps_per_turn: 3\n")
    groups = {**ENTRY_POINTS, "distillery.conf": {"shadow": "shadow_conf"}}
    for path in reversed(install_toy_plugin(site, groups)):
        monkeypatch.syspath_prepend(path)
    assert _config().benchmark.name == "bfcl_multi_turn_base"
    assert _config("benchmark=shadow_only").benchmark.max_steps_per_turn == 3


def test_cfg_job_prints_the_plugin_benchmark(toy_plugin, capsys):
    assert run_cli(["benchmark=toy", "--cfg", "job"]) == 0
    out = capsys.readouterr().out
    assert "benchmark:\n  name: toy\n" in out


def test_without_the_plugin_its_group_option_is_unknown():
    assert "pkg://toy_plugin.conf" not in plugin_config_paths()
    with pytest.raises(MissingConfigException, match="benchmark/toy"):
        compose(["benchmark=toy"])


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("toy_plugin.nowhere", "package toy_plugin.nowhere is not installed"),
        ("no_such_plugin.conf", "package no_such_plugin.conf cannot be imported: "),
        ("toy_plugin.bench", "toy_plugin.bench is a module, not a package of configs"),
        ("toy_plugin.conf:configs", "not a package name (e.g. my_package.conf)"),
    ],
)
def test_a_broken_config_entry_point_is_named(tmp_path, monkeypatch, capsys, value, why):
    groups = {**ENTRY_POINTS, "distillery.conf": {"broken": value}}
    for path in reversed(install_toy_plugin(tmp_path / "site", groups)):
        monkeypatch.syspath_prepend(path)
    where = f"config entry point broken = {value!r} of toy-plugin (distillery.conf): "
    with pytest.raises(PluginConfigError) as err:
        compose(["benchmark=toy"])
    assert str(err.value).startswith(where) and why in str(err.value)
    # The command refuses with the same line (exit status 2), before anything runs.
    assert run_cli(["benchmark=toy", "--plan"]) == 2
    assert capsys.readouterr().err.startswith(f"distillery: {where}")


def test_a_search_path_of_the_users_own_would_drop_the_plugins(toy_plugin):
    with pytest.raises(ConfigError, match="hydra.searchpath is set by the distillery.conf"):
        compose(["hydra.searchpath=[pkg://somewhere]", "benchmark=toy"])


def test_a_registered_benchmark_without_configs_is_explained(tmp_path, monkeypatch, capsys):
    groups = {"distillery.benchmarks": ENTRY_POINTS["distillery.benchmarks"]}
    for path in reversed(install_toy_plugin(tmp_path / "site", groups)):
        monkeypatch.syspath_prepend(path)
    assert run_cli(["benchmark=toy", "--plan"]) == 2
    err = capsys.readouterr().err
    assert "Could not find 'benchmark/toy'" in err
    assert err.splitlines()[-1] == (
        "distillery: benchmark 'toy' is registered, but no config package on Hydra's "
        "search path has benchmark/toy.yaml: select it with benchmark.name=toy, or have "
        "its package name its config package in the distillery.conf entry-point group"
    )
    assert run_cli(["benchmark=nope", "--plan"]) == 2  # not registered: Hydra's own words
    assert "is registered" not in capsys.readouterr().err
    # The hint's way works: the adapter by name on top of the default benchmark's yaml.
    assert _config("benchmark.name=toy").benchmark.name == "toy"
