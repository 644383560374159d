"""A package's public names, imported on first use.

Python imports a package's `__init__` before any of its modules, so an `__init__` that
imported its modules to re-export their names would make `import pkg.small_module` pay
for all of them (tracking's MLflow, state's pyarrow, core's Hydra). A package lists its
names by module instead and gets its `__getattr__` and `__dir__` from `lazy_exports`:

    if TYPE_CHECKING:  # what pyright and readers see
        from distillery.orchestrator.state.ledger import Ledger
    __all__ = ["Ledger"]
    if not TYPE_CHECKING:  # pyright would otherwise accept any name of the package
        __getattr__, __dir__ = lazy_exports(__name__, {"ledger": ("Ledger",)})

tests/orchestrator/test_package_exports.py checks that the three agree.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, tuple[str, ...]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`package`'s module `__getattr__` and `__dir__` for `exports` ({module: names}):
    a name's module is imported when the name is first read, and the name is then kept
    in the package, so the next read is a plain attribute."""
    where: dict[str, str] = {}
    for module, names in exports.items():
        for name in names:
            if name in where:
                raise ValueError(f"{package}: {name!r} exported from {where[name]} and {module}")
            where[name] = module

    def __getattr__(name: str) -> Any:  # noqa: N807 (the module hook's name)
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:  # noqa: N807
        return sorted({*vars(sys.modules[package]), *where})

    return __getattr__, __dir__
