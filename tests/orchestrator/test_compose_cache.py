"""Hydra composition is remembered per process (core/compose.py): the same inputs give
what a fresh composition gives, a caller's edit never reaches another caller, and a
config file edited (or another package's config folder) is a new composition."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from omegaconf import OmegaConf

from distillery.orchestrator.core import compose as composing
from tests.plugins import install_toy_plugin


def _fresh(overrides: list[str]):
    return composing._hydra_compose(composing.prepared_overrides(overrides), with_hydra=False)


def test_a_remembered_composition_is_a_fresh_one_and_each_caller_owns_its_copy():
    overrides = ["experiment=bfcl_table1", "benchmark.limit=3"]
    first = composing.compose(overrides)
    second = composing.compose(overrides)
    assert first is not second
    assert OmegaConf.to_container(second) == OmegaConf.to_container(_fresh(overrides))
    first.benchmark.limit = 99  # one caller's edit
    assert composing.compose(overrides).benchmark.limit == 3
    assert OmegaConf.is_struct(second)  # Hydra's flags kept on the copy


def test_an_edited_config_file_is_composed_again(tmp_path, monkeypatch):
    """A plugin's config package (a copy of the toy plugin's, on sys.path): its file
    edited between two compositions gives the new value, as a new process would."""
    site, plugin_root = install_toy_plugin(tmp_path / "site")
    shutil.copytree(Path(plugin_root) / "toy_plugin", tmp_path / "pkgs" / "toy_plugin")
    for path in (str(tmp_path / "pkgs"), site):
        monkeypatch.syspath_prepend(path)
    toy = tmp_path / "pkgs" / "toy_plugin" / "conf" / "benchmark" / "toy.yaml"
    try:
        assert composing.compose(["benchmark=toy"]).benchmark.max_steps_per_turn is None
        toy.write_text(toy.read_text().replace("max_steps_per_turn: null", "max_steps_per_turn: 7"))
        assert composing.compose(["benchmark=toy"]).benchmark.max_steps_per_turn == 7
    finally:
        for module in [m for m in sys.modules if m == "toy_plugin" or m.startswith("toy_plugin.")]:
            sys.modules.pop(module, None)
