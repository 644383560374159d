"""A sweep's configs from the command line's overrides: Hydra composition (distillery's
config package, every method's catalog file, installed plugins' config packages), the
`-m` grid and an experiment's `sweep:` lists expanded into points, each point typed and
validated (`config.to_config`).

What `distillery`, `--plan`, `distillery submit` and the Hydra flags all compose with, so
it sits in core, below the command line (cli) and the cluster submission (cluster) that
both call it. Split out of cli.py (issue 32); the functions are unchanged.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import itertools
import os
import re
import sys
from typing import Any

from omegaconf import DictConfig, OmegaConf

import distillery.conf  # noqa: F401  (registers the model schema with Hydra)
from distillery.orchestrator.core.config import ConfigError, DistilleryConfig, to_config

# Teacher and student are both drawn from the `model` config group; Hydra spells that
# `model@student=NAME`, users say `student=NAME`.
_ROLE_GROUP = re.compile(r"^(~|\+)?(teacher|student)=")


def rewrite_role_overrides(argv: list[str]) -> list[str]:
    return [_ROLE_GROUP.sub(lambda m: f"{m.group(1) or ''}model@{m.group(2)}=", a) for a in argv]


# Another package ships config groups (e.g. its `conf/benchmark/NAME.yaml`) by naming
# its config package in this entry-point group of its distribution:
#     [project.entry-points."distillery.conf"]
#     my_package = "my_package.conf"
# Each is added to Hydra's search path (after distillery's own `distillery.conf`).
CONF_ENTRY_POINT_GROUP = "distillery.conf"


class PluginConfigError(ValueError):
    """An entry point of `distillery.conf` does not name an importable config package:
    a setup problem of that package, named in the message."""


def plugin_config_paths() -> list[str]:
    """The Hydra search-path entries (`pkg://...`) of every `distillery.conf` entry point
    on sys.path, in a fixed order (by distribution, then entry name). One that does not
    name an importable package stops with a `PluginConfigError` naming it."""
    return list(_plugin_config_paths(tuple(sys.path)))


@functools.lru_cache(maxsize=8)
def _plugin_config_paths(path: tuple[str, ...]) -> tuple[str, ...]:
    """Per sys.path (a sweep composes once per point): reading every distribution's
    metadata takes milliseconds. Errors are raised, not cached."""
    from importlib.metadata import entry_points

    found = set()
    for ep in entry_points(group=CONF_ENTRY_POINT_GROUP):
        dist = getattr(getattr(ep, "dist", None), "name", None) or "?"
        found.add((dist, ep.name, ep.value.strip()))
    paths: list[str] = []
    for dist, name, value in sorted(found):
        where = f"config entry point {name} = {value!r} of {dist} ({CONF_ENTRY_POINT_GROUP})"
        if not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", value):
            raise PluginConfigError(f"{where}: not a package name (e.g. my_package.conf)")
        try:
            spec = importlib.util.find_spec(value)
        except Exception as exc:  # a parent package that is missing or fails to import
            raise PluginConfigError(
                f"{where}: package {value} cannot be imported: {type(exc).__name__}: {exc}"
            ) from None
        if spec is None:
            raise PluginConfigError(f"{where}: package {value} is not installed")
        if spec.submodule_search_locations is None:
            raise PluginConfigError(f"{where}: {value} is a module, not a package of configs")
        if f"pkg://{value}" not in paths:
            paths.append(f"pkg://{value}")
    return tuple(paths)


def compose(overrides: list[str], with_hydra: bool = False) -> DictConfig:
    """The composed config of one sweep point (`with_hydra`: Hydra's own config under
    `hydra`, as `--cfg hydra|all` prints it).

    Composition is remembered per process (`_COMPOSED`): validating, planning and
    pre-flighting a sweep compose the same points again, and Hydra takes ~0.5 s a point.
    The key is everything the result depends on: the prepared overrides (plugins' search
    path and catalogs included) and every config file's path, size and mtime in the
    config packages; each caller gets its own deep copy, so no caller sees another's
    edits. Interpolations are not resolved here, so the environment is read later, as
    without the cache."""
    overrides = prepared_overrides(overrides)
    if with_hydra:
        return _hydra_compose(overrides, with_hydra=True)
    key = (tuple(overrides), _config_files(_config_folders(overrides)))
    composed = _COMPOSED.pop(key, None)
    if composed is None:
        composed = _hydra_compose(overrides, with_hydra=False)
    _COMPOSED[key] = composed  # the most recently used last
    while len(_COMPOSED) > _COMPOSED_MAX:
        del _COMPOSED[next(iter(_COMPOSED))]
    return copy.deepcopy(composed)


_COMPOSED: dict[tuple[Any, ...], DictConfig] = {}
_COMPOSED_MAX = 512  # points; a composed config is tens of kB


def _hydra_compose(overrides: list[str], with_hydra: bool) -> DictConfig:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module

    with initialize_config_module(config_module="distillery.conf", version_base=None):
        return hydra_compose(
            config_name="config", overrides=overrides, return_hydra_config=with_hydra
        )


def _config_folders(overrides: list[str]) -> list[str]:
    """The folders Hydra reads configs from: distillery.conf's and those a
    `hydra.searchpath=[pkg://...,file://...]` override adds. One that cannot be found
    adds nothing here: Hydra's own composition then says what is wrong with it."""
    packages, folders = ["distillery.conf"], []
    for override in overrides:
        if override.lstrip("+~").startswith("hydra.searchpath="):
            packages += re.findall(r"pkg://([\w.]+)", override)
            folders += re.findall(r"file://([^,\]\s]+)", override)
    for package in packages:
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):  # a parent package that is not there
            continue
        folders += list(spec.submodule_search_locations or []) if spec else []
    return folders


def _config_files(folders: list[str]) -> tuple[tuple[str, int, int], ...]:
    """Every config file in the folders, as (path, size, mtime): one edited, added or
    removed (or a package found elsewhere on sys.path) is a new key."""
    found = []
    for folder in folders:
        for root, _, names in os.walk(folder):
            for name in [n for n in names if n.endswith((".yaml", ".yml"))]:
                try:
                    stat = os.stat(os.path.join(root, name))
                except OSError:  # removed while listed: the next key differs anyway
                    continue
                found.append((os.path.join(root, name), stat.st_size, stat.st_mtime_ns))
    return tuple(sorted(found))


def prepared_overrides(overrides: list[str]) -> list[str]:
    """The user's overrides and what distillery composes with them: every method's
    catalog file and the config packages of installed plugins."""
    extra = plugin_config_paths()
    if extra and any(o.lstrip("+~").startswith("hydra.searchpath=") for o in overrides):
        raise ConfigError(
            "hydra.searchpath is set by the distillery.conf entry points of installed "
            f"packages ({', '.join(extra)}); register a config package there instead"
        )
    # A benchmark's options are declared by its options model, not by conf/ (whose
    # `options: {}` Hydra would refuse a key of): `benchmark.options.KEY=V` is set as
    # Hydra's upsert, and the model refuses a key it does not declare, by name.
    overrides = [
        f"++{o}" if o.startswith("benchmark.options.") and "=" in o else o for o in overrides
    ]
    catalogs = method_catalog_files(["distillery.conf", *(p.removeprefix("pkg://") for p in extra)])
    if not any(_selects_catalogs(o) for o in overrides):
        overrides = [f"method_catalog=[{','.join(catalogs)}]", *overrides]
    if extra:
        overrides = [f"hydra.searchpath=[{','.join(extra)}]", *overrides]
    return overrides


def method_catalog_files(packages: list[str]) -> list[str]:
    """Every method's catalog file (`method_catalog/<name>.yaml`) in the config packages,
    distillery's first: each is composed, so a method (built in or of another package)
    ships its catalog entries in one file of its own, with no edit of config.yaml.
    Only config.yaml's defaults list (`[amd]`) is used when composing without this."""
    from importlib.resources import files

    names: list[str] = []
    for package in packages:
        folder = files(package) / "method_catalog"
        if not folder.is_dir():
            continue
        found = sorted(
            f.name.removesuffix(".yaml") for f in folder.iterdir() if f.name.endswith(".yaml")
        )
        names.extend(n for n in found if n not in names)
    return names


def _selects_catalogs(override: str) -> bool:
    """`method_catalog=[...]`: the user's own choice of catalog files."""
    return override.lstrip("+~").split("=", 1)[0] == "method_catalog"


def expand_grid(overrides: list[str], multirun: bool) -> list[list[str]]:
    """Hydra sweep syntax (`k=1,2,4`, `range(...)`, `choice(...)`) -> one override
    list per grid point, in Hydra's basic-sweeper order."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    axes: list[list[str]] = []
    for override in parsed:
        if override.is_sweep_override():
            if not multirun:
                raise ConfigError(
                    f"{override.input_line}: several values need -m (a sweep), e.g. "
                    f"distillery -m {override.input_line}"
                )
            key = override.get_key_element()
            axes.append([f"{key}={value}" for value in override.sweep_string_iterator()])
        else:
            axes.append([str(override.input_line)])
    return [list(point) for point in itertools.product(*axes)] or [[]]


def _override_value(value: Any) -> str:
    if isinstance(value, str):
        return value if re.fullmatch(r"[\w.:/@-]+", value) else repr(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list | tuple):
        return "[" + ",".join(_override_value(v) for v in value) + "]"
    if isinstance(value, dict):  # merged into the node: {k_st: 3} changes only k_st
        return "{" + ",".join(f"{k}:{_override_value(v)}" for k, v in value.items()) + "}"
    return str(value)


def sweep_points(overrides: list[str], multirun: bool) -> list[tuple[list[str], DictConfig]]:
    """Every sweep point's overrides and composed config: the command-line grid times
    the `sweep:` lists of the composed config (e.g. an experiment's students x seeds)."""
    points = []
    for point in expand_grid(overrides, multirun):
        composed = compose(point)
        node = composed.get("sweep")
        grid = OmegaConf.to_container(node, resolve=True) if node else {}
        if not grid:
            points.append((point, composed))
            continue
        # A key the command line sets wins over the experiment's sweep axis for it
        # (`experiment=bfcl_ablation student=qwen3_8b` evaluates qwen3_8b only).
        given = {o.split("=", 1)[0].lstrip("+~") for o in point}
        keys = [
            k
            for k in grid  # type: ignore[union-attr]
            if k not in given and rewrite_role_overrides([f"{k}="])[0][:-1] not in given
        ]
        for values in itertools.product(*(grid[k] for k in keys)):  # type: ignore[index]
            extra = rewrite_role_overrides(
                [f"{k}={_override_value(v)}" for k, v in zip(keys, values, strict=True)]
            )
            points.append((point + extra, compose(point + extra)))
    return points


def validated_configs(points: list[tuple[list[str], DictConfig]]) -> list[DistilleryConfig]:
    """Every sweep point typed and validated (`to_config`), an error naming the point
    when the sweep has several: what `distillery`, `--plan` and `distillery submit` all
    accept (submit validates here before anything reaches the cluster)."""
    configs = []
    for overrides, composed in points:
        try:
            configs.append(to_config(composed))
        except ConfigError as exc:
            where = f" (sweep point: {' '.join(overrides)})" if len(points) > 1 else ""
            raise ConfigError(f"{exc}{where}") from None
    return configs
