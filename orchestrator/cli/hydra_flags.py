"""The command line of a sweep as Hydra's users know it: Hydra's standard flags
(`--help`, `--hydra-help`, `--version`, `--info`, `--cfg job|hydra|all` with `--resolve`
and `--package`, `-m`) plus distillery's own (`--plan`, `-v`), and errors that say what
to do: a mistyped key is "unknown key X; did you mean Y?", never Hydra's advice to
append it with `+`.

distillery composes its config itself (one validated config per sweep point), so the
flags that only make sense for a `@hydra.main` application are refused with a reason.
"""

from __future__ import annotations

import difflib
import logging
import re
import sys
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf

INFO_CHOICES = ("all", "config", "defaults", "defaults-tree", "plugins", "searchpath")
CFG_CHOICES = ("job", "hydra", "all")
# Flags of a @hydra.main application that have no meaning here (distillery composes
# its own config from its own config package).
_UNSUPPORTED = {
    "--config-path": "the config comes from distillery's config package (and those of "
    "installed plugins); select groups with key=value",
    "-cp": "see --config-path",
    "--config-name": "distillery's config is always `config`; select an experiment with "
    "experiment=NAME",
    "-cn": "see --config-name",
    "--config-dir": "a config folder of your own is a package named in the distillery.conf "
    "entry-point group (CONTRIBUTING.md)",
    "-cd": "see --config-dir",
    "--shell-completion": "not supported",
    "-sc": "not supported",
    "--experimental-rerun": "re-run the same command instead: it resumes from the ledger",
    "--run": "a plain `distillery ...` runs",
    "-r": "a plain `distillery ...` runs",
}


class FlagError(ValueError):
    """A flag distillery does not take (or takes differently); the message says why."""


@dataclass
class Flags:
    overrides: list[str] = field(default_factory=list)
    help: bool = False
    hydra_help: bool = False
    version: bool = False
    info: str | None = None
    cfg: str | None = None
    resolve: bool = False
    package: str | None = None
    multirun: bool = False
    plan: bool = False
    verbose: bool = False


def parse_flags(argv: list[str]) -> Flags:
    """Flags and overrides, in any order (`--cfg` and `--info` take an optional value;
    `--package` takes one)."""
    out = Flags()
    i = 0
    while i < len(argv):
        arg = argv[i]
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        if arg in ("-h", "--help"):
            out.help = True
        elif arg == "--hydra-help":
            out.hydra_help = True
        elif arg == "--version":
            out.version = True
        elif arg in ("-i", "--info"):
            out.info = "all"
            if nxt in INFO_CHOICES:
                out.info, i = nxt, i + 1
        elif arg.startswith("--info="):
            out.info = _choice(arg.split("=", 1)[1], INFO_CHOICES, "--info")
        elif arg in ("-c", "--cfg"):
            out.cfg = "job"
            if nxt in CFG_CHOICES:
                out.cfg, i = nxt, i + 1
        elif arg.startswith("--cfg="):
            out.cfg = _choice(arg.split("=", 1)[1], CFG_CHOICES, "--cfg")
        elif arg == "--resolve":
            out.resolve = True
        elif arg in ("-p", "--package"):
            if nxt is None:
                raise FlagError(f"{arg} needs a config package, e.g. {arg} student")
            out.package, i = nxt, i + 1
        elif arg in ("-m", "--multirun"):
            out.multirun = True
        elif arg == "--plan":
            out.plan = True
        elif arg in ("-v", "--verbose"):
            out.verbose = True
        elif arg.split("=", 1)[0] in _UNSUPPORTED:
            flag = arg.split("=", 1)[0]
            raise FlagError(
                f"{flag} is a flag of Hydra applications distillery is not: {_UNSUPPORTED[flag]}"
            )
        elif arg.startswith("-") and "=" not in arg:
            raise FlagError(
                f"unknown flag {arg}; distillery's flags: --plan, -m, -v, --cfg job|hydra|all, "
                "--resolve, --package, --info, --hydra-help, --version, --help"
            )
        else:
            out.overrides.append(arg)
        i += 1
    return out


def _choice(value: str, choices: tuple[str, ...], flag: str) -> str:
    if value not in choices:
        raise FlagError(f"{flag}={value}: choose one of {', '.join(choices)}")
    return value


# -- printing configs --------------------------------------------------------------------


def config_documents(
    points: list[tuple[list[str], DictConfig]],
    which: str,
    *,
    resolve: bool = False,
    package: str | None = None,
) -> str:
    """The composed config of every sweep point as one labelled YAML document each
    (`---` between them, a comment saying which point it is), as `--cfg` prints them:
    `job` the config, `hydra` Hydra's own, `all` both."""
    from distillery.orchestrator.core.compose import compose

    docs = []
    total = len(points)
    for number, (overrides, composed) in enumerate(points, 1):
        label = " ".join(overrides) or "(the defaults)"
        head = f"--- # sweep point {number} of {total}: {label}"
        if which == "hydra":
            if number > 1:
                break  # one Hydra config for the whole invocation
            head = "--- # Hydra's config"
        node: Any
        if which == "job":
            node = composed
        else:
            full = compose(overrides, with_hydra=True)
            node = full if which == "all" else full.hydra
        if package:
            node = OmegaConf.select(node, package)
            if node is None:
                raise FlagError(f"--package {package}: no such key in the config")
            head += f" (package {package})"
        text = (
            OmegaConf.to_yaml(node, resolve=resolve)
            if isinstance(node, DictConfig)
            else f"{node}\n"
        )
        docs.append(f"{head}\n{text}")
    return "".join(docs).rstrip("\n")


# -- help and info -------------------------------------------------------------------


def app_help() -> str:
    """`distillery --help`: the usage, distillery's flags and the config groups with
    their options (as a Hydra application's help lists them)."""
    from distillery.orchestrator.cli import app as cli

    lines = [(cli.__doc__ or "").rstrip(), "", "Flags:"]
    lines += [
        "  --plan                 the stage graph, totals and a pre-flight; nothing runs",
        "  -m, --multirun         a sweep: key=a,b,c expands into points",
        "  -v, --verbose          keep Ray's and MLflow's own messages",
        "  --cfg job|hydra|all    print the composed config(s), one YAML document per point",
        "  --resolve, -p KEY      with --cfg: resolve interpolations; print one key's node",
        "  --info [WHAT]          Hydra's information: all, config, defaults, defaults-tree,",
        "                         plugins, searchpath",
        "  --hydra-help           Hydra's help (override syntax)",
        "  --version              distillery's and Hydra's versions",
        "",
        "Config groups (select with GROUP=OPTION; teacher and student are model options):",
    ]
    for group, options in config_groups().items():
        lines.append(f"  {group}: {', '.join(options)}")
    lines += ["", "Benchmark options (benchmark.options.KEY=VALUE; each benchmark's own):"]
    from distillery.workers.envs.registry import benchmark_class, known_benchmarks

    for name in known_benchmarks():
        try:
            keys = list(benchmark_class(name).options_model.model_fields)
        except Exception as exc:  # noqa: BLE001 - a benchmark that does not load here
            keys = [f"(not loadable here: {type(exc).__name__})"]
        lines.append(f"  {name}: {', '.join(keys)}")
    lines.append("")
    lines.append("Every key, its type, default and where the default comes from: the manual's")
    lines.append("configuration reference (mkdocs serve), or")
    lines.append("python -m distillery.orchestrator.cli.config_reference")
    return "\n".join(lines)


def config_groups() -> dict[str, list[str]]:
    """Each config group of distillery's config package and its options (`model` shown
    as the teacher and student it selects)."""
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    out: dict[str, list[str]] = {}
    with initialize_config_module(config_module="distillery.conf", version_base=None):
        loader = GlobalHydra.instance().config_loader()
        for group in sorted(loader.list_groups("")):
            if group.startswith("hydra") or group.startswith("_"):
                continue
            options = [o for o in loader.get_group_options(group) if not o.startswith("_")]
            name = "teacher, student" if group == "model" else group
            out[name] = options
    return out


def hydra_tool(overrides: list[str], args: Flags) -> int:
    """`--hydra-help` and `--info`: Hydra's own, on distillery's config as composed."""
    from distillery.orchestrator.core.compose import prepared_overrides

    full = prepared_overrides(overrides)
    # Hydra's --info configures the root logger (DEBUG, to stdout): give it back after.
    root = logging.getLogger()
    saved = (root.level, list(root.handlers))
    try:
        _hydra_tool(full, args)
    finally:
        root.handlers[:] = saved[1]
        root.setLevel(saved[0])
    sys.stdout.flush()
    return 0


def _hydra_tool(full: list[str], args: Flags) -> None:
    import argparse

    from hydra import initialize_config_module
    from hydra._internal.utils import get_args_parser
    from hydra.core.global_hydra import GlobalHydra

    with initialize_config_module(config_module="distillery.conf", version_base=None):
        hydra = GlobalHydra.instance().hydra
        assert hydra is not None
        if args.hydra_help:  # composes Hydra's own config only: its overrides only
            own = [o for o in full if o.lstrip("+~").startswith("hydra.")]
            hydra.hydra_help("config", get_args_parser(), argparse.Namespace(overrides=own))
            print(
                "\ndistillery takes Hydra's overrides and -m, --cfg, --resolve, --package, "
                "--info, --version; it composes its own config, so --config-path, "
                "--config-name, --config-dir, --run and --shell-completion do not apply. "
                "Its own flags: --plan, -v (distillery --help)."
            )
        else:
            hydra.show_info(args.info or "all", "config", full)


# -- errors that say what to do ------------------------------------------------------


def typo_hint(message: str, overrides: list[str]) -> str | None:
    """For Hydra's "Could not override 'a.b'" (a key not in the config): "unknown key
    a.b; did you mean a.c?" (or the keys there are), in place of its advice to append
    the typo with `+`."""
    found = re.search(r"Could not override '([^']+)'", message)
    if not found:
        return None
    key = found.group(1)
    from distillery.orchestrator.core.compose import compose

    others = [o for o in overrides if o.lstrip("+~").split("=", 1)[0] != key]
    try:
        composed = OmegaConf.to_container(compose(others), resolve=False)
    except Exception:  # noqa: BLE001 - another override is bad too: no hint then
        return None
    return unknown_key_message(key, composed)


def unknown_key_message(key: str, data: Any) -> str:
    """`unknown key KEY; did you mean SUGGESTION?` against the keys of `data` (a config
    as a dict), component by component; or the keys that are there."""
    parts = key.split(".")
    node = data
    path: list[str] = []
    for part in parts:
        if not isinstance(node, dict):
            break
        if part in node:
            node = node[part]
            path.append(part)
            continue
        keys = [str(k) for k in node]
        close = difflib.get_close_matches(part, keys, n=1, cutoff=0.6)
        where = ".".join(path)
        if close:
            suggestion = ".".join([*path, close[0], *parts[len(path) + 1 :]])
            return f"unknown key {key}; did you mean {suggestion}?"
        listed = ", ".join(sorted(keys)[:20]) + (", ..." if len(keys) > 20 else "")
        return f"unknown key {key}; {where or 'the config'} has: {listed}"
    return f"unknown key {key}"
