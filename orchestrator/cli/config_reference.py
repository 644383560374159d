"""The configuration reference, generated from the typed config models: every key, its
type, its default and where that default comes from, as Markdown.

    python -m distillery.orchestrator.cli.config_reference            # print it
    python -m distillery.orchestrator.cli.config_reference --out FILE # write it

The manual (MkDocs) builds its "Configuration reference" page from this at build time
(scripts/mkdocs_hooks.py), so the page can never disagree with the code.

Where a default comes from, per key:

* `conf/...yaml`: a file of the default composition sets it (conf/config.yaml and each
  group's default option: benchmark=bfcl_multi_turn_base, teacher=oracle,
  student=smollm2_135m, ..., experiment=quickstart), the last one composed winning as in
  Hydra; the typed model's own default is shown beside it when it differs;
* `model`: nothing in conf/ sets it, the typed model's default applies.

The "why" of a default (a paper, the authors' code, ours with a reason) is the field's
description and the comment above it in the model's source, quoted as they are.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import textwrap
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any, get_args, get_origin

import yaml
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

# The default composition (conf/config.yaml's defaults list): group -> (package, option).
_DEFAULT_GROUPS = (
    ("benchmark", "benchmark", "bfcl_multi_turn_base"),
    ("model", "teacher", "oracle"),
    ("model", "student", "smollm2_135m"),
    ("protocol", "protocol", "self_excluded"),
    ("memory", "memory", "default"),
    ("agent", "agent", "default"),
    ("cluster", "cluster", "local"),
    ("experiment", "", "quickstart"),
)


@dataclass(frozen=True)
class Key:
    path: str
    type: str
    default: str
    source: str
    why: str


def reference() -> str:
    """The whole reference page (Markdown)."""
    from distillery.orchestrator.core.config import DistilleryConfig
    from distillery.workers.envs.registry import benchmark_class, known_benchmarks
    from distillery.workers.llm.config import ModelConfig
    from distillery.workers.memory.registry import known_methods, memory_method

    composed = _composed_defaults()
    out = [
        "# Configuration reference",
        "",
        "Every key of a run's config, generated from the typed models that validate it "
        "(`python -m distillery.orchestrator.cli.config_reference` prints this page). "
        "**Default** is what `distillery` with no arguments runs with; **from** says "
        "where that value is set: a file of `conf/` (the last one composed wins, as in "
        "Hydra; the model's own default is given too where it differs) or the typed "
        "`model`'s default. **Why** quotes the model's own description of the value and "
        "its source (a paper, the authors' code, or ours with the reason).",
        "",
        "Set any key on the command line (`distillery benchmark.limit=20`), add a key "
        "that is not in the composed config with `+` (`+builder_models.NAME={...}`), "
        "select a config group option with `GROUP=OPTION` (`student=qwen3_4b`).",
    ]
    skip = {"teacher", "student", "method_catalog", "builder_models"}
    out += _section("Run", DistilleryConfig, "", composed, skip)
    out += [
        "",
        "## Models: `teacher.*`, `student.*`, `builder_models.NAME.*`",
        "",
        "Each `conf/model/NAME.yaml` (selected with `teacher=NAME`, `student=NAME`) sets "
        "its own values; the defaults below are the typed model's, the **Default** "
        "column the quickstart's student (`smollm2_135m`).",
    ]
    out += _table(_keys(ModelConfig, "student", composed, set()))
    out += [
        "",
        "## Methods: `method_catalog.NAME`",
        "",
        "Each entry is one evaluated method (one MLflow child run); `methods=[...]` "
        "selects entries by name.",
    ]
    from distillery.orchestrator.core.config import MethodConfig

    out += _table(_keys(MethodConfig, "method_catalog.NAME", {}, set()))
    out += [
        "",
        "## Memory methods' read settings",
        "",
        "`memory.retrieval.KEY` sets a default for every catalog entry of the methods "
        "that read it; `method_catalog.NAME.retrieval.KEY` sets one entry's. Each method "
        "validates its own:",
    ]
    for kind in known_methods():
        try:
            model = memory_method(kind).settings_model
        except Exception as exc:  # noqa: BLE001 - a broken plugin is named, not fatal
            out += ["", f"### `{kind}`", "", f"(its settings could not be loaded: {exc})"]
            continue
        out += ["", f"### `{kind}` ({model.__name__})", ""]
        doc = _doc(model)
        if doc:
            out += [doc, ""]
        out += _table(_keys(model, "method_catalog.NAME.retrieval", {}, set()))[1:]
    out += [
        "",
        "## Benchmark options: `benchmark.options.*`",
        "",
        "Each benchmark declares and validates its own options (set one with "
        "`benchmark.options.KEY=VALUE`, e.g. `benchmark.options.data_path=FOLDER`; a key "
        "its options do not declare is refused by name); an option that deviates from the "
        "benchmark's own pipeline is recorded with every run.",
    ]
    for name in known_benchmarks():
        try:
            model = benchmark_class(name).options_model
        except Exception as exc:  # noqa: BLE001 - a benchmark that does not load here
            out += ["", f"### `{name}`", "", f"(its options could not be loaded here: {exc})"]
            continue
        out += ["", f"### `{name}` ({model.__name__})", ""]
        doc = _doc(model)
        if doc:
            out += [doc, ""]
        out += _table(_keys(model, "benchmark.options", {}, set()))[1:]
    return "\n".join(out) + "\n"


def _section(
    title: str, model: type[BaseModel], prefix: str, composed: dict[str, Any], skip: set[str]
) -> list[str]:
    return ["", f"## {title}", "", *_table(_keys(model, prefix, composed, skip))[1:]]


def _table(keys: list[Key]) -> list[str]:
    lines = ["", "| key | type | default | from | why |", "|---|---|---|---|---|"]
    for k in keys:
        lines.append(
            f"| `{k.path}` | {_cell(k.type)} | {_cell(k.default)} | {_cell(k.source)} | "
            f"{_cell(k.why)} |"
        )
    return lines


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ") or "–"


def _keys(
    model: type[BaseModel], prefix: str, composed: dict[str, Any], skip: set[str]
) -> list[Key]:
    out: list[Key] = []
    comments = _field_comments(model)
    for name, field in model.model_fields.items():
        if name in skip:
            continue
        path = f"{prefix}.{name}" if prefix else name
        annotation = field.annotation
        nested = _model_of(annotation)
        if nested is not None and get_origin(annotation) is None:
            out += _keys(nested, path, composed, set())
            continue
        model_default = _model_default(field)
        found = composed.get(path, _MISSING)
        if found is not _MISSING:
            default, (where, value) = _show(found[1]), found
            source = f"`{where}`"
            if _show(value) != model_default and model_default != "required":
                source += f" (model: {model_default})"
        else:
            default, source = model_default, "model"
        why = " ".join(x for x in (field.description or "", comments.get(name, "")) if x)
        out.append(Key(path, _type_name(annotation), default, source, why))
    return out


_MISSING = object()


def _model_default(field: Any) -> str:
    if field.default is not PydanticUndefined:
        return _show(field.default)
    if field.default_factory is not None:
        try:
            return _show(field.default_factory())
        except TypeError:
            return "(computed)"
    return "required"


def _show(value: Any) -> str:
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if isinstance(value, tuple):
        value = list(value)
    if value is None:
        return "`null`"
    text = yaml.safe_dump(value, default_flow_style=True, width=1000).strip()
    text = text.removesuffix("...").strip()
    if len(text) > 120:
        text = text[:117] + "..."
    return f"`{text}`"


def _type_name(annotation: Any) -> str:
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in args)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin in (list, tuple, set, frozenset):
        inner = ", ".join(_type_name(a) for a in args if a is not Ellipsis)
        return f"{origin.__name__}[{inner}]"
    if origin is dict:
        return f"dict[{', '.join(_type_name(a) for a in args)}]"
    if annotation is type(None):
        return "None"
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


def _doc(model: type[BaseModel]) -> str:
    doc = inspect.getdoc(model) or ""
    return " ".join(doc.split()) if doc and not doc.startswith(("Usage docs", "!!!")) else ""


def _field_comments(model: type[BaseModel]) -> dict[str, str]:
    """Each field's comment lines: those right above it and the one at its end, in the
    model's (and its bases') source."""
    out: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)) or cls is BaseModel:
            continue
        try:
            source = textwrap.dedent(inspect.getsource(cls))
        except (OSError, TypeError):
            continue
        lines = source.splitlines()
        tree = ast.parse(source)
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node in body:
            if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
                continue
            above = []
            i = node.lineno - 2
            while i >= 0 and lines[i].strip().startswith("#"):
                above.insert(0, lines[i].strip().lstrip("#").strip())
                i -= 1
            line = lines[node.lineno - 1]
            inline = line.split("  # ", 1)[1].strip() if "  # " in line else ""
            text = " ".join(x for x in (*above, inline) if x and not x.startswith("noqa"))
            if text:
                out[node.target.id] = text
    return out


def _composed_defaults() -> dict[str, tuple[str, Any]]:
    """key path -> (the conf/ file that sets it in the default composition, its value),
    in Hydra's order (conf/config.yaml first: its defaults list starts with _self_)."""
    conf = files("distillery.conf")
    found: dict[str, tuple[str, Any]] = {}

    def load(rel: str) -> dict[str, Any]:
        data = yaml.safe_load((conf / rel).read_text()) or {}
        return data if isinstance(data, dict) else {}

    def flatten(data: Any, prefix: str) -> Iterator[tuple[str, Any]]:
        if isinstance(data, dict) and data:
            for key, value in data.items():
                if key in ("defaults", "hydra") and not prefix:
                    continue
                yield from flatten(value, f"{prefix}.{key}" if prefix else str(key))
        else:
            yield prefix, data

    for path, value in flatten(load("config.yaml"), ""):
        found[path] = ("conf/config.yaml", value)
    for group, package, option in _DEFAULT_GROUPS:
        rel = f"{group}/{option}.yaml"
        data = load(rel)
        # A file's own defaults list may pull in a nested group (memory/embedder).
        for entry in data.get("defaults") or []:
            if isinstance(entry, dict):
                for sub, choice in entry.items():
                    if sub.startswith("_") or choice is None:
                        continue
                    sub_rel = f"{group}/{sub}/{choice}.yaml"
                    try:
                        sub_data = load(sub_rel)
                    except FileNotFoundError:
                        continue
                    where = f"{package}.{sub}" if package else sub
                    for path, value in flatten(sub_data, where):
                        found[path] = (f"conf/{sub_rel}", value)
        data = {k: v for k, v in data.items() if k != "defaults"}
        if group == "experiment":  # `# @package _global_`: keys at the top level
            for path, value in flatten(data, ""):
                found[path] = (f"conf/{rel}", value)
        else:
            for path, value in flatten(data, package):
                found[path] = (f"conf/{rel}", value)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", default=None, help="write the page here (default: print it)")
    args = parser.parse_args(argv)
    page = reference()
    if args.out:
        Path(args.out).write_text(page)
    else:
        print(page, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
