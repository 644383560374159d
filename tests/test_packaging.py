"""The design card's layout: orchestrator/, workers/ and conf/ at the top of the
repository, installed under the import name distillery (tested as a wheel, editable, and
as a bare checkout on a Ray working_dir)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import distillery.conf
import distillery.orchestrator
import distillery.workers
from tests.support import REPO_ROOT


def test_the_editable_install_maps_the_top_level_folders() -> None:
    assert Path(distillery.orchestrator.__file__).parent == REPO_ROOT / "orchestrator"
    assert Path(distillery.workers.__file__).parent == REPO_ROOT / "workers"
    assert Path(distillery.conf.__file__).parent == REPO_ROOT / "conf"


def test_a_wheel_claims_only_distillery_and_finds_its_configs(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(tmp_path / "dist"), str(REPO_ROOT)],
        check=True,
    )  # fmt: skip
    (wheel,) = (tmp_path / "dist").glob("distillery-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"distillery"}, top
    assert "distillery/conf/config.yaml" in names
    assert "distillery/conf/benchmark/bfcl_multi_turn_base.yaml" in names
    assert "distillery/workers/memory/amd/bank.py" in names
    assert not [n for n in names if "/tests/" in n or n.startswith("tests/")]

    # Installed from the wheel (not the checkout), the CLI composes its configs.
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
    )  # fmt: skip
    probe = (
        "import distillery.orchestrator.cli as c, distillery.conf as conf; "
        "cfg = c.compose(['benchmark.limit=2']); "
        "print(conf.__file__); print(cfg.benchmark.name, cfg.benchmark.limit)"
    )
    env = {**os.environ, "PYTHONPATH": str(target), "PYTHONSAFEPATH": "1"}
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    conf_file, composed = out.stdout.strip().splitlines()
    assert Path(conf_file).is_relative_to(target)
    assert composed == "bfcl_multi_turn_base 2"


def test_a_bare_checkout_imports_as_on_a_ray_working_dir(tmp_path: Path) -> None:
    """`distillery submit` uploads the checkout; the cluster imports it uninstalled."""
    checkout = tmp_path / "checkout"
    for name in ("distillery", "orchestrator", "workers", "conf"):
        shutil.copytree(REPO_ROOT / name, checkout / name)
    shutil.copy(REPO_ROOT / "setup.py", checkout / "setup.py")
    probe = (
        "import distillery.orchestrator.plan as p, distillery.workers.memory.amd.bank as b; "
        "print(p.__file__); print(b.__file__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=checkout, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    for line in out.stdout.split():
        assert Path(line).is_relative_to(checkout), line
