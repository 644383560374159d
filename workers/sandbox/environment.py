"""The environment every process that runs model-influenced code starts from.

Never the driver's: the driver holds API keys (the teacher's, the object store's,
Qdrant's, the tracking server's) in its environment, and a world that runs a model's
code (AppWorld's interpreter allows ``import os``) or a grader that parses a model's
text would hand them to the model. So such a process gets an allow-list: ``PATH``,
the locale variables, ``HOME`` pointing at a private temporary folder (with
``TMPDIR`` inside it), and exactly the variables its adapter declares (AppWorld's
data folder, ToolSandbox's user key) — nothing else.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# Taken from the driver's environment when set: how to find programs and how to
# read and write text. No other variable of the driver's crosses.
INHERITED = (
    "PATH",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "LC_COLLATE",
    "LC_MESSAGES",
    "LC_NUMERIC",
    "LC_TIME",
    "TZ",
)
DEFAULT_LOCALE = "C.UTF-8"


def allowed_environment(
    home: str | os.PathLike[str],
    declared: Mapping[str, str] | None = None,
    source: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The allow-listed environment: `INHERITED` from `source` (the driver's
    environment by default), ``HOME=home``, ``TMPDIR=home/tmp`` and the `declared`
    variables of the adapter."""
    source = os.environ if source is None else source
    env = {name: source[name] for name in INHERITED if name in source}
    env.setdefault("PATH", os.defpath)
    if not any(name in env for name in ("LANG", "LC_ALL", "LC_CTYPE")):
        env["LANG"] = DEFAULT_LOCALE
    env["HOME"] = str(home)
    env["TMPDIR"] = str(Path(home) / "tmp")
    env.update({str(k): str(v) for k, v in (declared or {}).items()})
    return env


@dataclass
class PrivateHome:
    """A private temporary folder for one process (its ``HOME``, with ``tmp`` inside
    for its ``TMPDIR``), removed by `remove`."""

    path: Path

    @classmethod
    def create(cls, prefix: str = "distillery-home-") -> PrivateHome:
        path = Path(tempfile.mkdtemp(prefix=prefix))
        (path / "tmp").mkdir(mode=0o700)
        return cls(path)

    def environment(self, declared: Mapping[str, str] | None = None) -> dict[str, str]:
        return allowed_environment(self.path, declared)

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
