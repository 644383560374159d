"""The design card's layout: orchestrator/, workers/ and conf/ at the top of the
repository, the package distillery's subpackages through the links distillery/orchestrator
-> ../orchestrator (and workers, conf): imports resolve the same way in a wheel, an
editable install and a bare checkout (a Ray working_dir, packaged by Ray itself), and
`tests` is never part of the package."""

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


def test_the_top_level_folders_are_the_packages_subpackages() -> None:
    for name, module in (
        ("orchestrator", distillery.orchestrator),
        ("workers", distillery.workers),
        ("conf", distillery.conf),
    ):
        folder = Path(module.__file__).parent
        assert folder == REPO_ROOT / "distillery" / name  # imported as the package's own
        assert folder.resolve() == REPO_ROOT / name  # the top-level folder itself
    # Nothing of the repository but the package is importable under its name.
    import importlib.util

    assert importlib.util.find_spec("distillery.tests") is None
    assert not hasattr(distillery, "__path__") or list(distillery.__path__) == [
        str(REPO_ROOT / "distillery")
    ]


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
        "import distillery.orchestrator.core.compose as c, distillery.conf as conf; "
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
    """`distillery submit` uploads the checkout as the job's working_dir: packaged by
    Ray's own packager (which follows the links), unpacked, imported uninstalled."""
    from ray._private.runtime_env.packaging import _zip_files, unzip_package

    checkout = tmp_path / "checkout"
    checkout.mkdir()
    for name in ("distillery", "orchestrator", "workers", "conf", "tests"):
        os.symlink(REPO_ROOT / name, checkout / name)  # the checkout's top level
    for name in ("setup.py", "pyproject.toml"):
        shutil.copy(REPO_ROOT / name, checkout / name)
    package = tmp_path / "working_dir.zip"
    excludes = ["**/__pycache__", "tests", ".venv"]
    _zip_files(str(checkout), excludes, str(package), include_gitignore=False)
    unpacked = tmp_path / "unpacked"
    unzip_package(str(package), str(unpacked), remove_top_level_directory=False, unlink_zip=False)
    probe = (
        "import importlib.util, distillery.orchestrator.planning.plan as p, "
        "distillery.workers.memory.amd.bank as b; "
        "print(p.__file__); print(b.__file__); print(importlib.util.find_spec('distillery.tests'))"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONSAFEPATH", "PYTHONPATH")}
    out = subprocess.run(  # the working directory first on sys.path, as Ray's job has it
        [sys.executable, "-c", probe],
        cwd=unpacked,
        capture_output=True,
        text=True,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    plan_file, bank_file, tests_spec = out.stdout.split()
    for line in (plan_file, bank_file):
        assert Path(line).is_relative_to(unpacked), line
    assert tests_spec == "None"
