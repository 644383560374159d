"""MkDocs hooks of the manual (mkdocs.yml `hooks:`).

- The configuration reference (`reference/configuration.md`) is generated from the
  typed config models at build time (`distillery.orchestrator.cli.config_reference`), so it
  can never disagree with the code.
- A nav entry whose page is not in docs/ (a page another branch adds) is dropped rather
  than failing a strict build, and a page of docs/ the nav does not list is added under
  "More", so a new page is always reachable.
"""

from __future__ import annotations

from typing import Any

from mkdocs.structure.files import File, Files

REFERENCE = "reference/configuration.md"


def on_files(files: Files, config: Any) -> Files:
    from distillery.orchestrator.cli.config_reference import reference

    if files.get_file_from_path(REFERENCE) is None:
        files.append(File.generated(config, REFERENCE, content=reference()))
    pages = {f.src_uri for f in files.documentation_pages()}
    nav = config.get("nav")
    if nav:
        kept = _prune(nav, pages)
        listed = set(_listed(kept))
        extra = sorted(p for p in pages if p not in listed)
        if extra:
            kept.append({"More": extra})
        config["nav"] = kept
    return files


def _prune(items: list[Any], pages: set[str]) -> list[Any]:
    out: list[Any] = []
    for item in items:
        if isinstance(item, str):
            if item in pages or "://" in item:
                out.append(item)
        elif isinstance(item, dict):
            for title, value in item.items():
                if isinstance(value, list):
                    inner = _prune(value, pages)
                    if inner:
                        out.append({title: inner})
                elif isinstance(value, str) and (value in pages or "://" in value):
                    out.append({title: value})
    return out


def _listed(items: list[Any]) -> list[str]:
    out: list[str] = []
    for item in items:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict):
            for value in item.values():
                out += _listed(value) if isinstance(value, list) else [value]
    return out
